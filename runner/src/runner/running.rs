//! A started run until its code ends, whatever executes it: its output lines published
//! live and kept in the tail, the heartbeat (lease, record, message), kill requests, the
//! timeout and the runner's stop; then how it ended, as a status ([`ending_status`]).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_nats::jetstream::Message;
use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::RunnerCtx;
use super::claimed_run::{ClaimedRun, marking_if_slow};
use super::exec::{Outcome, Running, Stop, parse_signal};
use super::finish::Ended;
use super::logs::RunLog;
use crate::error::Error;
use crate::output::Line;
use crate::record::Status;
use crate::spec::JobSpec;

/// How long output still in flight when the code ended is waited for.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);
/// How long the answer to a kill request may take to go out (NATS may be slow or away).
const REPLY_MAX: Duration = Duration::from_millis(500);

/// A heartbeat in flight, holding the run until it is done.
type Beat<'a> = Pin<Box<dyn Future<Output = (&'a mut ClaimedRun, Result<(), Error>)> + Send + 'a>>;

/// Why the lifecycle stopped waiting for the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// It ended by itself.
    Exited,
    TimedOut,
    Killed(Signal),
    /// The runner stopped (after its drain).
    ShutDown,
}

/// Supervises `code` until it ends; output arrives on `lines`. A refused heartbeat (the
/// run was taken away) stops the code at once and is returned as the error.
pub(super) async fn until_code_ends(
    ctx: &RunnerCtx,
    msg: &Message,
    spec: &JobSpec,
    held: &mut ClaimedRun,
    mut code: Box<dyn Running>,
    mut lines: mpsc::Receiver<Line>,
    stop: &CancellationToken,
) -> Result<Ended, Error> {
    // From the start, whatever NATS does meanwhile.
    let timeout = tokio::time::sleep(spec.timeout.unwrap_or(Duration::MAX / 4));
    tokio::pin!(timeout);
    let grace = ctx.config.kill_grace;
    let (job, run_id) = (held.record.job.clone(), held.record.run_id.clone());
    let mut kills = ctx.kills.register(ctx.store.names.kill_subject(&job, &run_id));
    let mut log = RunLog::new(ctx, &job, &run_id, spec.output_lines as usize);
    let mut heartbeat = tokio::time::interval(ctx.config.heartbeat);
    // A beat that outlasted its period (NATS away) is followed by one, not by a burst.
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    heartbeat.tick().await;

    // The heartbeat's writes run beside the other arms, not in one: with NATS away each
    // waits out its request timeout, and meanwhile the timeout, a kill or the code's end
    // must still be seen. One at a time (it holds `held` while it runs); one in flight when
    // the code ends is finished.
    let mut idle = Some(held);
    let mut beating: Option<Beat<'_>> = None;
    let (ending, exit) = loop {
        tokio::select! {
            exit = code.wait() => break (Ending::Exited, exit),
            _ = &mut timeout => break (Ending::TimedOut, code.stop(Stop::Signal(Signal::SIGTERM), grace).await),
            Some(req) = kills.requests.recv() => {
                let Some((signal, answer)) = kill_request(&ctx.store.names, &req) else {
                    warn!(reply = ?req.reply, "ignored a message on the kill subject that is no kill request");
                    continue;
                };
                let _ = tokio::time::timeout(REPLY_MAX, ctx.store.client.publish(answer, "ok".into())).await;
                info!("kill requested ({signal})");
                break (Ending::Killed(signal), code.stop(Stop::Signal(signal), grace).await);
            }
            Some(line) = lines.recv() => log.line(line).await,
            _ = sleep_until(log.due()), if log.due().is_some() => log.flush().await,
            _ = heartbeat.tick(), if idle.is_some() => {
                if let Some(held) = idle.take() {
                    let output = log.tail().to_vec();
                    beating = Some(Box::pin(async move {
                        let beat = held.heartbeat(ctx, msg, output).await;
                        (held, beat)
                    }));
                }
            }
            (held, beat) = async { match beating.as_mut() { Some(beat) => beat.await, None => std::future::pending().await } }, if beating.is_some() => {
                (beating, idle) = (None, Some(held));
                if let Err(e) = beat {
                    code.stop(Stop::Kill, grace).await;
                    // Its last lines still go out: a run taken away has no end to carry them.
                    log.flush().await;
                    return Err(e);
                }
            }
            _ = stop.cancelled() => break (Ending::ShutDown, code.stop(Stop::Signal(Signal::SIGTERM), grace).await),
        }
    };
    // The code's end, before its last output and the log's end go out: what the run's
    // record and the fires behind it (see `guards`) take as its end.
    let at = ctx.clock.now();
    // Abandoned, a write in flight could land unseen and make the final one look refused.
    let held = match beating.take() {
        Some(beat) => {
            let (held, beat) = beat.await;
            beat?;
            Some(held)
        }
        None => idle,
    };
    // The fires waiting behind this run learn that it no longer runs should its last
    // output take long (a child of the job holding its output open): its guards are
    // marked ended then; else they are released after the final write, unmarked (see
    // `claimed_run::marking_if_slow`).
    let marked = {
        let drain = async {
            while let Some(line) = lines.recv().await {
                log.line(line).await;
            }
        };
        let guards = held.map_or(&mut [][..], |held| &mut held.guards[..]);
        marking_if_slow(guards, at, tokio::time::timeout(OUTPUT_DRAIN, drain)).await.1
    };
    drop(code);

    let (status, error, result) = ending_status(ending, exit.outcome, spec.timeout, &ctx.host);
    // The log's end as the code's: followers learn it now, and a short run's lines go
    // out with it, in one message. The record follows.
    log.end(status).await;
    if let Some(text) = result {
        log.keep(text);
    }
    Ok(Ended { at, marked, status, error, exit_code: exit.code, output: log.into_tail() })
}

