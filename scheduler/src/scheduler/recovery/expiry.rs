//! What the expiry of a run's lease means, for the reaper (as it happens) and the sweep
//! (when the expiry was missed). The record decides ([`on_expiry`]):
//!
//! - `running`: the runner died or stalled. The run is marked `lost` by compare-and-set
//!   (so the stalled runner, should it wake, finds its writes refused) and another attempt
//!   is queued if the job's retry policy allows.
//! - `queued`, but for a retry with no host (below): claimed (a runner took the run's
//!   lease, which is the claim), and let go unstarted (the runner died before the instant,
//!   or could not record the start while NATS failed over). None of its code ran: a run
//!   starts only after its `running` write lands. Within its starting deadline it is
//!   dispatched again, the same attempt, its record rewritten by compare-and-set (which
//!   fences the runner that let it go: its `running` write, from the revision it read, is
//!   refused); past it, it is `lost` as above.
//! - `queued` for a retry, with no host: the runner recorded a failed attempt and left the
//!   lease to expire after the backoff (see `runner::finish`). The next attempt is
//!   dispatched now (a runner that claimed it and let it go leaves it so too: dispatched
//!   again).
//! - anything else is over: left alone.
//!
//! A runner may write any run record and run lease, so nothing a record asks for is taken
//! on trust: another attempt only within the job's retries (or a message run's
//! `on.redeliver`), with an input the job's `input_schema` accepts ([`refused_by_spec`]).
//! A record that asks for more is recorded `failed`, saying why (docs/security.md).

use chrono::{DateTime, Utc};
use tracing::{info, warn};

use crate::catalog::Catalog;
use crate::dispatch::{Queued, publish_queued, queue_retry};
use crate::error::Error;
use crate::events::{Event, EventKind, publish_event};
use crate::names::lease_keys;
use crate::record::{RunRecord, Status, Trigger, is_message_run, parse_run_key, run_key};
use crate::spec::on::OnMessage;
use crate::spec::{JobSpec, Retries};
use crate::store::Store;
use crate::store::lease::holder;

/// What the expiry of a run's lease calls for, given the run's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    /// Its runner stopped renewing: the run is lost (and retried per policy).
    Lost,
    /// Claimed, never started: dispatched again within its deadline.
    Unstarted,
    /// The backoff of a failed attempt is over: its next attempt is due.
    RetryDue,
    /// Over: nothing to do.
    Nothing,
}

pub(super) fn on_expiry(record: &RunRecord) -> Expiry {
    match (record.status, record.host.is_some(), record.trigger) {
        (Status::Running, _, _) => Expiry::Lost,
        (Status::Queued, false, Trigger::Retry) => Expiry::RetryDue,
        (Status::Queued, _, _) => Expiry::Unstarted,
        _ => Expiry::Nothing,
    }
}

/// Why `spec` does not allow what the expired run's `record` asks for (its attempt, then
/// `next` more, with its input), if it does not.
fn refused_by_spec(record: &RunRecord, spec: &JobSpec, next: u32) -> Option<String> {
    let message = is_message_run(&record.run_id);
    // The attempts made before the one asked for.
    let made = (record.attempt + next).saturating_sub(1);
    let within = spec.retries.allow_after(made) || (message && spec.on.as_ref().is_some_and(|on| made <= on.redeliver));
    if made > 0 && !within {
        return Some(format!(
            "attempt {} is beyond what job {} allows (retries max {})",
            made + 1,
            spec.name,
            spec.retries.max
        ));
    }
    // A message run's input is its message, not checked against the schema at dispatch.
    match &record.input {
        Some(input) if !message => crate::input::check(spec, Some(input)).err().map(|e| e.to_string()),
        _ => None,
    }
}

/// Dispatches a retry that is due, to start now; a job removed meanwhile has its run
/// recorded `cancelled` instead.
async fn dispatch_retry(store: &Store, catalog: &Catalog, queued: Queued, now: DateTime<Utc>) -> Result<(), Error> {
    let (job, run_id, attempt) = (queued.record.job.clone(), queued.record.run_id.clone(), queued.record.attempt);
    let Some(pool) = catalog.get(&job).await?.and_then(|j| j.summary.as_ref().ok().map(|s| s.pool.clone())) else {
        let mut record = queued.record;
        record.status = Status::Cancelled;
        record.error = Some("job was removed before its retry".into());
        record.finished_at = Some(now);
        store.update_run(&record, queued.revision).await?;
        return Ok(());
    };
    info!(job, run = run_id, attempt, "retry due: dispatching");
    publish_queued(store, &pool, queued, now).await
}

