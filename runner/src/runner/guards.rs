//! Overlap policies and locks, decided when a run is about to start.
//!
//! A run of a job whose `overlap` is not `allow` holds `active.<job>` while it lives; a
//! run of a job with `lock` holds `lock.<name>`. Both are leases (server TTL, renewed with
//! the run's heartbeat, released at its end), so a dead runner's hold runs out by itself.
//! When `active.<job>` is taken:
//! - `skip`: the new run is `skipped`, naming the run in progress;
//! - `queue`: one run may wait (holding `queued.<job>`) until the active one ends; a
//!   further one is skipped;
//! - `replace`: the run in progress is asked to stop (TERM), and the new one starts when
//!   it has.
//!
//! A policy judges a run only against a run that was already going at its fire instant (a
//! run checked just before its instant waits for the instant before it judges): one whose
//! record says it started before the fire. A holder of `active.<job>` that started later,
//! or has not started (a backlog released late, after a takeover or while NATS failed
//! over, whose runs take the lease before their start is recorded), did not overlap this
//! fire: this run waits for it instead, and starts when it ends, until its starting
//! deadline (the job's, else [`BACKLOG_DEADLINE`]) has passed; then it is skipped, saying
//! so. So a backlog of a job whose runs are shorter than its period runs every fire
//! (docs/failure-model.md). The runs waiting for the lease take it in fire order, standing
//! in the job's line (`waiting`); under `skip`, a fire that comes while a backlog's run is
//! going (earlier fires stand in line, or the run going started late) goes in line behind
//! it, for a bounded time ([`time_in_line`]), rather than being skipped behind whichever
//! run of the backlog is going at its instant.
//!
//! A held lock skips the run. Lock names are shared by jobs, so queueing on them would
//! let one job starve the others; skipping is what `flock -n` users expect.
//!
//! A lease held by an earlier attempt of the same run (its runner died, and the lease has
//! not run out yet) is no other run: the attempt waits for it to expire, whatever the
//! policy, rather than being skipped by itself.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::RunnerCtx;
use super::run_ahead::{Holder, LATE_START, POLL, Span, holder_alive, leave_to_the_reaper, span};
use super::waiting::{Line, Look};
use crate::error::{Error, ErrorKind};
use crate::names::lease_keys;
use crate::spec::{JobSpec, Overlap};
use crate::store::kv::Bucket;
use crate::store::lease::{Lease, holder, holder_at};

/// What the guards say about starting now.
pub(super) enum Decision {
    /// Start now, holding these leases.
    Go(Vec<Lease>),
    /// Start as soon as possible: the run waited for its predecessor.
    Waited(Vec<Lease>),
    Skip(String),
    /// The runner stops while the run waits for its predecessor: hand it back unstarted.
    ShutDown,
}

/// What a run does when `active.<job>` is held by `current` (a run key).
#[derive(Debug, Clone, PartialEq, Eq)]
enum OnActive {
    /// Wait for it to end (our own earlier attempt, or `replace` asked it to stop).
    Wait,
    /// Wait for it to end, until the run's starting deadline: it took the lease after
    /// this run's fire was due, so it does not overlap this fire (a late backlog).
    WaitLate,
    /// Wait as the one queued run, if `queued.<job>` is free.
    Queue,
    /// Ask it to stop, then wait (overlap `replace`).
    Replace,
    Skip(String),
}

/// The holder of `active.<job>` as this run sees it: its run key, its span as its record
/// tells it (see [`Span`]), and whether it is a backlog's run.
struct Active<'a> {
    run_key: &'a str,
    span: Option<Span>,
    /// Earlier fires of the job stand in line for the lease (see `waiting`): the holder is
    /// a run of a backlog being worked off.
    in_backlog: bool,
}

