//! One claimed run, the same for every executor:
//!
//! 1. **prepare**: the spec is read and the code made ready ahead of the instant
//!    (`exec::prepare`), in the release group of its instant when there is time (`starter`);
//! 2. **check**: just before the instant the spec is read again (removed, invalid, paused,
//!    edited since) and the guards decide (overlap, locks, see `guards`);
//! 3. **arm**: the record is written `running`, the compare-and-set that fences the run
//!    against a retry elsewhere, before any of its code runs;
//! 4. **release**: with its group, or on its own at its instant, the code starts;
//! 5. **until the code ends** (`running.rs`: heartbeat, output, timeout, kill) and **finish**
//!    (`finish.rs`: the final record or the next attempt).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::Message;
use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::claimed_run::{ClaimedRun, in_progress};
use super::exec::{self, PrepareError, Ready, RunInfo};
use super::finish::{finish, finish_without_start};
use super::guards::{self, Decision};
use super::run_ahead::LATE_START;
use super::running::until_code_ends;
use super::starter::{Confirms, END_GATE_BOUND, Release, Ticket, start_gate_bound};
use super::{RunnerCtx, Stops};
use crate::dispatch::DispatchMsg;
use crate::error::Error;
use crate::events::{Event, EventKind, publish_event};
use crate::record::{Status, Trigger};
use crate::spec::{JobSpec, Overlap};

/// Lines of output waiting for the lifecycle; a job printing faster waits for it.
const OUTPUT_BUFFER: usize = 1024;

/// A run's code made ready for one revision of its spec, and its place in its instant's
/// release group, if it took one.
struct PreparedCode {
    revision: u64,
    ready: Result<Box<dyn Ready>, PrepareError>,
    ticket: Option<Ticket>,
}

impl PreparedCode {
    /// Made ready, its group released without it: what it still is alone, if anything.
    async fn without_release(self) -> Option<PreparedCode> {
        match &self.ready {
            Ok(ready) if !ready.bound_to_release() => Some(PreparedCode { ticket: None, ..self }),
            _ => {
                self.discard().await;
                None
            }
        }
    }

    async fn discard(self) {
        // Out of the group first: the release must not kill the pid once reaped (it may
        // be reused), nor let the dying supervisor take a line meant for another run.
        if let Some(t) = &self.ticket {
            t.withdraw();
        }
        if let Ok(ready) = self.ready {
            ready.discard().await;
        }
    }
}

/// The run from its claim to its end. Ok(false): not started, to be handed back.
pub(super) async fn claim_to_end(
    ctx: &RunnerCtx,
    msg: &Message,
    d: &DispatchMsg,
    held: &mut ClaimedRun,
    stops: &Stops,
) -> Result<bool, Error> {
    let alive = ctx.alive_path(&held.record.key(), d.attempt);
    let mut made = None;
    let result = run_claimed(ctx, msg, d, held, stops, alive.as_deref(), &mut made).await;
    if let Some(m) = made {
        m.discard().await;
    }
    result
}

