//! The shell executor: a command for `/bin/sh -c` or an argv, in a process group of its
//! own under its supervisor process (see `supervisor`), so that a timeout or a kill
//! reaches every process it started and the run dies with its runner.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use chrono::SecondsFormat;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::{Exit, Outcome, PrepareError, Ready, RunInfo, Running, StartError, Stop};
use crate::output::{Line, Source, read_lines};
use crate::runner::RunnerConfig;
use crate::runner::account::{self, RunAs};
use crate::runner::starter::Ticket;
use crate::runner::supervisor::{self, exit_code};
use crate::spec::ShellSpec;

/// A started shell job.
struct ShellProcess {
    child: Child,
    pgid: Pid,
}

/// A run's supervisor process created ahead of its fire instant, blocked until released.
/// Creating a process costs about a millisecond here and hundreds of fires at one instant
/// would queue behind each other; releasing a prepared one costs a write.
struct Prepared {
    process: ShellProcess,
    /// None when released with its group.
    go: Option<ChildStdin>,
    max_line_bytes: usize,
    /// The run's environment and input files, which the supervisor removes once read.
    leftovers: Vec<PathBuf>,
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

/// Creates the job's process (in a group of its own), blocked until it reads a line from
/// the stdin of `ticket`'s group (released with its group, see `starter`) or, without one,
/// until started. `env` is the spec's `env` with its secrets' values, read for this run.
pub(super) fn prepare(
    spec: &ShellSpec,
    env: &BTreeMap<String, String>,
    run: &RunInfo<'_>,
    runner: &RunnerConfig,
    supervisor: (&Path, Option<&str>),
    ticket: Option<&Ticket>,
) -> Result<Box<dyn Ready>, PrepareError> {
    let stdin = match ticket {
        Some(t) => Some(t.stdin.try_clone().map_err(PrepareError::Spawn)?),
        None => None,
    };
    let prepared = spawn(spec, env, run, runner, supervisor, stdin)?;
    if let Some(t) = ticket {
        t.set_pid(prepared.process.child.id());
    }
    Ok(Box::new(prepared))
}

fn spawn(
    spec: &ShellSpec,
    env: &BTreeMap<String, String>,
    run: &RunInfo<'_>,
    runner: &RunnerConfig,
    (exe, mode): (&Path, Option<&str>),
    stdin: Option<OwnedFd>,
) -> Result<Prepared, PrepareError> {
    if !runner.allow_shell {
        return Err(PrepareError::ShellNotAllowed);
    }
    let uid = nix::unistd::geteuid().as_raw();
    let run_as = account::decide(spec, runner, uid, &account::HostAccounts)?;
    // The run's first process is its supervisor (see `supervisor`).
    let job_args: Vec<&str> = match (&spec.command, &spec.argv) {
        (Some(command), _) => vec!["shell", command],
        (None, Some(argv)) if !argv.is_empty() => ["exec"].into_iter().chain(argv.iter().map(String::as_str)).collect(),
        _ => return Err(PrepareError::NoCommand),
    };
    if let RunAs::Account(a) = &run_as
        && !runner.allow_root
        && let Some(refused) = privileged_group(a.gid, spec.group.as_deref())
    {
        return Err(PrepareError::PrivilegedGroup { what: refused });
    }
    let mut cmd = Command::new(exe);
    cmd.args(mode);
    if let Some((path, within)) = run.alive {
        cmd.arg(supervisor::ALIVE_ARG).arg(path).arg(within.as_millis().to_string());
    }
    if let RunAs::Account(a) = &run_as {
        cmd.arg(supervisor::AS_ARG).arg(format!("{}:{}", a.uid, a.gid));
    }
    // The job's environment goes to the job's exec alone, through a private file: the
    // supervisor, root when the job runs as another user, starts with a fixed one.
    let env_file = write_job_env(&job_env(spec, env, run, &run_as), run.alive.map(|(path, _)| path))?;
    cmd.arg(supervisor::ENV_ARG).arg(&env_file);
    let removed = |input: &Option<PathBuf>| {
        let _ = std::fs::remove_file(&env_file);
        if let Some(path) = input {
            let _ = std::fs::remove_file(path);
        }
    };
    let input_file = match &run.input {
        Some(input) => {
            // Beside the keepalive file, in the runner's private directory: the supervisor
            // opens it as the runner's user, makes it the job's stdin and removes it.
            let Some((alive, _)) = run.alive else {
                removed(&None);
                return Err(PrepareError::NoInputDirectory);
            };
            let path = PathBuf::from(format!("{}.input", alive.display()));
            if let Err(e) = crate::private_file::write(&path, input) {
                removed(&None);
                return Err(PrepareError::Input(e));
            }
            cmd.arg(supervisor::INPUT_ARG).arg(&path);
            Some(path)
        }
        None => None,
    };
    cmd.args(job_args)
        .env_clear()
        .envs(SUPERVISOR_ENV)
        .stdin(stdin.map(Stdio::from).unwrap_or_else(Stdio::piped))
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
            cmd.current_dir(if a.home.is_dir() { a.home.as_path() } else { Path::new("/") });
        }
        (None, RunAs::Runner) => {}
    }
    let mut child = cmd.spawn().map_err(|e| {
        removed(&input_file);
        PrepareError::Spawn(e)
    })?;
    let go = child.stdin.take();
    let pgid = Pid::from_raw(child.id().map(|id| id as i32).unwrap_or(0));
    let leftovers = input_file.into_iter().chain([env_file]).collect();
    Ok(Prepared { process: ShellProcess { child, pgid }, go, max_line_bytes: runner.max_line_bytes, leftovers })
}

