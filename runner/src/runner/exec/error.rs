//! Why a run's code could not be made ready ([`PrepareError`]) or started
//! ([`StartError`]): the run fails with the error's text, one line, and the cause stays
//! its source for whoever logs or inspects it.

use super::super::account::AccountError;
use crate::error::Error;

/// Why a run's code could not be made ready; the lifecycle records it when the run
/// would start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    #[error("job has neither shell nor wasm")]
    NoCode,
    /// A secret the job names does not exist or could not be read, or a value of its
    /// `env` or `config` could not be resolved.
    #[error(transparent)]
    Secrets(Error),
    #[error("this runner runs no shell jobs ([runner] allow_shell = false)")]
    ShellNotAllowed,
    #[error("shell spec has no command")]
    NoCommand,
    #[error(transparent)]
    Account(#[from] AccountError),
    /// `what` names the group: "its group \"wheel\" (gid 10, wheel)".
    #[error(
        "the job would run in {what}, which gives root's rights: set another shell.group, \
         or allow it with [runner] allow_root = true"
    )]
    PrivilegedGroup { what: String },
    #[error("this runner has no directory for run inputs")]
    NoInputDirectory,
    #[error("could not hand the run its input: {0}")]
    Input(#[source] Error),
    #[error("could not hand the run its environment: {0}")]
    Environment(#[source] std::io::Error),
    #[error("could not start: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("could not start: this binary's path is unknown")]
    NoSupervisor,
    #[error("this runner cannot run wasm jobs: {0}")]
    NoWasmHost(#[source] Error),
    #[error("job has no wasm section")]
    NoWasm,
    /// Refused by the runner's `[wasm] trusted_keys`.
    #[error(transparent)]
    Signature(Error),
    #[error(transparent)]
    Replay(#[from] super::wasm::ReplayError),
    #[error("could not load plugin {plugin}: {source}")]
    Load { plugin: String, source: Error },
    /// The lease was lost to another owner while the code was made ready.
    #[error("the run's lease was taken while it was made ready: {0}")]
    LeaseTaken(#[source] Error),
}

/// Why code made ready did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// Writing the release line to a process that waits for it.
    #[error("could not start: {0}")]
    Release(#[source] std::io::Error),
    /// The error of code whose output is masked, as its text with the run's secrets
    /// masked: its cause is dropped on purpose, since it could say a secret's value.
    #[error("{0}")]
    Masked(String),
}
