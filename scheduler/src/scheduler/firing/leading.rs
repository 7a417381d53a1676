//! The loop of leading a shard: dispatch the fires due within the lead, follow the shard's
//! jobs' changes, keep the lease and move the watermark; at a stop, finish what is in
//! flight while the lease is surely ours, then let it go.
//!
//! Everything it reaches outside its memory goes through [`Ports`] (where fires go, the
//! shard's jobs' changes and their upkeep), its lease and watermark through `Keeping`.
//! `leader.rs` sets it up with NATS behind them; `lead_tests.rs` drives it on tokio's
//! paused clock with ports and a lease table of its own, no nats-server.

use chrono::{DateTime, TimeDelta, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::in_flight::InFlight;
use super::keeping::{Ended, Event, Held, Keeping, Mark};
use super::plan::{Action, Planner};
use super::queue::FireQueue;
use super::shard_lease::ShardLease;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::scheduler::loading::index::ShardChange;

/// What the loop of leading reaches outside its memory.
pub(super) trait Ports: Send {
    /// Work of the ports' own that came due while they follow the jobs (a snapshot's
    /// write ended, triggers to publish), done by `upkeep`.
    type Upkeep: Send;

    /// Carries out a fire's fate (a dispatch, retried until its deadline; a missed
    /// record). Spawned, so that the loop goes on meanwhile.
    fn act(&self, action: Action, now: DateTime<Utc>) -> impl Future<Output = ()> + Send + 'static;
    /// The next change of the shard's jobs, noted by the ports as it comes, or upkeep
    /// come due. Cancel-safe.
    fn next(&mut self) -> impl Future<Output = Followed<Self::Upkeep>> + Send;
    fn upkeep(&mut self, due: Self::Upkeep) -> impl Future<Output = ()> + Send;
    /// At each turn of the loop (metrics; a snapshot's write started when due).
    fn turn(&mut self, queue: &FireQueue);
    /// As each renewal comes due (metrics; the triggers' publish tried again).
    fn renewal_due(&mut self, queue: &FireQueue) -> impl Future<Output = ()> + Send;
    /// At a stop, while the lease is surely ours: what the ports keep brought up to date
    /// (the shard's snapshot) by `until`.
    fn finish(self, until: Instant) -> impl Future<Output = ()> + Send;
}

/// What `Ports::next` says.
pub(super) enum Followed<U> {
    /// Err: leading cannot go on without the jobs' changes.
    Change(Result<ShardChange, Error>),
    Upkeep(U),
}

/// How the loop leads, besides what the planner decides.
pub(super) struct Lead {
    pub planner: Planner,
    /// Dispatches in flight at most.
    pub max_in_flight: usize,
    pub clock: SharedClock,
}

/// Leads with `queue` until `cancel` (Ok) or until the lease is lost or may be (Err).
pub(super) async fn lead_loop<L: ShardLease, M: Mark, P: Ports>(
    mut ports: P,
    mut queue: FireQueue,
    mut keeping: Keeping<'_, L, M>,
    mut how: Lead,
    cancel: &CancellationToken,
) -> Result<(), Error> {
    let mut in_flight = InFlight::default();
    let ended = loop {
        ports.turn(&queue);
        let now = how.clock.now();
        // Dispatch everything due within the lead time, up to the in-flight limit. Not
        // leased, nothing: it sleeps until a renewal is answered.
        let room =
            |leased, in_flight: &InFlight| if leased { how.max_in_flight.saturating_sub(in_flight.len()) } else { 0 };
        let leased = keeping.leased();
        for action in how.planner.due(&mut queue, now, room(leased, &in_flight)) {
            let at = action.fire();
            match &action {
                Action::Run(due, _) => {
                    let job = due.job.name.clone();
                    in_flight.spawn_in_order((job, at), ports.act(action, now))
                }
                Action::Missed(..) => in_flight.spawn(at, ports.act(action, now)),
            }
        }
        let wake = how.planner.sleep(&mut queue, now, room(leased, &in_flight));
        tokio::select! {
            _ = cancel.cancelled() => break Ok(()),
            _ = tokio::time::sleep(wake) => {}
            followed = ports.next() => match followed {
                Followed::Change(Ok(ShardChange::Put(job, _))) => queue.upsert(job, how.clock.now()),
                Followed::Change(Ok(ShardChange::Removed(name))) => queue.remove(&name),
                // Without its jobs' changes the shard cannot be led: let another (or us
                // again, after a fresh load) take it at once.
                Followed::Change(Err(e)) => break Err(e),
                Followed::Upkeep(due) => ports.upkeep(due).await,
            },
            true = in_flight.join_next() => {}
            kept = keeping.next() => match kept {
                Ok(Event::Due) => {
                    // Not past now: a job added while the write is in flight fires from now.
                    keeping.start(low_water(&mut queue, &in_flight, now));
                    ports.renewal_due(&queue).await;
                }
                Ok(Event::Renewed) => {}
                // Lost, not renewed, or renewed too late to lead on: step down at once.
                Err(e) => break Err(e),
            }
        }
    };
    // A renewal in flight is waited for a moment: failed or unanswered, the lease may not
    // be ours, and nothing more is written.
    let Ended { outcome, stopping, lease_end, held } = keeping.finish(ended).await;
    end(ports, held, lease_end, (&mut queue, in_flight, &how.clock), stopping).await;
    outcome
}

/// The end of leading. On a stop, dispatches in flight are finished, the watermark
/// written and the ports finished, while the lease is surely ours (`lease_end`). Then the
/// lease is released: fenced by its revision, this does nothing if it is no longer ours.
/// Unless a write was abandoned (`held` None: a renewal; or the watermark's): it could
/// still land, after a successor read what it wrote, so the lease is left to expire.
async fn end<L: ShardLease, M: Mark, P: Ports>(
    ports: P,
    mut held: Option<Held<L, M>>,
    lease_end: Instant,
    (queue, mut in_flight, clock): (&mut FireQueue, InFlight, &SharedClock),
    stopping: bool,
) {
    let mut abandoned = held.is_none();
    if stopping {
        // Finished while the lease is ours, so that the watermark covers them; any left go
        // on by themselves (cut short, one would leave its fire to a successor's catch-up;
        // a successor's second dispatch of it is refused by its run record).
        let _ = tokio::time::timeout_at(lease_end, async { while in_flight.join_next().await {} }).await;
    }
    if stopping
        && Instant::now() < lease_end
        && let Some(Held { mark, .. }) = held.as_mut()
    {
        // Not past now: a job's change not read yet fires from now at its successor.
        let low = low_water(queue, &in_flight, clock.now());
        let moved = tokio::time::timeout_at(lease_end, mark.write(low)).await;
        abandoned |= moved.is_err();
        if !matches!(moved, Ok(Ok(()))) {
            warn!("the watermark was not moved at the end of leading: a successor resumes from the last one");
        }
        // Before the release, so that a successor reads this snapshot, not one written
        // under it while it reads.
        ports.finish(lease_end.min(Instant::now() + FINAL_SNAPSHOT_MAX)).await;
    }
    // Dispatches still in flight go on by themselves (after a step-down too): cut short,
    // one would leave its fire's record `queued` unpublished until the sweep; a
    // successor's second dispatch of it is refused by its run record.
    in_flight.tasks.detach_all();
    let Some(Held { lease, .. }) = held.filter(|_| !abandoned) else { return };
    if let Err(e) = lease.release().await {
        warn!("releasing scheduler lease: {e}");
    }
}

/// How long a stop waits for the ports to finish (the shard's snapshot brought up to date).
const FINAL_SNAPSHOT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Everything before the earliest fire not yet dispatched (queued or in flight) is done,
/// up to `ceiling`: now, as a job changed meanwhile (a change not read yet) fires from
/// then on. Fires dispatched ahead, after it, are refused as duplicates at a successor.
pub(super) fn low_water(queue: &mut FireQueue, in_flight: &InFlight, ceiling: DateTime<Utc>) -> DateTime<Utc> {
    let pending = [queue.peek(), in_flight.earliest(), Some(ceiling)];
    let next = pending.into_iter().flatten().min().unwrap_or(ceiling);
    next - TimeDelta::milliseconds(1)
}
