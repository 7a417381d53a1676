//! The scheduler: every agent runs one; together they own the shards and turn due fires
//! into dispatched runs. This module runs one (`Scheduler::run`, `rebalance`); its work is
//! grouped by concern:
//!
//! - `membership/`: who the schedulers are, when a change of them is acted on, which of
//!   them owns which shard.
//! - `loading/`: the jobs of the shards taken, read from the schedules index or its
//!   snapshots, then followed while led.
//! - `firing/`: a shard's lease, and its leader turning due fires into dispatched runs.
//! - `recovery/`: runs whose runner died or that were left without a trace, settled.
//!
//! Jobs hash into N shards (`shards`, fixed per deployment). Each scheduler runs a task
//! for every shard the assignment gives it; the task takes the shard's lease (released by
//! the previous owner, or expired on the server) and leads. The holder keeps a watermark
//! per shard (all fires up to it are dispatched), so a successor resumes exactly where it
//! stopped; a fire dispatched twice is refused by its run record's create-if-absent and
//! the `Nats-Msg-Id`. When members join or leave, every scheduler recomputes the
//! assignment: owners let go of shards that moved, and the new owners take them.

mod firing;
mod loading;
mod membership;
mod recovery;

pub use firing::queue::{Due, FireQueue, prefetching};
pub use loading::{loader, snapshot};
pub use membership::members::Presence as SchedulerPresence;
pub use membership::shards::{DEFAULT_SHARDS, MAX_SHARDS, SHARDS_KEY, parse_count, ranges, shard_count, shard_of};
pub use recovery::sweep;

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::store::{Bucket, Store};
use crate::trigger;
use crate::watchdog::Watched;
use firing::{leader, shard};
use membership::{members, settle, shards};
use recovery::reaper;

/// Scheduler settings (`[scheduler]` in `cronrun.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Shards of a new deployment. Fixed once the first scheduler has started: unset,
    /// an agent uses the deployment's count; set, it must match. Default 64.
    pub shards: Option<u32>,
    /// Lease TTL: how long a dead scheduler holds up its successor. Default 10s.
    #[serde(with = "crate::spec::codec::duration")]
    pub lease_ttl: Duration,
    /// Runs are handed to runners this long before their fire instant, and started on
    /// the runner's own timer, so lateness does not grow with the number of fires at
    /// one instant. Default 1.5s: for jobs every second, the next second's dispatch and
    /// claims then fall half-way between two instants instead of on the instant, where
    /// they took the cores from the runs starting (1,000 Wasm jobs every second: p99 from
    /// the fire to the guest's code 92 ms with 1 s, 47 ms with 1.5 s).
    #[serde(with = "crate::spec::codec::duration")]
    pub lead: Duration,
    /// A fire found later than this (e.g. after an outage) is recorded as missed instead
    /// of run, unless its job sets `starting_deadline`. Default 60s.
    #[serde(with = "crate::spec::codec::duration")]
    pub default_deadline: Duration,
    /// Dispatches in flight at once, per shard. Default 256.
    pub max_in_flight: usize,
    /// How often the records of the jobs of the shards led here are swept for runs left
    /// without an owner (see `sweep`). Default 5m.
    #[serde(with = "crate::spec::codec::duration")]
    pub reconcile_every: Duration,
    /// From this many jobs in the deployment, a scheduler taking a shard reads its
    /// snapshot and the index's changes since instead of the whole index (see `snapshot`).
    /// Below it, reading the index is quick. Snapshots are written at any size, by a pass
    /// over the index and by each shard's leader as its jobs change (see
    /// `loading::refresh`), so that a deployment growing past this finds them current.
    /// Default 100,000; 0: always.
    pub snapshots_from: u64,
    /// The identity the scheduler connects as, on a connection of its own (`scheduler.nk`,
    /// with the agent's `creds` a runner's). Default: none, the agent's one connection.
    /// Why: nats-server checks the reply subject of every message it delivers to an
    /// identity that may answer requests (a runner answers kill requests) and keeps it in a
    /// cache it then prunes; a scheduler reading millions of jobs at a start does not need
    /// that, nor the runner's rights.
    pub creds: Option<String>,
    /// How far this agent's clock may be from the NATS server's before its scheduler
    /// leaves the shards to schedulers within it (see `server_time`). Default 2s.
    #[serde(with = "crate::spec::codec::duration")]
    pub max_clock_offset: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            shards: None,
            lease_ttl: Duration::from_secs(10),
            lead: Duration::from_millis(1500),
            default_deadline: Duration::from_secs(60),
            max_in_flight: 256,
            reconcile_every: Duration::from_secs(300),
            snapshots_from: 100_000,
            creds: None,
            max_clock_offset: Duration::from_secs(2),
        }
    }
}

