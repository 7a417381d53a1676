//! Notifications (rules: `spec::notify`). Agents with the scheduler role share one durable
//! consumer, `notify`, of the events stream, handling the kinds a rule may name and
//! `dispatched` (the others are acked unread): each event is looked at by one agent,
//! whichever are up. For each, the
//! job's rules (its spec's `notify`, else `[notify] default`) decide from the run's kept records
//! (`decide.rs`); each notice is delivered (`deliver.rs`), and the event acked once all
//! are. A failed delivery is tried again with backoff (1 s doubling to 5 min) up to
//! `[notify] attempts` times; every outcome is published as a `notified` or
//! `notify_failed` event of the job (`cronrun notifications` lists them). A webhook that
//! leads to an internal address `[notify] allow_hosts` does not name is refused, once and
//! for good (`outbound.rs`). A webhook's URL and header values may name secrets (the
//! secrets bucket, read at each delivery: the schedulers' identity may read a secret by
//! name for this); what is said of a delivery names a secret URL as `[secret NAME]` and
//! masks every value it resolved.
//!
//! `late`: a fire's `dispatched` event, for a job with a `late` rule, is handed back with a
//! delay until the fire's deadline (a nak with that delay: no timer of ours to lose), then
//! the run's record decides (`decide::late`). Such checks in wait count against the
//! consumer's 10,000 pending events: at most the late-ruled fires within `late`.
//!
//! Once per event and rule: a rule that delivered writes `notified.<seq>.<rule>` (a day's
//! TTL), and a redelivery skips it. Events are pulled only into free slots and progress-
//! acked before each delivery, so one in hand is not redelivered to another agent. An agent that dies between a delivery and that write
//! delivers again on redelivery; the `Cronrun-Delivery` header, the same on every try,
//! lets a receiver drop the repeat.

mod decide;
mod deliver;
pub mod outbound;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::events::publish_event;
use crate::model::event::{Event, EventKind};
use crate::model::roles::NOTIFY_CONSUMER;
use crate::names::lease_keys;
use crate::record::{RunRecord, Trigger};
use crate::spec::notify::{Notice, Notify, watched_kinds};
use crate::store::Store;
use crate::store::pull::{EXPIRES, PullLimits, pull_into_slots};
pub use deliver::{DELIVERY_HEADER, SIGNATURE_HEADER, signature};

/// `[notify]` of `cronrun.toml`. Every agent with the scheduler role delivers, so every
/// one needs the same settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// Signing secrets by name, for rules' `secret`. Keep the file readable by the agent only.
    pub secrets: BTreeMap<String, String>,
    /// Rules for jobs whose spec has no `notify`. Default: none.
    pub default: Vec<Notify>,
    /// The dashboard's base URL, for a link to the run in each notice. Default: none.
    pub dashboard_url: Option<String>,
    /// How long one delivery may take. Default 10s.
    #[serde(with = "crate::spec::codec::duration")]
    pub timeout: Duration,
    /// Tries per notice before it is given up. Default 8 (about four minutes of backoff).
    pub attempts: u32,
    /// Notices delivered at once. Default 16.
    pub concurrency: usize,
    /// Internal addresses webhooks may reach: addresses (`127.0.0.1`), networks
    /// (`10.0.0.0/8`) and host names (`hooks.internal`, `*.svc.local`, any address they
    /// resolve to). Default: none, and a webhook leading to a loopback, link-local,
    /// private or other non-public address is refused (`outbound`).
    pub allow_hosts: Vec<String>,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            secrets: BTreeMap::new(),
            default: Vec::new(),
            dashboard_url: None,
            timeout: Duration::from_secs(10),
            attempts: 8,
            concurrency: 16,
            allow_hosts: Vec::new(),
        }
    }
}

impl NotifyConfig {
    pub fn validate(&self) -> Result<(), Error> {
        outbound::AllowHosts::parse(&self.allow_hosts)?;
        for (i, rule) in self.default.iter().enumerate() {
            rule.validate(&format!("notify.default[{i}]"))?;
        }
        let bounds = [
            ("notify.attempts", self.attempts as usize, 1, 100),
            ("notify.concurrency", self.concurrency, 1, 1024),
            ("notify.timeout", self.timeout.as_millis().min(u128::from(u32::MAX)) as usize, 100, 300_000),
        ];
        for (field, value, lo, hi) in bounds {
            if !(lo..=hi).contains(&value) {
                return Err(Error::invalid(field, format!("{field} is out of range ({lo} to {hi})")));
            }
        }
        Ok(())
    }
}

/// The delay before try `n + 1` of a notice: 1 s doubling, at most 5 min.
fn backoff(tries: u32) -> Duration {
    Duration::from_secs(1u64 << tries.saturating_sub(1).min(9)).min(Duration::from_secs(300))
}