/// What is made ready ahead and not started when this returns early is left in `made`,
/// for the caller to discard.
async fn run_claimed(
    ctx: &RunnerCtx,
    msg: &Message,
    d: &DispatchMsg,
    held: &mut ClaimedRun,
    stops: &Stops,
    alive: Option<&std::path::Path>,
    made: &mut Option<PreparedCode>,
) -> Result<bool, Error> {
    // 1. Prepare.
    let early = ctx.current(&d.job, d.spec_revision).await;
    // The job's own run TTL, when it asks for a longer one: in force from now on (the
    // lease was taken before the spec was read).
    if let Ok(Some((_, spec))) = &early
        && spec.run_ttl.is_some()
    {
        held.ttl = ctx.config.run_ttl_for(spec.run_ttl);
        if let Some(lease) = held.lease.as_mut() {
            lease.set_ttl(held.ttl);
            held.renew().await?;
        }
    }
    let run = RunInfo {
        job: &d.job,
        run_id: &d.run_id,
        attempt: d.attempt,
        trigger: d.trigger,
        scheduled_at: held.record.scheduled_at.unwrap_or(d.scheduled_at),
        alive: alive.map(|path| (path, ctx.config.alive_within(held.run_ttl()))),
        input: held.record.input.as_ref().map(|input| input.to_string()),
        traceparent: held.trace.traceparent(),
    };
    let confirms = match &early {
        Ok(Some((_, spec))) if spec.lock_name().is_some() => Confirms::AtTheMargin,
        Ok(Some((_, spec))) if spec.overlap == Overlap::Allow => Confirms::Unguarded,
        Ok(Some(_)) => Confirms::Guarded,
        Ok(None) | Err(_) => Confirms::AtTheMargin,
    };
    match early {
        Ok(Some((revision, spec))) => {
            *made = Some(make(ctx, msg, held, (revision, &spec), &run, ctx.starter.ticket(d.scheduled_at)).await);
        }
        Ok(None) => {}
        Err(e) => debug!("spec not available ahead of the instant: {e}"),
    }

    // 2. Check, just before a group release, or at the instant when starting alone.
    let check_at = match made.as_ref().and_then(|m| m.ticket.as_ref()) {
        Some(ticket) => ticket.check_at(d.scheduled_at, confirms),
        None => d.scheduled_at,
    };
    if !wait_until(ctx, msg, check_at, held, &stops.shutdown).await? {
        return Ok(false);
    }
    let (revision, mut spec) = match ctx.current(&d.job, d.spec_revision).await {
        Ok(Some(current)) => current,
        Ok(None) => return finish_without_start(ctx, held, Status::Cancelled, "job was removed").await,
        Err(e) => {
            return finish_without_start(ctx, held, Status::Failed, &format!("job spec is invalid: {e}")).await;
        }
    };
    if let Some(overlap) = d.overlap {
        Arc::make_mut(&mut spec).overlap = overlap;
    }
    if spec.paused && d.trigger != Trigger::Manual {
        return finish_without_start(ctx, held, Status::Skipped, "job is paused").await;
    }
    if made.as_ref().is_some_and(|m| m.revision != revision)
        && let Some(stale) = made.take()
    {
        // Edited since it was prepared: the new spec starts alone, a little late.
        stale.discard().await;
    }
    let ttl = held.run_ttl();
    // A backfilled fire stands in line at its dispatch, as a manual run at its trigger:
    // its fire instant, long past, would put it ahead of every run and past its deadline.
    let fire = match d.trigger {
        Trigger::Backfill => held.record.dispatched_at,
        _ => held.record.scheduled_at,
    };
    let fire = fire.unwrap_or(d.scheduled_at);
    let (run_key, asked) = (held.record.key(), tokio::time::Instant::now());
    match guards::acquire(ctx, (&spec, ttl), (&run_key, fire), &mut held.run_lease(ctx), &stops.shutdown).await? {
        Decision::Go(leases) => held.guards = leases,
        Decision::Waited(leases) => {
            held.guards = leases;
            // It waited for the guard: its group's release may have passed.
            if let Some(late) = made.take() {
                *made = late.without_release().await;
            }
        }
        Decision::Skip(why) => return finish_without_start(ctx, held, Status::Skipped, &why).await,
        Decision::ShutDown => return Ok(false),
    }
    // Its overlap lease stands for its own from now; a run that took none (its job's
    // policy is `allow` since the claim) takes its own.
    held.guards_taken(asked);
    if !held.leased() {
        held.take_own_lease(ctx).await?;
    }
    let made = match made.take() {
        Some(m) if m.ready.is_ok() => m,
        // Made ahead but failed (a spawn under load, say): tried once more, alone.
        Some(failed) => {
            failed.discard().await;
            make(ctx, msg, held, (revision, &spec), &run, None).await
        }
        None => make(ctx, msg, held, (revision, &spec), &run, None).await,
    };
    let in_group = made.ticket.is_some() && made.ready.is_ok();
    if !in_group {
        let waited = wait_until(ctx, msg, d.scheduled_at, held, &stops.shutdown).await;
        if !matches!(waited, Ok(true)) {
            made.discard().await;
            return waited;
        }
    }
    let PreparedCode { ready, ticket, .. } = made;
    let ready = match ready {
        Ok(ready) => ready,
        Err(why) => return finish_without_start(ctx, held, Status::Failed, &why.to_string()).await,
    };

    // 3. Arm.
    // Released with its group at its instant, unless that has passed (a late run).
    let planned = if in_group { d.scheduled_at.max(ctx.clock.now()) } else { ctx.clock.now() };
    if let Err(e) = mark_running(ctx, msg, held, (revision, planned), &stops.shutdown).await {
        PreparedCode { revision, ready: Ok(ready), ticket }.discard().await;
        return Err(e);
    }
    held.trace.claim_ended(std::time::SystemTime::now(), None, None);

    // 4. Release.
    let release = match ticket {
        Some(ticket) if ticket.confirm() => ticket.released(ctx.config.heartbeat / 2).await,
        // Too late for its group's release, or in none.
        Some(_) | None => Release::Alone,
    };
    let (ready, started, starting, ending) = match release {
        Release::Released(at, starting, ending) => (ready, at, Some(starting), Some(ending)),
        Release::Lost => {
            ready.discard().await;
            return finish_without_start(ctx, held, Status::Failed, "the release of the run's group was lost").await;
        }
        // A process bound to the release (killed by it, or to be discarded) is made again;
        // a guest starts as it is.
        Release::Alone if ready.bound_to_release() => {
            ready.discard().await;
            match exec::prepare(ctx, &spec, &run, None).await {
                Ok(ready) => (ready, ctx.clock.now(), None, None),
                Err(why) => return finish_without_start(ctx, held, Status::Failed, &why.to_string()).await,
            }
        }
        Release::Alone => (ready, ctx.clock.now(), None, None),
    };
    let (output, lines) = mpsc::channel(OUTPUT_BUFFER);
    let started_code = ready.start(output).await;
    // Started (or failed to): the runs released with this one start before any finishes.
    if let Some(gate) = starting.map(|starting| starting.gate()) {
        gate.passed(start_gate_bound(ctx.config.heartbeat)).await;
    }
    let code = match started_code {
        Ok(code) => code,
        Err(why) => return finish_without_start(ctx, held, Status::Failed, &why.to_string()).await,
    };
    held.record.started_at = Some(started);
    if ctx.store.lifecycle.every_run {
        publish_event(&ctx.store, &Event::new(&d.job, &d.run_id, EventKind::Started, d.attempt, started)).await;
    }
    // A backfilled fire is late by design: its lateness would only blur the histogram.
    let fire = Some(d.scheduled_at).filter(|_| d.trigger != Trigger::Backfill);
    let _running = crate::metrics::run_started(fire, started);

    // 5. Supervise and finish.
    let ended = until_code_ends(ctx, msg, &spec, held, code, lines, &stops.stop).await?;
    // Its output is out: the runs released with it get theirs out before any bookkeeping.
    if let Some(gate) = ending.map(|ending| ending.gate()) {
        gate.passed(END_GATE_BOUND).await;
    }
    finish(ctx, held, &spec, ended).await?;
    Ok(true)
}

