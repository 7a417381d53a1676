//! Containment of a run's processes, the best this host allows, in this order:
//!
//! 1. **cgroup**: a cgroup v2 of its own per run (`cronrun-run-<pid>` under the
//!    supervisor's own cgroup). The job joins it between its fork and its exec (so it
//!    cannot fork before), every process it starts is born in it, and ending the run
//!    writes `cgroup.kill`: the kernel kills every process in it at once, forks in flight
//!    included. Pids stay the host's. Needs cgroup2 mounted and writable (root, or a
//!    delegated subtree).
//! 2. **pid-namespace**: a PID namespace per run, the supervisor's child its init (below).
//! 3. **subreaper**: the supervisor as child subreaper (see `tree`).
//!
//! The PID namespace:  When a namespace's init ends, the kernel kills every other process in it, and no
//! process can leave its PID namespace (`setsid`, double forks, daemons: all stay in),
//! so nothing of a run outlives it. The supervisor (outside) forks the init (inside):
//!
//! - the init reads the release, starts the job as its child, reaps whatever the job
//!   leaves behind (it is their parent once orphaned), and exits with the job's status as
//!   soon as the job ends: the kernel then kills what is left;
//! - the supervisor watches its parent (the runner), the keepalive file and the runner's
//!   stop signal, and KILLs the init to end the run; the init dies with it too
//!   (`PR_SET_PDEATHSIG`), so a KILLed supervisor takes the whole run along.
//!
//! The init gives the namespace its own `/proc` (in a mount namespace of its own whose
//! root follows the host's mounts, `MS_SLAVE`), so that the pids a job sees in `/proc`,
//! `ps` and `kill` are its namespace's.
//!
//! This needs `CAP_SYS_ADMIN` (a runner running as root). Without it, the supervisor is a
//! child subreaper instead and ends what it can find (see `tree`), which a process that
//! keeps forking can outrun.
#![allow(unsafe_code)] // fork(2), only in a process with one thread (see `fork`).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::mount::{MsFlags, mount};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::Signal;
use nix::unistd::ForkResult;

/// What keeps a run's processes from outliving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// A cgroup v2 per run, killed with `cgroup.kill` (see the module).
    Cgroup,
    /// A PID namespace per run (see the module).
    PidNamespace,
    /// The supervisor as child subreaper, killing what it finds (see `tree`).
    Subreaper,
}

impl Containment {
    /// One line for the runner's log and `--containment`.
    pub fn describe(self) -> &'static str {
        match self {
            Containment::Cgroup => {
                "cgroup: each shell run has a cgroup v2 of its own, killed whole (cgroup.kill) when the run ends; \
                 nothing it starts outlives it"
            }
            Containment::PidNamespace => {
                "pid-namespace: each shell run has a PID namespace of its own (no writable cgroup v2 here); \
                 nothing it starts outlives it"
            }
            Containment::Subreaper => {
                "subreaper: neither a writable cgroup v2 nor PID namespaces here (the runner is not root?); a shell \
                 run's supervisor stops and kills what it finds of the run's processes, which a process that keeps \
                 forking may outrun"
            }
        }
    }
}

/// From now on, this process's children start in a new PID namespace, if this process
/// may make one.
pub fn new_pid_namespace() -> nix::Result<()> {
    unshare(CloneFlags::CLONE_NEWPID)
}

/// fork(2). Sound here: the supervisor has one thread (`cronrun __supervise` is
/// dispatched before any runtime or thread starts), so the child is a full copy of it.
pub fn fork() -> nix::Result<ForkResult> {
    // SAFETY: one thread in this process (see above): no lock is held by another thread
    // at the fork, and the child may allocate and use std as the parent does.
    unsafe { nix::unistd::fork() }
}

/// In the init, first thing: die with the supervisor. False when the supervisor is gone
/// already (its end of `link` closed), so that the init must not go on.
pub fn die_with_parent(link: &OwnedFd) -> bool {
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() {
        return false;
    }
    // The parent is outside the namespace (getppid says 0): its end of the pipe tells.
    let mut fds = [PollFd::new(link.as_fd(), PollFlags::POLLOUT)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => !fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)),
        Err(_) => false,
    }
}

/// In the init: a mount namespace whose root follows the host's mounts and whose `/proc`
/// is the new PID namespace's.
pub fn own_proc() -> nix::Result<()> {
    unshare(CloneFlags::CLONE_NEWNS)?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), flags, None::<&str>)
}

/// Skips the containments before the one named here (`cgroup`, `pid-namespace`,
/// `subreaper`), for tests of each: the runner starts its supervisors with a fixed
/// environment, so neither a job nor the agent's environment can set it for a run.
pub const CONTAINMENT_VAR: &str = "CRONRUN_SUPERVISOR_CONTAINMENT";

/// Whether `containment` may be tried, given `CONTAINMENT_VAR`.
pub fn allowed(containment: Containment) -> bool {
    let rank = |c: Containment| c as u8;
    let floor = match std::env::var(CONTAINMENT_VAR).as_deref() {
        Ok("pid-namespace") => Containment::PidNamespace,
        Ok("subreaper") => Containment::Subreaper,
        _ => Containment::Cgroup,
    };
    rank(containment) >= rank(floor)
}