/// What a scheduler and each of its shard tasks share.
#[derive(Clone)]
pub struct SchedulerCtx {
    pub store: Store,
    pub catalog: Catalog,
    /// The schedules index (see `store::schedules`), where a leader reads its shard's jobs.
    pub index: Bucket,
    /// Reads the jobs of the shards taken from the index.
    pub loader: loader::Loader,
    pub config: SchedulerConfig,
    pub clock: SharedClock,
    /// Who we are in lease values: `<host>/<instance>`.
    pub holder: String,
    /// The deployment's shard count (see `shard_count`).
    pub shards: u32,
    /// Each led shard's next fires, for `/metrics`.
    pub next_fires: crate::metrics::NextFires,
    /// This agent's clock against the server's: off, it leads no shards.
    pub server_time: crate::server_time::ServerTime,
}

pub struct Scheduler {
    pub ctx: SchedulerCtx,
    /// What notifications this scheduler delivers with (see `notify`).
    pub notify: crate::notify::NotifyConfig,
}

/// How often the shard tasks are looked at: one that ended on its own is started again.
const SHARD_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Forgets the shard tasks that ended although nobody stopped them (a panic outside
/// leading, which is caught): `rebalance` then starts them again, as without a task the
/// shard's jobs would never fire here. Whether any had.
fn forget_ended(running: &mut HashMap<u32, Running>) -> bool {
    let before = running.len();
    running.retain(|shard, task| {
        let ended = task.handle.is_finished();
        if ended {
            error!(shard, "the shard's task ended on its own; starting it again");
        }
        !ended
    });
    running.len() < before
}

/// A shard task of ours: standing by for the lease or leading.
struct Running {
    cancel: CancellationToken,
    handle: JoinHandle<()>,
}

impl Scheduler {
    /// Joins the members, runs the shards assigned to us and follows changes of the
    /// assignment until `cancel`; then leaves, and every shard releases its lease. A task
    /// of the scheduler that dies is an error: it cancels the agent and is returned.
    pub async fn run(mut self, cancel: CancellationToken) -> Result<(), Error> {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = self.ctx.catalog.wait_loaded() => {}
        }
        // Before joining: no shard of this deployment is without a watermark from now on.
        if let Err(e) = leader::seed_watermarks(&self.ctx.store, self.ctx.shards, self.ctx.clock.now()).await {
            warn!("writing the shards' first watermarks: {e}; shards never led start when first led");
        }
        let presence_stop = CancellationToken::new();
        let mut presence = tokio::spawn(members::publish(self.ctx.clone(), presence_stop.clone()));
        let mut clock_state = self.ctx.server_time.subscribe();
        let (members_tx, mut members) = watch::channel(members::Members::default());
        let mut tasks = Watched::default();
        tasks.spawn("the member list", members::follow(self.ctx.store.clone(), members_tx, cancel.clone()));
        // The reaper has a task of its own, so that the shards' work does not interrupt its
        // watch.
        let (state_tx, state) = mpsc::unbounded_channel();
        tasks.spawn("the reaper", reaper::Reaper::run(self.ctx.clone(), state, cancel.clone()));
        let (store, catalog, clock) = (self.ctx.store.clone(), self.ctx.catalog.clone(), self.ctx.clock.clone());
        let notify = std::mem::take(&mut self.notify);
        tasks.spawn(
            "the notifier",
            crate::notify::run(store.clone(), catalog.clone(), notify, clock.clone(), cancel.clone()),
        );
        // The triggers that follow events beside the schedule (see `trigger`).
        let chains = crate::chain::Chains { store: store.clone(), catalog: catalog.clone(), clock: clock.clone() };
        trigger::spawn(&mut tasks, chains, cancel.clone());
        trigger::spawn(&mut tasks, crate::messages::MessageTriggers { store, catalog, clock }, cancel.clone());
        let mut fault = None;
        let mut running: HashMap<u32, Running> = HashMap::new();
        let mut stopping: Vec<JoinHandle<()>> = Vec::new();
        let (mut seen, mut settle) = (Vec::new(), settle::Settle::default());
        let mut shard_check = tokio::time::interval(SHARD_CHECK_EVERY);
        info!(holder = %self.ctx.holder, shards = self.ctx.shards, "scheduler started");
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                // Tasks end with `cancel` too: only an end before it is a fault.
                why = tasks.ended() => {
                    fault = (!cancel.is_cancelled()).then_some(why);
                    break;
                }
                end = &mut presence => {
                    fault = (!cancel.is_cancelled()).then(|| match end {
                        Ok(()) => "the scheduler's presence ended".to_string(),
                        Err(e) => crate::watchdog::describe("the scheduler's presence", e),
                    });
                    break;
                }
                // Our clock off (or back within): we leave the list (or join it again).
                Ok(()) = clock_state.changed() => {
                    let off = clock_state.borrow_and_update().off;
                    let list = members::with_self(members.borrow().clone(), &self.ctx.holder, &seen, off);
                    if list != seen {
                        let now = settle.changed(&seen, &list, tokio::time::Instant::now());
                        seen = list;
                        if now {
                            self.rebalance(&seen, &mut running, &mut stopping, &state_tx);
                        }
                    }
                }
                changed = members.changed() => {
                    if changed.is_err() {
                        continue; // the member list task ended: `tasks.ended` says why
                    }
                    let off = self.ctx.server_time.state().off;
                    let list = members::with_self(members.borrow_and_update().clone(), &self.ctx.holder, &seen, off);
                    let now = settle.changed(&seen, &list, tokio::time::Instant::now());
                    seen = list;
                    if now {
                        self.rebalance(&seen, &mut running, &mut stopping, &state_tx);
                    }
                }
                _ = tokio::time::sleep_until(settle.due().unwrap_or_else(tokio::time::Instant::now)), if settle.due().is_some() => {
                    settle.done();
                    self.rebalance(&seen, &mut running, &mut stopping, &state_tx);
                }
                // A change of members still settling restarts them with its rebalance.
                _ = shard_check.tick() => {
                    if forget_ended(&mut running) && settle.due().is_none() {
                        self.rebalance(&seen, &mut running, &mut stopping, &state_tx);
                    }
                }
            }
        }
        if let Some(why) = &fault {
            error!("{why}: stopping the agent");
            cancel.cancel();
        }
        // Leave first, so the others start taking our shards as we release them.
        presence_stop.cancel();
        if !presence.is_finished() {
            let _ = presence.await;
        }
        for task in running.values() {
            task.cancel.cancel();
        }
        for handle in running.into_values().map(|t| t.handle).chain(stopping) {
            if let Err(e) = handle.await {
                warn!("shard task: {e}");
            }
        }
        tasks.join_all().await;
        match fault {
            Some(why) => Err(Error::new(crate::ErrorKind::Other, why)),
            None => Ok(()),
        }
    }

    /// Starts tasks for shards assigned to us and stops those assigned elsewhere, adding
    /// them to `stopping` (they release their leases on the way out; those done leave it).
    fn rebalance(
        &self,
        members: &[String],
        running: &mut HashMap<u32, Running>,
        stopping: &mut Vec<JoinHandle<()>>,
        state: &mpsc::UnboundedSender<(u32, bool)>,
    ) {
        let owners = shards::assign(members, self.ctx.shards);
        let ours = |shard: u32| owners.get(shard as usize).is_some_and(|&i| members[i] == self.ctx.holder);
        let moved: Vec<u32> = running.keys().copied().filter(|&s| !ours(s)).collect();
        stopping.retain(|h| !h.is_finished());
        stopping.extend(moved.into_iter().filter_map(|shard| running.remove(&shard)).map(|task| {
            task.cancel.cancel();
            task.handle
        }));
        let missing: Vec<u32> = (0..self.ctx.shards).filter(|&s| ours(s) && !running.contains_key(&s)).collect();
        for n in missing {
            let cancel = CancellationToken::new();
            let task = shard::Shard { n, ctx: self.ctx.clone(), state: state.clone() };
            let handle = tokio::spawn(task.run(cancel.clone()));
            running.insert(n, Running { cancel, handle });
        }
        info!(members = members.len(), owned = running.len(), "shards rebalanced");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shard_tasks_that_ended_on_their_own_are_forgotten_so_that_they_start_again() {
        let task = |work: tokio::task::JoinHandle<()>| Running { cancel: CancellationToken::new(), handle: work };
        let mut running = HashMap::from([
            (0, task(tokio::spawn(std::future::pending()))),
            (1, task(tokio::spawn(async { panic!("a bug while standing by") }))),
            (2, task(tokio::spawn(async {}))),
        ]);
        while !(running[&1].handle.is_finished() && running[&2].handle.is_finished()) {
            tokio::task::yield_now().await;
        }
        assert!(forget_ended(&mut running));
        assert_eq!(running.keys().copied().collect::<Vec<_>>(), vec![0], "only the task still standing by is kept");
        assert!(!forget_ended(&mut running), "nothing more ended");
    }
}
