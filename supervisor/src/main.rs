//! The first process of every shell run (see `cronrun_supervisor`): this binary, small, is
//! what a runner execs for each run; `cronrun __supervise` does the same where it is missing.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    cronrun_supervisor::main(&args)
}