/// What a run of `run_key`, fired at `fire`, does about the run holding `active.<job>`.
fn on_active(overlap: Overlap, current: &Active, run_key: &str, fire: DateTime<Utc>) -> OnActive {
    let running_at_fire = current.span.is_some_and(|span| span.covers(fire));
    match overlap {
        _ if current.run_key == run_key => OnActive::Wait,
        Overlap::Skip | Overlap::Allow | Overlap::Queue if !running_at_fire => OnActive::WaitLate,
        // Behind a backlog's run, whichever it is when this fire comes: in line behind it.
        Overlap::Skip if current.in_backlog => OnActive::WaitLate,
        Overlap::Skip | Overlap::Allow => {
            OnActive::Skip(format!("run {} is still running (overlap skip)", current.run_key))
        }
        Overlap::Queue => OnActive::Queue,
        Overlap::Replace => OnActive::Replace,
    }
}

/// The run's own lease as its guards use it: renewed while the run waits, and taken
/// before it waits if the run holds none (a run whose overlap lease is to be its lease,
/// see `claimed_run`): a waiting run is seen by the fires behind it, and its runner's
/// death by the scheduler.
pub(super) struct RunLease<'a> {
    pub(super) lease: &'a mut Option<Lease>,
    /// Its key and holder, to take it.
    pub(super) key: String,
    pub(super) holder: &'a str,
}

impl RunLease<'_> {
    /// Holds the lease, taking it (for `ttl`) if needed. A conflict when another runner
    /// holds it: a copy of the run's dispatch, delivered again, runs it.
    pub(super) async fn take(&mut self, leases: &Bucket, ttl: Duration) -> Result<(), Error> {
        if self.lease.is_some() {
            return Ok(());
        }
        match Lease::try_acquire(leases, &self.key, self.holder, ttl).await? {
            Some(lease) => {
                *self.lease = Some(lease);
                Ok(())
            }
            None => Err(Error::new(ErrorKind::Conflict, format!("{} is held by another runner", self.key))),
        }
    }

    fn get(&mut self) -> Option<&mut Lease> {
        self.lease.as_mut()
    }
}

/// How long after its fire a run of a backlog may still wait for the run before it, when
/// its job sets no `starting_deadline`: the schedulers' default deadline.
pub(super) const BACKLOG_DEADLINE: Duration = Duration::from_secs(60);

/// Takes the leases `spec` asks for, keeping the run's own lease alive while it waits.
/// `fire` is the run's fire instant (see [`on_active`]).
pub(super) async fn acquire(
    ctx: &RunnerCtx,
    (spec, ttl): (&JobSpec, Duration),
    (run_key, fire): (&str, DateTime<Utc>),
    run_lease: &mut RunLease<'_>,
    shutdown: &CancellationToken,
) -> Result<Decision, Error> {
    let leases = &ctx.store.leases;
    let mut held = Vec::new();
    let mut waited = false;
    if spec.overlap != Overlap::Allow {
        let late = ctx.clock.now() - fire > LATE_START;
        let mut line = Line::new(leases, &spec.name, (run_key, fire, late), ttl);
        let taken = take_active(ctx, (spec, ttl), (run_key, fire), run_lease, shutdown, &mut line).await;
        // Out of line however it ended, an error included: the next need not wait for
        // its place to expire.
        line.leave().await;
        match taken? {
            Taken::Now(lease) => held.push(lease),
            Taken::Waited(lease) => {
                held.push(lease);
                waited = true;
            }
            Taken::Not(decision) => return Ok(decision),
        }
    }
    if let Some(name) = spec.lock_name() {
        let key = lease_keys::lock(name);
        loop {
            if let Some(lease) = Lease::try_acquire(leases, &key, run_key, ttl).await? {
                held.push(lease);
                break;
            }
            let current = holder(leases, &key).await?.map(|h| h.holder).unwrap_or_else(|| "?".into());
            if current != run_key {
                release_all(held).await;
                return Ok(Decision::Skip(format!("lock {name} is held by run {current}")));
            }
            // Our own earlier attempt's: it runs out within its TTL.
            if let Err(e) = run_lease.take(leases, ttl).await {
                release_all(held).await;
                return Err(e);
            }
            tokio::select! {
                _ = shutdown.cancelled() => {
                    release_all(held).await;
                    return Ok(Decision::ShutDown);
                }
                _ = tokio::time::sleep(POLL) => {}
            }
            if let Some(lease) = run_lease.get() {
                lease.renew().await?;
            }
        }
    }
    Ok(if waited { Decision::Waited(held) } else { Decision::Go(held) })
}

