//! The sweep: runs left without an owner and without a trace the reaper could see. The
//! reaper acts on run lease expiries, but an expiry marker lasts `LEASE_MARKER_TTL`: a run
//! whose runner died while no scheduler led its shard for longer than that, a marker
//! purged by hand, a retry whose dispatch failed to publish, or a run whose dispatch
//! message was lost would stay `running` or `queued` for ever. Every `reconcile_every`,
//! the reaper sweeps the records of the jobs of the shards it leads and settles each such
//! run:
//!
//! - claimed (`running`, or `queued` with a host) and its run lease gone: as an expiry,
//!   `lost` and retried per policy (`expiry::run_lease_expired`);
//! - `queued` for its runners, no lease, dispatched longer than `DISPATCH_GRACE` ago: its
//!   message is published again (the same `Nats-Msg-Id`; a second copy loses the claim's
//!   compare-and-set), unless it is a fire past its starting deadline, which is recorded
//!   `skipped` as missed.
//!
//! The decision is `settle`, a function of the record, the lease and the time, tested on
//! its own. The cost of a sweep is one read of each led job's records (a direct get, see
//! `store::kv::last`), paced: at tens of thousands of jobs, reads back to back took the
//! server from the runs due meanwhile.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::{info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::dispatch::{Queued, publish_queued};
use crate::error::Error;
use crate::names::lease_keys;
use crate::record::{RunRecord, Status, Trigger};
use crate::store::{Store, StoredRun};

/// A queued run younger than this is left alone: its message is on its way or waits for a
/// free runner slot.
pub const DISPATCH_GRACE: Duration = Duration::from_secs(300);

/// What the sweep does with one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Owned, waiting normally, or over.
    Leave,
    /// Claimed, and its lease is gone: handle as a lease expiry.
    Expired,
    /// Queued without an owner past the grace: publish its dispatch again.
    Redispatch,
    /// A fire whose dispatch was lost and is now past its deadline: record it missed.
    Missed,
}

/// The fate of `record`, given whether its run lease exists, the time and the job's
/// starting deadline.
pub fn settle(record: &RunRecord, lease_held: bool, now: DateTime<Utc>, deadline: Duration) -> Settle {
    if lease_held || record.status.is_final() {
        return Settle::Leave;
    }
    let claimed = record.status == Status::Running || (record.status == Status::Queued && record.host.is_some());
    if claimed {
        return Settle::Expired;
    }
    let since = |t: Option<DateTime<Utc>>| t.and_then(|t| (now - t).to_std().ok()).unwrap_or_default();
    if since(record.dispatched_at) < DISPATCH_GRACE {
        return Settle::Leave;
    }
    let fire = matches!(record.trigger, Trigger::Schedule | Trigger::Catchup);
    match fire && since(record.scheduled_at) > deadline {
        true => Settle::Missed,
        false => Settle::Redispatch,
    }
}

/// The most jobs a sweep reads a second. Above `JOBS_PER_SECOND_MAX` × half the interval
/// jobs (30,000 at 5 min), a sweep takes more than half its interval; above twice that,
/// more than the interval, and the next begins at the first tick after it ends.
const JOBS_PER_SECOND_MAX: u32 = 200;

/// How far apart a sweep of `jobs` jobs every `every` starts its reads of them: spread
/// over half the interval, no closer than `JOBS_PER_SECOND_MAX` allows.
pub fn spacing(jobs: usize, every: Duration) -> Duration {
    let spread = every / 2 / u32::try_from(jobs.max(1)).unwrap_or(u32::MAX);
    spread.max(Duration::from_secs(1) / JOBS_PER_SECOND_MAX)
}

/// Sweeps the records of `jobs`, one job every `spacing`; returns how many runs it settled.
pub async fn sweep(
    store: &Store,
    catalog: &Catalog,
    jobs: &[String],
    default_deadline: Duration,
    clock: &SharedClock,
    spacing: Duration,
) -> usize {
    let (mut settled, mut next) = (0, tokio::time::Instant::now());
    for job in jobs {
        // From the later of the planned time and now: reads held up (a slow server) do
        // not come all at once after.
        tokio::time::sleep_until(next).await;
        next = next.max(tokio::time::Instant::now()) + spacing;
        let now = clock.now();
        let runs = match store.list_runs(job).await {
            Ok(runs) => runs,
            Err(e) => {
                warn!(job, "sweeping run records: {e}");
                continue;
            }
        };
        for run in runs.into_iter().filter(|r| !r.record.status.is_final()) {
            match settle_one(store, catalog, run, default_deadline, now).await {
                Ok(true) => settled += 1,
                Ok(false) => {}
                Err(e) => warn!(job, "settling a run without an owner: {e}"),
            }
        }
    }
    settled
}

