//! The runner: pulls due runs of its pools and executes them with bounded concurrency.
//!
//! A run's way through the runner, one file per step, the same for every kind of job:
//! - `claim.rs`: the dispatch message to its ack; the run's lease and record claimed.
//! - `lifecycle.rs`: prepare ahead, check, arm (`running`), release at the instant.
//! - `running.rs`: until the code ends: output, heartbeat, kill requests, timeout, stop.
//! - `kills.rs`: the kill requests of every run here, on one subscription.
//! - `finish.rs`: the final record or the next attempt, the log's end, the event.
//! - `exec/`: the executors behind one trait: `shell.rs` (process groups) and `wasm.rs`.
//!
//! What the steps use:
//! - `claimed_run.rs`: what the runner holds of a run: record and fence, leases, keepalive.
//! - `guards.rs`: overlap policies and locks, as leases held while a run lives.
//! - `run_ahead.rs`: the run ahead of a fire: when it ran, and whether it still lives.
//! - `starter.rs`: releases every run of one instant with a single write.
//! - `logs.rs`: the run's live log on NATS and the tail kept for its record.
//! - `supervisor` (crate `cronrun-supervisor`): a shell run's first process; the run dies
//!   with its runner, and its whole process tree with the run.
//! - `account.rs`: the user a shell job runs as; never root by accident.
//! - `presence.rs`: the `runner.<host>` key that `cronrun status` reads.
//! - `alive_dir.rs`: the directory of keepalive files, and those of runners that are gone.

pub mod account;
mod alive_dir;
mod claim;
mod claimed_run;
pub mod exec;
mod finish;
mod guards;
mod kills;
mod lifecycle;
mod logs;
mod presence;
mod run_ahead;
mod running;
mod starter;
mod waiting;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::retry::{Patience, retried};
use crate::spec::{History, JobSpec};
use crate::store::pull::{EXPIRES, PullLimits, pull_into_slots};
use crate::store::{Store, StoredJob};
use crate::watchdog::Watched;

pub use crate::output::{EOF_HEADER, STREAM_HEADER};
pub use cronrun_supervisor as supervisor;
pub use presence::RunnerPresence;

/// Runner settings (`[runner]` in `cronrun.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerConfig {
    /// Pools this runner takes runs from, besides the pool named after the agent (so
    /// `pool = "<agent name>"` pins a job to one host). Default `["default"]`.
    pub pools: Vec<String>,
    /// Runs held at once, waiting for their instant (at most the scheduler's lead, more
    /// for an instant that over 2,000 jobs share) or running. A job firing every second
    /// holds a slot for about the scheduler's lead (1.5 s) plus its run time, so a
    /// thousand such jobs need about 2,500 slots. Default 4096.
    pub slots: usize,
    /// How often a running run's record and message are refreshed. Default 5s.
    #[serde(with = "crate::spec::codec::duration")]
    pub heartbeat: Duration,
    /// Between TERM and KILL on timeout or kill. Default 5s.
    #[serde(with = "crate::spec::codec::duration")]
    pub kill_grace: Duration,
    /// Output lines longer than this are cut. Default 8 KiB.
    pub max_line_bytes: usize,
    /// On shutdown, let running jobs finish (true) or stop them at once. Either way runs
    /// not started yet are handed back to other runners at once, and runs stopped are
    /// recorded `lost` and retried if their policy allows. Default true.
    pub drain_on_shutdown: bool,
    /// How long a draining shutdown waits before stopping what still runs. Default 30s.
    #[serde(with = "crate::spec::codec::duration")]
    pub drain_timeout: Duration,
    /// The user shell jobs run as when they name none (`shell.user`); the runner must run
    /// as root to switch. Default: none (the runner's own user).
    pub default_user: Option<String>,
    /// Whether a runner running as root may run shell jobs as root. Default false: such a
    /// job fails with a line naming what to set (see `account`).
    pub allow_root: bool,
    /// Whether this runner runs shell jobs at all. Default true; false with
    /// `[wasm] trusted_keys` makes a runner that executes signed code only.
    pub allow_shell: bool,
}

impl RunnerConfig {
    /// TTL of a run's lease: three missed heartbeats and the run is lost.
    pub fn run_lease_ttl(&self) -> Duration {
        (self.heartbeat * 3).max(Duration::from_secs(1))
    }