/// How a run came by its job's overlap lease, or why it did not.
enum Taken {
    /// At once.
    Now(Lease),
    /// After waiting for the run before it.
    Waited(Lease),
    Not(Decision),
}

/// Takes `active.<job>` as the job's overlap policy says, waiting for it in `line` (see
/// `waiting`) when the policy waits.
async fn take_active(
    ctx: &RunnerCtx,
    (spec, ttl): (&JobSpec, Duration),
    (run_key, fire): (&str, DateTime<Utc>),
    run_lease: &mut RunLease<'_>,
    shutdown: &CancellationToken,
    line: &mut Line<'_>,
) -> Result<Taken, Error> {
    let leases = &ctx.store.leases;
    let key = lease_keys::active(&spec.name);
    // Late, so part of a backlog, it stands in line before its first try, so that the
    // fires released with it see it (`Line::take_now`).
    let mut taken = line.take_now(&key, ctx.clock.now()).await?;
    // Checked just before the instant: a run going now may end before it (the last
    // run of a backlog, started late). The policy judges the run going at the instant.
    while taken.is_none() && ctx.clock.now() < fire {
        let left = (fire - ctx.clock.now()).to_std().unwrap_or_default();
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(Taken::Not(Decision::ShutDown)),
            _ = tokio::time::sleep(left.min(POLL)) => {}
        }
        taken = match line.look(&key, ctx.clock.now()).await? {
            Look::Took(lease) => Some(*lease),
            Look::ClaimedRun(_) | Look::Free => None,
        };
    }
    if let Some(lease) = taken {
        return Ok(Taken::Now(lease));
    }
    run_lease.take(leases, ttl).await?;
    let deadline = spec.starting_deadline.unwrap_or(BACKLOG_DEADLINE);
    // Judged again when the holder changed while it was judged (see `holder_alive`).
    loop {
        // Gone since (or free, an earlier fire in line to take it): taken in its turn below.
        let value = holder_at(leases, &key).await?.map(|(value, revision)| {
            line.saw(revision);
            value
        });
        let free = value.is_none();
        let current = value.as_ref().map_or_else(|| "?".to_string(), |h| h.holder.clone());
        let ended_at = value.and_then(|h| h.ended_at);
        let span = span(ctx, &current, ended_at).await;
        let backlog = match spec.overlap == Overlap::Skip && span.is_some_and(|span| span.covers(fire)) {
            // Listed only when it can matter: a skip.
            true => {
                let in_line = line.earlier_in_line(&key).await;
                backlog_ahead(line.came_late(), span.is_some_and(|span| span.late.is_some()), in_line)
            }
            false => None,
        };
        let in_backlog = backlog.is_some();
        let active = Active { run_key: &current, span, in_backlog };
        let (mut give_up, mut queued) = (None, None);
        let bound = time_in_line(backlog, period(spec, fire), deadline);
        match on_active(spec.overlap, &active, run_key, fire) {
            OnActive::Wait => {}
            OnActive::WaitLate => give_up = Some(fire + deadline_of(bound)),
            OnActive::Skip(why) => {
                // Not waiting to take it while it finds out whether the run ahead lives.
                line.leave().await;
                let holding = (key.as_str(), current.as_str(), span);
                match holder_alive(ctx, holding, (ttl, fire), run_lease.get(), shutdown, line).await? {
                    Holder::Alive => return Ok(Taken::Not(Decision::Skip(why))),
                    Holder::ShutDown => return Ok(Taken::Not(Decision::ShutDown)),
                    Holder::Changed | Holder::EndedBefore => continue,
                    Holder::Gone(lease) => return Ok(Taken::Waited(*lease)),
                }
            }
            OnActive::Queue => match Lease::try_acquire(leases, &lease_keys::queued(&spec.name), run_key, ttl).await? {
                Some(waiter) => queued = Some(waiter),
                None => {
                    return Ok(Taken::Not(Decision::Skip(format!(
                        "run {current} is running and another waits (overlap queue)"
                    ))));
                }
            },
            OnActive::Replace => replace(ctx, &current).await,
        }
        // In line before it says so: the fires behind it go after it only once its place
        // is written (NATS away, it is written later, and says so then).
        line.join().await;
        let in_line = line.standing();
        match free {
            true => info!(in_line, "waiting for the earlier fires of the job to take its overlap lease first"),
            false => info!(%current, in_line, "waiting for the run in progress to end"),
        }
        let waited = line.wait_turn(ctx, &key, give_up, (run_lease.get(), queued.as_mut()), shutdown).await;
        if let Some(waiter) = queued {
            let _ = waiter.release().await;
        }
        let skipped = || {
            let ahead =
                if free { "the earlier fires of the job were".to_string() } else { format!("run {current} was") };
            let after = humantime::format_duration(bound);
            let limit = if in_backlog { "its time in line" } else { "this fire's starting deadline" };
            Taken::Not(Decision::Skip(format!("{ahead} still running at {limit}, {after} after it")))
        };
        return Ok(match waited? {
            Some(lease) => {
                if !free && current != run_key {
                    leave_to_the_reaper(ctx, &current).await;
                }
                Taken::Waited(lease)
            }
            None if shutdown.is_cancelled() => Taken::Not(Decision::ShutDown),
            // Its time in line is over behind a run that still holds the lease. That run
            // may have died with its runner (its lease outlives it by up to the TTL): as
            // for a skip, this fire is skipped only if it lives. It keeps its place
            // meanwhile: the run ahead may end now (its code ended, its final write slow),
            // and a later fire must not take the lease before it.
            None if !free => {
                let holding = (key.as_str(), current.as_str(), span);
                match holder_alive(ctx, holding, (ttl, fire), run_lease.get(), shutdown, line).await? {
                    Holder::Gone(lease) => Taken::Waited(*lease),
                    Holder::ShutDown => Taken::Not(Decision::ShutDown),
                    // It did not overlap this fire after all: waited for, within the deadline.
                    Holder::EndedBefore if ctx.clock.now() < fire + deadline_of(deadline) => continue,
                    // An earlier fire in line took the lease after it (this one standing in
                    // line, no later one could): a backlog longer than this fire's time in
                    // line, which bounds its wait.
                    Holder::Alive | Holder::Changed | Holder::EndedBefore => skipped(),
                }
            }
            None => skipped(),
        });
    }
}

