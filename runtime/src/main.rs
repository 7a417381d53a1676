//! The `cronrun` binary: parses the command line, sets up logging, runs the command, and
//! turns an error into one line on stderr and a non-zero exit.

use std::process::ExitCode;

use clap::Parser;
use cronrun::cli::{Cli, run};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A run's supervisor: no CLI parsing, no logging, no multi-threaded runtime.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(cronrun::runner::supervisor::ARG) {
        return cronrun::runner::supervisor::main(&args[2..]);
    }
    let cli = Cli::parse();
    // One-shot commands end in one line of their own; the client's reconnect logs are noise.
    // Daemons log at info, but async-nats logs every connection event at info: `connect`
    // reports the ones that matter (lost, back) itself.
    let default_level =
        if cli.command.is_daemon() { "info,async_nats=warn" } else { "warn,async_nats=off,cronrun::connect=error" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match cli.global.log_format {
        cronrun::cli::Output::Json => logs.json().init(),
        cronrun::cli::Output::Text => logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli));
    // Tasks still running (a stop that timed out) must not hold the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(e) => {
            let e = cronrun::cli::error_line(&e).replace('\n', " ");
            match cronrun::connect::last_denial() {
                // A denied write is not answered: say why it timed out.
                Some(denial) => eprintln!(
                    "error: NATS refused it: {denial}; connect as an identity whose role allows it (--creds, docs/security.md) [{e}]"
                ),
                None => eprintln!("error: {e}"),
            }
            ExitCode::FAILURE
        }
    }
}
