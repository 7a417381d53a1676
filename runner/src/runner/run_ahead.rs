//! The run ahead of a fire, holding its job's overlap lease (see `guards`): when it ran
//! ([`Span`], judged where it belonged when it started late) and, once the fire would
//! skip behind it, whether it still lives ([`holder_alive`]): a runner that dies holds its
//! run's lease until the TTL, and no fire is skipped behind a run that no longer runs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::RunnerCtx;
use super::waiting::Line;
use crate::error::Error;
use crate::record::{RunRecord, Status};
use crate::store::lease::{Lease, holder};

/// How often a waiting run looks whether its predecessor is gone.
pub(super) const POLL: Duration = Duration::from_millis(200);

/// When a run's code started and, if its end is recorded, ended: its record's
/// `started_at` and `finished_at`, by its runner's clock as corrected to the server's (see
/// `server_time`), the start no earlier than its dispatch (a scheduler's clock: a run
/// dispatched late, after a takeover, started late whatever its runner stamped).
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub(super) started: DateTime<Utc>,
    pub(super) finished: Option<DateTime<Utc>>,
    /// Its own fire, if it started over [`LATE_START`] after it: a backlog's run.
    pub(super) late: Option<DateTime<Utc>>,
}

/// How late after its fire a run's start makes it a backlog's run, and its coming to its
/// guards a backlog's fire (see `waiting::Place::late`).
pub(super) const LATE_START: chrono::Duration = chrono::Duration::milliseconds(500);

impl Span {
    /// Whether the run was going at `fire`: started before it and not ended by then. A
    /// backlog's run is judged where it belonged, lasting as long as it did from its own
    /// fire: one that ran past `fire` only because it started late (after a takeover)
    /// says nothing of the job's runs overlapping, and a job's fires are skipped only
    /// behind runs as long as the time between them.
    pub(super) fn covers(&self, fire: DateTime<Utc>) -> bool {
        let end = match (self.late, self.finished) {
            (Some(own), Some(finished)) => Some(own + (finished - self.started)),
            (_, finished) => finished,
        };
        self.started < fire && end.is_none_or(|end| end > fire)
    }

    fn ended_at(self, at: DateTime<Utc>) -> Span {
        Span { finished: Some(at), ..self }
    }
}

/// The span of the run `run_key`, if its record says it started and did not end `lost`,
/// ended by `ended_at` if its lease says so (its final write still waiting for NATS). A
/// holder whose start is not recorded (a backlog's run taken, its start write waiting for
/// NATS) or whose record cannot be read is taken as not started: waited for, never
/// skipped behind.
pub(super) async fn span(ctx: &RunnerCtx, run_key: &str, ended_at: Option<DateTime<Utc>>) -> Option<Span> {
    let (job, run_id) = crate::record::parse_run_key(run_key).ok()?;
    span_of(&ctx.store.get_run(job, run_id).await.ok()?.record, ended_at)
}

/// The span of the run whose record is `record` (see [`span`]).
fn span_of(record: &RunRecord, ended_at: Option<DateTime<Utc>>) -> Option<Span> {
    let ended = record.status.is_final();
    let started =
        record.started_at.filter(|_| record.status == Status::Running || ended && record.status != Status::Lost)?;
    let finished = ended.then(|| record.finished_at.unwrap_or(started)).or(ended_at);
    let started = record.dispatched_at.map_or(started, |dispatched| started.max(dispatched));
    let late = record.scheduled_at.filter(|fire| started - *fire > LATE_START);
    Some(Span { started, finished, late })
}

/// What became of a run that started before this fire and holds the job's overlap lease.
pub(super) enum Holder {
    /// It renews its lease, or released it having run past this fire's instant: skip.
    Alive,
    /// It did not run past this fire's instant after all, and this run took the lease in
    /// its turn: its lease ran out unreleased, its run not over (it died with its runner),
    /// or its end, recorded late (its final write waited for NATS), came before this fire.
    Gone(Box<Lease>),
    /// Another run holds the lease now (not a later fire's look, while this one stands in
    /// line: that one gives it back): to be judged afresh.
    Changed,
    /// It says it ended, and did not overlap this fire after all (see [`Span::covers`]):
    /// to be judged afresh, and waited for.
    EndedBefore,
    ShutDown,
}

