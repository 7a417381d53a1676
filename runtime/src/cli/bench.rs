//! `cronrun bench KIND ...`: the benchmarks of docs/benchmarks.md are a crate of their own
//! (`bench/`, the `cronrun-bench` binary), so that the binary users deploy carries none of
//! them. This execs the `cronrun-bench` built beside this binary with the same arguments
//! (the global flags given before `bench` too), so the documented commands stay true.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::{Ctx, Global};

/// The binary the benchmarks are, beside `cronrun`.
const BENCH_BINARY: &str = "cronrun-bench";

/// How a missing `cronrun-bench` is built, beside the `cronrun` it runs as its agents.
const BUILD_BOTH: &str = "cargo build --release -p cronrun -p cronrun-bench";

/// The exit code when `cronrun-bench` cannot be run (as for a command line error).
const CANNOT_RUN: u8 = 2;

#[derive(Args)]
pub struct BenchArgs {
    /// lateness|throughput|nats|dispatch|load|scale|soak and its flags (`cronrun bench
    /// --help` lists them), passed on to `cronrun-bench` as given
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    pub args: Vec<OsString>,
}

/// Why `cronrun-bench` could not be run.
#[derive(Debug, thiserror::Error)]
enum BenchBinaryError {
    #[error("cannot find the cronrun binary's own path")]
    OwnPath(#[source] std::io::Error),
    #[error(
        "`cronrun bench` runs the {BENCH_BINARY} binary, which is not at {path} (beside {exe}): build it with `{BUILD_BOTH}`"
    )]
    Missing { path: PathBuf, exe: PathBuf },
    #[error("cannot run {path}")]
    Exec { path: PathBuf, source: std::io::Error },
}

/// Execs `cronrun-bench` with the global flags and `a`'s arguments; returns only when it
/// could not, having said why in one line on stderr.
pub fn run(ctx: &Ctx, a: BenchArgs) -> ExitCode {
    let e = match bench_binary() {
        Ok(path) => {
            let source = std::process::Command::new(&path).args(global_flags(&ctx.global)).args(a.args).exec();
            BenchBinaryError::Exec { path, source }
        }
        Err(e) => e,
    };
    eprintln!("error: {}", super::error_line(&e.into()));
    ExitCode::from(CANNOT_RUN)
}

/// `cronrun-bench` beside this binary.
fn bench_binary() -> Result<PathBuf, BenchBinaryError> {
    beside(&std::env::current_exe().map_err(BenchBinaryError::OwnPath)?)
}

fn beside(exe: &Path) -> Result<PathBuf, BenchBinaryError> {
    let path = exe.with_file_name(BENCH_BINARY);
    if !path.is_file() {
        return Err(BenchBinaryError::Missing { path, exe: exe.to_path_buf() });
    }
    Ok(path)
}

/// The global flags as `cronrun-bench` takes them: those given here (on the command line
/// or from the environment), so that it acts on the same server and namespace.
fn global_flags(global: &Global) -> Vec<OsString> {
    let mut flags = Vec::new();
    let mut flag = |name: &str, value: &str| flags.extend([OsString::from(name), OsString::from(value)]);
    if let Some(nats) = &global.nats {
        flag("--nats", nats);
    }
    if let Some(creds) = &global.creds {
        flag("--creds", creds);
    }
    flag("--namespace", &global.namespace);
    if let Some(domain) = &global.jetstream_domain {
        flag("--jetstream-domain", domain);
    }
    flag("--output", output_name(global.output));
    flag("--log-format", output_name(global.log_format));
    flags
}

fn output_name(output: super::Output) -> &'static str {
    match output {
        super::Output::Text => "text",
        super::Output::Json => "json",
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{beside, global_flags};
    use crate::cli::{Cli, Command};

    #[test]
    fn the_bench_command_passes_its_arguments_and_the_global_flags_on() {
        let args = ["cronrun", "--nats", "nats://h:1", "--output", "json", "bench", "load", "--schedules", "5"];
        let cli = Cli::try_parse_from(args).unwrap();
        let Command::Bench(bench) = cli.command else { panic!("not the bench command") };
        assert_eq!(bench.args, ["load", "--schedules", "5"]);
        let flags = global_flags(&cli.global);
        let expected = ["--nats", "nats://h:1", "--namespace", "cronrun", "--output", "json", "--log-format", "text"];
        assert_eq!(flags, expected);
        // Its own --help is cronrun-bench's, which lists the benchmarks.
        let cli = Cli::try_parse_from(["cronrun", "bench", "--help"]).unwrap();
        let Command::Bench(bench) = cli.command else { panic!("not the bench command") };
        assert_eq!(bench.args, ["--help"]);
    }

    #[test]
    fn a_missing_bench_binary_is_one_line_saying_where_and_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = beside(&dir.path().join("cronrun")).unwrap_err().to_string();
        assert!(e.contains(&format!("not at {}", dir.path().join("cronrun-bench").display())), "{e}");
        assert!(e.contains("cargo build --release -p cronrun -p cronrun-bench") && !e.contains('\n'), "{e}");
    }
}
