//! One dispatched run on this runner: claim the record, wait for the fire instant, start,
//! supervise (heartbeat, output, timeout, kill), finish. Every record write is a
//! compare-and-set on the revision this runner last wrote; a refused write means the run
//! was taken from us (fencing), and the child is killed without writing anything more.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::RunnerCtx;
use super::finish::{Ended, finish, publish_eof, publish_line, shut_down, timed_out};
use super::guards::{self, Decision};
use super::held::Held;
use super::output::{Line, Source, Tail, read_lines};
use super::shell::{self, RunEnv, ShellProcess};
use super::starter::{Starter, Ticket};
use super::wasm_job;
use crate::dispatch::DispatchMsg;
use crate::error::Error;
use crate::events::{Event, EventKind, publish_event};
use crate::names::lease_keys;
use crate::record::{Status, Trigger};
use crate::spec::JobSpec;
use crate::store::StoredRun;
use crate::store::kv::Fenced;
use crate::store::lease::Lease;

/// Runs one dispatch message to its end and acks it.
/// The runner's two shutdown signals: `shutdown` at once (runs not started yet are handed
/// back), `stop` when draining is over (runs still going are stopped).
#[derive(Clone)]
pub(crate) struct Stops {
    pub shutdown: CancellationToken,
    pub stop: CancellationToken,
}

/// What becomes of the dispatch message.
enum Disposition {
    Done,
    /// Not started; another runner should take it now.
    HandBack,
    /// Not ours to start now; look again after this long.
    Later(Duration),
}