/// The whole environment of a run's supervisor, which runs as root when the job runs as
/// another user: fixed, so that nothing a job author sets (`LD_PRELOAD`, `LD_AUDIT`,
/// `GCONV_PATH`, `MALLOC_*`...) reaches a root process. The job's own goes to the job's
/// exec (see `job_env`).
const SUPERVISOR_ENV: [(&str, &str); 1] = [("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")];

/// The job's environment: the agent's (`inherit_env`) or the clean one, the account's
/// `HOME`, `USER` and `LOGNAME`, the spec's `env` (`spec_env`, its secrets resolved), and
/// the run's `CRONRUN_*`, each overriding the ones before.
fn job_env(
    spec: &ShellSpec,
    spec_env: &BTreeMap<String, String>,
    run: &RunInfo<'_>,
    run_as: &RunAs,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = match spec.inherit_env {
        true => std::env::vars_os().collect(),
        false => clean_env().into_iter().map(|(n, v)| (n.into(), v.into())).collect(),
    };
    let mut set = |name: &str, value: OsString| {
        env.insert(name.into(), value);
    };
    if let RunAs::Account(a) = run_as {
        set("HOME", a.home.clone().into());
        set("USER", a.name.clone().into());
        set("LOGNAME", a.name.clone().into());
    }
    for (name, value) in spec_env {
        set(name, value.into());
    }
    set("CRONRUN_JOB", run.job.into());
    set("CRONRUN_RUN_ID", run.run_id.into());
    set("CRONRUN_ATTEMPT", run.attempt.to_string().into());
    set("CRONRUN_SCHEDULED_AT", run.scheduled_at.to_rfc3339_opts(SecondsFormat::Millis, true).into());
    // Last, as the variables above: the run's own, whatever the spec's `env` says.
    if let Some(traceparent) = &run.traceparent {
        set("TRACEPARENT", traceparent.into());
    }
    env
}

/// Writes the job's environment for its supervisor (`--env`), into the runner's private
/// keepalive directory beside `alive` (a memory file system), else a private file in the
/// temporary directory. The supervisor removes it once read.
fn write_job_env(env: &BTreeMap<OsString, OsString>, alive: Option<&Path>) -> Result<PathBuf, PrepareError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let failed = PrepareError::Environment;
    let text = supervisor::encode_env(env.iter().map(|(n, v)| (n.as_os_str(), v.as_os_str()))).map_err(failed)?;
    let (mut file, path) = match alive {
        Some(alive) => {
            let path = PathBuf::from(format!("{}.env", alive.display()));
            let _ = std::fs::remove_file(&path);
            let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path);
            (file.map_err(failed)?, path)
        }
        None => {
            let file = tempfile::Builder::new().prefix("cronrun-env-").tempfile().map_err(failed)?;
            file.keep().map_err(|e| failed(e.error))?
        }
    };
    file.write_all(&text).map_err(|e| {
        let _ = std::fs::remove_file(&path);
        failed(e)
    })?;
    Ok(path)
}

/// Groups that give their members root's power or its secrets, by name where the host
/// has them; gid 0 always. A job runs in one (its `group`, or its user's primary group)
/// only on a runner with `[runner] allow_root = true`.
const PRIVILEGED_GROUPS: [&str; 10] =
    ["root", "sudo", "wheel", "admin", "shadow", "disk", "kmem", "docker", "lxd", "libvirt"];

