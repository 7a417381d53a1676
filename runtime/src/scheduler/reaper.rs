//! Runs whose runner died, and retries that are due. Every run holds a lease
//! (`run.<job>.<run-id>`) that its runner renews with each heartbeat. When the server
//! expires one, the scheduler leading the job's shard looks at the run's record:
//!
//! - still claimed (`running`, or `queued` with a host): the runner died or stalled. The
//!   run is marked `lost` by compare-and-set (so the stalled runner, should it wake, finds
//!   its writes refused) and another attempt is queued if the job's retry policy allows.
//! - `queued` for a retry, with no host: the runner recorded a failed attempt and left the
//!   lease to expire after the backoff (see `runner::finish`). The next attempt is
//!   dispatched now. Runners never publish dispatches, so a runner identity cannot start
//!   runs; and a runner that dies between the two writes leaves a lease that still expires.
//!
//! Every scheduler follows all run leases. An expiry in a shard it does not lead is kept
//! (as long as the server keeps the expiry marker) and handled should it take the shard
//! over: the expiry may have come while the shard had no leader.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{SchedulerCtx, shard_of};
use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::dispatch::{Queued, publish_queued, retry};
use crate::error::Error;
use crate::events::{Event, EventKind, publish_event};
use crate::record::{Status, Trigger, parse_run_key};
use crate::store::kv::Watch;
use crate::store::{LEASE_MARKER_TTL, Store};

/// Every scheduler runs one, beside its shard tasks.
pub(super) struct Reaper {
    store: Store,
    catalog: Catalog,
    clock: SharedClock,
    shards: u32,
    watch: Option<Watch>,
    leading: HashSet<u32>,
    /// Expired run leases of shards not led here, with when they were seen.
    pending: HashMap<String, Instant>,
    default_deadline: Duration,
    /// The sweep in progress, if any (see `sweep`): one at a time.
    sweeping: Option<tokio::task::JoinHandle<()>>,
    /// The shards led here changed since they were last logged.
    leading_changed: bool,
}

impl Reaper {
    /// Follows run leases until `cancel`; `leading` says which of our shards lead.
    pub async fn run(ctx: SchedulerCtx, mut leading: mpsc::UnboundedReceiver<(u32, bool)>, cancel: CancellationToken) {
        let mut reaper = Self {
            store: ctx.store,
            catalog: ctx.catalog,
            clock: ctx.clock,
            shards: ctx.shards,
            watch: None,
            leading: HashSet::new(),
            pending: HashMap::new(),
            default_deadline: ctx.config.default_deadline,
            sweeping: None,
            leading_changed: false,
        };
        // Which shards are led here, logged once a second at most when it changes (one
        // line, not one per shard).
        let mut log_leading = tokio::time::interval(Duration::from_secs(1));
        let mut sweep_every = tokio::time::interval(ctx.config.reconcile_every);
        sweep_every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Opened with nothing else to interrupt it: a dropped open would leave a
            // consumer behind on the server.
            if reaper.watch.is_none() {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    () = reaper.open() => {}
                }
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                Some((shard, now_leading)) = leading.recv() => reaper.set_leading(shard, now_leading),
                () = reaper.next_change() => {}
                _ = sweep_every.tick() => reaper.sweep(),
                _ = log_leading.tick(), if reaper.leading_changed => {
                    reaper.leading_changed = false;
                    let total = reaper.shards;
                    info!("leading {} of {total} shards: {}", reaper.leading.len(), ranges(&reaper.leading));
                }
            }
        }
    }

    /// A shard of ours started or stopped leading; expiries kept for it are handled now.
    fn set_leading(&mut self, shard: u32, leading: bool) {
        self.leading_changed = true;
        if !leading {
            self.leading.remove(&shard);
            return;
        }
        self.leading.insert(shard);
        let keys: Vec<String> = self.pending.keys().filter(|k| self.shard_of_key(k) == Some(shard)).cloned().collect();
        for key in keys {
            self.pending.remove(&key);
            self.reap(key);
        }
    }

    async fn open(&mut self) {
        match self.store.leases.watch("run.>").await {
            Ok(w) => self.watch = Some(w),
            Err(e) => {
                warn!("watching run leases: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    /// Waits for the next run lease change and handles it. Cancel-safe.
    async fn next_change(&mut self) {
        let Some(watch) = self.watch.as_mut() else { return };
        match watch.next().await {
            Some(Ok(change)) if change.expired => self.expired(change.key),
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                warn!("run lease watch interrupted, resyncing: {e}");
                self.watch = None;
            }
            None => self.watch = None,
        }
    }

    fn shard_of_key(&self, key: &str) -> Option<u32> {
        let (job, _) = key.strip_prefix("run.").and_then(|k| parse_run_key(k).ok())?;
        Some(shard_of(job, self.shards))
    }

    fn expired(&mut self, key: String) {
        let Some(shard) = self.shard_of_key(&key) else { return };
        if self.leading.contains(&shard) {
            return self.reap(key);
        }
        self.pending.retain(|_, seen| seen.elapsed() < LEASE_MARKER_TTL);
        self.pending.insert(key, Instant::now());
    }

    /// Starts a sweep of the records of the jobs of the shards led here, unless one runs.
    fn sweep(&mut self) {
        if self.leading.is_empty() || self.sweeping.as_ref().is_some_and(|s| !s.is_finished()) {
            return;
        }
        let (leading, shards) = (self.leading.clone(), self.shards);
        let jobs: Vec<String> = self
            .catalog
            .snapshot_where(|name| leading.contains(&shard_of(name, shards)))
            .into_iter()
            .map(|job| job.name.clone())
            .collect();
        let (store, catalog, now, deadline) =
            (self.store.clone(), self.catalog.clone(), self.clock.now(), self.default_deadline);
        self.sweeping = Some(tokio::spawn(async move {
            let settled = super::sweep::sweep(&store, &catalog, &jobs, deadline, now).await;
            if settled > 0 {
                info!(settled, jobs = jobs.len(), "sweep settled runs left without an owner");
            }
        }));
    }

    fn reap(&self, key: String) {
        let (store, catalog, now) = (self.store.clone(), self.catalog.clone(), self.clock.now());
        tokio::spawn(async move {
            if let Err(e) = run_lease_expired(&store, &catalog, &key, now).await {
                warn!(lease = %key, "handling an expired run lease: {e}");
            }
        });
    }
}

/// `shards` as sorted ranges, e.g. `0-3, 7, 9-12`; `none` when empty.
fn ranges(shards: &HashSet<u32>) -> String {
    let mut sorted: Vec<u32> = shards.iter().copied().collect();
    sorted.sort_unstable();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        out.push(if sorted[i] == start { start.to_string() } else { format!("{start}-{}", sorted[i]) });
        i += 1;
    }
    if out.is_empty() { "none".into() } else { out.join(", ") }
}

// A sweep is bounded work, but it stops with its scheduler all the same.
impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(sweeping) = self.sweeping.take() {
            sweeping.abort();
        }
    }
}