/// Waits at most the lease's TTL (and a second) for the holder `current` of lease `key` to
/// show whether it lives: a runner that dies holds its run's overlap lease until the TTL,
/// and the fires meanwhile must not be skipped behind a run that no longer runs. Its end
/// seen, it is judged by its record as it is then, not by `span` read before: a start
/// recorded late is written again as the code starts (`lifecycle::restamp_late_start`),
/// and a run that started late does not overlap the fires after its own. Found not
/// to overlap this fire, the run stands in `line` and takes the lease in its turn: the
/// other fires behind the same run may have found the same. A run standing in line keeps
/// its place meanwhile.
pub(super) async fn holder_alive(
    ctx: &RunnerCtx,
    (key, current, span): (&str, &str, Option<Span>),
    (ttl, fire): (Duration, DateTime<Utc>),
    mut run_lease: Option<&mut Lease>,
    shutdown: &CancellationToken,
    line: &mut Line<'_>,
) -> Result<Holder, Error> {
    let leases = &ctx.store.leases;
    let until = tokio::time::Instant::now() + ttl + Duration::from_secs(1);
    while tokio::time::Instant::now() < until {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(Holder::ShutDown),
            _ = tokio::time::sleep(POLL) => {}
        }
        // Watched, not taken: a lease taken only to look would look like a new holder to
        // the other fires waiting on it.
        match holder(leases, key).await? {
            // Its code ended: before this fire, it is waited for (judged again); after it,
            // it overlapped.
            Some(h) if h.holder == current => {
                if let Some(at) = h.ended_at {
                    let span = self::span(ctx, current, Some(at)).await.or(span);
                    return Ok(if ended_before(span, at, fire) { Holder::EndedBefore } else { Holder::Alive });
                }
            }
            // A later fire's look: it takes the lease, then looks at the line, and gives
            // it back to this one standing in line (`Line::take_now`). Looked at again.
            Some(h) if line.standing() && line.is_later(&h.holder) => {}
            Some(_) => return Ok(Holder::Changed),
            None => {
                let (died, now) = ended(ctx, current).await;
                let span = now.or(span);
                let why = match died {
                    Ended::At(at) if ended_before(span, at, fire) => "the run in progress had ended before this fire",
                    Ended::At(_) | Ended::Unknown => return Ok(Holder::Alive),
                    Ended::Not => "the run in progress died with its runner",
                };
                line.join().await;
                // Not taken: by an earlier fire in line (seen holding it at the next look),
                // or for a moment by a later fire's look, or its turn not known (a listing
                // failed): looked at again.
                if let Some(lease) = line.take_now(key, ctx.clock.now()).await? {
                    info!(%current, "{why}: this one runs");
                    if matches!(died, Ended::Not) {
                        leave_to_the_reaper(ctx, current).await;
                    }
                    return Ok(Holder::Gone(Box::new(lease)));
                }
            }
        }
        if let Some(lease) = run_lease.as_deref_mut() {
            lease.renew().await?;
        }
        // A fire whose time in line is over keeps its place while it looks.
        if line.standing() {
            line.keep().await;
        }
    }
    Ok(Holder::Alive)
}

/// How long the lease left to the reaper for a dead holder lives: the shortest TTL.
const REAPER_LEASE_TTL: Duration = Duration::from_secs(1);

/// The run `run_key` held its job's overlap lease, which a run waiting for it has just
/// taken: if its record says it is `running`, it let the lease run out, dead with its
/// runner (a run that ends writes its end first; one that gave the lease back unstarted,
/// a later fire's look, has no such record). Its own run lease is then set to expire at
/// once, so that the reaper records it `lost` and retries it per policy: the overlap
/// lease's expiry, its lease as it ran, may have been seen by no reaper (the agent
/// leading the reaper's shard died too), and the take leaves no trace of it, where a run
/// lease's expiry marker stays until the next reaper's watch begins. A run that holds a
/// run lease of its own already is left as it is.
pub(super) async fn leave_to_the_reaper(ctx: &RunnerCtx, run_key: &str) {
    let Ok((job, run_id)) = crate::record::parse_run_key(run_key) else { return };
    match ctx.store.get_run(job, run_id).await {
        Ok(stored) if stored.record.status == Status::Running => {}
        _ => return,
    }
    info!(%run_key, "the run ahead died with its runner: left to the reaper");
    let key = crate::names::lease_keys::run(job, run_id);
    if let Err(e) = Lease::try_acquire(&ctx.store.leases, &key, &ctx.host, REAPER_LEASE_TTL).await {
        info!(%run_key, "the dead run is left to the sweep: {e}");
    }
}

/// Whether a run of `span` (unknown: taken as going before `fire`) that ended `at` did not
/// overlap `fire`.
pub(super) fn ended_before(span: Option<Span>, at: DateTime<Utc>, fire: DateTime<Utc>) -> bool {
    span.map_or(at <= fire, |span| !span.ended_at(at).covers(fire))
}

/// How the run `run_key` ended, its overlap lease gone.
enum Ended {
    /// As runs end, at this instant (its record's `finished_at`).
    At(DateTime<Utc>),
    /// As runs end, at a time unknown (its record unreadable, or without `finished_at`):
    /// taken as past the fire, so that a doubt skips rather than runs beside it.
    Unknown,
    /// Not: `lost`, still `running` with its lease gone, or never recorded. It died with its
    /// runner.
    Not,
}

/// How the run `run_key` ended, and its span as its record says now.
async fn ended(ctx: &RunnerCtx, run_key: &str) -> (Ended, Option<Span>) {
    let Ok((job, run_id)) = crate::record::parse_run_key(run_key) else { return (Ended::Unknown, None) };
    let record = match ctx.store.get_run(job, run_id).await {
        Ok(stored) => stored.record,
        // No record: a run dispatched with none, whose start was never written.
        Err(e) if e.is_not_found() => return (Ended::Not, None),
        Err(_) => return (Ended::Unknown, None),
    };
    let ended = match record.finished_at {
        _ if !record.status.is_final() || record.status == Status::Lost => Ended::Not,
        Some(at) => Ended::At(at),
        None => Ended::Unknown,
    };
    (ended, span_of(&record, None))
}