/// Why a job may not run with gid `gid` without `allow_root`, if it may not: which group
/// it would run in, for `PrepareError::PrivilegedGroup`.
fn privileged_group(gid: u32, named: Option<&str>) -> Option<String> {
    static GIDS: std::sync::OnceLock<Vec<(u32, &'static str)>> = std::sync::OnceLock::new();
    let gids = GIDS.get_or_init(|| {
        let by_name = PRIVILEGED_GROUPS.iter().filter_map(|&name| {
            let group = nix::unistd::Group::from_name(name).ok().flatten()?;
            Some((group.gid.as_raw(), name))
        });
        [(0, "root")].into_iter().chain(by_name).collect()
    });
    let (_, name) = gids.iter().find(|(privileged, _)| *privileged == gid)?;
    Some(match named {
        Some(group) => format!("its group {group:?} (gid {gid}, {name})"),
        None => format!("its user's primary group (gid {gid}, {name})"),
    })
}

/// The supervisor to exec: `cronrun-supervise` beside this binary (a few MB, so each run
/// starts fast) when it speaks this build's `PROTOCOL`, else this binary itself in its
/// `__supervise` mode. Looked up once, by the first run; others wait for that answer.
pub(super) async fn supervisor_command() -> Result<(&'static Path, Option<&'static str>), PrepareError> {
    static FOUND: tokio::sync::OnceCell<Option<(PathBuf, bool)>> = tokio::sync::OnceCell::const_new();
    let found = FOUND
        .get_or_init(|| async {
            let exe = std::env::current_exe().ok()?;
            let small = exe.with_file_name(supervisor::BINARY);
            let speaks = small.is_file() && speaks_our_protocol(&small, PROTOCOL_ANSWER_MAX).await;
            let found = if speaks { (small, true) } else { (exe, false) };
            say_containment(&found.0, (!found.1).then_some(supervisor::ARG)).await;
            Some(found)
        })
        .await;
    let Some((path, small)) = found else { return Err(PrepareError::NoSupervisor) };
    Ok((path.as_path(), (!small).then_some(supervisor::ARG)))
}

/// Says in one log line what keeps shell runs' processes from outliving them here (see
/// `supervisor::Containment`), as the supervisor finds it.
async fn say_containment(binary: &Path, mode: Option<&str>) {
    let mut ask = Command::new(binary);
    ask.args(mode).arg(supervisor::CONTAINMENT_ARG).env_clear().envs(SUPERVISOR_ENV);
    ask.stdin(Stdio::null()).stderr(Stdio::null()).kill_on_drop(true);
    match tokio::time::timeout(PROTOCOL_ANSWER_MAX, ask.output()).await {
        Ok(Ok(out)) if out.status.success() => {
            let said = String::from_utf8_lossy(&out.stdout);
            match said.starts_with("pid-namespace") {
                true => info!("shell run containment: {}", said.trim()),
                false => warn!("shell run containment: {}", said.trim()),
            }
        }
        _ => warn!(
            "shell run containment: unknown ({} {} did not answer)",
            binary.display(),
            supervisor::CONTAINMENT_ARG
        ),
    }
}

/// Finds the supervisor and says which containment is in force, once, at the runner's
/// start.
pub(crate) async fn announce() {
    let _ = supervisor_command().await;
}

/// How long `cronrun-supervise --protocol` may take to answer: it prints a line and exits.
const PROTOCOL_ANSWER_MAX: Duration = Duration::from_secs(5);

/// Whether `binary --protocol` answers this build's `PROTOCOL` within `within` (an older
/// or newer `cronrun-supervise` left beside an upgraded `cronrun` may take other
/// arguments, and one that hangs must not hold the runs back). Killed if it does not.
async fn speaks_our_protocol(binary: &Path, within: Duration) -> bool {
    let mut ask = Command::new(binary);
    ask.arg(supervisor::PROTOCOL_ARG).stdin(Stdio::null()).stderr(Stdio::null()).kill_on_drop(true);
    let answer = match tokio::time::timeout(within, ask.output()).await {
        Ok(answer) => answer,
        Err(_) => Err(std::io::Error::other(format!("no answer to {} within {within:?}", supervisor::PROTOCOL_ARG))),
    };
    let said = answer.as_ref().map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string());
    match said {
        Ok(said) if said == supervisor::PROTOCOL => true,
        Ok(said) => {
            warn!(
                "{} is from another build (it says {said:?}): runs use `cronrun {}` instead, which is slower; \
                 install the cronrun-supervise of this cronrun beside it",
                binary.display(),
                supervisor::ARG
            );
            false
        }
        Err(e) => {
            warn!("{} cannot be run ({e}): runs use `cronrun {}` instead", binary.display(), supervisor::ARG);
            false
        }
    }
}

