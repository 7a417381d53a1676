//! Wasm jobs on the runner: the component is prepared (fetched, compiled or loaded from
//! the cache, linked) when the run is claimed, ahead of its instant; at the instant it is
//! instantiated and called on the runner's own timer, then supervised like a shell run.

use async_nats::jetstream::Message;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::RunnerCtx;
use super::finish::{Ended, finish, publish_line, shut_down};
use super::held::Held;
use super::output::{Line, Tail};
use super::run::{Stops, finish_without_start, mark_running, wait_until};
use super::starter::Ticket;
use crate::dispatch::DispatchMsg;
use crate::error::Error;
use crate::events::{Event, EventKind, publish_event};
use crate::record::Status;
use crate::spec::{JobSpec, WasmSpec};
use crate::wasm::{JobContext, PreparedWasm, WasmOutcome};

/// A Wasm run made ready at its claim: its component, and its place in the release of
/// its instant (see `starter`), if there was time to take one.
pub(super) struct Ready {
    pub loaded: Result<PreparedWasm, String>,
    pub ticket: Option<Ticket>,
}

/// Prepares the run's component; errors are reported when the run would start.
pub(super) async fn prepare(ctx: &RunnerCtx, spec: &WasmSpec) -> Result<PreparedWasm, String> {
    match &ctx.wasm {
        Ok(runtime) => runtime.prepare(spec).await.map_err(|e| format!("could not load plugin {}: {e}", spec.plugin)),
        Err(why) => Err(format!("this runner cannot run wasm jobs: {why}")),
    }
}

/// The spec's timeout, else `[wasm] default_timeout`: no guest runs unbounded.
fn wasm_timeout(ctx: &RunnerCtx, spec: &JobSpec) -> std::time::Duration {
    let default = ctx.wasm.as_ref().map(|w| w.config().default_timeout).unwrap_or_default();
    spec.timeout.unwrap_or(default)
}

/// Starts the run at its instant and supervises it. Ok(false): handed back (shutdown).
pub(super) async fn run(
    ctx: &RunnerCtx,
    msg: &Message,
    d: &DispatchMsg,
    held: &mut Held,
    (revision, spec): (u64, &JobSpec),
    ready: Option<Ready>,
    stops: &Stops,
) -> Result<bool, Error> {
    let (loaded, ticket) = match (ready, &spec.wasm) {
        (Some(r), _) => (r.loaded, r.ticket),
        (None, Some(wasm)) => (prepare(ctx, wasm).await, None),
        (None, None) => (Err("job has no wasm section".to_string()), None),
    };
    let prepared = match loaded {
        Ok(p) => p,
        Err(why) => return finish_without_start(ctx, held, Status::Failed, &why).await,
    };
    // Recorded running before it may start, then released with the other runs of its
    // instant, or on its own timer if too late for that.
    if ticket.is_none() && !wait_until(ctx, msg, d.scheduled_at, held, &stops.shutdown).await? {
        return Ok(false);
    }
    let planned = if ticket.is_some() { d.scheduled_at } else { ctx.clock.now() };
    mark_running(ctx, msg, held, (revision, planned), &stops.shutdown).await?;
    let released = match ticket {
        Some(t) if t.confirm() => t.released().await,
        _ => None,
    };
    let started = match released {
        Some(at) => at,
        None => {
            wait_until(ctx, msg, d.scheduled_at, held, &stops.shutdown).await?;
            ctx.clock.now()
        }
    };
    held.record.started_at = Some(started);
    publish_event(&ctx.store, &Event::new(&d.job, &d.run_id, EventKind::Started, d.attempt, started)).await;
    let _running = crate::metrics::run_started(d.scheduled_at, started);

    let job_ctx = JobContext {
        job: d.job.clone(),
        run_id: d.run_id.clone(),
        scheduled_at: held
            .record
            .scheduled_at
            .unwrap_or(d.scheduled_at)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        attempt: d.attempt,
        trigger: d.trigger,
    };
    let (line_tx, mut line_rx) = mpsc::channel::<Line>(1024);
    let stop_guest = CancellationToken::new();
    let timeout = wasm_timeout(ctx, spec);
    let mut call = tokio::spawn(prepared.run(job_ctx, Some(timeout), line_tx, stop_guest.clone()));
    let logs_subject = ctx.store.names.logs_subject(&d.job, &d.run_id);
    let mut kills = ctx
        .store
        .client
        .subscribe(ctx.store.names.kill_subject(&d.job, &d.run_id))
        .await
        .map_err(|e| Error::nats("subscribing to kill requests", e))?;
    let mut tail = Tail::new(spec.output_lines as usize);
    let mut heartbeat = tokio::time::interval(ctx.config.heartbeat);
    heartbeat.tick().await;
    let (mut killed, mut shutting_down) = (false, false);
    let outcome = loop {
        tokio::select! {
            outcome = &mut call => break outcome.unwrap_or_else(|e| WasmOutcome::Failed(format!("the job's task failed: {e}"))),
            Some(line) = line_rx.recv() => publish_line(ctx, &logs_subject, line, &mut tail).await,
            Some(req) = kills.next() => {
                if let Some(reply) = req.reply {
                    let _ = ctx.store.client.publish(reply, "ok".into()).await;
                }
                info!("kill requested");
                killed = true;
                stop_guest.cancel();
            }
            _ = heartbeat.tick() => {
                if let Err(e) = held.heartbeat(ctx, msg, &tail).await {
                    stop_guest.cancel();
                    return Err(e);
                }
            }
            _ = stops.stop.cancelled(), if !shutting_down => {
                shutting_down = true;
                stop_guest.cancel();
            }
        }
    };
    while let Ok(line) = line_rx.try_recv() {
        publish_line(ctx, &logs_subject, line, &mut tail).await;
    }
    let (status, error) = match outcome {
        WasmOutcome::Succeeded(text) => {
            if let Some(text) = text {
                tail.push(text);
            }
            (Status::Succeeded, None)
        }
        WasmOutcome::Failed(why) => (Status::Failed, Some(why)),
        WasmOutcome::TimedOut => {
            (Status::TimedOut, Some(format!("timed out after {}", humantime::format_duration(timeout))))
        }
        WasmOutcome::Cancelled if shutting_down => (Status::Lost, Some(shut_down(ctx))),
        WasmOutcome::Cancelled if killed => (Status::Cancelled, Some("killed on request".into())),
        WasmOutcome::Cancelled => (Status::Cancelled, Some("stopped".into())),
    };
    finish(ctx, held, spec, Ended { status, error, exit_code: None, output: tail.to_vec() }).await?;
    Ok(true)
}