/// Dispatches a retry that is due, to start now; a job removed meanwhile has its run
/// recorded `cancelled` instead.
async fn dispatch_retry(store: &Store, catalog: &Catalog, queued: Queued, now: DateTime<Utc>) -> Result<(), Error> {
    let (job, run_id, attempt) = (queued.record.job.clone(), queued.record.run_id.clone(), queued.record.attempt);
    let Some(pool) = catalog.get(&job).and_then(|j| j.summary.as_ref().ok().map(|s| s.pool.clone())) else {
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

/// Handles the expiry of lease `key`. Idempotent: a run that is over, or whose lease was
/// taken again meanwhile, is left alone.
pub(super) async fn run_lease_expired(
    store: &Store,
    catalog: &Catalog,
    key: &str,
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
    let claimed = record.status == Status::Running || (record.status == Status::Queued && record.host.is_some());
    let retry_due = record.status == Status::Queued && record.host.is_none() && record.trigger == Trigger::Retry;
    if !(claimed || retry_due) || store.leases.get(key).await?.is_some() {
        return Ok(());
    }
    if retry_due {
        let queued = Queued { revision: stored.revision, record };
        return dispatch_retry(store, catalog, queued, now).await;
    }
    let host = record.host.clone().unwrap_or_default();
    warn!(job, run = run_id, attempt = record.attempt, %host, "run lost: its runner stopped renewing the run's lease");
    record.status = Status::Lost;
    record.error = Some(format!("runner {host} stopped renewing the run's lease"));
    record.finished_at = Some(now);
    let revision = store.update_run(&record, stored.revision).await?;
    let detail = record.error.clone().unwrap_or_default();
    publish_event(store, &Event::new(job, run_id, EventKind::Lost, record.attempt, now).with_detail(detail)).await;
    let Some(summary) =
        catalog.get(job).and_then(|j| j.summary.as_ref().ok().map(|s| (s.retries.clone(), s.pool.clone())))
    else {
        return Ok(());
    };
    let (retries, pool) = summary;
    if retries.allow_after(record.attempt) {
        let start_at = retries.retry_at(record.attempt, now);
        info!(job, run = run_id, next_attempt = record.attempt + 1, %start_at, "retrying lost run");
        let retrying = retry(store, &pool, record, revision, start_at, now).await?;
        publish_event(store, &retrying).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn shard_sets_read_as_ranges() {
        for (shards, text) in [
            (vec![], "none"),
            (vec![5], "5"),
            (vec![3, 0, 1, 2], "0-3"),
            (vec![0, 1, 2, 3, 7, 9, 10, 11, 12], "0-3, 7, 9-12"),
        ] {
            assert_eq!(super::ranges(&shards.into_iter().collect()), text);
        }
    }
}