async fn settle_one(
    store: &Store,
    catalog: &Catalog,
    run: StoredRun,
    default_deadline: Duration,
    now: DateTime<Utc>,
) -> Result<bool, Error> {
    let (job, run_id) = (run.record.job.clone(), run.record.run_id.clone());
    let lease = lease_keys::run(&job, &run_id);
    let held = super::expiry::run_leased(store, &job, &run_id).await?;
    let summary =
        catalog.get(&job).await?.and_then(|j| j.summary.as_ref().ok().map(|s| (s.pool.clone(), s.starting_deadline)));
    let deadline = summary.as_ref().and_then(|s| s.1).unwrap_or(default_deadline);
    match settle(&run.record, held, now, deadline) {
        Settle::Leave => Ok(false),
        Settle::Expired => {
            info!(job, run = run_id, "run without its lease and no expiry seen: handling it as lost");
            super::expiry::run_lease_expired(store, catalog, (&lease, default_deadline), now).await?;
            Ok(true)
        }
        Settle::Redispatch => {
            let Some((pool, _)) = summary else { return Ok(false) };
            info!(job, run = run_id, "queued run without a dispatch seen for long: dispatching it again");
            let start = run.record.scheduled_at.filter(|_| run.record.trigger != Trigger::Retry).unwrap_or(now);
            publish_queued(store, &pool, Queued { revision: run.revision, record: run.record }, start).await?;
            Ok(true)
        }
        Settle::Missed => {
            let mut record = run.record;
            record.status = Status::Skipped;
            record.error = Some("missed: its dispatch was lost and it is past its starting deadline".into());
            record.finished_at = Some(now);
            store.update_run(&record, run.revision).await?;
            crate::metrics::fires_missed(&job, 1);
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_spreads_its_reads_over_half_its_interval_at_most_200_a_second() {
        let (ms, every) = (Duration::from_millis, Duration::from_secs(300));
        // (jobs, spacing)
        let cases = [(0, ms(150_000)), (1, ms(150_000)), (100, ms(1_500)), (30_000, ms(5)), (2_500_000, ms(5))];
        for (jobs, want) in cases {
            assert_eq!(spacing(jobs, every), want, "{jobs} jobs");
        }
        assert_eq!(spacing(10, Duration::from_secs(1)), ms(50));
    }

    #[test]
    fn what_the_sweep_does_with_each_run() {
        let now = DateTime::parse_from_rfc3339("2026-11-23T12:00:00Z").unwrap().to_utc();
        let ago = |secs: i64| Some(now - chrono::TimeDelta::seconds(secs));
        let record = |status: Status, host: Option<&str>, trigger: Trigger, dispatched: i64, scheduled: i64| {
            let mut r = RunRecord::queued("job", "run", trigger, ago(scheduled).unwrap(), 1);
            (r.status, r.host, r.dispatched_at) = (status, host.map(Into::into), ago(dispatched));
            r
        };
        let deadline = Duration::from_secs(60);
        let (run, q) = (Status::Running, Status::Queued);
        // (record, lease held) -> what the sweep does
        let cases = [
            (record(run, Some("h"), Trigger::Schedule, 10, 10), true, Settle::Leave),
            (record(run, Some("h"), Trigger::Schedule, 10, 10), false, Settle::Expired),
            (record(q, Some("h"), Trigger::Manual, 10, 10), false, Settle::Expired),
            (record(Status::Succeeded, Some("h"), Trigger::Schedule, 900, 900), false, Settle::Leave),
            (record(Status::Lost, Some("h"), Trigger::Schedule, 900, 900), false, Settle::Leave),
            // Queued without an owner: waits out the grace, then is dispatched again.
            (record(q, None, Trigger::Manual, 10, 10), false, Settle::Leave),
            (record(q, None, Trigger::Manual, 301, 301), false, Settle::Redispatch),
            (record(q, None, Trigger::Retry, 400, 4000), false, Settle::Redispatch),
            (record(q, None, Trigger::Retry, 400, 4000), true, Settle::Leave),
            // A fire past its deadline is missed rather than run that late.
            (record(q, None, Trigger::Schedule, 400, 400), false, Settle::Missed),
            (record(q, None, Trigger::Catchup, 400, 400), false, Settle::Missed),
        ];
        for (i, (record, held, want)) in cases.into_iter().enumerate() {
            assert_eq!(settle(&record, held, now, deadline), want, "case {i}: {record:?} held={held}");
        }
        // A generous deadline lets the lost fire run late instead.
        let late = record(q, None, Trigger::Schedule, 400, 400);
        assert_eq!(settle(&late, false, now, Duration::from_secs(3600)), Settle::Redispatch);
    }
}
