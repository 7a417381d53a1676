//! One run of a prepared component: a fresh store and sandbox (no preopens, env or
//! network; memory and table limits; guest stdout/stderr split into lines straight into
//! the run's output, see `stdio.rs`), the epoch deadline from the timeout, cancellation,
//! and the mapping of how the call ended (result, trap, limit, deadline) to a
//! [`WasmOutcome`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi_http::WasiHttpCtx;

use super::PreparedWasm;
use super::bindings::{self, Trigger as WitTrigger};
use super::grants::Grants;
use super::host::{HostState, Limits, human_bytes};
use super::http::HttpGrants;
use super::stdio::GuestOutput;
use crate::output::{Line, Source};
use crate::record::Trigger;

/// What the runner tells the job about the run.
#[derive(Debug, Clone)]
pub struct JobContext {
    pub job: String,
    pub run_id: String,
    /// RFC 3339 UTC with milliseconds.
    pub scheduled_at: String,
    pub attempt: u32,
    pub trigger: Trigger,
    /// The run's input, JSON text (`input::get`).
    pub input: Option<String>,
    /// The spec's `wasm.config` as the guest reads it (`config::get`): the runner resolves
    /// the secrets it names when the run starts, so the values are never in the spec.
    pub config: std::collections::BTreeMap<String, String>,
    /// W3C `traceparent` naming the run's span (telemetry on): the guest's `TRACEPARENT`
    /// environment variable, the one variable its sandbox has. `cronrun:job@0.1.0` has no
    /// field for it; the WASI environment every wasip2 guest reads needs none.
    pub traceparent: Option<String>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WasmOutcome {
    /// `ok(none)` or `ok(some(text))`: the text is the run's last output line.
    Succeeded(Option<String>),
    /// `err(text)`, a trap, a panic, a limit: the run record's error.
    Failed(String),
    TimedOut,
    Cancelled,
}

const ENDED_NOT: u8 = 0;
const ENDED_TIMEOUT: u8 = 1;
const ENDED_CANCEL: u8 = 2;
/// Stderr lines kept to explain a panic (Rust prints its message over a few lines).
const PANIC_TAIL_LINES: usize = 8;
/// Time a host call stuck past the deadline (where epochs cannot interrupt) gets.
const HOST_CALL_GRACE: Duration = Duration::from_secs(1);

impl PreparedWasm {
    /// Instantiates and calls `run`; log lines and guest stdout/stderr go to `output`
    /// (stderr lines with `Source::Stderr`); returns when the call ends, the timeout
    /// passes (epoch interruption) or `cancel` fires.
    pub async fn run(
        self,
        ctx: JobContext,
        timeout: Option<Duration>,
        output: mpsc::Sender<Line>,
        cancel: CancellationToken,
    ) -> WasmOutcome {
        let max_line = self.inner.config.max_line_bytes;
        let stdout = GuestOutput::new(Source::Stdout, max_line, output.clone(), 0);
        let stderr = GuestOutput::new(Source::Stderr, max_line, output.clone(), PANIC_TAIL_LINES);
        let deadline = timeout.map(|t| Instant::now() + t);
        // An instance slot, waited for within the run's timeout (the wait is part of it).
        let permit = tokio::select! {
            permit = self.inner.instances.clone().acquire_owned() => permit.ok(),
            _ = cancel.cancelled() => return WasmOutcome::Cancelled,
            _ = until(deadline) => return WasmOutcome::TimedOut,
        };
        let Some(permit) = permit else {
            return WasmOutcome::Failed("the Wasm host is shutting down".into());
        };
        let mut store = self.sandbox(&ctx, stdout.clone(), stderr.clone(), output);
        let ended = Arc::new(AtomicU8::new(ENDED_NOT));
        watch(&mut store, deadline, cancel.clone(), ended.clone());
        let wit_ctx = self.wit_context(ctx);
        let pre = self.pre;
        let call = async move {
            let job = pre.instantiate_async(&mut store).await?;
            let result = job.call_run(&mut store, &wit_ctx).await;
            // The instance is gone with `store`; the guest's stdout/stderr are done.
            drop(store);
            drop(permit);
            result
        };
        // Backstop for a host call that hangs (epochs only interrupt guest code).
        let hard_stop = until(deadline.map(|d| d + HOST_CALL_GRACE));
        let outcome = tokio::select! {
            result = call => classify(result, ended.load(Ordering::SeqCst), &self.inner.config),
            _ = cancel.cancelled() => WasmOutcome::Cancelled,
            _ = hard_stop => WasmOutcome::TimedOut,
        };
        // The last lines without a newline, or waiting for room in `output`, go out now;
        // bounded, in case nobody reads `output` any more.
        let drain = async {
            stdout.finish().await;
            stderr.finish().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
        if let WasmOutcome::Failed(message) = &outcome
            && message.contains("wasm `unreachable`")
            && let Some(panic) = panic_message(&stderr.tail())
        {
            return WasmOutcome::Failed(format!("the job panicked: {panic}"));
        }
        outcome
    }

    /// A fresh store: WASI with no preopens, env or network, stdout/stderr into the
    /// run's output, the memory and table limits.
    fn sandbox(
        &self,
        ctx: &JobContext,
        stdout: GuestOutput,
        stderr: GuestOutput,
        output: mpsc::Sender<Line>,
    ) -> Store<HostState> {
        let config = &self.inner.config;
        let grants = Grants::from_spec(&self.spec);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stdout)
            .stderr(stderr)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        if let Some(traceparent) = &ctx.traceparent {
            wasi.env("TRACEPARENT", traceparent);
        }
        let wasi = wasi.build();
        let state = HostState {
            wasi,
            http: WasiHttpCtx::new(),
            hooks: HttpGrants::new(grants.clone(), config.http_max_concurrent, config.http_max_requests),
            table: wasmtime::component::ResourceTable::new(),
            limits: Limits {
                memory_bytes: usize::try_from(config.memory_limit).unwrap_or(usize::MAX),
                table_elements: config.max_table_elements as usize,
            },
            job: ctx.job.clone(),
            input: ctx.input.clone(),
            config: ctx.config.clone(),
            grants,
            nats: self.inner.nats.clone(),
            output,
            max_line_bytes: config.max_line_bytes,
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|s| &mut s.limits);
        store
    }