/// `bound` as a span of wall time.
fn deadline_of(bound: Duration) -> chrono::Duration {
    chrono::Duration::from_std(bound).unwrap_or(chrono::Duration::MAX)
}

/// The backlog a `skip` fire finds going at its instant (see [`time_in_line`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backlog {
    /// Earlier fires of the job that came late stand in line, or this fire came late
    /// itself: a backlog is being worked off.
    InLine,
    /// Nothing stands in line, but the run going started late: a backlog's last run.
    LastRun,
}

/// The backlog ahead of a fire that came to its guards `came_late` or not, behind a run
/// that started late or not, with earlier fires come late in line or not.
fn backlog_ahead(came_late: bool, run_started_late: bool, earlier_in_line: bool) -> Option<Backlog> {
    match (came_late || earlier_in_line, run_started_late) {
        (true, _) => Some(Backlog::InLine),
        (false, true) => Some(Backlog::LastRun),
        (false, false) => None,
    }
}

/// The least a fire waits in line behind a backlog: a loaded runner works a backlog of
/// an every-second job off in more than a second (CI lost such fires at one period).
const IN_LINE_MIN: Duration = Duration::from_secs(10);

/// How long after its fire a run waits for the run ahead of it, within the starting
/// `deadline`. Behind a backlog, a period of the job's schedule, no more: a job whose runs
/// are shorter than its period works its backlog off within that, and one whose runs are
/// longer cannot catch up, so its fires are skipped as they come rather than queueing
/// behind it until their deadlines. Behind fires standing in line, ten seconds at least,
/// as many runs go ahead. Behind a backlog's last run, one period: a long job whose run
/// started late (on a loaded runner, after a takeover) would otherwise make every later
/// fire wait for the one before it, never skipping.
fn time_in_line(backlog: Option<Backlog>, period: Option<Duration>, deadline: Duration) -> Duration {
    let period = match (backlog, period) {
        (None, _) | (_, None) => return deadline,
        (Some(Backlog::InLine), Some(period)) => period.max(IN_LINE_MIN),
        (Some(Backlog::LastRun), Some(period)) => period,
    };
    period.min(deadline)
}

