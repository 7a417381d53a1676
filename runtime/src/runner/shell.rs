//! Shell jobs: a command for `/bin/sh -c` or an argv, in a process group of its own so
//! that a timeout or a kill reaches every process it started.

use std::os::fd::OwnedFd;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use super::account::{self, RunAs};
use crate::spec::ShellSpec;

/// A started shell job.
pub struct ShellProcess {
    pub child: Child,
    pgid: Pid,
}

/// A run's supervisor process created ahead of its fire instant, blocked until released.
/// Creating a process costs about a millisecond here and hundreds of fires at one instant
/// would queue behind each other; releasing a prepared one costs a write.
pub struct Prepared {
    process: ShellProcess,
    /// None when released with its group.
    go: Option<ChildStdin>,
}

/// The variables of the agent's environment a job sees unless it sets `inherit_env`:
/// nothing else of the agent (its NATS URL, credentials path, secrets of its unit file)
/// reaches a job.
const KEPT_VARIABLES: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

/// The clean environment of a run: the kept variables the agent has, and a PATH if not.
fn clean_env() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> =
        KEPT_VARIABLES.iter().filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?))).collect();
    if !vars.iter().any(|(name, _)| name == "PATH") {
        vars.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    vars
}

/// Environment every run gets on top of the clean one (or the agent's) and the spec's.
pub struct RunEnv<'a> {
    pub job: &'a str,
    pub run_id: &'a str,
    pub attempt: u32,
    pub scheduled_at: &'a str,
    /// The file the runner touches with every renewal of the run's lease, and how stale
    /// it may get before the supervisor stops the run (see `supervisor`).
    pub alive: Option<(&'a std::path::Path, Duration)>,
    /// The runner's settings: whom the job may run as (see `account`).
    pub runner: &'a super::RunnerConfig,
}

/// Creates the job's process (in a group of its own), blocked until it reads a line from
/// `shared_stdin` (released with its group, see `starter`) or, without one, until
/// `Prepared::start`.
pub fn prepare(spec: &ShellSpec, env: &RunEnv<'_>, shared_stdin: Option<OwnedFd>) -> std::io::Result<Prepared> {
    if !env.runner.allow_shell {
        return Err(std::io::Error::other("this runner runs no shell jobs ([runner] allow_shell = false)"));
    }
    let uid = nix::unistd::geteuid().as_raw();
    let run_as = account::decide(spec, env.runner, uid, &account::HostAccounts).map_err(std::io::Error::other)?;
    // The run's first process is this binary as its supervisor (see `supervisor`).
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg(super::supervisor::ARG);
    if let Some((path, within)) = env.alive {
        cmd.arg(super::supervisor::ALIVE_ARG).arg(path).arg(within.as_millis().to_string());
    }
    if let RunAs::Account(a) = &run_as {
        cmd.arg(super::supervisor::AS_ARG).arg(format!("{}:{}", a.uid, a.gid));
    }
    match (&spec.command, &spec.argv) {
        (Some(command), _) => cmd.args(["shell", command]),
        (None, Some(argv)) if !argv.is_empty() => cmd.arg("exec").args(argv),
        _ => return Err(std::io::Error::other("shell spec has no command")),
    };
    if !spec.inherit_env {
        cmd.env_clear().envs(clean_env());
    }
    if let RunAs::Account(a) = &run_as {
        cmd.env("HOME", &a.home).env("USER", &a.name).env("LOGNAME", &a.name);
    }
    cmd.envs(&spec.env)
        .env("CRONRUN_JOB", env.job)
        .env("CRONRUN_RUN_ID", env.run_id)
        .env("CRONRUN_ATTEMPT", env.attempt.to_string())
        .env("CRONRUN_SCHEDULED_AT", env.scheduled_at)
        .stdin(shared_stdin.map(Stdio::from).unwrap_or_else(Stdio::piped))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    match (&spec.cwd, &run_as) {
        (Some(cwd), _) => {
            cmd.current_dir(cwd);
        }
        // As cron does: another user starts in its home, or at `/` when it has none here
        // (the runner's own directory is none of its business).
        (None, RunAs::Account(a)) => {
            cmd.current_dir(if a.home.is_dir() { a.home.as_path() } else { std::path::Path::new("/") });
        }
        (None, RunAs::Runner) => {}
    }
    let mut child = cmd.spawn()?;
    let go = child.stdin.take();
    let pgid = Pid::from_raw(child.id().map(|id| id as i32).unwrap_or(0));
    Ok(Prepared { process: ShellProcess { child, pgid }, go })
}

impl Prepared {
    /// The supervisor's pid.
    pub fn pid(&self) -> Option<u32> {
        self.process.child.id()
    }

    /// Releases the process: from here on it runs the job.
    pub async fn start(self) -> std::io::Result<ShellProcess> {
        if let Some(mut go) = self.go {
            go.write_all(b"go\n").await?;
        }
        Ok(self.process)
    }

    /// Discards a prepared process that will not run (its job was paused or edited).
    pub async fn discard(mut self) {
        self.process.signal(Signal::SIGKILL);
        let _ = self.process.child.wait().await;
    }
}

impl ShellProcess {
    /// Sends `signal` to the whole group. A group already gone is not an error.
    pub fn signal(&self, signal: Signal) {
        if self.pgid.as_raw() > 0 {
            let _ = killpg(self.pgid, signal);
        }
    }

    /// TERM to the group, then, after `grace` if the main process still lives, the end of
    /// the whole tree (see `kill_tree`).
    pub async fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.signal(Signal::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok) {
            Some(status) => Some(status),
            None => self.kill_tree().await,
        }
    }

    /// Ends the run's whole tree at once, processes that left the group included: the
    /// supervisor kills it and exits. KILL to the group too, in case it cannot.
    pub async fn kill_tree(&mut self) -> Option<ExitStatus> {
        if self.pgid.as_raw() > 0 {
            let _ = nix::sys::signal::kill(self.pgid, super::supervisor::STOP_SIGNAL);
        }
        let status = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await.ok().and_then(Result::ok);
        self.signal(Signal::SIGKILL);
        match status {
            Some(s) => Some(s),
            None => self.child.wait().await.ok(),
        }
    }
}

/// Parses `TERM`, `SIGTERM`, `kill`, `9`... into a signal.
pub fn parse_signal(s: &str) -> Option<Signal> {
    let upper = s.trim().to_ascii_uppercase();
    if let Ok(n) = upper.parse::<i32>() {
        return Signal::try_from(n).ok();
    }
    let name = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    name.parse().ok()
}

/// Exit code for the record: the code, or 128 + signal as shells report it.
pub fn exit_code(status: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse() {
        assert_eq!(parse_signal("term"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("SIGKILL"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("9"), Some(Signal::SIGKILL));
        assert_eq!(parse_signal("nope"), None);
    }
}
