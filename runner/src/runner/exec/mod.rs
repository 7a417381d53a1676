//! Executors: how the code of one kind of job runs. The run lifecycle (`lifecycle.rs`)
//! is the same for every kind; an executor only makes the code ready ahead of its
//! instant ([`prepare`] → [`Ready`]), starts it ([`Ready::start`]), and waits for or stops
//! it ([`Running`]). Output leaves as lines on the channel given to `start`; record,
//! heartbeat, kill requests, timeout and the final status are the lifecycle's.
//!
//! - `shell.rs`: a command in a process group under its supervisor process.
//! - `wasm.rs`: a component of the `job` world in the Wasm host's sandbox.
//! - `masked.rs`: the secrets a run resolved, masked in its output and how it ended.
//! - `error.rs`: why code could not be made ready or started, its cause kept.
//!
//! Secrets a job's `env` or `config` names are read when its run is made ready, at each
//! run (never kept from one run to the next: a secret set anew is what the next run gets);
//! one that does not exist fails the run with one line naming it.

mod error;
mod masked;
pub mod shell;
mod wasm;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use super::RunnerCtx;
use super::starter::Ticket;
use crate::output::Line;
use crate::record::Trigger;
use crate::spec::JobSpec;
use crate::spec::secret::SecretValues;
pub(crate) use error::{PrepareError, StartError};

/// What a run's code is told about the run.
pub(super) struct RunInfo<'a> {
    pub job: &'a str,
    pub run_id: &'a str,
    pub attempt: u32,
    pub trigger: Trigger,
    /// The fire the run belongs to (kept across retries).
    pub scheduled_at: DateTime<Utc>,
    /// The keepalive file the runner touches with every lease renewal, and how stale it
    /// may get before a shell run's supervisor stops the run (see `supervisor`).
    pub alive: Option<(&'a Path, Duration)>,
    /// The run's input as JSON text (`trigger --input`), if it was given one.
    pub input: Option<String>,
    /// W3C `traceparent` naming the run's span, when telemetry is on: a shell job's
    /// `TRACEPARENT`, a guest's too (WASI environment), so the job's own spans join the
    /// run's trace.
    pub traceparent: Option<String>,
}

/// How the lifecycle stops a running job.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stop {
    /// This signal (TERM on timeout and shutdown), then the end of everything left after
    /// the grace.
    Signal(Signal),
    /// Everything at once.
    Kill,
}

/// Parses `TERM`, `SIGTERM`, `kill`, `9`... into a signal (a kill request's, `cronrun kill
/// --signal`'s, the dashboard's).
pub fn parse_signal(s: &str) -> Option<Signal> {
    let upper = s.trim().to_ascii_uppercase();
    if let Ok(n) = upper.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let name = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    name.parse().ok()
}

/// How the job's code ended, as its executor saw it.
#[derive(Debug)]
pub(super) struct Exit {
    /// A process's exit code (128 + signal when a signal ended it); none for a guest.
    pub code: Option<i32>,
    pub outcome: Outcome,
}

#[derive(Debug)]
pub(super) enum Outcome {
    /// With the text a guest returned, the run's last output line.
    Succeeded(Option<String>),
    Failed(String),
    /// The executor's own deadline (a guest's default timeout) passed.
    TimedOut(Duration),
    /// Stopped by [`Running::stop`].
    Stopped,
}

impl Exit {
    fn guest(outcome: Outcome) -> Self {
        Self { code: None, outcome }
    }
}

/// A run's code made ready ahead of its instant.
#[async_trait]
pub(super) trait Ready: Send {
    /// Starts the code (a process released with its group has started already); output
    /// lines go to `output`.
    async fn start(self: Box<Self>, output: mpsc::Sender<Line>) -> Result<Box<dyn Running>, StartError>;
    /// Drops it unstarted (the job was paused or edited, or the release came first).
    async fn discard(self: Box<Self>);
    /// Whether only its group's release starts it (a process reading the group's pipe):
    /// one that missed the release must be made again.
    fn bound_to_release(&self) -> bool {
        false
    }
}

/// A run's code while it runs.
#[async_trait]
pub(super) trait Running: Send {
    /// Resolves when the code ended by itself. Cancel-safe: raced against the lifecycle's
    /// heartbeat, output, kill requests and timeout.
    async fn wait(&mut self) -> Exit;
    /// Stops the code (`how`; whatever is left after `grace`) and says how it ended.
    async fn stop(&mut self, how: Stop, grace: Duration) -> Exit;
}

/// Makes the code of a run of `spec` ready, in the release group of `ticket` if given.
/// The error is why it cannot run; the lifecycle records it when the run would start.
pub(super) async fn prepare(
    ctx: &RunnerCtx,
    spec: &JobSpec,
    run: &RunInfo<'_>,
    ticket: Option<&Ticket>,
) -> Result<Box<dyn Ready>, PrepareError> {
    let (ready, secrets) = match (&spec.shell, &spec.wasm) {
        (Some(shell), _) => {
            let secrets = resolve(ctx, shell.secret_names()).await?;
            let env = shell.resolved_env(&secrets).map_err(PrepareError::Secrets)?;
            let supervisor = shell::supervisor_command().await?;
            (shell::prepare(shell, &env, run, &ctx.config, supervisor, ticket)?, secrets)
        }
        (None, Some(_)) => wasm::prepare(ctx, spec, run).await?,
        (None, None) => return Err(PrepareError::NoCode),
    };
    Ok(masked::masked(ready, &secrets))
}

/// The values of the secrets `names`, read now. The error is the run's: one line naming
/// a secret that does not exist (or why it could not be read).
async fn resolve(ctx: &RunnerCtx, names: BTreeSet<&str>) -> Result<SecretValues, PrepareError> {
    if names.is_empty() {
        return Ok(SecretValues::new());
    }
    ctx.store.secrets.resolve(names).await.map_err(PrepareError::Secrets)
}

/// Whether a run of `spec` has a supervisor process watching its keepalive file.
pub(super) fn keeps_alive(spec: &JobSpec) -> bool {
    spec.shell.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse() {
        assert_eq!(parse_signal("term"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("SIGKILL"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("9"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("nope"), None);
    }
}