/// The time from `fire` to the job's next fire, if it has a schedule.
fn period(spec: &JobSpec, fire: DateTime<Utc>) -> Option<Duration> {
    let (schedule, tz) = spec.parsed_schedule().ok()?;
    (schedule.next_after(fire, tz)? - fire).to_std().ok()
}

/// Asks the runner of `run_key` to stop it (overlap `replace`).
async fn replace(ctx: &RunnerCtx, run_key: &str) {
    let Ok((job, run_id)) = crate::record::parse_run_key(run_key) else { return };
    let subject = ctx.store.names.kill_subject(job, run_id);
    info!(replaced = run_key, "stopping the run in progress (overlap replace)");
    let _ = ctx.store.ask_control(subject, "TERM".into(), Duration::from_secs(5)).await;
}

pub(super) async fn renew_all(leases: &mut [Lease]) -> Result<(), Error> {
    for lease in leases {
        lease.renew().await?;
    }
    Ok(())
}

pub(super) async fn release_all(leases: Vec<Lease>) {
    for lease in leases {
        let _ = lease.release().await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::run_ahead::ended_before;
    use super::*;

    #[test]
    fn a_fire_waits_behind_a_backlog_a_period_ten_seconds_at_least_behind_a_line() {
        let s = Duration::from_secs;
        let minute = Some(s(60));
        let cases = [
            // (what is ahead, the job's period, its deadline, the wait)
            (None, minute, s(60), s(60)),
            (None, None, s(30), s(30)),
            (Some(Backlog::InLine), Some(s(1)), s(60), s(10)),
            (Some(Backlog::InLine), minute, s(30), s(30)),
            (Some(Backlog::InLine), None, s(60), s(60)),
            (Some(Backlog::LastRun), Some(s(1)), s(60), s(1)),
            (Some(Backlog::LastRun), Some(s(3600)), s(60), s(60)),
        ];
        for (backlog, period, deadline, wait) in cases {
            assert_eq!(time_in_line(backlog, period, deadline), wait, "{backlog:?}, period {period:?}");
        }
        // (this fire came late, the run going started late, earlier fires in line, the backlog)
        let ahead = [
            (false, false, false, None),
            (false, true, false, Some(Backlog::LastRun)),
            (false, false, true, Some(Backlog::InLine)),
            (false, true, true, Some(Backlog::InLine)),
            // A backlog's own fire, come late: its time in line is a backlog's, not a period.
            (true, true, false, Some(Backlog::InLine)),
            (true, false, false, Some(Backlog::InLine)),
        ];
        for (came_late, started_late, in_line, expected) in ahead {
            let what = format!("came late {came_late}, run ahead started late {started_late}, in line {in_line}");
            assert_eq!(backlog_ahead(came_late, started_late, in_line), expected, "{what}");
        }
    }

    #[test]
    fn a_held_active_lease_is_waited_for_queued_behind_replaced_or_skips_as_the_policy_says() {
        let (me, other) = ("nightly/r-2", "nightly/r-1");
        let fire = DateTime::parse_from_rfc3339("2026-12-06T01:00:10Z").unwrap().to_utc();
        let (before, after) = (fire - chrono::Duration::milliseconds(1), fire + chrono::Duration::seconds(5));
        let running = |started| Some(Span { started, finished: None, late: None });
        let ended = |started, finished| Some(Span { started, finished: Some(finished), late: None });
        // A backlog's run of the fire two seconds before this one, started late, just before
        // this fire's instant, and running `ms` milliseconds past it (or still running).
        let ms = chrono::Duration::milliseconds;
        let own = fire - chrono::Duration::seconds(2);
        let late = |past: Option<i64>| {
            let started = fire - ms(300);
            Some(Span { started, finished: past.map(|past| fire + ms(past)), late: Some(own) })
        };
        let skip = OnActive::Skip(format!("run {other} is still running (overlap skip)"));
        let cases = [
            // Going at this fire's instant: the policy decides.
            (Overlap::Skip, other, running(before), skip.clone()),
            (Overlap::Queue, other, running(before), OnActive::Queue),
            (Overlap::Replace, other, running(before), OnActive::Replace),
            // Ended after the instant, its lease not yet released: it overlapped.
            (Overlap::Skip, other, ended(before, after), skip.clone()),
            // Started at or after this fire was due, or not started (a backlog released
            // late), or ended before it (its end recorded late, while NATS failed over): no
            // overlap with this fire, waited for, whatever the order of fires.
            (Overlap::Skip, other, running(fire), OnActive::WaitLate),
            (Overlap::Skip, other, running(after), OnActive::WaitLate),
            (Overlap::Skip, other, None, OnActive::WaitLate),
            (Overlap::Skip, other, ended(before - chrono::Duration::seconds(9), before), OnActive::WaitLate),
            (Overlap::Queue, other, running(after), OnActive::WaitLate),
            // A backlog's run is judged at its own fire: 0.4 s long, it would have ended
            // long before this fire (the takeover made it overlap); 2.3 s long, it would
            // have run past it, and so it skips it; still running, it may yet.
            (Overlap::Skip, other, late(Some(100)), OnActive::WaitLate),
            (Overlap::Skip, other, late(Some(1_699)), OnActive::WaitLate),
            (Overlap::Skip, other, late(Some(2_000)), skip.clone()),
            (Overlap::Skip, other, late(None), skip),
            // Replace stops the run in progress, late or not: the newest fire wins.
            (Overlap::Replace, other, running(after), OnActive::Replace),
            // Our own earlier attempt (its runner died): waited for whatever the policy.
            (Overlap::Skip, me, running(before), OnActive::Wait),
            (Overlap::Queue, me, running(after), OnActive::Wait),
            (Overlap::Replace, me, None, OnActive::Wait),
        ];
        for (overlap, current, span, expected) in cases {
            let active = Active { run_key: current, span, in_backlog: false };
            assert_eq!(on_active(overlap, &active, me, fire), expected, "{overlap:?}, held by {current} {span:?}");
        }
        // A holder whose lease says it ended `at` after this fire's time in line: ended
        // before this fire (waited for) or not (it lived: skip), as `covers` judges it.
        let at = |past| fire + ms(past);
        let unknown = None;
        let ends = [
            (unknown, at(-1), true),
            (unknown, at(0), true),
            (unknown, at(1), false),
            (running(before), at(1), false),
            (running(before), at(-1), true),
            (late(None), at(100), true),
            (late(None), at(1_699), true),
            (late(None), at(1_700), true),
            (late(None), at(1_701), false),
        ];
        for (span, at, before) in ends {
            assert_eq!(ended_before(span, at, fire), before, "{span:?} ended at {at}");
        }
        // Earlier fires stand in line: the run going at this fire's instant is a backlog's,
        // and this fire goes in line behind it, whatever run holds the lease when it comes.
        // Only `skip`: `queue` keeps its one place, `replace` stops the run in progress.
        let cases = [
            (Overlap::Skip, running(before), OnActive::WaitLate),
            (Overlap::Skip, ended(before, after), OnActive::WaitLate),
            (Overlap::Queue, running(before), OnActive::Queue),
            (Overlap::Replace, running(before), OnActive::Replace),
        ];
        for (overlap, span, expected) in cases {
            let active = Active { run_key: other, span, in_backlog: true };
            assert_eq!(on_active(overlap, &active, me, fire), expected, "{overlap:?} behind a backlog, {span:?}");
        }
    }
}
