//! What the binaries over this library (`cronrun`, `cronrun-bench`) do around their
//! command, in one place: act as a run's supervisor when exec'd as one, log to stderr, run
//! the command on a multi-threaded runtime, and end an error in one line.

use std::future::Future;
use std::process::ExitCode;

use super::Output;

/// The process as a run's supervisor, when its first argument says so (the runner execs
/// the binary beside it when no `cronrun-supervise` is there): no CLI parsing, no
/// logging, no multi-threaded runtime.
pub fn supervise_if_asked() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().collect();
    (args.get(1).map(String::as_str) == Some(crate::runner::supervisor::ARG))
        .then(|| crate::runner::supervisor::main(&args[2..]))
}

/// Logs on stderr as `format` says, filtered by `RUST_LOG`, else `default_filter`.
pub fn init_logging(format: Output, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        Output::Json => logs.json().init(),
        Output::Text => logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
}

/// Runs `command` to its end; an error is one line on stderr, as `say` words it, and a
/// failed exit. Tasks still running (a stop that timed out) do not hold the exit up.
pub fn run<T>(
    command: impl Future<Output = anyhow::Result<T>>,
    ok: impl FnOnce(T) -> ExitCode,
    say: impl FnOnce(&anyhow::Error) -> String,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(command);
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(value) => ok(value),
        Err(e) => {
            eprintln!("error: {}", say(&e));
            ExitCode::FAILURE
        }
    }
}