/// Runs one dispatch message to its end and acks it (or hands it back).
pub(super) async fn execute(ctx: Arc<RunnerCtx>, msg: Message, stops: Stops) {
    let dispatch: DispatchMsg = match serde_json::from_slice(&msg.payload) {
        Ok(d) => d,
        Err(e) => {
            warn!("dropping unreadable dispatch message: {e}");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    let span = info_span!("run", job = %dispatch.job, run = %dispatch.run_id, attempt = dispatch.attempt);
    async {
        let ack = match run(&ctx, &msg, &dispatch, &stops).await {
            Ok(Disposition::Done) => msg.ack().await,
            Ok(Disposition::HandBack) => msg.ack_with(AckKind::Nak(None)).await,
            Ok(Disposition::Later(delay)) => msg.ack_with(AckKind::Nak(Some(delay))).await,
            Err(e) if e.is_conflict() => {
                info!("run taken over elsewhere; this runner stops it: {e}");
                msg.ack().await
            }
            // NATS trouble (a leader election, say) part way: the record may say anything
            // from queued to claimed; redelivery lets a runner pick it up from there.
            Err(e) => {
                warn!("run interrupted, handing it back for redelivery: {e}");
                msg.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await
            }
        };
        if let Err(e) = ack {
            debug!("ack: {e}");
        }
    }
    .instrument(span)
    .await
}

async fn run(ctx: &RunnerCtx, msg: &Message, d: &DispatchMsg, stops: &Stops) -> Result<Disposition, Error> {
    let redelivered = msg.info().map(|i| i.delivered > 1).unwrap_or(false);
    // The record as dispatched saves a read; after a redelivery it may be out of date.
    let stored = match (&d.queued, redelivered) {
        (Some(q), false) => StoredRun { record: q.record.clone(), revision: q.revision },
        _ => match ctx.store.get_run(&d.job, &d.run_id).await {
            Ok(s) => s,
            Err(e) if e.is_not_found() => return Ok(Disposition::Done),
            Err(e) => return Err(e),
        },
    };
    // A redelivered run still queued was claimed by a runner that died before starting it;
    // taking it over is safe, as that runner's start would be a refused compare-and-set.
    let claimable = stored.record.host.is_none() || redelivered;
    if stored.record.status != Status::Queued || stored.record.attempt != d.attempt || !claimable {
        debug!(status = stored.record.status.as_str(), "already handled elsewhere");
        return Ok(Disposition::Done);
    }
    // The run's lease comes first: whoever holds it runs the attempt. A run due later is
    // claimed ahead of its instant, so starting on time costs one write, not two; one
    // due now is claimed by the write that starts it.
    let key = lease_keys::run(&d.job, &d.run_id);
    let Some(lease) = Lease::try_acquire(&ctx.store.leases, &key, &ctx.host, ctx.config.run_lease_ttl()).await? else {
        // Held: by the runner running it (whose record write is on its way), or left by
        // one that gave up or died. Look again once such a lease has expired: dropping
        // the message could leave a queued record with nobody to start it.
        debug!("another runner holds the run; looking again after its lease");
        return Ok(Disposition::Later(ctx.config.run_lease_ttl()));
    };
    let fence = Fenced::at(stored.revision);
    let (record, renewed) = (stored.record, std::time::Instant::now());
    let mut held = Held { record, fence, lease: Some(lease), guards: Vec::new(), alive: None, renewed };
    held.record.host = Some(ctx.host.clone());
    if d.scheduled_at > ctx.clock.now()
        && let Err(e) = held.write(ctx).await
    {
        held.release().await;
        return Err(e);
    }
    let result = match claimed(ctx, msg, d, &mut held, stops).await {
        Ok(false) => hand_back(ctx, &mut held).await,
        Ok(true) => Ok(Disposition::Done),
        Err(e) => Err(e),
    };
    // A run that may be recorded `running` and ended in NATS trouble keeps its lease until
    // it expires: the scheduler then records it `lost` (and retries it). Released, it would
    // stay `running` with nobody to notice.
    if result.as_ref().is_err_and(|e| !e.is_conflict()) && held.record.status == Status::Running {
        held.lease = None;
    }
    held.release().await;
    result
}

/// Un-claims a run this runner will not start (it is shutting down).
async fn hand_back(ctx: &RunnerCtx, held: &mut Held) -> Result<Disposition, Error> {
    info!("shutting down: handing the run back before it started");
    held.record.host = None;
    held.write(ctx).await?;
    Ok(Disposition::HandBack)
}

/// The run from its claim to its end. Ok(false): not started, to be handed back.
async fn claimed(
    ctx: &RunnerCtx,
    msg: &Message,
    d: &DispatchMsg,
    held: &mut Held,
    stops: &Stops,
) -> Result<bool, Error> {
    // Prepare the process now; it is released at the instant (see `starter`).
    let scheduled = d.scheduled_at.to_rfc3339_opts(SecondsFormat::Millis, true);
    let early = ctx.current(&d.job, d.spec_revision).await;
    // The job's own run TTL, when it asks for a longer one: in force from now on (the
    // lease was taken before the spec was read).
    if let (Ok(Some((_, spec))), Some(lease)) = (&early, held.lease.as_mut())
        && spec.run_ttl.is_some()
    {
        lease.set_ttl(ctx.config.run_ttl_for(spec.run_ttl));
        held.renew().await?;
    }
    let alive = ctx.alive_path(&held.record.key(), d.attempt);
    let within = ctx.config.alive_within(held.run_ttl(ctx));
    let env = RunEnv {
        job: &d.job,
        run_id: &d.run_id,
        attempt: d.attempt,
        scheduled_at: &scheduled,
        alive: alive.as_deref().map(|path| (path, within)),
        runner: &ctx.config,
    };
    let (mut prepared, mut prepared_wasm) = (None, None);
    match early {
        Ok(Some((revision, spec))) => match &spec.wasm {
            Some(wasm) => {
                let ready = wasm_job::Ready {
                    loaded: wasm_job::prepare(ctx, wasm).await,
                    ticket: ctx.starter.ticket(d.scheduled_at),
                };
                prepared_wasm = Some((revision, ready));
            }
            None => {
                held.watch_alive(alive.clone());
                prepared = prepare(ctx, &spec, revision, d.scheduled_at, &env);
            }
        },
        Ok(None) => {}
        Err(e) => debug!("spec not available ahead of the instant: {e}"),
    }
    // Re-check just before a group release, or at the instant when starting alone.
    let in_group = prepared.as_ref().is_some_and(|p| p.ticket.is_some())
        || prepared_wasm.as_ref().is_some_and(|(_, w)| w.ticket.is_some());
    let check_at = if in_group { d.scheduled_at - Starter::margin() } else { d.scheduled_at };
    if !wait_until(ctx, msg, check_at, held, &stops.shutdown).await? {
        discard(prepared).await;
        return Ok(false);
    }
    let (revision, spec) = match ctx.current(&d.job, d.spec_revision).await {
        Ok(Some(current)) => current,
        Ok(None) => {
            discard(prepared).await;
            return finish_without_start(ctx, held, Status::Cancelled, "job was removed").await;
        }
        Err(e) => {
            discard(prepared).await;
            return finish_without_start(ctx, held, Status::Failed, &format!("job spec is invalid: {e}")).await;
        }
    };
    if spec.paused && d.trigger != Trigger::Manual {
        discard(prepared).await;
        return finish_without_start(ctx, held, Status::Skipped, "job is paused").await;
    }

    if prepared.as_ref().is_some_and(|p| p.revision != revision) {
        // Edited since it was prepared: the new spec starts alone, a little late.
        discard(prepared.take()).await;
    }
    let ttl = held.run_ttl(ctx);
    match guards::acquire(ctx, (&spec, ttl), &held.record.key(), held.lease.as_mut(), &stops.shutdown).await? {
        Decision::Go(leases) => held.guards = leases,
        Decision::Waited(leases) => {
            held.guards = leases;
            discard(prepared.take()).await;
        }
        Decision::Skip(why) => {
            discard(prepared).await;
            return finish_without_start(ctx, held, Status::Skipped, &why).await;
        }
        Decision::ShutDown => {
            discard(prepared).await;
            return Ok(false);
        }
    }
    let shell_spec = match (&spec.shell, &spec.wasm) {
        (Some(shell), _) => shell,
        (None, Some(_)) => {
            // Prepared for this very revision, or prepared again now.
            let ready = prepared_wasm.filter(|(r, _)| *r == revision).map(|(_, p)| p);
            return wasm_job::run(ctx, msg, d, held, (revision, &spec), ready, stops).await;
        }
        (None, None) => return finish_without_start(ctx, held, Status::Failed, "job has neither shell nor wasm").await,
    };
    // Released with its group, or started on its own at its instant.
    let in_group = prepared.as_ref().is_some_and(|p| p.ticket.is_some());
    if !in_group && !wait_until(ctx, msg, d.scheduled_at, held, &stops.shutdown).await? {
        discard(prepared).await;
        return Ok(false);
    }
    let planned = if in_group { d.scheduled_at } else { ctx.clock.now() };
    if let Err(e) = mark_running(ctx, msg, held, (revision, planned), &stops.shutdown).await {
        discard(prepared).await;
        return Err(e);
    }
    // Too late for the group's release: the prepared process was killed; start alone.
    if prepared.as_ref().and_then(|p| p.ticket.as_ref()).is_some_and(|t| !t.confirm()) {
        discard(prepared.take()).await;
    }
    let started = match prepared {
        Some(Ready { process, ticket: Some(ticket), .. }) => match ticket.released().await {
            Some(at) => process.start().await.map(|p| (p, at)),
            None => Err(std::io::Error::other("release of the run's group was lost")),
        },
        Some(Ready { process, ticket: None, .. }) => process.start().await.map(|p| (p, ctx.clock.now())),
        None => {
            held.watch_alive(alive.clone());
            match shell::prepare(shell_spec, &env, None) {
                Ok(p) => p.start().await.map(|p| (p, ctx.clock.now())),
                Err(e) => Err(e),
            }
        }
    };
    let (process, started) = match started {
        Ok(p) => p,
        Err(e) => return finish_without_start(ctx, held, Status::Failed, &format!("could not start: {e}")).await,
    };
    // The release itself; written with the next heartbeat or the end.
    held.record.started_at = Some(started);
    publish_event(&ctx.store, &Event::new(&d.job, &d.run_id, EventKind::Started, d.attempt, started)).await;
    let _running = crate::metrics::run_started(d.scheduled_at, started);
    supervise(ctx, msg, &spec, held, process, &stops.stop).await?;
    Ok(true)
}

/// Records the run `running` (planned to start at `at`, from spec `revision`) before its
/// process or guest may start: the compare-and-set that fences it against a retry
/// elsewhere. NATS trouble (a leader election) is retried, lease kept alive, as long as
/// the lease lives, so a start is late rather than doubled or lost. If it still fails, the run's
/// lease is left to expire rather than released: the write may have landed unseen, and
/// the scheduler that sees the expiry records the run `lost` and retries it per policy.
pub(super) async fn mark_running(
    ctx: &RunnerCtx,
    msg: &Message,
    held: &mut Held,
    (revision, at): (u64, DateTime<Utc>),
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    held.record.spec_revision = revision;
    held.record.status = Status::Running;
    held.record.started_at = Some(at);
    held.record.heartbeat_at = Some(at);
    // As long as the lease lives (renewed between tries, once NATS answers again), less
    // half a heartbeat: it must not expire while the write may still land unseen.
    let lease_left = |held: &Held| held.renewed + held.run_ttl(ctx).saturating_sub(ctx.config.heartbeat / 2);
    let mut backoff = Duration::from_millis(50);
    loop {
        let error = match held.write(ctx).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_conflict() => return Err(e),
            Err(e) => e,
        };
        if std::time::Instant::now() + backoff > lease_left(held) {
            held.lease = None;
            return Err(error);
        }
        warn!("the run's start is not recorded yet, retrying in {backoff:?}: {error}");
        let stopping = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(backoff) => false,
        };
        if stopping {
            held.lease = None;
            return Err(error);
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
        if let Err(e) = held.renew().await
            && e.is_conflict()
        {
            return Err(e);
        }
        let _ = msg.ack_with(AckKind::Progress).await;
    }
}

/// Sleeps until `at`, renewing the run's lease and telling JetStream we are alive
/// meanwhile. Ok(false) when shut down; a conflict when the run was taken away.
pub(super) async fn wait_until(
    ctx: &RunnerCtx,
    msg: &Message,
    at: DateTime<Utc>,
    held: &mut Held,
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
                    held.renew().await?;
                    let _ = msg.ack_with(AckKind::Progress).await;
                }
            }
        }
    }
}

