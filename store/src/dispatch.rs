//! Handing a run to the runners: the run record is created if absent under its
//! fire-derived key, then the run is published to `CRONRUN_DISPATCH` with a `Nats-Msg-Id`.
//! Both steps refuse a second dispatch of the same run; the order makes a crash between
//! them harmless (the next dispatcher finds the record `queued` and publishes again,
//! deduplicated by the server if the first publish did land).
//!
//! A scheduled fire on time is published alone ([`dispatch_unrecorded`]): its record is
//! created by the runner that claims it, `running` (or `skipped`), create-if-absent, one
//! stored message a run fewer. A second dispatch of the fire (a new leader's, after a
//! takeover) is deduplicated by `Nats-Msg-Id` within the stream's window, and refused
//! after it by that create: the record exists.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind};
use crate::events::{Event, EventKind, publish_event};
use crate::record::{RunRecord, Status, Trigger};
use crate::store::Store;

/// The body of a dispatch message. The record in `cronrun_runs` is the truth; this says
/// which record to look at and when to start it, and carries the record as queued so
/// that a runner can claim it without reading it first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchMsg {
    pub job: String,
    pub run_id: String,
    pub attempt: u32,
    pub trigger: Trigger,
    pub scheduled_at: DateTime<Utc>,
    pub spec_revision: u64,
    /// Set by `dispatch` and `retry` as they publish; None for a run dispatched with no
    /// record (see [`dispatch_unrecorded`]), whose runner creates its record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<Queued>,
    /// The overlap policy this run follows instead of its job's (`backfill --overlap
    /// allow`: backfilled runs neither wait for nor skip one another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<crate::spec::Overlap>,
}

impl DispatchMsg {
    /// Its `Nats-Msg-Id`: one per attempt of a run, so that the stream keeps one dispatch
    /// of each within its deduplication window.
    fn msg_id(&self) -> String {
        format!("{}.{}.{}", self.job, self.run_id, self.attempt)
    }

    /// The first attempt of run `run_id` of `job` (spec `spec_revision`) that `trigger`
    /// starts for `scheduled_at`: what every trigger hands dispatch (see the scheduler's
    /// `trigger`).
    pub fn first(job: &str, run_id: String, trigger: Trigger, scheduled_at: DateTime<Utc>, spec_revision: u64) -> Self {
        DispatchMsg {
            job: job.to_string(),
            run_id,
            attempt: 1,
            trigger,
            scheduled_at,
            spec_revision,
            queued: None,
            overlap: None,
        }
    }

    /// The run, as its spans name it.
    pub fn traced(&self) -> crate::telemetry::TracedRun<'_> {
        crate::telemetry::TracedRun {
            job: &self.job,
            run_id: &self.run_id,
            attempt: self.attempt,
            trigger: self.trigger,
            scheduled_at: self.scheduled_at,
        }
    }
}

/// Publishes the first attempt of a scheduled fire with no record (see the module's doc):
/// the runner that claims it creates the record. A fire whose record must be there
/// before a runner takes it (its `late` check reads it) goes through [`dispatch`].
pub async fn dispatch_unrecorded(
    store: &Store,
    pool: &str,
    msg: &DispatchMsg,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let began = std::time::SystemTime::now();
    publish(store, pool, &DispatchMsg { queued: None, ..msg.clone() }, &msg.msg_id(), began).await?;
    crate::telemetry::fire_span(store.names.namespace(), msg.traced(), now, std::time::SystemTime::now());
    if store.lifecycle.every_run {
        publish_dispatched(store, msg, now).await;
    }
    Ok(())
}

/// The `queued` record of `msg`'s attempt, dispatched at `dispatched_at`: what `dispatch`
/// creates, and what the runner of a run dispatched with no record (see
/// [`dispatch_unrecorded`]) starts from, dispatched when the server stored its message.
pub fn queued_record(msg: &DispatchMsg, dispatched_at: Option<DateTime<Utc>>) -> RunRecord {
    let mut record = RunRecord::queued(&msg.job, &msg.run_id, msg.trigger, msg.scheduled_at, msg.spec_revision);
    record.attempt = msg.attempt;
    record.dispatched_at = dispatched_at;
    record
}

/// The run record as the dispatcher left it and its revision. Compare-and-set from it
/// fails if anyone wrote the record since, so a stale copy cannot start a run twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Queued {
    pub revision: u64,
    pub record: RunRecord,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Dispatched,
    /// Already dispatched and past `queued`: nothing was sent.
    Duplicate,
}