    /// The lease TTL of a run of a job asking for `run_ttl`: never below the runner's own.
    pub fn run_ttl_for(&self, run_ttl: Option<Duration>) -> Duration {
        run_ttl.map_or(self.run_lease_ttl(), |t| t.max(self.run_lease_ttl()))
    }

    /// How long a shell run's supervisor lets it go on without a lease renewal, for a run
    /// lease of `ttl`: half a heartbeat less, so that it is stopped before the lease
    /// expires and a retry may start elsewhere (two and a half heartbeats by default).
    pub fn alive_within(&self, ttl: Duration) -> Duration {
        ttl.saturating_sub(self.heartbeat / 2)
    }
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            pools: vec!["default".into()],
            slots: 4096,
            heartbeat: Duration::from_secs(5),
            kill_grace: Duration::from_secs(5),
            max_line_bytes: 8 * 1024,
            drain_on_shutdown: true,
            drain_timeout: Duration::from_secs(30),
            default_user: None,
            allow_root: false,
            allow_shell: true,
        }
    }
}

/// The runner's two shutdown signals: `shutdown` at once (runs not started yet are handed
/// back), `stop` when draining is over (runs still going are stopped).
#[derive(Clone)]
pub(crate) struct Stops {
    pub shutdown: CancellationToken,
    pub stop: CancellationToken,
}

/// What every run task of this runner shares.
pub(crate) struct RunnerCtx {
    pub store: Store,
    pub catalog: Catalog,
    pub config: RunnerConfig,
    /// The wall clock, moved to the server's time while it is off (`server_time`).
    pub clock: SharedClock,
    /// The wall clock itself, which presence writes measure.
    raw_clock: SharedClock,
    server_time: crate::server_time::ServerTime,
    pub host: String,
    pub starter: starter::Starter,
    /// The Wasm host, or why this runner has none.
    pub wasm: Result<crate::wasm::WasmRuntime, Error>,
    /// Runs held (claimed or running), shared with the agent's `/metrics`.
    pub running: Arc<AtomicUsize>,
    /// The runs taking kill requests (see `kills`).
    kills: Arc<kills::Kills>,
    /// Keepalive files of shell runs (see `supervisor`); removed with the runner.
    alive_dir: Option<alive_dir::AliveDir>,
    /// Prunes of run history, per job (see `prune`).
    prunes: Arc<Mutex<HashMap<String, Pruning>>>,
    specs: Mutex<HashMap<String, (u64, Arc<JobSpec>)>>,
}

/// Specs of jobs this runner ran, by revision; cleared when it grows past this.
const SPEC_CACHE_MAX: usize = 100_000;

