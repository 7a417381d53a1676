//! The `cronrun-bench` binary (run directly or as `cronrun bench ...`): parses the command
//! line, sets up logging as the `cronrun` daemons do, runs one benchmark, and turns an
//! error into one line on stderr and a non-zero exit.

use std::process::ExitCode;

use clap::Parser;
use cronrun::cli::Output;
use cronrun_bench::BenchCli;

// The allocator of `cronrun`, so that what runs in this process (`bench throughput`'s
// agent, `bench load`'s probes) is measured as it runs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `bench throughput` runs an agent in this process: its runner execs this binary as
    // a run's supervisor when no `cronrun-supervise` is beside it, as `cronrun` does.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(cronrun::runner::supervisor::ARG) {
        return cronrun::runner::supervisor::main(&args[2..]);
    }
    let cli = BenchCli::parse();
    init_logging(cli.global.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(cronrun_bench::run(cli));
    // Tasks still running (a stop that timed out) must not hold the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cronrun::cli::error_line(&e).replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// Info lines on stderr, as the daemons log (a benchmark says what it is doing); async-nats
/// logs every connection event at info, so only its warnings.
fn init_logging(format: Output) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,async_nats=warn"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        Output::Json => logs.json().init(),
        Output::Text => logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
}