/// Makes the run's code ready for `spec` at `revision`, in `ticket`'s group if given.
/// That may take longer than the run's lease (compiling a large component): meanwhile
/// the lease is renewed and the message kept in hand every heartbeat, and a lease lost
/// to another owner ends the making.
async fn make(
    ctx: &RunnerCtx,
    msg: &Message,
    held: &mut ClaimedRun,
    (revision, spec): (u64, &JobSpec),
    run: &RunInfo<'_>,
    ticket: Option<Ticket>,
) -> PreparedCode {
    if exec::keeps_alive(spec) {
        held.watch_alive(run.alive.map(|(path, _)| path.to_path_buf()));
    }
    let beat = ctx.config.heartbeat;
    let next = held.renewed + beat;
    let mut renew = tokio::time::interval_at(next, beat);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ready = {
        let prepare = exec::prepare(ctx, spec, run, ticket.as_ref());
        tokio::pin!(prepare);
        loop {
            tokio::select! {
                ready = &mut prepare => break ready,
                _ = renew.tick() => {
                    in_progress(msg).await;
                    match held.renew().await {
                        Err(e) if e.is_conflict() => break Err(PrepareError::LeaseTaken(e)),
                        Err(e) => warn!("renewing the lease of a run being made ready: {e}"),
                        Ok(()) => {}
                    }
                }
            }
        }
    };
    PreparedCode { revision, ready, ticket }
}

/// How many times a refused `running` write is tried again from the record as read
/// afresh (see `ClaimedRun::adopt_current`).
const ADOPT_MAX: u32 = 3;