/// Sleeps until `due`; never returns without one.
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// The signal a message on a run's kill subject asks for, and where to answer, if it is a
/// kill request: a signal's name, asking for its answer on a control answer subject, as
/// `cronrun kill` and `overlap = "replace"` send it. Anything else is refused, such as
/// what a consumer anyone may create delivers there (the server checks no push consumer's
/// deliver subject against the creator's publish rights; such messages carry the
/// stream's `$JS.ACK.` reply), or a request asking to be answered elsewhere.
fn kill_request(names: &crate::names::Names, req: &async_nats::Message) -> Option<(Signal, async_nats::Subject)> {
    let answer = req.reply.clone().filter(|reply| names.is_control_answer(reply))?;
    let signal = parse_signal(std::str::from_utf8(&req.payload).ok()?)?;
    Some((signal, answer))
}

/// The run's status and error from why the lifecycle stopped waiting and how the code
/// ended, and a guest's returned text (its last output line). What the lifecycle did
/// decides over what the code reported: a kill that lands as the job succeeds is still a
/// kill.
pub(super) fn ending_status(
    ending: Ending,
    outcome: Outcome,
    timeout: Option<Duration>,
    host: &str,
) -> (Status, Option<String>, Option<String>) {
    let timed_out = |after: Duration| format!("timed out after {}", humantime::format_duration(after));
    match (ending, outcome) {
        (Ending::Exited, Outcome::Succeeded(text)) => (Status::Succeeded, None, text),
        (Ending::Exited, Outcome::Failed(why)) => (Status::Failed, Some(why), None),
        (Ending::Exited, Outcome::TimedOut(after)) => (Status::TimedOut, Some(timed_out(after)), None),
        (Ending::Exited, Outcome::Stopped) => (Status::Cancelled, Some("stopped".into()), None),
        (Ending::TimedOut, _) => (Status::TimedOut, Some(timed_out(timeout.unwrap_or_default())), None),
        (Ending::Killed(signal), _) => (Status::Cancelled, Some(format!("killed on request ({signal})")), None),
        (Ending::ShutDown, _) => (Status::Lost, Some(format!("runner {host} shut down before the run ended")), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_follows_the_lifecycle_first_then_the_code() {
        let secs = Duration::from_secs;
        let cases = [
            (Ending::Exited, Outcome::Succeeded(Some("done".into())), Status::Succeeded, None, Some("done")),
            (Ending::Exited, Outcome::Succeeded(None), Status::Succeeded, None, None),
            (
                Ending::Exited,
                Outcome::Failed("exited with code 3".into()),
                Status::Failed,
                Some("exited with code 3"),
                None,
            ),
            (Ending::Exited, Outcome::TimedOut(secs(30)), Status::TimedOut, Some("timed out after 30s"), None),
            (Ending::Exited, Outcome::Stopped, Status::Cancelled, Some("stopped"), None),
            (Ending::TimedOut, Outcome::Stopped, Status::TimedOut, Some("timed out after 2s"), None),
            (
                Ending::TimedOut,
                Outcome::Succeeded(Some("late".into())),
                Status::TimedOut,
                Some("timed out after 2s"),
                None,
            ),
            (
                Ending::Killed(Signal::SIGKILL),
                Outcome::Succeeded(None),
                Status::Cancelled,
                Some("killed on request (SIGKILL)"),
                None,
            ),
            (Ending::ShutDown, Outcome::Stopped, Status::Lost, Some("runner h1 shut down before the run ended"), None),
        ];
        for (ending, outcome, status, error, result) in cases {
            let case = format!("{ending:?} {outcome:?}");
            let got = ending_status(ending, outcome, Some(secs(2)), "h1");
            assert_eq!(got, (status, error.map(String::from), result.map(String::from)), "{case}");
        }
    }
}
