//! Chains (`spec::after`): the end of a run starts one run of each job chained after its
//! job.
//!
//! The runs bucket is the truth of how runs end, so chains follow it, not the events
//! (which are published without acknowledgement). Agents with the scheduler role share one
//! durable consumer, `chains`, of the bucket's stream: every write of a run record passes
//! by one agent, whichever are up. A record in a final state whose job has downstream jobs
//! (the catalog's `after` index) dispatches one run of each downstream whose `on` matches,
//! under a run id derived from the upstream run (`record::chain_run_id`). Dispatch is
//! create-if-absent with `Nats-Msg-Id`, as for fires, and leaves a `chained.<job>.<run>`
//! marker (a day) in the leases bucket, so a redelivery, or an agent that dies between the
//! dispatch and the ack, starts nothing twice, even once the chained run's record is
//! pruned. A write whose dispatches fail is handed back and tried again a second later.
//!
//! The consumer exists only while some job has `after`: created for new writes when the
//! first such job appears, deleted when the last goes (and at start, should one be left
//! from before), so a deployment without chains pays nothing, and a consumer left behind
//! cannot replay old runs into a chain added later. One deleted by someone else is made
//! again. The catalog signals changes of the `after` index (`Catalog::trigger_changes`),
//! so the first chain added makes the consumer at once, and the last removed deletes it.
//! A chain added (or removed) applies to the runs that end after the agents have seen it.
//! A chained run carries its depth; past `MAX_DEPTH` nothing more is started, which ends
//! any cycle written around `apply`'s check (straight into KV, two applies at once).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::catalog::{Catalog, TriggerChanges};
use crate::clock::SharedClock;
use crate::dispatch::{DispatchMsg, Outcome};
use crate::error::{Error, ErrorKind};
use crate::model::roles::CHAIN_CONSUMER;
use crate::names::lease_keys;
use crate::record::{RunRecord, Trigger, chain_run_id};
use crate::store::Store;
use crate::store::pull::{EXPIRES, PullLimits, consumer_missing, pull_into_slots, until_gone};
use crate::trigger::{self, Trigger as _};

/// Record writes handled at once by one agent.
const CONCURRENCY: usize = 64;
/// How long after a failure (the consumer not made or not deleted, its pull ended) it is
/// tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest wait for a change of the catalog's `after` index: a bound only, since each
/// change is signalled.
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(60);
/// How often the consumer is checked to still exist.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// Runs in one chain at most, counting from the first upstream run.
pub const MAX_DEPTH: u64 = 100;
/// How long a `chained` marker is kept.
const MARKER_TTL: Duration = Duration::from_secs(24 * 3600);

/// Chains as a trigger (see `trigger`) that follows run records: the scheduler runs it as
/// one of its tasks.
pub struct Chains {
    pub store: Store,
    pub catalog: Catalog,
    pub clock: SharedClock,
}

impl trigger::Trigger for Chains {
    const KIND: Trigger = Trigger::Chain;
}

impl trigger::Follows for Chains {
    const TASK: &'static str = "the chains";
    fn run(self, cancel: CancellationToken) -> impl std::future::Future<Output = ()> + Send + 'static {
        run(self.store, self.catalog, self.clock, cancel)
    }
}

struct Chainer {
    store: Store,
    catalog: Catalog,
    clock: SharedClock,
}

/// Starts chained runs until `cancel`.
pub async fn run(store: Store, catalog: Catalog, clock: SharedClock, cancel: CancellationToken) {
    tokio::select! {
        _ = cancel.cancelled() => return,
        _ = catalog.wait_loaded() => {}
    }
    let mut changes = catalog.trigger_changes();
    let chainer = Arc::new(Chainer { store, catalog, clock });
    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    // One may be left from before this agent started.
    let mut may_exist = true;
    loop {
        // Before reading the catalog: a change made while it is read wakes the wait below.
        changes.seen();
        if !chainer.catalog.has_chains() {
            // Deleted only once every shard said it has no chains: a shard not led yet
            // (agents starting, an upgrade) may have some, and the records meanwhile wait.
            let complete = chainer.catalog.triggers_complete();
            if may_exist && complete {
                may_exist = !chainer.delete_consumer().await;
            }
            // A deletion that failed is tried again soon; anything else waits for a change.
            let wait = if may_exist && complete { RETRY_AFTER } else { LOOK_AT_LEAST_EVERY };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = changes.changed() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            continue;
        }
        may_exist = true;
        match consumer(&chainer.store).await {
            Ok(consumer) => {
                info!("chains: following run records");
                // Ends at `cancel` by itself, once it has handed back what its pull still brings.
                tokio::select! {
                    pulled = chainer.clone().pull(consumer.clone(), slots.clone(), &cancel) => {
                        if let Err(e) = pulled {
                            warn!("chains: pulling run records: {e}");
                        }
                    }
                    // Nothing failed: the consumer is deleted at once.
                    _ = until_no_chains(&chainer.catalog, &mut changes) => continue,
                    _ = until_gone(&consumer, CHECK_EVERY) => warn!("chains: the consumer was deleted; making it again"),
                }
            }
            Err(e) => warn!("chains: {e}; trying again"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RETRY_AFTER) => {}
        }
    }
}

