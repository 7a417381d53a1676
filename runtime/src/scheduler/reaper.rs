//! Runs whose runner died, and retries that are due. Every run holds a lease
//! (`run.<job>.<run-id>`) that its runner renews with each heartbeat. When the server
//! expires one, the scheduler leading the job's shard looks at the run's record (see
//! `expiry`): a run still claimed is `lost` (and retried per policy), a retry whose
//! backoff is over is dispatched. Runners never publish dispatches, so a runner identity
//! cannot start runs; and a runner that dies between the two writes leaves a lease that
//! still expires.
//!
//! Every scheduler follows all run leases. An expiry in a shard it does not lead is kept
//! (as long as the server keeps the expiry marker) and handled should it take the shard
//! over: the expiry may have come while the shard had no leader.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::expiry::run_lease_expired;
use super::{SchedulerCtx, shard_of};
use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::record::parse_run_key;
use crate::store::kv::Watch;
use crate::store::{Bucket, LEASE_MARKER_TTL, Store};

/// The longest wait between two tries at handling an expiry.
const REAP_RETRY_MAX: Duration = Duration::from_secs(16);

/// Every scheduler runs one, beside its shard tasks.
pub(super) struct Reaper {
    store: Store,
    catalog: Catalog,
    /// The schedules index: the names of the jobs of the shards led here, for the sweep.
    index: Bucket,
    clock: SharedClock,
    shards: u32,
    watch: Option<Watch>,
    leading: HashSet<u32>,
    /// Expired run leases of shards not led here, with when they were seen.
    pending: HashMap<String, Instant>,
    default_deadline: Duration,
    /// How often a sweep starts (`reconcile_every`); it spreads its reads over half of it.
    sweep_every: Duration,
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
            index: ctx.index,
            clock: ctx.clock,
            shards: ctx.shards,
            watch: None,
            leading: HashSet::new(),
            pending: HashMap::new(),
            default_deadline: ctx.config.default_deadline,
            sweep_every: ctx.config.reconcile_every,
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
                    info!("leading {} of {total} shards: {}", reaper.leading.len(), super::shards::ranges(reaper.leading.iter().copied()));
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
        let (store, catalog, index, clock, deadline) =
            (self.store.clone(), self.catalog.clone(), self.index.clone(), self.clock.clone(), self.default_deadline);
        let every = self.sweep_every;
        let leading = self.leading.clone();
        self.sweeping = Some(tokio::spawn(async move {
            let mut jobs = Vec::new();
            for n in leading {
                match index.keys(&format!("{n}.>")).await {
                    Ok(keys) => {
                        jobs.extend(keys.into_iter().filter_map(|k| k.split_once('.').map(|(_, job)| job.to_string())))
                    }
                    Err(e) => return warn!(shard = n, "sweep: listing the shard's jobs: {e}"),
                }
            }
            let spacing = super::sweep::spacing(jobs.len(), every);
            let settled = super::sweep::sweep(&store, &catalog, &jobs, deadline, &clock, spacing).await;
            if settled > 0 {
                info!(settled, jobs = jobs.len(), "sweep settled runs left without an owner");
            }
        }));
    }

    /// Handles one expiry on a task of its own, trying again a few times over half a
    /// minute when NATS fails (then the sweep settles the run).
    fn reap(&self, key: String) {
        let (store, catalog, now) = (self.store.clone(), self.catalog.clone(), self.clock.now());
        tokio::spawn(async move {
            let mut wait = Duration::from_secs(1);
            loop {
                match run_lease_expired(&store, &catalog, &key, now).await {
                    Ok(()) => return,
                    Err(e) if wait <= REAP_RETRY_MAX => {
                        warn!(lease = %key, "handling an expired run lease: {e}; trying again in {wait:?}")
                    }
                    Err(e) => {
                        return warn!(lease = %key, "handling an expired run lease: {e}; the sweep will settle the run");
                    }
                }
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        });
    }
}

// A sweep is bounded work, but it stops with its scheduler all the same.
impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(sweeping) = self.sweeping.take() {
            sweeping.abort();
        }
    }
}