/// Records the run `running` (planned to start at `at`, from spec `revision`) before its
/// code may start: the compare-and-set that fences it against a retry elsewhere. NATS
/// trouble (a leader election) is retried, lease kept alive, as long as the lease lives,
/// so a start is late rather than doubled or lost. If it still fails, the run's lease is
/// left to expire rather than released: the write may have landed unseen, and the
/// scheduler that sees the expiry records the run `lost` and retries it per policy. A
/// refused write is made again while the run is still ours (`ClaimedRun::adopt_current`).
async fn mark_running(
    ctx: &RunnerCtx,
    msg: &Message,
    held: &mut ClaimedRun,
    (revision, at): (u64, DateTime<Utc>),
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    // As long as the lease lives (renewed between tries, once NATS answers again), less
    // half a heartbeat: it must not expire while the write may still land unseen.
    let lease_left = |held: &ClaimedRun| held.renewed + held.run_ttl().saturating_sub(ctx.config.heartbeat / 2);
    // Its lease is its claim: one that may have run out (the runner stalled since its last
    // renewal) is renewed before the start is written, and a refusal (expired, taken) ends
    // the claim here.
    if tokio::time::Instant::now() >= lease_left(held) {
        held.renew().await?;
    }
    held.record.spec_revision = revision;
    held.record.status = Status::Running;
    held.record.started_at = Some(at);
    held.record.heartbeat_at = Some(at);
    let mut backoff = Duration::from_millis(50);
    let mut adopted = 0;
    loop {
        let error = match held.write(ctx).await {
            Ok(()) => {
                restamp_late_start(ctx, held, at).await;
                return Ok(());
            }
            Err(e) if e.is_conflict() => {
                // Refused, but perhaps still ours (see `adopt_current`): written again from
                // the record as it is, a few times, as a read may still be out of date.
                if !held.adopt_current(ctx).await {
                    return Err(e);
                }
                if adopted == ADOPT_MAX {
                    // Still ours, but the reads lag: trouble, not a takeover (the run is
                    // handed back and its lease left to expire).
                    return Err(Error::nats_msg("starting the run", "its record read stayed out of date"));
                }
                adopted += 1;
                info!("the run's record moved on while it stayed ours; starting it from there");
                tokio::time::sleep(Duration::from_millis(50) * (adopted - 1)).await;
                continue;
            }
            Err(e) => e,
        };
        if tokio::time::Instant::now() + backoff > lease_left(held) {
            held.leave_lease_to_expire();
            return Err(error);
        }
        warn!("the run's start is not recorded yet, retrying in {backoff:?}: {error}");
        let stopping = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(backoff) => false,
        };
        if stopping {
            held.leave_lease_to_expire();
            return Err(error);
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
        if let Err(e) = held.renew().await
            && e.is_conflict()
        {
            return Err(e);
        }
        in_progress(msg).await;
        // A failing renewal takes its own time (NATS away): no write once the lease may
        // have run out.
        if tokio::time::Instant::now() >= lease_left(held) {
            held.leave_lease_to_expire();
            return Err(error);
        }
    }
}

/// Writes the run's start again with the time its code starts if the write of its
/// planned start was acknowledged over `LATE_START` after it (NATS away between): the
/// fires behind the run judge it by its start (`run_ahead::Span`), and a start recorded
/// at its instant would have them skipped behind a run that did not run then. One try:
/// should it fail, the run's next writes (heartbeat, end) carry the start all the same.
async fn restamp_late_start(ctx: &RunnerCtx, held: &mut ClaimedRun, planned: DateTime<Utc>) {
    // The code starts after the acknowledgement: a backlog's start by then.
    let now = ctx.clock.now();
    if now - planned <= LATE_START {
        return;
    }
    (held.record.started_at, held.record.heartbeat_at) = (Some(now), Some(now));
    let late_ms = (now - planned).num_milliseconds();
    match held.write(ctx).await {
        Ok(()) => info!(late_ms, "the run's start was recorded late: recorded again as its code starts"),
        Err(e) => warn!(late_ms, "the run's start was recorded late, and not again as its code starts: {e}"),
    }
}

/// Sleeps until `at`, renewing the run's lease and telling JetStream we are alive
/// meanwhile. Ok(false) when shut down; a conflict when the run was taken away.
async fn wait_until(
    ctx: &RunnerCtx,
    msg: &Message,
    at: DateTime<Utc>,
    held: &mut ClaimedRun,
    cancel: &CancellationToken,
) -> Result<bool, Error> {
    loop {
        let left = (at - ctx.clock.now()).to_std().unwrap_or_default();
        if left.is_zero() {
            return Ok(true);
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(false),
            _ = tokio::time::sleep(left.min(ctx.config.heartbeat)) => {
                if left > ctx.config.heartbeat {
                    // Given up on a stop: the run, not started, is handed back.
                    tokio::select! {
                        _ = cancel.cancelled() => return Ok(false),
                        renewed = held.renew() => renewed?,
                    }
                    in_progress(msg).await;
                }
            }
        }
    }
}