/// A run's process, prepared before its instant.
struct Ready {
    revision: u64,
    process: shell::Prepared,
    ticket: Option<Ticket>,
}

/// Creates the run's process ahead of its instant, in the instant's release group when
/// there is still time to join one.
fn prepare(ctx: &RunnerCtx, spec: &JobSpec, revision: u64, at: DateTime<Utc>, env: &RunEnv<'_>) -> Option<Ready> {
    let shell_spec = spec.shell.as_ref()?;
    let ticket = ctx.starter.ticket(at);
    let stdin = match &ticket {
        Some(t) => Some(t.stdin.try_clone().ok()?),
        None => None,
    };
    let process = shell::prepare(shell_spec, env, stdin).ok()?;
    if let Some(t) = &ticket {
        t.set_pid(process.pid());
    }
    Some(Ready { revision, process, ticket })
}

async fn discard(prepared: Option<Ready>) {
    if let Some(p) = prepared {
        // Not the release's to kill any more: the pid may be reused once reaped.
        if let Some(t) = &p.ticket {
            t.set_pid(None);
        }
        p.process.discard().await;
    }
}

/// Ends a run that never started. Ok(true): it is done with.
pub(super) async fn finish_without_start(
    ctx: &RunnerCtx,
    held: &mut Held,
    status: Status,
    why: &str,
) -> Result<bool, Error> {
    info!("run {}: {why}", status.as_str());
    held.record.status = status;
    held.record.error = Some(why.to_string());
    held.record.finished_at = Some(ctx.clock.now());
    held.write(ctx).await?;
    let r = &held.record;
    crate::metrics::run_ended(&r.job, status, None, ctx.clock.now());
    if status == Status::Skipped {
        crate::metrics::run_skipped(&r.job, why);
    }
    publish_eof(ctx, &ctx.store.names.logs_subject(&r.job, &r.run_id), status).await;
    let event =
        Event::new(&r.job, &r.run_id, EventKind::of_status(status), r.attempt, ctx.clock.now()).with_detail(why);
    publish_event(&ctx.store, &event).await;
    // Runs that never start (skipped, cancelled) count against the history like others.
    let history = ctx.catalog.get(&r.job).and_then(|j| j.summary.as_ref().ok().map(|s| s.history.clone()));
    if let Some(history) = history {
        ctx.prune(&r.job, &history).await;
    }
    Ok(true)
}

