//! The `cronrun-bench` binary (run directly or as `cronrun bench ...`): parses the command
//! line, sets up logging as the `cronrun` daemons do, runs one benchmark, and turns an
//! error into one line on stderr and a non-zero exit.

use std::process::ExitCode;

use clap::Parser;
use cronrun::cli::{error_line, process};
use cronrun_bench::BenchCli;

// The allocator of `cronrun`, so that what runs in this process (`bench throughput`'s
// agent, `bench load`'s probes) is measured as it runs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `bench throughput` runs an agent in this process: its runner execs this binary as
    // a run's supervisor when no `cronrun-supervise` is beside it, as `cronrun` does.
    if let Some(supervised) = process::supervise_if_asked() {
        return supervised;
    }
    let cli = BenchCli::parse();
    // Info lines, as the daemons log (a benchmark says what it is doing); async-nats logs
    // every connection event at info, so only its warnings.
    process::init_logging(cli.global.log_format, "info,async_nats=warn");
    process::run(cronrun_bench::run(cli), |()| ExitCode::SUCCESS, |e| error_line(e).replace('\n', " "))
}
