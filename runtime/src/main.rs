//! The `cronrun` binary: parses the command line, sets up logging, runs the command, and
//! turns an error into one line on stderr and a non-zero exit.

use std::process::ExitCode;

use clap::Parser;
use cronrun::cli::{Cli, error_line, process, run};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    if let Some(supervised) = process::supervise_if_asked() {
        return supervised;
    }
    let cli = Cli::parse();
    // One-shot commands end in one line of their own; the client's reconnect logs are noise.
    // Daemons log at info, but async-nats logs every connection event at info: `connect`
    // reports the ones that matter (lost, back) itself.
    let default_filter =
        if cli.command.is_daemon() { "info,async_nats=warn" } else { "warn,async_nats=off,cronrun::connect=error" };
    process::init_logging(cli.global.log_format, default_filter);
    process::run(
        run(cli),
        |code| code,
        |e| {
            let e = error_line(e).replace('\n', " ");
            match cronrun::connect::last_denial() {
                // A denied write is not answered: say why it timed out.
                Some(denial) => format!(
                    "NATS refused it: {denial}; connect as an identity whose role allows it (--creds, docs/security.md) [{e}]"
                ),
                None => e,
            }
        },
    )
}