#[async_trait]
impl Ready for Prepared {
    /// Releases the process (unless its group did): from here on it runs the job.
    async fn start(mut self: Box<Self>, output: mpsc::Sender<Line>) -> Result<Box<dyn Running>, StartError> {
        if let Some(mut go) = self.go.take() {
            go.write_all(b"go\n").await.map_err(StartError::Release)?;
        }
        let mut readers = Vec::new();
        let max = self.max_line_bytes;
        if let Some(out) = self.process.child.stdout.take() {
            readers.push(tokio::spawn(read_lines(out, Source::Stdout, max, output.clone())));
        }
        if let Some(err) = self.process.child.stderr.take() {
            readers.push(tokio::spawn(read_lines(err, Source::Stderr, max, output)));
        }
        Ok(Box::new(Started { process: self.process, readers }))
    }

    async fn discard(mut self: Box<Self>) {
        self.process.signal(Signal::SIGKILL);
        if self.process.reaped_within(REAP_MAX).await.is_some() {
            self.process.end_left_cgroup();
        }
        for path in &self.leftovers {
            let _ = std::fs::remove_file(path);
        }
    }

    fn bound_to_release(&self) -> bool {
        self.go.is_none()
    }
}

/// A released shell job and the readers of its output.
struct Started {
    process: ShellProcess,
    readers: Vec<JoinHandle<()>>,
}

#[async_trait]
impl Running for Started {
    async fn wait(&mut self) -> Exit {
        let status = self.process.child.wait().await.ok();
        // The run ends with its main process; what it left in its group goes with it.
        self.process.signal(Signal::SIGKILL);
        if status.is_some_and(|s| s.code().is_none()) {
            self.process.end_left_cgroup();
        }
        match status {
            Some(s) if s.success() => Exit { code: Some(0), outcome: Outcome::Succeeded(None) },
            Some(s) => {
                let code = exit_code(&s);
                Exit { code: Some(code), outcome: Outcome::Failed(format!("exited with code {code}")) }
            }
            None => Exit { code: None, outcome: Outcome::Failed("lost track of the process".into()) },
        }
    }

    async fn stop(&mut self, how: Stop, grace: Duration) -> Exit {
        let status = match how {
            Stop::Kill | Stop::Signal(Signal::SIGKILL) => self.process.kill_tree().await,
            Stop::Signal(signal) => {
                self.process.signal(signal);
                self.process.ended_within(grace).await
            }
        };
        self.process.signal(Signal::SIGKILL);
        if status.as_ref().is_some_and(|s| s.code().is_none()) {
            self.process.end_left_cgroup();
        }
        Exit { code: status.as_ref().map(exit_code), outcome: Outcome::Stopped }
    }
}

impl Drop for Started {
    /// Output still unread when the run is done with (a process that left the group
    /// holds the pipe) is not waited for.
    fn drop(&mut self) {
        self.readers.iter().for_each(JoinHandle::abort);
    }
}

impl ShellProcess {
    /// After its supervisor was KILLed (it removes its run's cgroup when it exits by
    /// itself): what is left of the run's cgroup is killed and removed, in the background.
    fn end_left_cgroup(&self) {
        static OURS: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
        let (Some(parent), Ok(pid)) = (OURS.get_or_init(supervisor::own_cgroup), u32::try_from(self.pgid.as_raw()))
        else {
            return;
        };
        let dir = supervisor::run_cgroup(parent, pid);
        if dir.exists() {
            tokio::task::spawn_blocking(move || supervisor::end_left_cgroup(&dir, Duration::from_secs(5)));
        }
    }

    /// Sends `signal` to the whole group. A group already gone is not an error.
    fn signal(&self, signal: Signal) {
        if self.pgid.as_raw() > 0 {
            let _ = killpg(self.pgid, signal);
        }
    }

