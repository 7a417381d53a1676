//! The Wasm executor: the component is fetched, compiled (or loaded from the cache) and
//! linked when the run is claimed, ahead of its instant; at the release it is
//! instantiated and called in the Wasm host's sandbox (see `crate::wasm`).

use std::time::Duration;

use async_trait::async_trait;
use chrono::SecondsFormat;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Exit, Outcome, Ready, RunInfo, Running, Stop};
use crate::output::Line;
use crate::runner::RunnerCtx;
use crate::spec::JobSpec;
use crate::spec::secret::SecretValues;
use crate::wasm::{JobContext, PreparedWasm, WasmOutcome};

/// A component linked for one run, and what the guest is told.
struct Prepared {
    wasm: PreparedWasm,
    context: JobContext,
    timeout: Duration,
}

/// The component of `spec` linked for this run, and the secrets its config names, read
/// for this run once its signature passed and its component is loaded: the guest gets
/// their values (`config::get`), which must be masked in what it prints.
pub(super) async fn prepare(
    ctx: &RunnerCtx,
    spec: &JobSpec,
    run: &RunInfo<'_>,
) -> Result<(Box<dyn Ready>, SecretValues), String> {
    let (runtime, wasm) = match (&ctx.wasm, &spec.wasm) {
        (Ok(runtime), Some(wasm)) => (runtime, wasm),
        (Err(why), _) => return Err(format!("this runner cannot run wasm jobs: {why}")),
        (_, None) => return Err("job has no wasm section".into()),
    };
    // Signed by a trusted key for this very job and pool, and not older than the newest
    // signing seen for the job: before anything is fetched or compiled.
    runtime.verify(&spec.name, &spec.pool, wasm).map_err(|e| e.to_string())?;
    if !runtime.config().trusted_keys.is_empty() {
        replay_guard(ctx, &spec.name, wasm.signed_at.as_deref()).await?;
    }
    let prepared = runtime
        .prepare(&spec.name, &spec.pool, wasm)
        .await
        .map_err(|e| format!("could not load plugin {}: {e}", wasm.plugin))?;
    let secrets = super::resolve(ctx, wasm.secret_names()).await?;
    let config = wasm.resolved_config(&secrets).map_err(|e| e.to_string())?;
    let context = JobContext {
        job: run.job.to_string(),
        run_id: run.run_id.to_string(),
        scheduled_at: run.scheduled_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        attempt: run.attempt,
        trigger: run.trigger,
        input: run.input.clone(),
        config,
        traceparent: run.traceparent.clone(),
    };
    // The spec's timeout, else `[wasm] default_timeout`: no guest runs unbounded.
    let timeout = spec.timeout.unwrap_or(runtime.config().default_timeout);
    Ok((Box::new(Prepared { wasm: prepared, context, timeout }), secrets))
}

/// Tries of the compare-and-set on `signed.<job>` before the run fails (other runners of
/// the job moving it meanwhile).
const REPLAY_GUARD_TRIES: usize = 5;

/// Refuses a spec signed before the newest signing time runners have seen for `job`, and
/// moves that time forward to `signed_at` when it is newer: `signed.<job>` in the leases
/// bucket, which runners alone may write (an admin identity cannot set it back), written
/// by create or compare-and-set and never moved back. The first signed spec a deployment
/// sees is trusted as the newest; deleting the job does not reset it. A run that cannot
/// read or write the key fails rather than run unchecked.
async fn replay_guard(ctx: &RunnerCtx, job: &str, signed_at: Option<&str>) -> Result<(), String> {
    let Some(signed_at) = signed_at else {
        // `verify` refused it already; kept as a refusal should it ever not.
        return Err(format!(
            "job {job} has no signing time (wasm.signed_at): sign it again with `cronrun deploy --sign KEY`"
        ));
    };
    let parse = |at: &str| chrono::DateTime::parse_from_rfc3339(at).map(|t| t.with_timezone(&chrono::Utc));
    let ours =
        parse(signed_at).map_err(|_| format!("job {job}'s wasm.signed_at {signed_at:?} is not an RFC 3339 instant"))?;
    let key = crate::names::lease_keys::signed(job);
    let leases = &ctx.store.leases;
    let value = serde_json::to_vec(signed_at)
        .map(bytes::Bytes::from)
        .map_err(|e| format!("job {job}: cannot encode its signing time for {key}: {e}"))?;
    let failed = |e: crate::error::Error| format!("job {job}: cannot check the signing time against {key}: {e}");
    for _ in 0..REPLAY_GUARD_TRIES {
        let written = match leases.get(&key).await.map_err(failed)? {
            None => leases.create(&key, value.clone(), None).await,
            Some(seen) => {
                let newest = serde_json::from_slice::<String>(&seen.value).ok().and_then(|at| parse(&at).ok());
                match newest {
                    Some(newest) if ours < newest => {
                        return Err(format!(
                            "job {job} was signed at {signed_at}, older than the signing of {} already seen for it: \
                             refused as a replay of an older build (deploy it again with `cronrun deploy --sign KEY`)",
                            newest.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                        ));
                    }
                    Some(newest) if ours == newest => return Ok(()),
                    // Newer (or an unreadable value, which only a runner could have written).
                    _ => leases.update(&key, value.clone(), seen.revision, None).await,
                }
            }
        };
        match written {
            Ok(_) => return Ok(()),
            Err(e) if e.is_conflict() || matches!(e.kind(), crate::ErrorKind::AlreadyExists) => continue,
            Err(e) => return Err(failed(e)),
        }
    }
    Err(format!("job {job}: {key} kept changing while its signing time was checked; the run is refused, try again"))
}

#[async_trait]
impl Ready for Prepared {
    async fn start(self: Box<Self>, output: mpsc::Sender<Line>) -> Result<Box<dyn Running>, String> {
        let cancel = CancellationToken::new();
        let Prepared { wasm, context, timeout } = *self;
        let call = tokio::spawn(wasm.run(context, Some(timeout), output, cancel.clone()));
        Ok(Box::new(Called { call, cancel, timeout }))
    }

    async fn discard(self: Box<Self>) {}
}

/// The guest's call, running on a task of its own.
struct Called {
    call: JoinHandle<WasmOutcome>,
    cancel: CancellationToken,
    timeout: Duration,
}

impl Called {
    fn exit(&self, outcome: Result<WasmOutcome, tokio::task::JoinError>) -> Exit {
        Exit::guest(match outcome {
            Ok(WasmOutcome::Succeeded(text)) => Outcome::Succeeded(text),
            Ok(WasmOutcome::Failed(why)) => Outcome::Failed(why),
            Ok(WasmOutcome::TimedOut) => Outcome::TimedOut(self.timeout),
            Ok(WasmOutcome::Cancelled) => Outcome::Stopped,
            Err(e) => Outcome::Failed(format!("the job's task failed: {e}")),
        })
    }
}

#[async_trait]
impl Running for Called {
    async fn wait(&mut self) -> Exit {
        let outcome = (&mut self.call).await;
        self.exit(outcome)
    }

    /// A guest has no signals: any stop interrupts it at its next epoch tick (or host
    /// call), and the call ends within the host's own bound.
    async fn stop(&mut self, _how: Stop, _grace: Duration) -> Exit {
        self.cancel.cancel();
        let outcome = (&mut self.call).await;
        self.exit(outcome)
    }
}

impl Drop for Called {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
