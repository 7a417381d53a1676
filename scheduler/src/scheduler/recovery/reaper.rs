//! Runs whose runner died, and retries that are due. Every run holds a lease
//! (`run.<job>.<run-id>`, or its job's overlap lease `active.<job>` naming it: see the
//! runner's `claimed_run`) that its runner renews with each heartbeat. When the server
//! expires a run's own lease, the scheduler leading shard 0 looks at the run's record (see
//! `expiry`): a run still claimed is `lost` (and retried per policy), a retry whose
//! backoff is over is dispatched. An overlap lease's expiry marker does not say which run
//! held it: the records of its job are swept at once (see `sweep`), which settles the run
//! it stood for. Nor does it last, the job's next run taking the key again at once: a new
//! follower sweeps the jobs whose overlap leases are held as it begins. Runners never publish dispatches, so a runner identity
//! cannot start runs; and a runner that dies between the two writes leaves a lease that
//! still expires.
//!
//! The leader of shard 0 follows all run leases and handles every expiry, whichever
//! shard its job is in (each is a compare-and-set on the record, so two reapers at once
//! during a handover do no harm). One follower, not one per agent: each run changes its
//! lease twice, and every follower is sent every change. A new follower reads each
//! lease's last value first, so expiries while shard 0 had no leader, whose markers the
//! server keeps `store::LEASE_MARKER_TTL` (15 min), are handled then; older ones by the sweep.

use std::collections::HashSet;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::expiry::run_lease_expired;
use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::names::lease_keys;
use crate::scheduler::SchedulerCtx;
use crate::store::kv::Watch;
use crate::store::{Bucket, Store};

/// The shard whose leader follows the run leases.
const REAPING_SHARD: u32 = 0;

/// The longest wait between two tries at handling an expiry.
const REAP_RETRY_MAX: Duration = Duration::from_secs(16);

/// Every scheduler runs one, beside its shard tasks.
pub(in crate::scheduler) struct Reaper {
    store: Store,
    catalog: Catalog,
    /// The schedules index: the names of the jobs of the shards led here, for the sweep.
    index: Bucket,
    clock: SharedClock,
    shards: u32,
    /// The run leases followed, while leading `REAPING_SHARD`.
    watch: Option<Watch>,
    leading: HashSet<u32>,
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
            if reaper.watch.is_none() && reaper.leading.contains(&REAPING_SHARD) {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    () = reaper.open() => {}
                }
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                Some((shard, now_leading)) = leading.recv() => reaper.set_leading(shard, now_leading),
                () = reaper.next_change(), if reaper.watch.is_some() => {}
                _ = sweep_every.tick() => reaper.sweep(),
                _ = log_leading.tick(), if reaper.leading_changed => {
                    reaper.leading_changed = false;
                    let total = reaper.shards;
                    info!("leading {} of {total} shards: {}", reaper.leading.len(), crate::scheduler::membership::shards::ranges(reaper.leading.iter().copied()));
                }
            }
        }
    }

    /// A shard of ours started or stopped leading. Leaving `REAPING_SHARD`, the run
    /// leases are no longer followed here; taking it, they are from the next turn.
    fn set_leading(&mut self, shard: u32, leading: bool) {
        self.leading_changed = true;
        match leading {
            true => self.leading.insert(shard),
            false => self.leading.remove(&shard),
        };
        if shard == REAPING_SHARD && !leading {
            self.watch = None;
        }
    }

    async fn open(&mut self) {
        let leases = [lease_keys::run("*", ">"), lease_keys::active(">")];
        match self.store.leases.watch_all_of(&leases).await {
            Ok(w) => {
                self.watch = Some(w);
                self.settle_now(None);
            }
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
            Some(Ok(change)) if change.expired => match change.key.strip_prefix(&lease_keys::active("")) {
                Some(job) => self.settle_now(Some(job.to_string())),
                None => self.reap(change.key),
            },
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                warn!("run lease watch interrupted, resyncing: {e}");
                self.watch = None;
            }
            None => self.watch = None,
        }
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

    /// Settles, on a task of its own, the runs left without a lease of `expired`'s job,
    /// whose overlap lease (standing for a run's own) expired; or, None, of every job
    /// holding an overlap lease as the watch begins: one that expired while no reaper
    /// followed them and was taken again by its job's next run (at once, by a run waiting
    /// for it) left no marker to see. Listed after the watch began: an expiry after that
    /// is seen as it comes. A sweep settles what this misses.
    fn settle_now(&self, expired: Option<String>) {
        let (store, catalog, clock) = (self.store.clone(), self.catalog.clone(), self.clock.clone());
        let deadline = self.default_deadline;
        tokio::spawn(async move {
            let prefix = lease_keys::active("");
            let jobs: Vec<String> = match &expired {
                Some(job) => vec![job.clone()],
                None => match store.leases.keys(&lease_keys::active(">")).await {
                    Ok(keys) => keys.iter().filter_map(|k| k.strip_prefix(&prefix)).map(str::to_string).collect(),
                    Err(e) => return warn!("listing the overlap leases held: {e}; the sweep will settle their runs"),
                },
            };
            let settled = super::sweep::sweep(&store, &catalog, &jobs, deadline, &clock, Duration::ZERO).await;
            match expired {
                Some(job) => info!("overlap lease of {job} expired: {settled} of its runs settled"),
                None => info!(
                    "following run leases: {} jobs holding an overlap lease swept, {settled} runs settled",
                    jobs.len()
                ),
            }
        });
    }

    /// Handles one expiry on a task of its own, trying again a few times over half a
    /// minute when NATS fails (then the sweep settles the run).
    fn reap(&self, key: String) {
        let (store, catalog, now) = (self.store.clone(), self.catalog.clone(), self.clock.now());
        let deadline = self.default_deadline;
        tokio::spawn(async move {
            let mut wait = Duration::from_secs(1);
            loop {
                match run_lease_expired(&store, &catalog, (&key, deadline), now).await {
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