/// Creates the record for `msg` and publishes it to `pool`.
pub async fn dispatch(store: &Store, pool: &str, msg: &DispatchMsg, now: DateTime<Utc>) -> Result<Outcome, Error> {
    dispatch_with_input(store, pool, msg, None, now).await
}

/// `dispatch`, the run given `input` (see `crate::input`), kept in its record.
pub async fn dispatch_with_input(
    store: &Store,
    pool: &str,
    msg: &DispatchMsg,
    input: Option<serde_json::Value>,
    now: DateTime<Utc>,
) -> Result<Outcome, Error> {
    let began = std::time::SystemTime::now();
    let mut record = queued_record(msg, Some(now));
    record.input = input;
    let (queued, created) = match store.create_run(&record).await {
        Ok(revision) => (Queued { revision, record }, true),
        Err(e) if *e.kind() == ErrorKind::AlreadyExists => {
            let existing = store.get_run(&msg.job, &msg.run_id).await?;
            if existing.record.status != Status::Queued || existing.record.attempt != msg.attempt {
                return Ok(Outcome::Duplicate);
            }
            (Queued { revision: existing.revision, record: existing.record }, false)
        }
        Err(e) => return Err(e),
    };
    publish(store, pool, &DispatchMsg { queued: Some(queued), ..msg.clone() }, &msg.msg_id(), began).await?;
    // The fire span once, by whoever created the record (a dispatch published again after
    // a dispatcher's crash, or a race between two, would repeat its fixed id).
    if created {
        crate::telemetry::fire_span(store.names.namespace(), msg.traced(), now, std::time::SystemTime::now());
    }
    // A run someone asked for (the CLI, the dashboard's admin) keeps its event: with
    // their name in `by`, it is the audit trail of manual runs.
    if store.lifecycle.every_run || store.actor.is_some() {
        publish_dispatched(store, msg, now).await;
    }
    Ok(Outcome::Dispatched)
}

/// The run's `dispatched` event: for every run with `[events] lifecycle` (see
/// `store::Lifecycle`), else for the runs people ask for and the fires whose `late`
/// check it starts.
pub async fn publish_dispatched(store: &Store, msg: &DispatchMsg, now: DateTime<Utc>) {
    publish_event(store, &Event::new(&msg.job, &msg.run_id, EventKind::Dispatched, msg.attempt, now)).await;
}

/// Records a fire that will not run as a `skipped` run (create-if-absent: a fire that
/// was dispatched after all keeps its record). True when this call created the record.
pub async fn record_skipped(
    store: &Store,
    job: &str,
    run_id: &str,
    fire: DateTime<Utc>,
    revision: u64,
    why: &str,
    now: DateTime<Utc>,
) -> bool {
    let mut record = RunRecord::queued(job, run_id, Trigger::Schedule, fire, revision);
    record.status = Status::Skipped;
    record.error = Some(why.to_string());
    record.finished_at = Some(now);
    match store.create_run(&record).await {
        Ok(_) => true,
        Err(e) if *e.kind() == ErrorKind::AlreadyExists => false,
        Err(e) => {
            tracing::warn!(job, run = run_id, "skipped fire not recorded: {e}");
            false
        }
    }
}

