//! `cronrun-supervise [--alive FILE MS] [--as UID:GID] [--input FILE] shell CMD | exec PROG ARGS...` (or
//! `cronrun __supervise ...` where that binary is missing): the first process of every
//! shell run. A crate of its own, so that the binary exec'd for every run is small.
//!
//! The runner starts it ahead of the run's instant in a new process group. It waits for
//! one line on stdin (the release, see `starter`; EOF means the runner is gone and the
//! run must not start), then runs the job in the same group (see `command`: a plain shell
//! command starts without the shell, as dash itself would start it) and exits with its status.
//! It outlives TERM, INT and HUP sent to the group, so the job alone decides how to end;
//! and when its parent, the runner, dies, it kills the whole tree: a run never outlives
//! its runner, so a retry elsewhere never runs beside it. The tree is the group and every
//! process that left it (`setsid`, a double fork): the supervisor is a child subreaper
//! (see `tree`), so such processes become its children, and they die with the run, on
//! the job's end, on SIGUSR1 from the runner (timeout, kill) and on the runner's death.
//!
//! A runner that is alive but stalled (SIGSTOP, a paused VM, a long GC) or cut off from
//! NATS cannot renew the run's lease, and a retry starts elsewhere once the lease expires.
//! With `--alive FILE MS` the supervisor watches the file the runner touches after every
//! lease renewal, and kills the group when it is older than MS (less than the lease TTL):
//! the run stops before its retry can start, without waiting for its runner to wake.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::getppid;

mod command;
mod tree;

pub use command::{Plan, environment_passes_through, shell_is_dash};

/// The supervisor's own binary, installed beside `cronrun`.
pub const BINARY: &str = "cronrun-supervise";
/// The hidden argument that selects this mode of the `cronrun` binary.
pub const ARG: &str = "__supervise";
/// `--alive FILE MS`: the runner's keepalive file and how stale it may get.
pub const ALIVE_ARG: &str = "--alive";
/// `--as UID:GID`: the job runs as this user and group (see `account`); the supervisor
/// stays as it is, so that it can end the job's tree.
pub const AS_ARG: &str = "--as";
/// `--input FILE`: the job's standard input is this file (the run's input, see the
/// runner), removed once open; without it, `/dev/null`.
pub const INPUT_ARG: &str = "--input";

/// `--protocol`: prints `PROTOCOL` and exits, so that a runner can tell a
/// `cronrun-supervise` left from another build (its arguments may differ) from its own.
pub const PROTOCOL_ARG: &str = "--protocol";
/// What this build's supervisor answers to `--protocol`. Change it with the arguments.
pub const PROTOCOL: &str =
    "cronrun-supervise 2: --alive FILE MS, --as UID:GID, --input FILE, shell CMD | exec PROG ARGS";

/// How often the parent is checked.
const PARENT_CHECK: Duration = Duration::from_millis(200);

/// Exit code when the release never came.
const NOT_RELEASED: u8 = 125;

/// Supervises the run `args` describe (the flags and command after the binary name, or
/// after `__supervise`).
pub fn main(args: &[String]) -> ExitCode {
    if args == [PROTOCOL_ARG] {
        println!("{PROTOCOL}");
        return ExitCode::SUCCESS;
    }
    let parent = getppid();
    // Everything that can be set up before the release is, so that the release is
    // followed by nothing but starting the job.
    let signals = match Signals::take() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("cronrun: cannot take the run's signals: {e}");
            return ExitCode::from(NOT_RELEASED);
        }
    };
    let (alive, args) = match args {
        [flag, path, ms, rest @ ..] if flag == ALIVE_ARG => match ms.parse() {
            Ok(ms) => (Some((PathBuf::from(path), Duration::from_millis(ms))), rest),
            Err(_) => {
                eprintln!("cronrun: {ALIVE_ARG} takes a file and milliseconds");
                return ExitCode::from(NOT_RELEASED);
            }
        },
        _ => (None, args),
    };
    let (run_as, args) = match args {
        [flag, ids, rest @ ..] if flag == AS_ARG => match ids.split_once(':').map(|(u, g)| (u.parse(), g.parse())) {
            Some((Ok(uid), Ok(gid))) => (Some((uid, gid)), rest),
            _ => {
                eprintln!("cronrun: {AS_ARG} takes UID:GID");
                return ExitCode::from(NOT_RELEASED);
            }
        },
        _ => (None, args),
    };
    let (input, args) = match args {
        [flag, path, rest @ ..] if flag == INPUT_ARG => match std::fs::File::open(path) {
            Ok(file) => {
                // Opened as the supervisor, before the job drops to its user, and before
                // the release: the file, private to the runner, is gone at once.
                let _ = std::fs::remove_file(path);
                (Some(file), rest)
            }
            Err(e) => {
                eprintln!("cronrun: {INPUT_ARG} {path}: {e}");
                return ExitCode::from(NOT_RELEASED);
            }
        },
        _ => (None, args),
    };
    // Exactly one line, byte by byte, from fd 0 itself: the pipe may be shared with the
    // other runs of the same instant, and each must take one line only (std's `Stdin`
    // would buffer, taking the lines of the others).
    let mut byte = [0u8; 1];
    let stdin = std::io::stdin();
    loop {
        match nix::unistd::read(stdin.as_fd(), &mut byte) {
            Ok(1) if byte[0] == b'\n' => break,
            Ok(1) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return ExitCode::from(NOT_RELEASED),
        }
    }
    supervise(args, parent, Options { alive, run_as, input }, signals)
}