    /// The main process's end, waited for `grace`; then the end of the whole tree (see
    /// `kill_tree`).
    async fn ended_within(&mut self, grace: Duration) -> Option<ExitStatus> {
        match tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok) {
            Some(status) => Some(status),
            None => self.kill_tree().await,
        }
    }

    /// Ends the run's whole tree at once, processes that left the group included: the
    /// supervisor kills it and exits. KILL to the group too, in case it cannot.
    async fn kill_tree(&mut self) -> Option<ExitStatus> {
        if self.pgid.as_raw() > 0 {
            let _ = nix::sys::signal::kill(self.pgid, supervisor::STOP_SIGNAL);
        }
        let status = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await.ok().and_then(Result::ok);
        self.signal(Signal::SIGKILL);
        match status {
            Some(s) => Some(s),
            None => self.reaped_within(REAP_MAX).await,
        }
    }

    /// The supervisor's end once KILLed, waited for at most `bound`: a process stuck in
    /// the kernel (uninterruptible I/O, a dead NFS mount) dies only when that ends, and the
    /// run must not wait for it with its slot taken. Given up on, it is reaped in the
    /// background (tokio's orphan queue) whenever it does die.
    async fn reaped_within(&mut self, bound: Duration) -> Option<ExitStatus> {
        match tokio::time::timeout(bound, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let pid = self.child.id().unwrap_or(0);
                warn!(
                    pid,
                    "the run's supervisor did not die within {bound:?} of SIGKILL (stuck in the kernel?); going on without its exit status"
                );
                None
            }
        }
    }
}

/// How long a KILLed supervisor's end is waited for (see `reaped_within`).
const REAP_MAX: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileged_groups_are_named_in_one_line() {
        for (gid, named) in [(0, Some("0")), (0, Some("root")), (0, None)] {
            let refused =
                privileged_group(gid, named).map(|what| PrepareError::PrivilegedGroup { what }).unwrap().to_string();
            assert!(
                refused.contains("gid 0") && refused.contains("allow_root") && !refused.contains('\n'),
                "{refused}"
            );
        }
        assert_eq!(privileged_group(4242, Some("4242")), None);
        assert_eq!(privileged_group(65534, None), None);
    }

    #[tokio::test]
    async fn a_supervisor_is_used_only_when_it_answers_our_protocol_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("ours", format!("echo '{}'", supervisor::PROTOCOL), true),
            ("older", "echo 'cronrun-supervise 1'".to_string(), false),
            ("fails", "exit 3".to_string(), false),
            ("hangs", "exec sleep 30".to_string(), false),
        ];
        // Written by a child process: a file this multi-threaded test process had open for
        // writing could be exec'd while a fork elsewhere still held it (ETXTBSY).
        for (name, body, _) in &cases {
            let path = dir.path().join(name);
            let script = "printf '#!/bin/sh\\n%s\\n' \"$1\" > \"$2\" && chmod 755 \"$2\"";
            let made = std::process::Command::new("sh")
                .args(["-c", script, "sh", body.as_str(), path.to_str().unwrap()])
                .status();
            assert!(made.unwrap().success());
        }
        for (name, _, speaks) in cases {
            let asked = std::time::Instant::now();
            assert_eq!(speaks_our_protocol(&dir.path().join(name), Duration::from_millis(500)).await, speaks, "{name}");
            assert!(asked.elapsed() < Duration::from_secs(3), "{name}: answered or given up on within the bound");
        }
        let missing = dir.path().join("missing");
        assert!(!speaks_our_protocol(&missing, Duration::from_millis(500)).await);
    }

    #[tokio::test]
    async fn a_process_that_will_not_die_is_waited_for_no_longer_than_the_bound() {
        let spawn = |program: &str, arg: &str| {
            let child = Command::new(program).arg(arg).process_group(0).spawn().unwrap();
            let pgid = Pid::from_raw(child.id().unwrap() as i32);
            ShellProcess { child, pgid }
        };
        // Not killed, it stands for one stuck in the kernel, which SIGKILL does not end.
        let mut stuck = spawn("sleep", "30");
        let waited = std::time::Instant::now();
        assert_eq!(stuck.reaped_within(Duration::from_millis(300)).await, None);
        assert!((Duration::from_millis(300)..Duration::from_secs(3)).contains(&waited.elapsed()));
        stuck.signal(Signal::SIGKILL);
        let mut done = spawn("true", "");
        assert!(done.reaped_within(Duration::from_secs(10)).await.is_some_and(|s| s.success()));
    }
}