/// Queues the next attempt of a run whose attempt ended badly (failed, timed out, lost):
/// `queue_retry`, then `publish_queued` to start at `start_at`. Schedulers only (runners
/// hand a failed attempt to the scheduler, see `runner::finish`). Returns the `retrying`
/// event for the caller to publish after its own (events follow writes that landed: a
/// refused retry publishes nothing).
pub async fn retry(
    store: &Store,
    pool: &str,
    record: RunRecord,
    revision: u64,
    start_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Event, Error> {
    let (queued, event) = queue_retry(store, record, revision, now).await?;
    publish_queued(store, pool, queued, start_at).await?;
    Ok(event)
}

/// Records the next attempt of a run `queued` (trigger `retry`, no host) by compare-and-set
/// from `revision`: a conflict means someone else moved the run first. Returns the record
/// as queued and the `retrying` event.
pub async fn queue_retry(
    store: &Store,
    mut record: RunRecord,
    revision: u64,
    now: DateTime<Utc>,
) -> Result<(Queued, Event), Error> {
    next_attempt(&mut record, now);
    // The record rides in the dispatch message too: fitted once, for both.
    record.fit(store.record_budget)?;
    let revision = store.update_run(&record, revision).await?;
    let event = Event::new(&record.job, &record.run_id, EventKind::Retrying, record.attempt, now)
        .with_detail(record.error.clone().unwrap_or_default());
    Ok((Queued { revision, record }, event))
}

/// Turns the record of an attempt that ended into that of the next, queued at `now`: the
/// error names the attempt and how it ended; what belonged to the attempt (host, times,
/// exit, output: the log stream keeps it) is cleared.
fn next_attempt(record: &mut RunRecord, now: DateTime<Utc>) {
    let why = record.error.take().unwrap_or_else(|| record.status.as_str().to_string());
    record.error = Some(format!("attempt {} {}: {why}", record.attempt, record.status.as_str()));
    record.attempt += 1;
    record.trigger = Trigger::Retry;
    record.status = Status::Queued;
    record.dispatched_at = Some(now);
    record.output.clear();
    (record.host, record.started_at, record.finished_at, record.heartbeat_at) = (None, None, None, None);
    (record.exit_code, record.duration_ms) = (None, None);
}

/// Publishes the dispatch of a run its record shows `queued` (a retry from `queue_retry`,
/// or a run whose message was lost) to start at `start_at`; deduplicated per attempt by
/// `Nats-Msg-Id`.
pub async fn publish_queued(store: &Store, pool: &str, queued: Queued, start_at: DateTime<Utc>) -> Result<(), Error> {
    let msg = queued_msg(queued, start_at);
    publish(store, pool, &msg, &msg.msg_id(), std::time::SystemTime::now()).await
}

/// `publish_queued` for an attempt dispatched before whose runner let it go unstarted
/// (see `scheduler::recovery::expiry`): under its own `Nats-Msg-Id` (the record's revision in it),
/// which the first dispatch's does not deduplicate. A runner still holding the first
/// message finds the record moved on and leaves it to this one.
pub async fn publish_again(store: &Store, pool: &str, queued: Queued, start_at: DateTime<Utc>) -> Result<(), Error> {
    let revision = queued.revision;
    let msg = queued_msg(queued, start_at);
    let msg_id = format!("{}.r{revision}", msg.msg_id());
    publish(store, pool, &msg, &msg_id, std::time::SystemTime::now()).await
}

fn queued_msg(queued: Queued, start_at: DateTime<Utc>) -> DispatchMsg {
    let record = &queued.record;
    DispatchMsg {
        job: record.job.clone(),
        run_id: record.run_id.clone(),
        attempt: record.attempt,
        trigger: record.trigger,
        scheduled_at: start_at,
        spec_revision: record.spec_revision,
        queued: Some(queued.clone()),
        overlap: None,
    }
}

/// Publishes `msg`, its dispatch span (begun at `began`) in its `traceparent` header
/// when telemetry is on.
async fn publish(
    store: &Store,
    pool: &str,
    msg: &DispatchMsg,
    msg_id: &str,
    began: std::time::SystemTime,
) -> Result<(), Error> {
    let span = crate::telemetry::DispatchSpan::begin(store.names.namespace(), msg.traced(), began);
    let headers = headers(msg_id, span.as_ref().map(|s| s.traceparent()));
    // Never an empty body: a runner could not tell which run it was.
    let body = serde_json::to_vec(msg)
        .map_err(|e| Error::new(ErrorKind::Other, format!("encoding the dispatch of {msg_id}: {e}")))?;
    let published = async {
        store
            .js
            .publish_with_headers(store.names.dispatch_subject(pool), headers, body.into())
            .await
            .map_err(|e| Error::nats(&format!("dispatching {msg_id}"), e))?
            .await
            .map_err(|e| Error::nats(&format!("dispatching {msg_id}"), e))
    };
    let result = published.await.map(|_| ());
    if let Some(span) = span {
        span.end(result.as_ref().err().map(|e| e.to_string()));
    }
    result
}

/// A dispatch message's headers: its `Nats-Msg-Id`, and the `traceparent` of its dispatch
/// span when there is one (telemetry on).
fn headers(msg_id: &str, traceparent: Option<String>) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    if let Some(traceparent) = traceparent {
        headers.insert(crate::telemetry::TRACEPARENT_HEADER, traceparent.as_str());
    }
    headers
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn valid() -> Vec<u8> {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let record = RunRecord::queued("job", "20270115T080000Z", Trigger::Schedule, at, 3);
        let msg = DispatchMsg {
            job: "job".into(),
            run_id: "20270115T080000Z".into(),
            attempt: 1,
            trigger: Trigger::Schedule,
            scheduled_at: at,
            spec_revision: 3,
            queued: Some(Queued { revision: 9, record }),
            overlap: None,
        };
        serde_json::to_vec(&msg).unwrap()
    }

    #[test]
    fn the_next_attempt_is_queued_clean_and_names_how_the_last_one_ended() {
        let fire = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let now = fire + chrono::TimeDelta::seconds(7);
        for (status, error, expected) in [
            (Status::Failed, Some("exited with code 3"), "attempt 1 failed: exited with code 3"),
            (Status::Lost, None, "attempt 1 lost: lost"),
            (Status::TimedOut, Some("timed out after 5s"), "attempt 1 timed_out: timed out after 5s"),
        ] {
            let mut record = RunRecord::queued("job", "run", Trigger::Schedule, fire, 4);
            (record.status, record.error) = (status, error.map(String::from));
            (record.host, record.started_at, record.finished_at) = (Some("h1".into()), Some(fire), Some(now));
            (record.exit_code, record.duration_ms, record.output) = (Some(3), Some(7000), vec!["out".into()]);
            next_attempt(&mut record, now);
            assert_eq!((record.attempt, record.status, record.trigger), (2, Status::Queued, Trigger::Retry));
            assert_eq!(record.error.as_deref(), Some(expected));
            assert_eq!((record.scheduled_at, record.spec_revision, record.dispatched_at), (Some(fire), 4, Some(now)));
            assert!(record.host.is_none() && record.started_at.is_none() && record.finished_at.is_none());
            assert!(record.exit_code.is_none() && record.duration_ms.is_none() && record.output.is_empty());
        }
    }

    proptest! {
        /// A runner decodes whatever lands on a dispatch subject (anyone allowed to publish
        /// there, a corrupted message): it never panics, it only refuses.
        #[test]
        fn the_dispatch_decoder_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            cut in 0usize..600,
            flips in proptest::collection::vec((0usize..600, any::<u8>()), 0..8),
        ) {
            let _ = serde_json::from_slice::<DispatchMsg>(&bytes);
            let mut near = valid();
            near.truncate(cut.max(1).min(near.len()));
            let _ = serde_json::from_slice::<DispatchMsg>(&near);
            let mut mutated = valid();
            for (at, byte) in flips {
                let at = at % mutated.len();
                mutated[at] = byte;
            }
            // What decodes, re-encodes to the same message.
            if let Ok(msg) = serde_json::from_slice::<DispatchMsg>(&mutated) {
                let again: DispatchMsg = serde_json::from_slice(&serde_json::to_vec(&msg).unwrap()).unwrap();
                prop_assert_eq!(again, msg);
            }
        }
    }

    #[test]
    fn with_telemetry_off_a_dispatch_carries_no_traceparent_and_nothing_is_exported() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let msg: DispatchMsg = serde_json::from_slice(&valid()).unwrap();
        // Nothing started telemetry in this process (only an agent does).
        assert!(!crate::telemetry::enabled());
        let span = crate::telemetry::DispatchSpan::begin("cronrun", msg.traced(), std::time::SystemTime::now());
        assert!(span.is_none(), "no dispatch span is made");
        let headers = headers("job.20270115T080000Z.1", span.map(|s| s.traceparent()));
        assert!(headers.get(crate::telemetry::TRACEPARENT_HEADER).is_none());
        assert_eq!(headers.get("Nats-Msg-Id").map(|v| v.as_str()), Some("job.20270115T080000Z.1"));
        let trace = crate::telemetry::RunTrace::new("cronrun", msg.traced(), None, std::time::SystemTime::now());
        assert_eq!(trace.traceparent(), None, "a job is given no TRACEPARENT");
        crate::telemetry::fire_span("cronrun", msg.traced(), at, std::time::SystemTime::now());
    }

    #[test]
    fn a_dispatch_message_round_trips() {
        let msg: DispatchMsg = serde_json::from_slice(&valid()).unwrap();
        assert_eq!(serde_json::to_vec(&msg).unwrap(), valid());
    }
}