    fn wit_context(&self, ctx: JobContext) -> bindings::JobContext {
        bindings::JobContext {
            job: ctx.job,
            run_id: ctx.run_id,
            scheduled_at: ctx.scheduled_at,
            attempt: ctx.attempt,
            trigger: match ctx.trigger {
                Trigger::Schedule => WitTrigger::Schedule,
                Trigger::Manual => WitTrigger::Manual,
                Trigger::Retry => WitTrigger::Retry,
                // A past fire run late, as a catch-up is; `scheduled_at` is that fire.
                Trigger::Catchup | Trigger::Backfill => WitTrigger::Catchup,
                // `cronrun:job@0.1.0` predates chains and messages; a guest sees such a
                // run as started on demand, and finds its upstream or message in `input`.
                Trigger::Chain | Trigger::Message => WitTrigger::Manual,
            },
            config: ctx.config.into_iter().collect(),
        }
    }
}

/// Every epoch tick: stop if cancelled or past the deadline (recording which in
/// `ended`), else yield to the executor so other runs and the cancel/timeout branches
/// of [`PreparedWasm::run`] get polled.
fn watch(store: &mut Store<HostState>, deadline: Option<Instant>, cancel: CancellationToken, ended: Arc<AtomicU8>) {
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if cancel.is_cancelled() {
            ended.store(ENDED_CANCEL, Ordering::SeqCst);
            return Ok(UpdateDeadline::Interrupt);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            ended.store(ENDED_TIMEOUT, Ordering::SeqCst);
            return Ok(UpdateDeadline::Interrupt);
        }
        Ok(UpdateDeadline::Yield(1))
    });
}

type CallResult = wasmtime::Result<Result<Option<String>, String>>;

fn classify(result: CallResult, ended: u8, config: &super::WasmConfig) -> WasmOutcome {
    let err = match result {
        Ok(Ok(text)) => return WasmOutcome::Succeeded(text),
        Ok(Err(text)) => return WasmOutcome::Failed(text),
        Err(err) => err,
    };
    match ended {
        ENDED_TIMEOUT => return WasmOutcome::TimedOut,
        ENDED_CANCEL => return WasmOutcome::Cancelled,
        _ => {}
    }
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return WasmOutcome::Failed(format!("the job called exit({}) instead of returning from run", exit.0));
    }
    let limit = err
        .chain()
        .map(|e| e.to_string())
        .find(|m| m.starts_with("memory limit exceeded") || m.starts_with("table limit exceeded"));
    if let Some(message) = limit {
        return WasmOutcome::Failed(message);
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::StackOverflow) => WasmOutcome::Failed(format!(
            "stack overflow: the job recursed deeper than its stack of {} allows (wasm.max_stack)",
            human_bytes(usize::try_from(config.max_stack).unwrap_or(usize::MAX))
        )),
        Some(Trap::Interrupt) => WasmOutcome::TimedOut,
        Some(Trap::UnreachableCodeReached) => {
            WasmOutcome::Failed("the job aborted: wasm `unreachable` executed (a panic or abort in the guest)".into())
        }
        Some(Trap::MemoryOutOfBounds) => WasmOutcome::Failed(format!(
            "the job trapped: {}: a bug in the job, or its stack in linear memory overflowing (deep recursion)",
            Trap::MemoryOutOfBounds
        )),
        Some(trap) => WasmOutcome::Failed(format!("the job trapped: {trap}")),
        None => WasmOutcome::Failed(format!("the job failed in the host: {}", err.root_cause())),
    }
}

/// From Rust's "panicked at FILE:LINE:COL:" line and the message after it.
fn panic_message(tail: &[String]) -> Option<String> {
    let i = tail.iter().rposition(|l| l.contains("panicked at"))?;
    let at = tail[i].split("panicked at").nth(1).unwrap_or("").trim().trim_end_matches(':');
    let message: Vec<&str> = tail[i + 1..].iter().map(String::as_str).take_while(|l| !l.starts_with("note:")).collect();
    Some(format!("{} (at {at})", message.join(" ")))
}

/// Completes at `deadline`, never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}
