//! `cronrun-supervise [--alive FILE MS] [--as UID:GID] [--env FILE] [--input FILE] shell CMD | exec PROG ARGS...`
//! (or `cronrun __supervise ...` where that binary is missing): the first process of every
//! shell run. A crate of its own, so that the binary exec'd for every run is small.
//!
//! The runner starts it ahead of the run's instant in a new process group, with a fixed
//! environment: the job's (`--env FILE`) reaches the job's own exec only, after the drop
//! to its user (`--as`), so that nothing a job author sets (`LD_PRELOAD`...) is read by a
//! process running as root. It waits for one line on stdin (the release, see `starter`;
//! EOF means the runner is gone and the run must not start), then runs the job in the
//! same group (see `command`: a plain shell command starts without the shell, as dash
//! itself would start it) and exits with its status. It outlives TERM, INT and HUP sent to
//! the group, so the job alone decides how to end; and when its parent, the runner, dies,
//! it kills the whole tree: a run never outlives its runner, so a retry elsewhere never
//! runs beside it.
//!
//! The tree is every process the job starts, `setsid` and double forks included. Where
//! the supervisor may (root), each run gets a PID namespace whose init is the
//! supervisor's child (see `contain`): ending the init ends everything in it, and nothing
//! leaves it. Elsewhere the supervisor is a child subreaper (see `tree`), so processes
//! that leave the group become its children and are killed as it finds them. Either way
//! the tree dies on the job's end, on SIGUSR1 from the runner (timeout, kill) and on the
//! runner's death.
//!
//! A runner that is alive but stalled (SIGSTOP, a paused VM, a long GC) or cut off from
//! NATS cannot renew the run's lease, and a retry starts elsewhere once the lease expires.
//! With `--alive FILE MS` the supervisor watches the file the runner touches after every
//! lease renewal, and kills the group when it is older than MS (less than the lease TTL):
//! the run stops before its retry can start, without waiting for its runner to wake.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, getppid};

mod command;
mod contain;
mod tree;

pub use command::{Plan, environment_passes_through, shell_is_dash};
pub use contain::{Containment, end_left_cgroup, own_cgroup, run_cgroup};

/// The supervisor's own binary, installed beside `cronrun`.
pub const BINARY: &str = "cronrun-supervise";
/// The hidden argument that selects this mode of the `cronrun` binary.
pub const ARG: &str = "__supervise";
/// `--alive FILE MS`: the runner's keepalive file and how stale it may get.
pub const ALIVE_ARG: &str = "--alive";
/// `--as UID:GID`: the job runs as this user and group (see `account`); the supervisor
/// stays as it is, so that it can end the job's tree.
pub const AS_ARG: &str = "--as";
/// `--env FILE`: the job's environment (see `read_env`), removed once read; without it,
/// this process's own.
pub const ENV_ARG: &str = "--env";
/// `--input FILE`: the job's standard input is this file (the run's input, see the
/// runner), removed once open; without it, `/dev/null`.
pub const INPUT_ARG: &str = "--input";

/// `--protocol`: prints `PROTOCOL` and exits, so that a runner can tell a
/// `cronrun-supervise` left from another build (its arguments may differ) from its own.
pub const PROTOCOL_ARG: &str = "--protocol";
/// What this build's supervisor answers to `--protocol`. Change it with the arguments.
pub const PROTOCOL: &str =
    "cronrun-supervise 3: --alive FILE MS, --as UID:GID, --env FILE, --input FILE, shell CMD | exec PROG ARGS";
