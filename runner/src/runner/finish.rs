//! The end of a run, whatever executed it: the final record (or the next attempt), its
//! event, and history pruning (its log ended with its code, see `running`); also the end
//! of a run that never started (skipped, cancelled, failed to start), its log's end too.

use std::time::Duration;

use tracing::{info, warn};

use super::RunnerCtx;
use super::claimed_run::ClaimedRun;
use super::logs::publish_end;
use crate::dispatch::queue_retry;
use crate::error::Error;
use crate::events::{Event, EventKind, publish_event};
use crate::record::Status;
use crate::spec::JobSpec;

/// How a started run ended.
pub(super) struct Ended {
    /// When its code ended.
    pub at: chrono::DateTime<chrono::Utc>,
    /// Its overlap and lock leases say so already (its last output took long, see
    /// `running`); else the final write marks them should it take long.
    pub marked: bool,
    pub status: Status,
    pub error: Option<String>,
    pub exit_code: Option<i32>,
    pub output: Vec<String>,
}

/// Records the end of the run, or queues its next attempt when the attempt failed and
/// the job's retries allow one; its `run` and `finish` spans go out.
pub(super) async fn finish(ctx: &RunnerCtx, held: &mut ClaimedRun, spec: &JobSpec, ended: Ended) -> Result<(), Error> {
    let begun = std::time::SystemTime::now();
    let finished = ended.at;
    if let Some(started) = held.record.started_at {
        held.trace.ran(started, finished, ended.status, ended.error.as_deref());
    }
    let status = ended.status;
    let unmarked = (!ended.marked).then_some(finished);
    let result = record_end(ctx, held, spec, ended, unmarked).await;
    held.trace.finished(begun, status, result.as_ref().err().map(|e| e.to_string()));
    result
}

/// `finish` without its spans: the final record, or the next attempt queued.
async fn record_end(
    ctx: &RunnerCtx,
    held: &mut ClaimedRun,
    spec: &JobSpec,
    ended: Ended,
    unmarked: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(), Error> {
    let finished = ended.at;
    let (job, run_id) = (held.record.job.clone(), held.record.run_id.clone());
    let r = &mut held.record;
    r.finished_at = Some(finished);
    r.duration_ms = r.started_at.map(|s| (finished - s).num_milliseconds().max(0) as u64);
    r.output = ended.output;
    r.exit_code = ended.exit_code;
    (r.status, r.error) = (ended.status, ended.error);
    let status = r.status;
    let duration = r.duration_ms.map(Duration::from_millis);
    crate::metrics::run_ended(&job, status, duration, finished);
    let detail = r.error.clone().unwrap_or_default();
    let event = Event::new(&job, &run_id, EventKind::of_status(status), r.attempt, finished).with_detail(detail);
    if matches!(status, Status::Failed | Status::TimedOut | Status::Lost) && spec.retries.allow_after(r.attempt) {
        let now = ctx.clock.now();
        let wait = spec.retries.delay_after(r.attempt);
        info!(status = status.as_str(), next_attempt = held.record.attempt + 1, ?wait, "attempt failed, retrying");
        // The next attempt must find the overlap and lock leases free, wherever it is
        // claimed. The run's own lease stays: its expiry after `wait` has the job's
        // scheduler dispatch the next attempt (runners publish no dispatches, see
        // `scheduler::recovery::reaper`), and should this runner die before, it expires
        // anyway. A run whose overlap lease stood for its own takes one of its own first
        // (failing that, its overlap lease is handed over instead, held through the wait).
        if let Err(e) = held.take_own_lease(ctx).await {
            warn!("the run's overlap lease is kept until its retry: {e}");
            held.keep_overlap_lease();
        }
        held.release_guards().await;
        let (_, retrying) = queue_retry(&ctx.store, held.record.clone(), held.fence.revision, now).await?;
        held.hand_over_lease(wait).await;
        publish_event(&ctx.store, &event).await;
        publish_event(&ctx.store, &retrying).await;
        return Ok(());
    }
    write_final(ctx, held, unmarked).await?;
    publish_event(&ctx.store, &event).await;
    info!(status = status.as_str(), duration_ms = held.record.duration_ms, "run finished");
    ctx.prune(&job, &spec.history);
    Ok(())
}

/// How long a finished run's record write is retried while NATS is away.
const FINAL_WRITE_BOUND: Duration = Duration::from_secs(600);

/// The final write is retried while NATS is away, for up to `FINAL_WRITE_BOUND`, and the
/// run's lease is renewed meanwhile, so that an outage shorter than that does not make a
/// finished run look lost (and run again). A conflict is final: the run was taken away.
/// Its overlap and lock leases, unless marked ended `unmarked` already, are marked so should
/// the write take long (see `ClaimedRun::write_marking`).
async fn write_final(
    ctx: &RunnerCtx,
    held: &mut ClaimedRun,
    mut unmarked: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(), Error> {
    let give_up = tokio::time::Instant::now() + FINAL_WRITE_BOUND;
    let mut backoff = Duration::from_millis(100);
    loop {
        let (written, marked) = held.write_marking(ctx, unmarked).await;
        unmarked = unmarked.filter(|_| !marked);
        match written {
            Ok(()) => return Ok(()),
            Err(e) if e.is_conflict() || tokio::time::Instant::now() > give_up => return Err(e),
            Err(e) => {
                warn!("final record not written yet, retrying in {backoff:?}: {e}");
                if let Some(at) = unmarked.take() {
                    held.mark_guards_ended(at).await;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ctx.config.heartbeat);
                if let Err(e) = held.renew().await
                    && e.is_conflict()
                {
                    return Err(e);
                }
            }
        }
    }
}

/// Ends a run that never started. Ok(true): it is done with.
pub(super) async fn finish_without_start(
    ctx: &RunnerCtx,
    held: &mut ClaimedRun,
    status: Status,
    why: &str,
) -> Result<bool, Error> {
    info!("run {}: {why}", status.as_str());
    let begun = std::time::SystemTime::now();
    held.trace.claim_ended(begun, Some(status), (status == Status::Failed).then(|| why.to_string()));
    let result = record_unstarted(ctx, held, status, why).await;
    held.trace.finished(begun, status, result.as_ref().err().map(|e| e.to_string()));
    result
}

/// `finish_without_start` without its spans.
async fn record_unstarted(ctx: &RunnerCtx, held: &mut ClaimedRun, status: Status, why: &str) -> Result<bool, Error> {
    held.record.status = status;
    held.record.error = Some(why.to_string());
    held.record.finished_at = Some(ctx.clock.now());
    held.write(ctx).await?;
    let r = &held.record;
    crate::metrics::run_ended(&r.job, status, None, ctx.clock.now());
    if status == Status::Skipped {
        crate::metrics::run_skipped(&r.job, why);
    }
    publish_end(ctx, &r.job, &r.run_id, status).await;
    let event =
        Event::new(&r.job, &r.run_id, EventKind::of_status(status), r.attempt, ctx.clock.now()).with_detail(why);
    publish_event(&ctx.store, &event).await;
    // Runs that never start (skipped, cancelled) count against the history like others.
    let job = ctx.catalog.get(&r.job).await.ok().flatten();
    let history = job.and_then(|j| j.summary.as_ref().ok().map(|s| s.history.clone()));
    if let Some(history) = history {
        ctx.prune(&r.job, &history);
    }
    Ok(true)
}