impl RunnerCtx {
    /// The job's current revision and spec, at least `at_least` (the revision it was
    /// dispatched with): from the catalog, or from KV when the catalog has not seen that
    /// revision yet (a `trigger` right after an edit). None: the job was removed.
    async fn current(&self, job: &str, at_least: u64) -> Result<Option<(u64, Arc<JobSpec>)>, Error> {
        match self.catalog.get_read(job).await? {
            None => Ok(None),
            Some((known, read)) if known.revision >= at_least => {
                if let Err(e) = &known.summary {
                    return Err(e.clone());
                }
                let spec = match read {
                    // Read from KV just now (a job this runner had not run lately): once.
                    Some(stored) => self.keep_spec(stored)?,
                    None => self.spec(job, known.revision).await?,
                };
                Ok(Some((known.revision, spec)))
            }
            _ => match self.store.get_job(job).await {
                Ok(stored) => Ok(Some((stored.revision, self.keep_spec(stored)?))),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    /// The spec of `job` at `revision` (or newer, if it changed meanwhile).
    async fn spec(&self, job: &str, revision: u64) -> Result<Arc<JobSpec>, Error> {
        if let Ok(cache) = self.specs.lock()
            && let Some((r, spec)) = cache.get(job)
            && *r == revision
        {
            return Ok(spec.clone());
        }
        self.keep_spec(self.store.get_job(job).await?)
    }

    /// The spec as read, kept for the job's next runs.
    fn keep_spec(&self, stored: StoredJob) -> Result<Arc<JobSpec>, Error> {
        let spec = Arc::new(stored.spec?);
        if let Ok(mut cache) = self.specs.lock() {
            if cache.len() >= SPEC_CACHE_MAX {
                cache.clear();
            }
            cache.insert(stored.name, (stored.revision, spec.clone()));
        }
        Ok(spec)
    }

    /// Where the keepalive file of attempt `attempt` of run `key` lives (see `supervisor`).
    fn alive_path(&self, key: &str, attempt: u32) -> Option<std::path::PathBuf> {
        Some(self.alive_dir.as_ref()?.path().join(format!("{key}.{attempt}")))
    }

    /// Trims the job's finished runs to its history, on a task of its own: a prune reads
    /// all the job's records, and holds neither the run's slot nor the runner's stop. It
    /// runs after every K runs finished here (K = half the history, at least 5), one at a
    /// time per job on this runner (a run finishing meanwhile makes the next one start):
    /// the bucket holds history + K per runner of each job, and what finishes during a prune.
    fn prune(&self, job: &str, history: &History) {
        let every = ((history.succeeded + history.failed) / 2).max(5);
        {
            let Ok(mut prunes) = self.prunes.lock() else { return };
            let p = prunes.entry(job.to_string()).or_default();
            p.finished += 1;
            if p.finished < every || p.under_way {
                return;
            }
            (p.finished, p.under_way) = (0, true);
        }
        let (store, history) = (self.store.clone(), history.clone());
        let over = PruneOver(self.prunes.clone(), job.to_string());
        tokio::spawn(async move {
            let job = &over.1;
            match tokio::time::timeout(PRUNE_MAX, store.prune_runs(job, &history)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => warn!(job, "pruning run history: {e}"),
                Err(_) => warn!(job, "pruning run history: not done in {PRUNE_MAX:?}, left to the next prune"),
            }
        });
    }
}

/// Marks a job's prune over when dropped, however its task ends.
struct PruneOver(Arc<Mutex<HashMap<String, Pruning>>>, String);

impl Drop for PruneOver {
    fn drop(&mut self) {
        if let Ok(mut prunes) = self.0.lock()
            && let Some(p) = prunes.get_mut(&self.1)
        {
            p.under_way = false;
        }
    }
}

/// The longest a prune may take (it reads the job's records, then purges one by one).
const PRUNE_MAX: Duration = Duration::from_secs(60);

/// Of one job: runs finished here since its last prune, and whether one is under way.
#[derive(Default)]
struct Pruning {
    finished: u32,
    under_way: bool,
}

pub struct Runner {
    ctx: Arc<RunnerCtx>,
}

impl Runner {
    pub fn new(
        store: Store,
        catalog: Catalog,
        mut config: RunnerConfig,
        wasm: crate::wasm::WasmConfig,
        (clock, server_time): (SharedClock, crate::server_time::ServerTime),
        host: String,
    ) -> Self {
        if !config.pools.contains(&host) {
            config.pools.push(host.clone());
        }
        if nix::unistd::geteuid().is_root() && config.default_user.is_none() && !config.allow_root {
            warn!(
                "this runner runs as root: shell jobs that name no user (shell.user) will fail; \
                 set [runner] default_user, or allow_root = true to run them as root"
            );
        }
        let wasm = store.wasm_host(wasm).inspect_err(|e| warn!("wasm jobs will fail on this runner: {e}"));
        // Runs start on the server's time while this clock is off (see `server_time`); the
        // presence writes measure the clock itself.
        let corrected = server_time.corrected(clock.clone());
        let ctx = RunnerCtx {
            wasm,
            store,
            catalog,
            config,
            starter: starter::Starter::new(corrected.clone()),
            clock: corrected,
            raw_clock: clock,
            server_time,
            host,
            running: Arc::new(AtomicUsize::new(0)),
            kills: Arc::default(),
            alive_dir: alive_dir::AliveDir::make()
                .map_err(|e| warn!("shell runs will not stop themselves when this runner stalls: {e}"))
                .ok(),
            prunes: Arc::default(),
            specs: Mutex::new(HashMap::new()),
        };
        Self { ctx: Arc::new(ctx) }
    }

    /// The runner's slots and how many are in use, for `/metrics`.
    pub fn slots(&self) -> (usize, Arc<AtomicUsize>) {
        (self.ctx.config.slots.max(1), self.ctx.running.clone())
    }

    /// Pulls and runs until `cancel`, then drains: no new runs are taken, and those held
    /// finish within `drain_timeout` (or are stopped).
    pub async fn run(self, cancel: CancellationToken) -> Result<(), Error> {
        let ctx = self.ctx;
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = ctx.catalog.wait_loaded() => {}
        }
        // Which containment shell runs get, said once at start (see `supervisor`).
        exec::shell::announce().await;
        let slots = Arc::new(Semaphore::new(ctx.config.slots.max(1)));
        let tracker = TaskTracker::new();
        let stops = Stops { shutdown: cancel.clone(), stop: CancellationToken::new() };
        let mut tasks = Watched::default();
        // Subscribed before a run is taken: no run starts without its kill requests.
        tasks.spawn("the runs' kill requests", kills::follow(ctx.clone(), cancel.clone()));
        for pool in &ctx.config.pools {
            // Stopped meanwhile: the stop below finds the cancel.
            let Some(consumer) = open_pool_consumer(&ctx, pool, &cancel).await? else { break };
            let puller = pull_loop(ctx.clone(), consumer, slots.clone(), tracker.clone(), stops.clone());
            tasks.spawn(format!("the puller of pool {pool}"), puller);
        }
        tasks.spawn("the runner's presence", presence::publish(ctx.clone(), cancel.clone()));
        info!(host = %ctx.host, pools = ?ctx.config.pools, slots = ctx.config.slots, "runner ready");
        let fault = tokio::select! {
            _ = cancel.cancelled() => None,
            // Tasks end with `cancel` too: only an end before it is a fault.
            why = tasks.ended() => (!cancel.is_cancelled()).then_some(why),
        };
        if let Some(why) = &fault {
            error!("{why}: stopping the agent");
            cancel.cancel();
        }
        tasks.join_all().await;
        tracker.close();
        // Runs not started yet hand themselves back at once; running ones may finish.
        let held = ctx.running.load(Ordering::SeqCst);
        if ctx.config.drain_on_shutdown {
            info!(held, "runner draining");
            if tokio::time::timeout(ctx.config.drain_timeout, tracker.wait()).await.is_err() {
                warn!("drain timeout: stopping runs still in progress");
            }
        }
        stops.stop.cancel();
        tracker.wait().await;
        presence::remove(&ctx).await;
        match fault {
            Some(why) => Err(Error::new(crate::ErrorKind::Other, why)),
            None => Ok(()),
        }
    }
}

/// How long a runner starting waits out NATS trouble opening its pools' consumer.
const CONSUMER_WAIT: Duration = Duration::from_secs(120);

/// `pool_consumer`, NATS trouble waited out for up to `CONSUMER_WAIT`: a node of the
/// cluster failing as the runner started made the whole agent stop. None when stopped.
async fn open_pool_consumer(
    ctx: &RunnerCtx,
    pool: &str,
    cancel: &CancellationToken,
) -> Result<Option<PullConsumer>, Error> {
    let patience = Patience { bound: CONSUMER_WAIT, pause: Duration::from_secs(1) };
    let said = |e: &Error| warn!("{e}; trying again");
    retried(patience, cancel, |_| true, said, || pool_consumer(&ctx.store, pool, ctx.config.heartbeat)).await
}

/// The durable consumer all runners of `pool` share; created once, used as found.
async fn pool_consumer(store: &Store, pool: &str, heartbeat: Duration) -> Result<PullConsumer, Error> {
    let stream = store
        .js
        .get_stream(store.names.dispatch_stream())
        .await
        .map_err(|e| Error::nats("opening the dispatch stream", e))?;
    let name = store.names.pool_consumer(pool);
    stream
        .get_or_create_consumer(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                description: Some(format!("cronrun runners of pool {pool}")),
                filter_subject: store.names.dispatch_subject(pool),
                ack_policy: AckPolicy::Explicit,
                // Runners send progress every heartbeat; a message whose runner went
                // quiet for three is redelivered.
                ack_wait: (heartbeat * 3).max(Duration::from_secs(10)),
                max_ack_pending: 100_000,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| Error::nats(&format!("opening consumer {name}"), e))
}

async fn pull_loop(
    ctx: Arc<RunnerCtx>,
    consumer: PullConsumer,
    slots: Arc<Semaphore>,
    tracker: TaskTracker,
    stops: Stops,
) {
    let cancel = stops.shutdown.clone();
    let limits = PullLimits { max_batch: 256, expires: EXPIRES };
    loop {
        let pulled = pull_into_slots(&consumer, &slots, &limits, &cancel, |msg, permit| {
            let ctx = ctx.clone();
            let stops = stops.clone();
            tracker.spawn(async move {
                ctx.running.fetch_add(1, Ordering::SeqCst);
                claim::execute(ctx.clone(), msg, stops).await;
                ctx.running.fetch_sub(1, Ordering::SeqCst);
                drop(permit);
            });
        })
        .await;
        let Err(e) = pulled else { return };
        warn!("pulling runs: {e}");
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}