struct Notifier {
    store: Store,
    catalog: Catalog,
    config: NotifyConfig,
    clock: SharedClock,
    http: reqwest::Client,
    /// `[notify] allow_hosts`, for URLs naming an address (the client's resolver checks names).
    allow: Arc<outbound::AllowHosts>,
    /// Events whose job has a rule that may apply, being worked on (runs read, notices
    /// delivered): at most `config.concurrency`.
    working: Semaphore,
}

/// Events an agent holds at once, most of them needing no notice: pulled this many at a
/// time, not `concurrency` (16) at a time. With 16, the shared consumer fell 27,000 events
/// behind at 1,667 runs a second (`bench lateness --jobs 100000 --spread`), one pull
/// request for every 16.
const EVENTS_IN_HAND: usize = 256;
/// A held event waiting for a work slot says so at once and then this often (the
/// consumer's `ack_wait` is the delivery timeout plus 30 s), so that it is not delivered
/// to another meanwhile.
const WAITING_PROGRESS: Duration = Duration::from_secs(10);

/// Delivers notices until `cancel`.
pub async fn run(store: Store, catalog: Catalog, config: NotifyConfig, clock: SharedClock, cancel: CancellationToken) {
    let http = match client(&config) {
        Ok(http) => http,
        Err(e) => {
            // The agent goes on without them: a restart would not build one either.
            error!("notifications will not be sent: no HTTP client: {e}");
            return cancel.cancelled().await;
        }
    };
    let working = Semaphore::new(config.concurrency);
    let in_hand = EVENTS_IN_HAND.max(config.concurrency);
    let (http, allow) = http;
    let notifier = Arc::new(Notifier { store, catalog, config, clock, http, allow, working });
    notifier.catalog.wait_loaded().await;
    let slots = Arc::new(Semaphore::new(in_hand));
    loop {
        let consumer = tokio::select! {
            _ = cancel.cancelled() => return,
            c = consumer(&notifier.store, &notifier.config) => c,
        };
        match consumer {
            Ok(consumer) => notifier.clone().pull(consumer, slots.clone(), &cancel).await,
            Err(e) => warn!("notifications: {e}; trying again"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// The webhook client: its resolver and redirects keep to public addresses and those
/// `allow_hosts` names (`outbound`).
fn client(config: &NotifyConfig) -> Result<(reqwest::Client, Arc<outbound::AllowHosts>), Error> {
    let allow = Arc::new(outbound::AllowHosts::parse(&config.allow_hosts)?);
    let http = reqwest::Client::builder()
        .user_agent(concat!("cronrun/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(outbound::Guard(allow.clone())))
        .redirect(outbound::redirect_policy(allow.clone()))
        .build()
        .map_err(|e| Error::new(crate::error::ErrorKind::Other, e.to_string()).with_source(e))?;
    Ok((http, allow))
}

/// The shared consumer: created with new events only, its settings brought up to this
/// agent's `[notify]` on every start (create or update).
async fn consumer(store: &Store, config: &NotifyConfig) -> Result<PullConsumer, Error> {
    let events = store.names.events_stream();
    let stream = store.js.get_stream(&events).await.map_err(|e| Error::nats("opening the events stream", e))?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(NOTIFY_CONSUMER.into()),
            description: Some("cronrun notifications".into()),
            // Every event, those no rule needs acked unread (`handle`): with one filter per
            // watched kind instead, the server's search for the next message matching any
            // of them took most of its CPU under load (see docs/benchmarks.md). An
            // older agent's consumer with those filters is updated to this one.
            filter_subject: store.names.event_subject("*", "*"),
            deliver_policy: DeliverPolicy::New,
            ack_policy: AckPolicy::Explicit,
            // One delivery at most between progress acks (see `notify`).
            ack_wait: config.timeout + Duration::from_secs(30),
            max_deliver: i64::from(config.attempts) + 1,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::nats("opening the notify consumer", e))
}

impl Notifier {
    /// Pulls events into free slots (`store::pull`) until `cancel` or a pull fails.
    async fn pull(self: Arc<Self>, consumer: PullConsumer, slots: Arc<Semaphore>, cancel: &CancellationToken) {
        let limits = PullLimits { max_batch: usize::MAX, expires: EXPIRES };
        let pulled = pull_into_slots(&consumer, &slots, &limits, cancel, |msg, permit| {
            let notifier = self.clone();
            tokio::spawn(async move {
                notifier.handle(msg).await;
                drop(permit);
            });
        })
        .await;
        if let Err(e) = pulled {
            warn!("notifications: pulling events: {e}");
        }
    }

    async fn handle(&self, msg: async_nats::jetstream::Message) {
        let Ok(info) = msg.info() else { return };
        let (seq, tries) = (info.stream_sequence, info.delivered.max(1) as u32);
        let event: Event = match serde_json::from_slice(&msg.payload) {
            Ok(e) => e,
            Err(e) => {
                debug!("notifications: not an event: {e}");
                let _ = msg.ack_with(AckKind::Term).await;
                return;
            }
        };
        if !watched_kinds().any(|kind| kind == event.event) {
            let _ = msg.ack().await;
            return;
        }
        let handled = match event.event {
            EventKind::Dispatched => self.check_late(&msg, &event, seq, tries).await,
            _ => self.notify(&msg, &event, seq, tries).await.map(|()| None),
        };
        let ack = match handled {
            Ok(None) => msg.ack().await,
            Ok(Some(wait)) => msg.ack_with(AckKind::Nak(Some(wait))).await,
            Err(()) if tries >= self.config.attempts => msg.ack_with(AckKind::Term).await,
            Err(()) => msg.ack_with(AckKind::Nak(Some(backoff(tries)))).await,
        };
        if let Err(e) = ack {
            debug!("notifications: ack: {e}");
        }
    }

    /// A work slot for `msg`'s event, keeping the event ours while it waits for one.
    async fn work_slot(&self, msg: &async_nats::jetstream::Message) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if let Ok(permit) = self.working.try_acquire() {
            return Some(permit);
        }
        let slot = self.working.acquire();
        tokio::pin!(slot);
        loop {
            let _ = msg.ack_with(AckKind::Progress).await;
            tokio::select! {
                permit = &mut slot => return permit.ok(),
                _ = tokio::time::sleep(WAITING_PROGRESS) => {}
            }
        }
    }

    /// Delivers what the job's rules ask for about `event`. Err: a delivery failed.
    async fn notify(
        &self,
        msg: &async_nats::jetstream::Message,
        event: &Event,
        seq: u64,
        tries: u32,
    ) -> Result<(), ()> {
        let rules = self.rules(&event.job).await?;
        if !rules.iter().any(|rule| decide::may_notice(rule, event.event)) {
            return Ok(());
        }
        let _working = self.work_slot(msg).await;
        let runs = match self.store.list_runs(&event.job).await {
            Ok(runs) => runs.into_iter().map(|r| r.record).collect::<Vec<_>>(),
            Err(e) => {
                warn!(job = %event.job, "notifications: reading runs: {e}");
                return Err(());
            }
        };
        let record = runs.iter().find(|r| r.run_id == event.run_id);
        // A failure's event follows the write that queued its retry, if any (runner and
        // reaper alike): a later attempt in the record is the one sure sign of it.
        let seen = decide::Seen {
            kind: event.event,
            retried: record.is_some_and(|r| r.attempt > event.attempt),
            streak: decide::streak(&runs, &event.run_id),
        };
        let mut result = Ok(());
        for (i, rule) in rules.iter().enumerate() {
            let Some(notice) = decide::notice(rule, seen) else { continue };
            let told = self.tell(msg, event, seq, tries, (i, rule), notice, record, seen.streak).await;
            result = result.and(told);
        }
        result
    }

    /// A fire's `late` check (see the module docs): Ok(Some(wait)) to look again then.
    async fn check_late(
        &self,
        msg: &async_nats::jetstream::Message,
        event: &Event,
        seq: u64,
        tries: u32,
    ) -> Result<Option<Duration>, ()> {
        let rules = self.rules(&event.job).await?;
        let late: Vec<(usize, &Notify, Duration)> =
            rules.iter().enumerate().filter_map(|(i, rule)| rule.late.map(|d| (i, rule, d))).collect();
        // One check per fire: its first attempt's dispatch.
        if late.is_empty() || event.attempt != 1 {
            return Ok(None);
        }
        let _working = self.work_slot(msg).await;
        let record = match self.store.get_run(&event.job, &event.run_id).await {
            Ok(stored) => stored.record,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => {
                warn!(job = %event.job, "notifications: reading run {}: {e}", event.run_id);
                return Err(());
            }
        };
        let Some(fire) = record.scheduled_at.filter(|_| matches!(record.trigger, Trigger::Schedule | Trigger::Catchup))
        else {
            return Ok(None);
        };
        let now = self.clock.now();
        let (mut wait, mut result) = (None::<Duration>, Ok(()));
        for (i, rule, after) in late {
            match decide::late(after, fire, now, Some(record.status)) {
                decide::LateCheck::Wait(d) => wait = Some(wait.map_or(d, |w| w.min(d))),
                decide::LateCheck::Settled => {}
                decide::LateCheck::Late => {
                    let told = self.tell(msg, event, seq, tries, (i, rule), Notice::Late, Some(&record), 0).await;
                    result = result.and(told);
                }
            }
        }
        result.map(|()| wait)
    }

    /// The job's rules: its spec's `notify`, else `[notify] default`. Err: the spec could
    /// not be read (the event is looked at again).
    async fn rules(&self, job: &str) -> Result<Vec<Notify>, ()> {
        let job = self.catalog.get(job).await.map_err(|e| warn!(job, "notifications: reading the job: {e}"))?;
        Ok(match job.as_ref().and_then(|j| j.summary.as_ref().ok()).map(|s| s.notify().to_vec()) {
            Some(rules) if !rules.is_empty() => rules,
            _ => self.config.default.clone(),
        })
    }

    /// Delivers `notice` by rule number `i` unless it delivered already for this event
    /// (`notified.<seq>.<i>`), and publishes how it went. Err: the delivery failed.
    #[allow(clippy::too_many_arguments)]
    async fn tell(
        &self,
        msg: &async_nats::jetstream::Message,
        event: &Event,
        seq: u64,
        tries: u32,
        (i, rule): (usize, &Notify),
        notice: Notice,
        record: Option<&RunRecord>,
        streak: u32,
    ) -> Result<(), ()> {
        let key = lease_keys::notified(seq, i);
        if matches!(self.store.leases.get(&key).await, Ok(Some(_))) {
            return Ok(());
        }
        // Each rule may take the whole timeout: the event stays ours meanwhile.
        let _ = msg.ack_with(AckKind::Progress).await;
        let delivery = format!("{}-{seq}", self.store.names.events_stream());
        let message = deliver::Message {
            notice,
            event,
            record,
            streak,
            dashboard: self.config.dashboard_url.as_deref(),
            delivery: &delivery,
        };
        let (kind, detail, result) = match self.deliver(rule, &message).await {
            Ok(how) => {
                info!(job = %event.job, run = %event.run_id, "notified {}: {how}", notice.as_str());
                let day = Some(Duration::from_secs(86_400));
                if let Err(e) = self.store.leases.create(&key, bytes::Bytes::from_static(b"1"), day).await {
                    debug!("notifications: marking {key}: {e}");
                }
                (EventKind::Notified, format!("{}: {how}", notice.as_str()), Ok(()))
            }
            Err(deliver::Failure::Refused(why)) => {
                // Where the webhook leads does not change by trying again: marked done, so
                // that a redelivery for another rule does not try it.
                warn!(job = %event.job, run = %event.run_id, "notice {} not delivered: {why} (not retried)", notice.as_str());
                let day = Some(Duration::from_secs(86_400));
                if let Err(e) = self.store.leases.create(&key, bytes::Bytes::from_static(b"1"), day).await {
                    debug!("notifications: marking {key}: {e}");
                }
                (EventKind::NotifyFailed, format!("{}: {why} (not retried)", notice.as_str()), Ok(()))
            }
            Err(deliver::Failure::Failed(why)) => {
                let next = match tries >= self.config.attempts {
                    true => "given up".to_string(),
                    false => format!("try {tries} of {}, next in {:?}", self.config.attempts, backoff(tries)),
                };
                warn!(job = %event.job, run = %event.run_id, "notice {} not delivered: {why} ({next})", notice.as_str());
                (EventKind::NotifyFailed, format!("{}: {why} ({next})", notice.as_str()), Err(()))
            }
        };
        let told = Event::new(&event.job, &event.run_id, kind, event.attempt, self.clock.now());
        publish_event(&self.store, &told.with_detail(detail)).await;
        result
    }

    /// Sends `message` where `rule` says, signed with the rule's secret.
    async fn deliver(&self, rule: &Notify, message: &deliver::Message<'_>) -> Result<String, deliver::Failure> {
        let secret = match rule.secret.as_deref() {
            Some(name) => match self.config.secrets.get(name) {
                Some(secret) => Some(secret.as_bytes()),
                None => {
                    return Err(deliver::Failure::Failed(format!(
                        "no secret {name:?} in [notify.secrets] of this agent"
                    )));
                }
            },
            None => None,
        };
        // The secrets of the rule's URL and headers, read for this delivery: one missing is
        // a failed try (it may be set before the next), naming it, never its value.
        let names = rule.secret_names();
        let secrets = match names.is_empty() {
            true => Default::default(),
            false => self.store.secrets.resolve(names).await.map_err(|e| deliver::Failure::Failed(e.to_string()))?,
        };
        let body = message.body(rule.format);
        let target = deliver::Target { http: &self.http, allow: &self.allow, store: &self.store };
        deliver::send(target, rule, &secrets, body, secret, message.delivery, self.config.timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_a_second_to_five_minutes() {
        let delays: Vec<u64> = (1..=11).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
    }
}