/// What the flags before the job's command ask for.
struct Options {
    /// `--alive FILE MS`
    alive: Option<(PathBuf, Duration)>,
    /// `--as UID:GID`
    run_as: Option<(u32, u32)>,
    /// `--input FILE`, open.
    input: Option<std::fs::File>,
}

/// Whether the runner's keepalive file is older than `within` (or gone).
fn stale(path: &Path, within: Duration) -> bool {
    let modified = std::fs::metadata(path).and_then(|m| m.modified());
    modified.map(|t| t.elapsed().unwrap_or_default() > within).unwrap_or(true)
}

/// The signals the supervisor acts on, blocked and read from a signalfd: TERM, INT and
/// HUP, taken so that they do not end the supervisor (the job got them from the group and
/// decides); USR1, the runner's order to end the whole tree now (see `STOP_SIGNAL`); CHLD,
/// a child ended. No runtime and no handlers: a run's first process starts for little.
/// The job starts with an empty mask, as `Command` gives every child.
struct Signals(SignalFd);

impl Signals {
    /// Blocks the signals and opens their signalfd. The supervisor has one thread (in
    /// `cronrun __supervise` too: dispatched before anything starts a runtime), so this
    /// thread's mask is the process's, and no signal reaches a thread that would die of it.
    fn take() -> nix::Result<Signals> {
        let mut mask = SigSet::empty();
        for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, STOP_SIGNAL, Signal::SIGCHLD] {
            mask.add(signal);
        }
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
        SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).map(Signals)
    }

    /// Waits at most `timeout` for signals, and returns whether USR1 was among them.
    fn wait(&self, timeout: Duration) -> bool {
        let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, timeout).unwrap_or(0) <= 0 {
            return false;
        }
        let mut stop = false;
        while let Ok(Some(info)) = self.0.read_signal() {
            stop |= info.ssi_signo == STOP_SIGNAL as u32;
        }
        stop
    }
}

/// Sent by the runner to the supervisor alone: kill the run's whole tree and exit.
pub const STOP_SIGNAL: Signal = Signal::SIGUSR1;

/// Exit code of a run whose tree was killed (128 + KILL, as shells report it).
const KILLED: u8 = 137;

fn supervise(
    args: &[String],
    parent: nix::unistd::Pid,
    Options { alive, run_as, input }: Options,
    signals: Signals,
) -> ExitCode {
    let Some(plan) = Plan::of(args, shell_is_dash() && environment_passes_through()) else {
        eprintln!("cronrun: usage: cronrun {ARG} shell CMD | exec PROG ARGS...");
        return ExitCode::from(NOT_RELEASED);
    };
    if !tree::become_subreaper() {
        eprintln!("cronrun: cannot become a subreaper: processes leaving the run's group may outlive it");
    }
    let mut child = match plan.start(run_as, input.as_ref()) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("cronrun: cannot start {}: {e}", args.get(1).map(String::as_str).unwrap_or(""));
            return ExitCode::from(127);
        }
    };
    let mut next_check = Instant::now() + PARENT_CHECK;
    loop {
        if let Some(status) = child.try_wait().transpose() {
            // What the job left behind ends with it.
            tree::kill_tree();
            return status.map(process_exit).unwrap_or(ExitCode::FAILURE);
        }
        if signals.wait(next_check.saturating_duration_since(Instant::now())) {
            return stop_tree();
        }
        if Instant::now() >= next_check {
            next_check = Instant::now() + PARENT_CHECK;
            if getppid() != parent {
                return stop_tree();
            }
            if let Some((path, within)) = &alive
                && stale(path, *within)
            {
                eprintln!(
                    "cronrun: the runner renewed this run's lease last over {within:?} ago: stopping the run before a retry starts elsewhere"
                );
                return stop_tree();
            }
        }
    }
}

fn stop_tree() -> ExitCode {
    tree::kill_tree();
    ExitCode::from(KILLED)
}

/// The job's status as this process's: its code, or 128 + signal as shells report it.
fn process_exit(status: ExitStatus) -> ExitCode {
    ExitCode::from(exit_code(&status).clamp(0, 255) as u8)
}

/// Exit code for the record: the code, or 128 + signal as shells report it.
pub fn exit_code(status: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