/// Why a running process ended, beyond its exit status.
enum Ending {
    Exited,
    TimedOut,
    Killed(Signal),
    ShutDown,
}

async fn supervise(
    ctx: &RunnerCtx,
    msg: &Message,
    spec: &JobSpec,
    held: &mut Held,
    mut process: ShellProcess,
    cancel: &CancellationToken,
) -> Result<(), Error> {
    let (job, run_id) = (held.record.job.clone(), held.record.run_id.clone());
    let logs_subject = ctx.store.names.logs_subject(&job, &run_id);
    let (line_tx, mut line_rx) = mpsc::channel::<Line>(1024);
    let mut readers = Vec::new();
    if let Some(out) = process.child.stdout.take() {
        readers.push(tokio::spawn(read_lines(out, Source::Stdout, ctx.config.max_line_bytes, line_tx.clone())));
    }
    if let Some(err) = process.child.stderr.take() {
        readers.push(tokio::spawn(read_lines(err, Source::Stderr, ctx.config.max_line_bytes, line_tx.clone())));
    }
    drop(line_tx);
    let mut kills = ctx
        .store
        .client
        .subscribe(ctx.store.names.kill_subject(&job, &run_id))
        .await
        .map_err(|e| Error::nats("subscribing to kill requests", e))?;
    let mut tail = Tail::new(spec.output_lines as usize);
    let mut heartbeat = tokio::time::interval(ctx.config.heartbeat);
    heartbeat.tick().await;
    let timeout = tokio::time::sleep(spec.timeout.unwrap_or(Duration::MAX / 4));
    tokio::pin!(timeout);

    let (ending, exit) = loop {
        tokio::select! {
            status = process.child.wait() => break (Ending::Exited, status.ok()),
            _ = &mut timeout => break (Ending::TimedOut, process.terminate(ctx.config.kill_grace).await),
            Some(req) = kills.next() => {
                let signal = shell::parse_signal(&String::from_utf8_lossy(&req.payload)).unwrap_or(Signal::SIGTERM);
                if let Some(reply) = req.reply {
                    let _ = ctx.store.client.publish(reply, "ok".into()).await;
                }
                info!("kill requested ({signal})");
                let status = if signal == Signal::SIGKILL {
                    process.kill_tree().await
                } else {
                    process.signal(signal);
                    process.terminate(ctx.config.kill_grace).await
                };
                break (Ending::Killed(signal), status);
            }
            Some(line) = line_rx.recv() => publish_line(ctx, &logs_subject, line, &mut tail).await,
            _ = heartbeat.tick() => {
                if let Err(e) = held.heartbeat(ctx, msg, &tail).await {
                    process.kill_tree().await;
                    return Err(e);
                }
            }
            _ = cancel.cancelled() => {
                break (Ending::ShutDown, process.terminate(ctx.config.kill_grace).await);
            }
        }
    };
    // The run ends with its main process; what it left in its group goes with it.
    process.signal(Signal::SIGKILL);
    let drain = async {
        while let Some(line) = line_rx.recv().await {
            publish_line(ctx, &logs_subject, line, &mut tail).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(2), drain).await.is_err() {
        readers.iter().for_each(|r| r.abort());
    }

    let (status, error) = match (&ending, &exit) {
        (Ending::Exited, Some(s)) if s.success() => (Status::Succeeded, None),
        (Ending::Exited, Some(s)) => (Status::Failed, Some(format!("exited with code {}", shell::exit_code(s)))),
        (Ending::Exited, None) => (Status::Failed, Some("lost track of the process".into())),
        (Ending::TimedOut, _) => (Status::TimedOut, Some(timed_out(spec))),
        (Ending::Killed(sig), _) => (Status::Cancelled, Some(format!("killed on request ({sig})"))),
        (Ending::ShutDown, _) => (Status::Lost, Some(shut_down(ctx))),
    };
    let exit_code = exit.as_ref().map(shell::exit_code);
    finish(ctx, held, spec, Ended { status, error, exit_code, output: tail.to_vec() }).await
}