/// How long the end of a run waits for the kernel to empty its cgroup.
const CGROUP_KILL_WAIT: Duration = Duration::from_secs(5);

/// A run's cgroup v2 (see the module), removed when dropped (once empty).
pub struct RunCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open (as this process: the job writes to it after dropping to its
    /// user, and the kernel checks the opener's rights).
    procs: File,
}

impl RunCgroup {
    /// A new cgroup below this process's own, if cgroup2 is mounted and writable here.
    pub fn make() -> Option<RunCgroup> {
        if !allowed(Containment::Cgroup) {
            return None;
        }
        let dir = run_cgroup(&own_cgroup()?, std::process::id());
        std::fs::create_dir(&dir).ok()?;
        match std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")) {
            Ok(procs) => Some(RunCgroup { dir, procs }),
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// Makes the process `cmd` starts join this cgroup before it execs (after it dropped
    /// to its user: the kernel checks the rights of whoever opened `cgroup.procs`). A
    /// failed join leaves it where it was; `holds` tells.
    pub fn join(&self, cmd: &mut Command) {
        let fd = self.procs.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and only calls
        // write(2), which is async-signal-safe; the fd stays open in the parent (`self`)
        // until the child has exec'd (spawn returns after that).
        unsafe {
            cmd.pre_exec(move || {
                let _ = nix::unistd::write(BorrowedFd::borrow_raw(fd), b"0");
                Ok(())
            });
        }
    }

    /// Whether a process lives in the cgroup.
    pub fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .is_ok_and(|events| events.lines().any(|line| line == "populated 1"))
    }

    /// Kills every process in the cgroup and waits (bounded) until the kernel has ended
    /// them all, reaping those that were our children.
    pub fn kill(&self) {
        if !self.populated() {
            return;
        }
        let written = std::fs::OpenOptions::new().write(true).open(self.dir.join("cgroup.kill"));
        if written.and_then(|mut file| file.write_all(b"1")).is_err() {
            return;
        }
        let until = Instant::now() + CGROUP_KILL_WAIT;
        while self.populated() && Instant::now() < until {
            crate::tree::reap();
            std::thread::sleep(Duration::from_millis(1));
        }
        crate::tree::reap();
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// This process's cgroup v2 directory, where cgroup2 is mounted. A supervisor's is its
/// runner's: the runs' cgroups are below it (see `run_cgroup`).
pub fn own_cgroup() -> Option<PathBuf> {
    let mount = cgroup2_mount()?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(mount.join(own.trim_start_matches('/')))
}

/// The cgroup of the run whose supervisor has pid `supervisor`, below `parent` (the
/// supervisor's own cgroup: its runner's).
pub fn run_cgroup(parent: &Path, supervisor: u32) -> PathBuf {
    parent.join(format!("cronrun-run-{supervisor}"))
}

/// Ends what a supervisor KILLed from outside left of its run's cgroup (`dir`): kills its
/// processes and removes it, waiting at most `within` for the kernel to empty it. For the
/// runner, once it has reaped a supervisor that did not exit by itself (one that does
/// removes its cgroup); nothing to do (and no wait) when there is no such cgroup.
pub fn end_left_cgroup(dir: &Path, within: Duration) {
    if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
        return;
    }
    let _ = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.kill")).and_then(|mut f| f.write_all(b"1"));
    let until = Instant::now() + within;
    while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Where cgroup2 is mounted, from `/proc/self/mountinfo` (`... MOUNTPOINT ... - cgroup2 ...`).
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        (fs.split_whitespace().next()? == "cgroup2").then_some(())?;
        Some(PathBuf::from(unescape(mount.split_whitespace().nth(4)?)))
    })
}

/// A path of `mountinfo`, whose spaces, tabs, newlines and backslashes are octal escapes.
fn unescape(path: &str) -> String {
    path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// What runs get here: a cgroup only if a process really joins one (a cgroup2 mounted
/// but not ours to use fails there), else a PID namespace if this process may make one.
/// Ends this process's use of both: run it in a process of its own (`--containment`).
pub fn probe() -> Containment {
    remove_left_behind();
    if let Some(cgroup) = RunCgroup::make() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "read x"]).stdin(std::process::Stdio::piped());
        cgroup.join(&mut cmd);
        if let Ok(mut child) = cmd.spawn() {
            let joined = cgroup.populated();
            cgroup.kill();
            let _ = child.kill();
            let _ = child.wait();
            if joined {
                return Containment::Cgroup;
            }
        }
    }
    match allowed(Containment::PidNamespace) && new_pid_namespace().is_ok() {
        true => Containment::PidNamespace,
        false => Containment::Subreaper,
    }
}

/// Removes the empty cgroups of supervisors that are gone (KILLed before they could),
/// below this process's cgroup: asked by a runner starting, so that a runner's life
/// leaves none behind for long.
fn remove_left_behind() {
    let Some(parent) = own_cgroup() else { return };
    let Ok(entries) = std::fs::read_dir(&parent) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("cronrun-run-")?.parse::<i32>().ok()) else {
            continue;
        };
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH);
        if gone {
            // Only an empty cgroup can be removed: one with processes stays.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}