/// Whether run `run_id` of `job` holds a lease: its own (`run.<job>.<run-id>`), or its
/// job's overlap lease naming it, which a run of a job with an overlap policy holds
/// instead of one of its own (see the runner's `claimed_run`).
pub(super) async fn run_leased(store: &Store, job: &str, run_id: &str) -> Result<bool, Error> {
    if store.leases.get(&lease_keys::run(job, run_id)).await?.is_some() {
        return Ok(true);
    }
    let active = holder(&store.leases, &lease_keys::active(job)).await?;
    Ok(active.is_some_and(|a| a.holder == run_key(job, run_id)))
}

/// Handles the expiry of lease `key`. Idempotent: a run that is over, or whose lease was
/// taken again meanwhile, is left alone.
pub(super) async fn run_lease_expired(
    store: &Store,
    catalog: &Catalog,
    (key, default_deadline): (&str, std::time::Duration),
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let Some((job, run_id)) = key.strip_prefix("run.").and_then(|k| parse_run_key(k).ok()) else {
        return Ok(());
    };
    let stored = match store.get_run(job, run_id).await {
        Ok(s) => s,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut record = stored.record;
    let expiry = on_expiry(&record);
    // Taken again meanwhile (a retry claimed), or its overlap lease still names it: not
    // expired (yet).
    if expiry == Expiry::Nothing || run_leased(store, job, run_id).await? {
        return Ok(());
    }
    let spec = match store.get_job(job).await {
        Ok(stored) => stored.spec.ok(),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    if expiry == Expiry::RetryDue {
        if let Some(why) = spec.as_ref().and_then(|spec| refused_by_spec(&record, spec, 0)) {
            return refuse(store, record, stored.revision, &why, now).await;
        }
        let queued = Queued { revision: stored.revision, record };
        return dispatch_retry(store, catalog, queued, now).await;
    }
    let refused = spec.as_ref().and_then(|spec| refused_by_spec(&record, spec, 0));
    if expiry == Expiry::Unstarted && refused.is_none() {
        let deadline = spec.as_ref().and_then(|s| s.starting_deadline).unwrap_or(default_deadline);
        // A backfilled fire, long past by design, is due from its dispatch.
        let due = match record.trigger {
            Trigger::Backfill => record.dispatched_at,
            _ => record.scheduled_at,
        };
        let fire = due.unwrap_or(now);
        if now <= fire + chrono::Duration::from_std(deadline).unwrap_or(chrono::Duration::MAX) {
            return dispatch_unstarted(store, catalog, record, stored.revision, now).await;
        }
    }
    let host = record.host.clone().unwrap_or_default();
    warn!(job, run = run_id, attempt = record.attempt, %host, "run lost: its runner stopped renewing the run's lease");
    record.status = Status::Lost;
    record.error = Some(format!("runner {host} stopped renewing the run's lease"));
    record.finished_at = Some(now);
    let lost = Event::new(job, run_id, EventKind::Lost, record.attempt, now)
        .with_detail(record.error.clone().unwrap_or_default());
    let policy = catalog
        .get(job)
        .await?
        .and_then(|j| j.summary.as_ref().ok().map(|s| (s.retries.clone(), s.pool.clone(), s.on().cloned())));
    // A retried attempt goes from its last record straight to the next attempt in one
    // compare-and-set, as a runner's failed attempt does: a `lost` record is final, and
    // what follows final records (chains, message triggers) must not see one that is not.
    // A message's run lost is run again while its attempts are within `on.redeliver`.
    // The retry is queued before `lost` is published: whoever reads the event (the
    // notifier) finds the next attempt recorded.
    let again = |retries: &Retries, on: &Option<OnMessage>| {
        retries.allow_after(record.attempt)
            || (is_message_run(run_id) && on.as_ref().is_some_and(|on| record.attempt <= on.redeliver))
    };
    match policy {
        Some((retries, pool, on)) if again(&retries, &on) && refused.is_none() => {
            let start_at = retries.retry_at(record.attempt, now);
            info!(job, run = run_id, next_attempt = record.attempt + 1, %start_at, "retrying lost run");
            let (queued, retrying) = queue_retry(store, record, stored.revision, now).await?;
            publish_event(store, &lost).await;
            publish_event(store, &retrying).await;
            // Should this publish fail, the sweep publishes the queued attempt again.
            publish_queued(store, &pool, queued, start_at).await?;
        }
        _ => {
            if let Some(why) = refused {
                warn!(job, run = run_id, "lost run not retried: {why}");
                record.error = Some(format!("{}; not retried: {why}", record.error.unwrap_or_default()));
            }
            store.update_run(&record, stored.revision).await?;
            publish_event(store, &lost).await;
        }
    }
    Ok(())
}

/// Dispatches again a run claimed and let go before it started (see the module's docs).
async fn dispatch_unstarted(
    store: &Store,
    catalog: &Catalog,
    mut record: RunRecord,
    revision: u64,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let host = record.host.take().unwrap_or_default();
    info!(job = record.job, run = record.run_id, %host, "the run's runner let it go before it started: dispatching it again");
    let Some(pool) = catalog.get(&record.job).await?.and_then(|j| j.summary.as_ref().ok().map(|s| s.pool.clone()))
    else {
        record.status = Status::Cancelled;
        record.error = Some("job was removed before its run started".into());
        record.finished_at = Some(now);
        store.update_run(&record, revision).await?;
        return Ok(());
    };
    let revision = store.update_run(&record, revision).await?;
    crate::dispatch::publish_again(store, &pool, Queued { revision, record }, now).await
}

/// Records `failed` a run whose record asked for what its job does not allow.
async fn refuse(
    store: &Store,
    mut record: RunRecord,
    revision: u64,
    why: &str,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    warn!(job = record.job, run = record.run_id, "refused to dispatch a run its job does not allow: {why}");
    record.status = Status::Failed;
    record.error = Some(format!("not dispatched: {why}"));
    record.finished_at = Some(now);
    store.update_run(&record, revision).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_asking_for_an_attempt_or_input_its_job_does_not_allow_is_refused() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let spec: JobSpec = serde_json::from_str(
            r#"{"name":"job","schedule":"@hourly","shell":{"command":"true"},"retries":{"max":2},
                "input_schema":{"type":"object","required":["n"]}}"#,
        )
        .unwrap();
        let record = |attempt: u32, run_id: &str, input: Option<serde_json::Value>| {
            let mut r = RunRecord::queued("job", run_id, Trigger::Retry, at, 1);
            r.attempt = attempt;
            r.input = input;
            r
        };
        let good = Some(serde_json::json!({"n": 1}));
        let bad = Some(serde_json::json!({"rm": "-rf"}));
        let fire = "20270115T080000Z";
        // (record, attempts asked for beyond it, refused)
        let cases = [
            (record(2, fire, None), 0, false),
            (record(3, fire, None), 0, false),
            (record(4, fire, None), 0, true),
            // A lost attempt 3 retried would be attempt 4: beyond max 2.
            (record(3, fire, None), 1, true),
            (record(2, "20270115T080000Z-m0a1b", good.clone()), 0, false),
            (record(2, "20270115T080000Z-m0a1b", bad.clone()), 0, true),
            (record(1, "20270115T080000Z-m0a1b", bad), 0, true),
            (record(1, "20270115T080000Z-m0a1b", good), 0, false),
        ];
        for (r, next, refused) in cases {
            let why = refused_by_spec(&r, &spec, next);
            assert_eq!(
                why.is_some(),
                refused,
                "attempt {} (+{next}) of {} with {:?}: {why:?}",
                r.attempt,
                r.run_id,
                r.input
            );
        }
    }

    #[test]
    fn an_expiry_loses_started_runs_dispatches_unstarted_ones_again_and_due_retries() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let cases = [
            (Status::Running, Some("h1"), Trigger::Schedule, Expiry::Lost),
            (Status::Queued, Some("h1"), Trigger::Schedule, Expiry::Unstarted),
            (Status::Queued, Some("h1"), Trigger::Retry, Expiry::Unstarted),
            (Status::Queued, None, Trigger::Retry, Expiry::RetryDue),
            // Claimed (its lease taken) and let go before its `running` write.
            (Status::Queued, None, Trigger::Schedule, Expiry::Unstarted),
            (Status::Queued, None, Trigger::Manual, Expiry::Unstarted),
            (Status::Succeeded, Some("h1"), Trigger::Schedule, Expiry::Nothing),
            (Status::Failed, Some("h1"), Trigger::Retry, Expiry::Nothing),
            (Status::Lost, Some("h1"), Trigger::Schedule, Expiry::Nothing),
            (Status::Skipped, None, Trigger::Schedule, Expiry::Nothing),
        ];
        for (status, host, trigger, expected) in cases {
            let mut record = RunRecord::queued("job", "run", trigger, at, 1);
            record.status = status;
            record.host = host.map(String::from);
            assert_eq!(on_expiry(&record), expected, "{status:?} on {host:?}, {trigger:?}");
        }
    }
}