/// `--containment`: prints which containment runs get here (see `Containment`) and exits.
pub const CONTAINMENT_ARG: &str = "--containment";

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
    if args == [CONTAINMENT_ARG] {
        // Asked once by a runner: what its runs would get (this process ends here).
        println!("{}", contain::probe().describe());
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
    let (env, args) = match args {
        [flag, path, rest @ ..] if flag == ENV_ARG => match read_env(Path::new(path)) {
            Ok(env) => (env, rest),
            Err(e) => {
                eprintln!("cronrun: {ENV_ARG} {path}: {e}");
                return ExitCode::from(NOT_RELEASED);
            }
        },
        // Run by hand: the job gets this process's environment.
        _ => (std::env::vars_os().collect(), args),
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
    let Some(plan) = Plan::of(args, shell_is_dash() && environment_passes_through(&env)) else {
        eprintln!("cronrun: usage: cronrun {ARG} shell CMD | exec PROG ARGS...");
        return ExitCode::from(NOT_RELEASED);
    };
    let cgroup = contain::RunCgroup::make();
    let job = Job { plan, run_as, input, env, cgroup };
    if job.cgroup.is_none() && contain::allowed(Containment::PidNamespace) && contain::new_pid_namespace().is_ok() {
        return contained(job, parent, alive, signals);
    }
    supervise(job, parent, alive, signals)
}

/// The file of the job's environment: `NAME=VALUE` entries, each ended by a NUL byte,
/// written by the runner into its private directory and removed here once read.
/// The supervisor itself starts with a fixed environment (nothing of the job's reaches a
/// process running as root: no `LD_PRELOAD`, `GCONV_PATH`...): the job's is given to the
/// job's own exec only, after the switch to its user.
fn read_env(path: &Path) -> std::io::Result<Vec<(OsString, OsString)>> {
    let text = std::fs::read(path);
    let _ = std::fs::remove_file(path);
    let mut env = Vec::new();
    for entry in text?.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        match entry.iter().position(|b| *b == b'=') {
            Some(at) if at > 0 => {
                env.push((OsString::from_vec(entry[..at].to_vec()), OsString::from_vec(entry[at + 1..].to_vec())))
            }
            _ => return Err(std::io::Error::other("an entry is not NAME=VALUE")),
        }
    }
    Ok(env)
}

/// `env` as `read_env` reads it: the text of an `--env` file.
pub fn encode_env<'a>(
    env: impl IntoIterator<Item = (&'a std::ffi::OsStr, &'a std::ffi::OsStr)>,
) -> std::io::Result<Vec<u8>> {
    let mut text = Vec::new();
    for (name, value) in env {
        let (name, value) = (name.as_bytes(), value.as_bytes());
        if name.is_empty() || name.contains(&b'=') || name.contains(&0) || value.contains(&0) {
            let name = String::from_utf8_lossy(name);
            let why = format!("the variable {name:?} cannot be passed (empty, a NUL byte, or = in its name)");
            return Err(std::io::Error::other(why));
        }
        text.extend_from_slice(name);
        text.push(b'=');
        text.extend_from_slice(value);
        text.push(0);
    }
    Ok(text)
}

/// The job of a run and how it starts.
struct Job<'a> {
    plan: Plan<'a>,
    /// `--as UID:GID`
    run_as: Option<(u32, u32)>,
    /// `--input FILE`, open.
    input: Option<std::fs::File>,
    /// The job's environment (`--env FILE`).
    env: Vec<(OsString, OsString)>,
    /// The run's cgroup, if it has one (see `contain`).
    cgroup: Option<contain::RunCgroup>,
}

impl Job<'_> {
    fn start(&self) -> std::io::Result<std::process::Child> {
        let join = |cmd: &mut std::process::Command| {
            if let Some(cgroup) = &self.cgroup {
                cgroup.join(cmd);
            }
        };
        self.plan.start(self.run_as, self.input.as_ref(), &self.env, join)
    }

    /// Kills whatever is left of the run: its cgroup, then what the subreaper finds
    /// (everything when the job did not join the cgroup).
    fn end_tree(&self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
        tree::kill_tree();
    }
}

/// Waits for the release: exactly one line, byte by byte, from fd 0 itself: the pipe may
/// be shared with the other runs of the same instant, and each must take one line only
/// (std's `Stdin` would buffer, taking the lines of the others). False on EOF (the runner
/// is gone) or an error: the run must not start.
fn released() -> bool {
    let mut byte = [0u8; 1];
    let stdin = std::io::stdin();
    loop {
        match nix::unistd::read(stdin.as_fd(), &mut byte) {
            Ok(1) if byte[0] == b'\n' => return true,
            Ok(1) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            _ => return false,
        }
    }
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

/// How long the supervisor waits for the init it KILLed (the kernel ends every process
/// of the namespace first; one stuck in the kernel holds it up).
const INIT_KILL_WAIT: Duration = Duration::from_secs(5);

/// The run in a PID namespace of its own (see `contain`): the init child starts the job;
/// this process watches the runner and ends the namespace by ending the init.
fn contained(job: Job<'_>, parent: Pid, alive: Option<(PathBuf, Duration)>, signals: Signals) -> ExitCode {
    // The init writes a byte once released; its end closed tells it that we are gone.
    let (from_init, to_supervisor) = match nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK) {
        Ok(pipe) => pipe,
        Err(e) => {
            eprintln!("cronrun: cannot set up the run's namespace: {e}");
            return ExitCode::from(NOT_RELEASED);
        }
    };
    let init = match contain::fork() {
        Ok(ForkResult::Child) => {
            drop((from_init, signals));
            init(&job, &to_supervisor)
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            eprintln!("cronrun: cannot start the run's namespace: {e}");
            return ExitCode::from(NOT_RELEASED);
        }
    };
    drop((to_supervisor, job));
    let mut released = false;
    let mut next_check = Instant::now() + PARENT_CHECK;
    loop {
        match waitpid(init, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {}
            Ok(WaitStatus::Exited(_, code)) => return ExitCode::from(code.clamp(0, 255) as u8),
            Ok(WaitStatus::Signaled(_, signal, _)) => return ExitCode::from((128 + signal as i32).clamp(0, 255) as u8),
            Ok(_) => {}
            Err(_) => return ExitCode::FAILURE,
        }
        if signals.wait(next_check.saturating_duration_since(Instant::now())) {
            return end_namespace(init);
        }
        if Instant::now() >= next_check {
            next_check = Instant::now() + PARENT_CHECK;
            if getppid() != parent {
                return end_namespace(init);
            }
            released = released || nix::unistd::read(&from_init, &mut [0u8; 1]) == Ok(1);
            if let Some((path, within)) = &alive
                && released
                && stale(path, *within)
            {
                eprintln!(
                    "cronrun: the runner renewed this run's lease last over {within:?} ago: stopping the run before a retry starts elsewhere"
                );
                return end_namespace(init);
            }
        }
    }
}

