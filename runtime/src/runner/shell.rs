//! Shell jobs: a command for `/bin/sh -c` or an argv, in a process group of its own so
//! that a timeout or a kill reaches every process it started.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::spec::ShellSpec;

/// A started shell job.
pub struct ShellProcess {
    pub child: Child,
    pgid: Pid,
}

/// Environment every run gets on top of the runner's and the spec's.
pub struct RunEnv<'a> {
    pub job: &'a str,
    pub run_id: &'a str,
    pub attempt: u32,
    pub scheduled_at: &'a str,
}

pub fn spawn(spec: &ShellSpec, env: &RunEnv<'_>) -> std::io::Result<ShellProcess> {
    let mut cmd = match (&spec.command, &spec.argv) {
        (Some(command), _) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(command);
            c
        }
        (None, Some(argv)) if !argv.is_empty() => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
        _ => return Err(std::io::Error::other("shell spec has no command")),
    };
    cmd.envs(&spec.env)
        .env("CRONRUN_JOB", env.job)
        .env("CRONRUN_RUN_ID", env.run_id)
        .env("CRONRUN_ATTEMPT", env.attempt.to_string())
        .env("CRONRUN_SCHEDULED_AT", env.scheduled_at)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let child = cmd.spawn()?;
    let pgid = Pid::from_raw(child.id().map(|id| id as i32).unwrap_or(0));
    Ok(ShellProcess { child, pgid })
}

impl ShellProcess {
    /// Sends `signal` to the whole group. A group already gone is not an error.
    pub fn signal(&self, signal: Signal) {
        if self.pgid.as_raw() > 0 {
            let _ = killpg(self.pgid, signal);
        }
    }

    /// TERM to the group, then KILL after `grace` if the main process still lives.
    pub async fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.signal(Signal::SIGTERM);
        let status = tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok);
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