/// Returns once no job has `after`, looking when the catalog signals a change. Not at
/// `cancel`: it races a pull that ends at `cancel` by itself, once it has handed back
/// what it still brings.
async fn until_no_chains(catalog: &Catalog, changes: &mut TriggerChanges) {
    loop {
        changes.seen();
        if !catalog.has_chains() {
            return;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(LOOK_AT_LEAST_EVERY) => {}
        }
    }
}

fn runs_stream(store: &Store) -> String {
    format!("KV_{}", store.names.runs_bucket())
}

/// The shared consumer of every run record write from its creation on.
async fn consumer(store: &Store) -> Result<PullConsumer, Error> {
    let stream =
        store.js.get_stream(runs_stream(store)).await.map_err(|e| Error::nats("opening the runs stream", e))?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(CHAIN_CONSUMER.into()),
            description: Some("cronrun chains".into()),
            filter_subject: format!("$KV.{}.>", store.names.runs_bucket()),
            deliver_policy: DeliverPolicy::New,
            ack_policy: AckPolicy::Explicit,
            // A write takes a few KV operations; one held by an agent that died is
            // handed to another after this.
            ack_wait: Duration::from_secs(10),
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::nats("opening the chains consumer", e))
}

impl Chainer {
    async fn pull(
        self: Arc<Self>,
        consumer: PullConsumer,
        slots: Arc<Semaphore>,
        cancel: &CancellationToken,
    ) -> Result<(), async_nats::jetstream::consumer::pull::BatchError> {
        let limits = PullLimits { max_batch: usize::MAX, expires: EXPIRES };
        pull_into_slots(&consumer, &slots, &limits, cancel, |msg, permit| {
            let chainer = self.clone();
            tokio::spawn(async move {
                chainer.handle(msg).await;
                drop(permit);
            });
        })
        .await
    }

    /// True once the consumer is gone (deleted now, or not there).
    async fn delete_consumer(&self) -> bool {
        let stream = match self.store.js.get_stream(runs_stream(&self.store)).await {
            Ok(stream) => stream,
            Err(e) => {
                warn!("chains: opening the runs stream to delete the consumer: {e}");
                return false;
            }
        };
        match stream.delete_consumer(CHAIN_CONSUMER).await {
            Ok(_) => {
                info!("chains: no job has `after`; consumer deleted");
                true
            }
            Err(e) if consumer_missing(&e) => true,
            Err(e) => {
                warn!("chains: deleting the consumer: {e}; trying again");
                false
            }
        }
    }

    async fn handle(&self, msg: async_nats::jetstream::Message) {
        // Deletes and purges (history pruning) carry a KV-Operation header and no record.
        if msg.headers.as_ref().is_some_and(|h| h.get("KV-Operation").is_some()) {
            return ack(&msg, AckKind::Ack).await;
        }
        let record = match RunRecord::from_json(&msg.payload) {
            // A record is written under its own key: one under another (a forgery) is not
            // followed.
            Ok(record) if msg.subject.ends_with(&format!(".{}", record.key())) => record,
            Ok(record) => {
                warn!(subject = %msg.subject, "chains: the record of {} under another key: ignored", record.key());
                return ack(&msg, AckKind::Ack).await;
            }
            Err(e) => {
                warn!(subject = %msg.subject, "chains: a run record this agent cannot read ({e}): no runs started after it");
                return ack(&msg, AckKind::Ack).await;
            }
        };
        let kind = match self.start_downstream(&record).await {
            Ok(()) => AckKind::Ack,
            Err(e) => {
                warn!(job = %record.job, run = %record.run_id, "chains: starting the runs after this one: {e}; trying again");
                AckKind::Nak(Some(Duration::from_secs(1)))
            }
        };
        ack(&msg, kind).await;
    }

    /// Dispatches the runs that `record`'s end starts, if it is an end.
    async fn start_downstream(&self, record: &RunRecord) -> Result<(), Error> {
        if !record.status.is_final() {
            return Ok(());
        }
        for (downstream, on) in self.catalog.downstream_of(&record.job) {
            if on.matches(record.status) {
                self.start(record, &downstream).await?;
            }
        }
        Ok(())
    }