/// KILLs the namespace's init, which takes every process of the namespace with it, and
/// waits (bounded) until the kernel has ended them all.
fn end_namespace(init: Pid) -> ExitCode {
    let _ = nix::sys::signal::kill(init, Signal::SIGKILL);
    let until = Instant::now() + INIT_KILL_WAIT;
    while Instant::now() < until {
        match waitpid(init, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => std::thread::sleep(Duration::from_millis(2)),
            _ => break,
        }
    }
    ExitCode::from(KILLED)
}

/// The namespace's init: dies with the supervisor, mounts the namespace's `/proc`, waits
/// for the release, starts the job, reaps every process that ends, and exits with the
/// job's status when the job ends (the kernel then kills the rest of the namespace).
fn init(job: &Job<'_>, to_supervisor: &OwnedFd) -> ! {
    if !contain::die_with_parent(to_supervisor) {
        std::process::exit(NOT_RELEASED.into());
    }
    // Without it (a container that forbids the mount) the job sees the host's /proc.
    let _ = contain::own_proc();
    if !released() {
        std::process::exit(NOT_RELEASED.into());
    }
    let _ = nix::unistd::write(to_supervisor, b"r");
    let child = match job.start() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("cronrun: cannot start {}: {e}", job.plan.program());
            std::process::exit(127);
        }
    };
    let job_pid = Pid::from_raw(child.id() as i32);
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == job_pid => std::process::exit(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == job_pid => std::process::exit(128 + signal as i32),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => std::process::exit(1),
        }
    }
}

/// The run in its cgroup, or with neither a cgroup nor a namespace: this process is a
/// child subreaper, starts the job at the release, and at the end kills the cgroup and
/// what it finds of the tree (see `contain`, `tree`).
fn supervise(job: Job<'_>, parent: Pid, alive: Option<(PathBuf, Duration)>, signals: Signals) -> ExitCode {
    if !tree::become_subreaper() {
        eprintln!("cronrun: cannot become a subreaper: processes leaving the run's group may outlive it");
    }
    if !released() {
        return ExitCode::from(NOT_RELEASED);
    }
    let mut child = match job.start() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("cronrun: cannot start {}: {e}", job.plan.program());
            return ExitCode::from(127);
        }
    };
    let mut next_check = Instant::now() + PARENT_CHECK;
    loop {
        if let Some(status) = child.try_wait().transpose() {
            // What the job left behind ends with it.
            job.end_tree();
            return status.map(process_exit).unwrap_or(ExitCode::FAILURE);
        }
        if signals.wait(next_check.saturating_duration_since(Instant::now())) {
            return stop_tree(&job);
        }
        if Instant::now() >= next_check {
            next_check = Instant::now() + PARENT_CHECK;
            if getppid() != parent {
                return stop_tree(&job);
            }
            if let Some((path, within)) = &alive
                && stale(path, *within)
            {
                eprintln!(
                    "cronrun: the runner renewed this run's lease last over {within:?} ago: stopping the run before a retry starts elsewhere"
                );
                return stop_tree(&job);
            }
        }
    }
}

fn stop_tree(job: &Job<'_>) -> ExitCode {
    job.end_tree();
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
