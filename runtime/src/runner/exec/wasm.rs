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
use crate::wasm::{JobContext, PreparedWasm, WasmOutcome};

/// A component linked for one run, and what the guest is told.
struct Prepared {
    wasm: PreparedWasm,
    context: JobContext,
    timeout: Duration,
}

pub(super) async fn prepare(ctx: &RunnerCtx, spec: &JobSpec, run: &RunInfo<'_>) -> Result<Box<dyn Ready>, String> {
    let (runtime, wasm) = match (&ctx.wasm, &spec.wasm) {
        (Ok(runtime), Some(wasm)) => (runtime, wasm),
        (Err(why), _) => return Err(format!("this runner cannot run wasm jobs: {why}")),
        (_, None) => return Err("job has no wasm section".into()),
    };
    let prepared = runtime.prepare(wasm).await.map_err(|e| format!("could not load plugin {}: {e}", wasm.plugin))?;
    let context = JobContext {
        job: run.job.to_string(),
        run_id: run.run_id.to_string(),
        scheduled_at: run.scheduled_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        attempt: run.attempt,
        trigger: run.trigger,
        input: run.input.clone(),
    };
    // The spec's timeout, else `[wasm] default_timeout`: no guest runs unbounded.
    let timeout = spec.timeout.unwrap_or(runtime.config().default_timeout);
    Ok(Box::new(Prepared { wasm: prepared, context, timeout }))
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