    async fn start(&self, upstream: &RunRecord, job: &str) -> Result<(), Error> {
        let Some(entry) = self.catalog.get(job).await? else { return Ok(()) };
        let Ok(summary) = &entry.summary else { return Ok(()) };
        let depth = depth_of(upstream) + 1;
        if depth > MAX_DEPTH {
            warn!(job, upstream = %upstream.key(), "chains: {MAX_DEPTH} runs in one chain (a cycle?): no run started");
            return Ok(());
        }
        let now = self.clock.now();
        let msg = chained_run(upstream, job, entry.revision, now);
        let marker = lease_keys::chained(job, &msg.run_id);
        if self.store.leases.get(&marker).await?.is_some() {
            return Ok(());
        }
        let input = input_of(upstream, depth);
        let outcome = Chains::start(&self.store, &summary.pool, &msg, Some(input), now).await?;
        if outcome == Outcome::Dispatched {
            info!(job, run = %msg.run_id, upstream = %upstream.key(), "chained run dispatched");
        }
        match self.store.leases.create(&marker, "".into(), Some(MARKER_TTL)).await {
            Err(e) if !e.is_conflict() && *e.kind() != ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    }
}

/// The run of `job` that the end of `upstream` starts: its id fixed by the upstream run,
/// due at once (`scheduled_at` is the upstream's end, so its lateness counts the hop; not
/// later than now, should the upstream's host clock run ahead).
fn chained_run(upstream: &RunRecord, job: &str, revision: u64, now: DateTime<Utc>) -> DispatchMsg {
    let ended = upstream.finished_at.map_or(now, |t| t.min(now));
    let fire = upstream.scheduled_at.or(upstream.finished_at).unwrap_or(ended);
    let run_id = chain_run_id(fire, &upstream.job, &upstream.run_id);
    Chains::first(job, run_id, ended, revision)
}

/// How many chained runs led to `record`: 0 for a run not started by a chain.
fn depth_of(record: &RunRecord) -> u64 {
    let chained = matches!(record.trigger, Trigger::Chain | Trigger::Retry);
    record.input.as_ref().filter(|_| chained).and_then(|i| i["after"]["depth"].as_u64()).unwrap_or(0)
}

/// What a chained run is given (its `input`): the upstream run, how it ended, and how
/// deep in its chain the new run is.
fn input_of(upstream: &RunRecord, depth: u64) -> serde_json::Value {
    json!({ "after": {
        "job": upstream.job,
        "run_id": upstream.run_id,
        "status": upstream.status.as_str(),
        "exit_code": upstream.exit_code,
        "error": upstream.error,
        "finished_at": upstream.finished_at,
        "depth": depth,
    }})
}

async fn ack(msg: &async_nats::jetstream::Message, kind: AckKind) {
    // An ack the server confirms: one lost would hand the write to another agent.
    let acked = match kind {
        AckKind::Ack => msg.double_ack().await,
        kind => msg.ack_with(kind).await,
    };
    if let Err(e) = acked {
        debug!("chains: ack: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Status;
    use chrono::TimeZone;

    #[test]
    fn a_chained_run_is_fixed_by_its_upstream_run_and_carries_how_it_ended() {
        let fire = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
        let mut upstream = RunRecord::queued("extract", "20261123T080000Z", Trigger::Schedule, fire, 3);
        (upstream.status, upstream.exit_code, upstream.error) = (Status::Failed, Some(2), Some("exit status 2".into()));
        upstream.finished_at = Some(fire + chrono::TimeDelta::seconds(5));
        let (t1, t2) = (fire + chrono::TimeDelta::seconds(6), fire + chrono::TimeDelta::seconds(90));
        let (first, again) = (chained_run(&upstream, "load", 7, t1), chained_run(&upstream, "load", 7, t2));
        assert_eq!(first, again, "a redelivery later is the same run");
        assert_eq!((first.trigger, first.attempt, first.spec_revision), (Trigger::Chain, 1, 7));
        assert_eq!(first.scheduled_at, fire + chrono::TimeDelta::seconds(5));
        assert_eq!(first.run_id, chain_run_id(fire, "extract", "20261123T080000Z"));
        let other = RunRecord { run_id: "20261123T080000Z-m0001".into(), ..upstream.clone() };
        assert_ne!(chained_run(&other, "load", 7, t1).run_id, first.run_id);
        let input = input_of(&upstream, 1);
        assert_eq!(input["after"]["depth"], 1);
        assert_eq!(input["after"]["status"], "failed");
        assert_eq!(input["after"]["exit_code"], 2);
        assert_eq!(input["after"]["run_id"], "20261123T080000Z");
        // An upstream host whose clock runs ahead does not make the run due later.
        upstream.finished_at = Some(t2 + chrono::TimeDelta::seconds(60));
        assert_eq!(chained_run(&upstream, "load", 7, t2).scheduled_at, t2);
    }

    #[test]
    fn the_depth_of_a_chain_counts_chained_runs_and_their_retries_only() {
        let t = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
        let run = |trigger, input: Option<serde_json::Value>| {
            let mut r = RunRecord::queued("b", "r", trigger, t, 1);
            r.input = input;
            r
        };
        let chained = Some(json!({ "after": { "depth": 7 } }));
        assert_eq!(depth_of(&run(Trigger::Chain, chained.clone())), 7);
        assert_eq!(depth_of(&run(Trigger::Retry, chained.clone())), 7);
        // A manual run given the same input is the start of a chain.
        assert_eq!(depth_of(&run(Trigger::Manual, chained)), 0);
        assert_eq!(depth_of(&run(Trigger::Schedule, None)), 0);
    }
}
