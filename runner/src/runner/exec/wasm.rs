//! The Wasm executor: the component is fetched, compiled (or loaded from the cache) and
//! linked when the run is claimed, ahead of its instant; at the release it is
//! instantiated and called in the Wasm host's sandbox (see `crate::wasm`).

use std::time::Duration;

use async_trait::async_trait;
use chrono::SecondsFormat;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Exit, Outcome, PrepareError, Ready, RunInfo, Running, StartError, Stop};
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
) -> Result<(Box<dyn Ready>, SecretValues), PrepareError> {
    let (runtime, wasm) = match (&ctx.wasm, &spec.wasm) {
        (Ok(runtime), Some(wasm)) => (runtime, wasm),
        (Err(why), _) => return Err(PrepareError::NoWasmHost(why.clone())),
        (_, None) => return Err(PrepareError::NoWasm),
    };
    // Signed by a trusted key for this very job and pool, and not older than the newest
    // signing seen for the job: before anything is fetched or compiled.
    runtime.verify(&spec.name, &spec.pool, wasm).map_err(PrepareError::Signature)?;
    if !runtime.config().trusted_keys.is_empty() {
        replay_guard(ctx, &spec.name, wasm.signed_at.as_deref()).await?;
    }
    let prepared = runtime
        .prepare(&spec.name, &spec.pool, wasm)
        .await
        .map_err(|source| PrepareError::Load { plugin: wasm.plugin.clone(), source })?;
    let secrets = super::resolve(ctx, wasm.secret_names()).await?;
    let config = wasm.resolved_config(&secrets).map_err(PrepareError::Secrets)?;
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

/// Why the replay guard refused a signed spec, or could not check it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error("job {job} has no signing time (wasm.signed_at): sign it again with `cronrun deploy --sign KEY`")]
    NoSigningTime { job: String },
    #[error("job {job}'s wasm.signed_at {signed_at:?} is not an RFC 3339 instant")]
    BadSigningTime { job: String, signed_at: String, source: chrono::ParseError },
    #[error("job {job}: cannot encode its signing time for {key}: {source}")]
    Encode { job: String, key: String, source: serde_json::Error },
    #[error("job {job}: cannot check the signing time against {key}: {source}")]
    Check { job: String, key: String, source: crate::error::Error },
    #[error(
        "job {job} was signed at {signed_at}, older than the signing of {newest} already seen for it: \
         refused as a replay of an older build (deploy it again with `cronrun deploy --sign KEY`)"
    )]
    Replayed { job: String, signed_at: String, newest: String },
    #[error("job {job}: {key} kept changing while its signing time was checked; the run is refused, try again")]
    KeptChanging { job: String, key: String },
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
async fn replay_guard(ctx: &RunnerCtx, job: &str, signed_at: Option<&str>) -> Result<(), ReplayError> {
    let Some(signed_at) = signed_at else {
        // `verify` refused it already; kept as a refusal should it ever not.
        return Err(ReplayError::NoSigningTime { job: job.to_string() });
    };
    let parse = |at: &str| chrono::DateTime::parse_from_rfc3339(at).map(|t| t.with_timezone(&chrono::Utc));
    let ours = parse(signed_at).map_err(|source| ReplayError::BadSigningTime {
        job: job.to_string(),
        signed_at: signed_at.to_string(),
        source,
    })?;
    let key = crate::names::lease_keys::signed(job);
    let leases = &ctx.store.leases;
    let value = serde_json::to_vec(signed_at).map(bytes::Bytes::from).map_err(|source| ReplayError::Encode {
        job: job.to_string(),
        key: key.clone(),
        source,
    })?;
    let failed = |source: crate::error::Error| ReplayError::Check { job: job.to_string(), key: key.clone(), source };
    for _ in 0..REPLAY_GUARD_TRIES {
        let written = match leases.get(&key).await.map_err(failed)? {
            None => leases.create(&key, value.clone(), None).await,
            Some(seen) => {
                let newest = serde_json::from_slice::<String>(&seen.value).ok().and_then(|at| parse(&at).ok());
                match newest {
                    Some(newest) if ours < newest => {
                        return Err(ReplayError::Replayed {
                            job: job.to_string(),
                            signed_at: signed_at.to_string(),
                            newest: newest.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                        });
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
    Err(ReplayError::KeptChanging { job: job.to_string(), key })
}

#[async_trait]
impl Ready for Prepared {
    async fn start(self: Box<Self>, output: mpsc::Sender<Line>) -> Result<Box<dyn Running>, StartError> {
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
