//! A hostile job author and hostile job processes (issue 44): what a job sets in its
//! environment never reaches a root process, privileged groups need `allow_root`, the run
//! has no supplementary groups, and no process of a run outlives it, however it escapes
//! (`setsid` and a chain of forks longer than any kill loop), on each way a run ends.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::*;
use cronrun::record::Status;

/// Whether the tests that switch users can run here (CI runs as root).
fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn run_now(nats: &Nats, job: &str) -> serde_json::Value {
    let out = nats.cli(&["trigger", job, "--wait", "--output", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)))
}

fn output_of(record: &serde_json::Value) -> String {
    let lines = record["output"].as_array().map(|l| l.iter().filter_map(|l| l.as_str()).collect::<Vec<_>>());
    lines.unwrap_or_default().join("\n")
}

/// A world-readable directory (a job as `nobody` loads its library and writes its marks).
fn open_dir(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `LD_PRELOAD` in `shell.env` reaches the job (its `env` shows it) but no process running
/// as root: a library whose constructor writes a mark named after its uid and euid each
/// time it is loaded is never loaded as uid 0 (today's supervisor, exec'd with the job's
/// environment, loaded it as root). It is loaded in the job, as the job's user: the
/// dynamic loader honours it there, with that user's rights only.
#[tokio::test(flavor = "multi_thread")]
async fn ld_preload_in_a_jobs_env_never_runs_as_root() {
    if !root() {
        eprintln!("skipped: needs root (to run a job as nobody)");
        return;
    }
    let nats = Nats::start().await;
    let public = tempfile::tempdir().unwrap();
    let open = public.path().join("open");
    open_dir(public.path(), 0o755);
    open_dir(&open, 0o755);
    let marks = open.join("marks");
    open_dir(&marks, 0o777);
    let library = open.join("p.so");
    let source = open.join("p.c");
    let code = format!(
        "#include <stdio.h>\n#include <unistd.h>\n#include <fcntl.h>\n\
         __attribute__((constructor)) static void mark(void) {{\n\
           char path[4096];\n\
           snprintf(path, sizeof path, \"{}/uid-%d-euid-%d-pid-%d\", (int)getuid(), (int)geteuid(), (int)getpid());\n\
           int fd = open(path, O_WRONLY | O_CREAT, 0666);\n\
           if (fd >= 0) close(fd);\n\
         }}\n",
        marks.display()
    );
    std::fs::write(&source, code).unwrap();
    let built =
        std::process::Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&library).arg(&source).output().unwrap();
    assert!(built.status.success(), "cc: {}", String::from_utf8_lossy(&built.stderr));
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    let runner = nats.runner_with("r", "allow_root = false");
    ready(&scheduler).await;
    ready(&runner).await;
    let so = library.display();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"preload\"\nschedule = \"@yearly\"\n\
             shell = {{ command = \"env; id -u\", user = \"nobody\", env = {{ LD_PRELOAD = \"{so}\", LD_LIBRARY_PATH = \"{dir}\", GCONV_PATH = \"{dir}\", MALLOC_CHECK_ = \"3\" }} }}\n\
             [[job]]\nname = \"preload-argv\"\nschedule = \"@yearly\"\n\
             shell = {{ argv = [\"/usr/bin/id\", \"-u\"], user = \"nobody\", env = {{ LD_PRELOAD = \"{so}\" }} }}\n",
            dir = open.display()
        ),
    );
    for job in ["preload", "preload-argv"] {
        let record = run_now(&nats, job);
        assert_eq!(record["status"], "succeeded", "{job}: {record}");
        let output = output_of(&record);
        assert!(output.lines().any(|l| l == "65534"), "{job} ran as nobody: {output}");
        if job == "preload" {
            assert!(output.contains(&format!("LD_PRELOAD={so}")), "the variable reaches the job: {output}");
        }
    }
    let marks: Vec<String> =
        std::fs::read_dir(&marks).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let as_root: Vec<&String> = marks.iter().filter(|m| m.starts_with("uid-0-") || m.contains("-euid-0-")).collect();
    assert!(as_root.is_empty(), "the job's LD_PRELOAD was loaded as root: {as_root:?} (all: {marks:?})");
    assert!(
        marks.iter().any(|m| m.starts_with("uid-65534-euid-65534-")),
        "the library is loaded in the job, as its user (documented): {marks:?}"
    );
}

/// A privileged group (gid 0 by number or as `root`) is refused on a runner without
/// `allow_root`: the run fails with one line saying so (at run time: the spec is valid
/// for runners that allow it). A job as another user has exactly its gid, no
/// supplementary groups (`/proc/self/status` and `id -G`).
#[tokio::test(flavor = "multi_thread")]
async fn privileged_groups_need_allow_root_and_a_run_has_no_supplementary_groups() {
    if !root() {
        eprintln!("skipped: needs root (to run a job as another user)");
        return;
    }
    let nats = Nats::start().await;
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    let runner = nats.runner_with("r", "allow_root = false");
    ready(&scheduler).await;
    ready(&runner).await;
    apply(
        &nats,
        "[[job]]\nname = \"gid-0\"\nschedule = \"@yearly\"\nshell = { command = \"id\", user = \"nobody\", group = \"0\" }\n\
         [[job]]\nname = \"gid-root\"\nschedule = \"@yearly\"\nshell = { command = \"id\", user = \"nobody\", group = \"root\" }\n\
         [[job]]\nname = \"groups\"\nschedule = \"@yearly\"\n\
         shell = { command = \"grep ^Groups: /proc/self/status; id -G\", user = \"nobody\", group = \"4242\" }\n\
         [[job]]\nname = \"own-groups\"\nschedule = \"@yearly\"\n\
         shell = { command = \"grep ^Groups: /proc/self/status; id -G\", user = \"nobody\" }\n",
    );
    for job in ["gid-0", "gid-root"] {
        let record = run_now(&nats, job);
        assert_eq!(record["status"], "failed", "{job}: {record}");
        let error = record["error"].as_str().unwrap_or_default();
        assert!(error.contains("gives root's rights") && error.contains("allow_root"), "{job}: {error}");
        assert!(!error.contains('\n'), "{job}: one line: {error}");
        assert!(!output_of(&record).contains("gid=0"), "{job} ran: {record}");
    }
    for (job, gid) in [("groups", "4242"), ("own-groups", "65534")] {
        let record = run_now(&nats, job);
        assert_eq!(record["status"], "succeeded", "{job}: {record}");
        let output = output_of(&record);
        let lines: Vec<&str> = output.lines().collect();
        assert_eq!(lines.len(), 2, "{job}: {output}");
        assert_eq!(lines[0].trim_end(), "Groups:", "{job}: no supplementary groups: {output}");
        assert_eq!(lines[1].trim(), gid, "{job}: its gid alone: {output}");
    }
}

/// Generations of the escaper: more than any kill loop of rounds (today's was 100).
const GENERATIONS: usize = 120;
/// Trials of each way a run ends.
const TRIALS: usize = 20;
/// Trials run at once.
const BATCH: usize = 5;

/// The escaper: `sh esc.sh TRIAL N` leaves its session (`setsid`), starts the next
/// generation (which does the same, N times), writes its pid into TRIAL, and becomes
/// `TRIAL/zz 600` (a link to `sleep`: its command line names the trial). Each
/// generation's parent lives on, so a process found and killed only exposes the next.
fn escaper(dir: &Path) -> PathBuf {
    let script = dir.join("esc.sh");
    std::fs::write(
        &script,
        "d=$1; n=$2\n\
         if [ \"$n\" -gt 0 ]; then setsid sh \"$0\" \"$d\" $((n - 1)) & fi\n\
         echo $$ > \"$d/pid.$$\"\n\
         exec \"$d/zz\" 600\n",
    )
    .unwrap();
    script
}

/// A trial's directory, with its `zz`.
fn trial_dir(dir: &Path, name: &str) -> PathBuf {
    let trial = dir.join(name);
    std::fs::create_dir_all(&trial).unwrap();
    std::os::unix::fs::symlink(which_sleep(), trial.join("zz")).unwrap();
    trial
}

fn which_sleep() -> PathBuf {
    ["/usr/bin/sleep", "/bin/sleep"].into_iter().map(PathBuf::from).find(|p| p.exists()).unwrap()
}

/// The job of a trial: the escaper in the background, then, once every generation wrote
/// its pid, `then` (exit: the parent ends while its children live; or sleep).
fn trial_command(script: &Path, trial: &Path, then: &str) -> String {
    let (s, t) = (script.display(), trial.display());
    format!(
        "setsid sh {s} {t} {GENERATIONS} & i=0; \
         while [ $(ls {t} | grep -c pid) -lt {} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; {then}",
        GENERATIONS + 1
    )
}

/// How many processes the trial started (its pid files) and how many of them live: by
/// pid (kill -0, when the pid names a process running the trial's `zz`) and by a scan
/// of every process whose command line names the trial (the same processes whatever the
/// pid they saw).
fn counted(trial: &Path) -> (usize, usize) {
    let needle = trial.display().to_string();
    let cmdline = |pid: i32| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let names_trial = |pid: i32| String::from_utf8_lossy(&cmdline(pid)).contains(&needle);
    let pids: Vec<i32> = std::fs::read_dir(trial)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("pid.")?.parse().ok())
        .collect();
    let by_pid = pids.iter().filter(|&&pid| alive(pid) && names_trial(pid)).count();
    let by_scan = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| names_trial(pid))
        .count();
    (pids.len(), by_pid.max(by_scan))
}

/// Waits until every generation of `trial` has started.
async fn escaped(trial: &Path) {
    eventually(Duration::from_secs(30), "every generation of the escaper to start", || async {
        (counted(trial).0 > GENERATIONS).then_some(())
    })
    .await;
}

/// After a run ended: nothing of its trial lives (a few seconds for the kernel).
async fn nothing_left(trial: &Path, how: &str) -> usize {
    let mut living = counted(trial).1;
    for _ in 0..50 {
        if living == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        living = counted(trial).1;
    }
    let (started, _) = counted(trial);
    assert!(started > GENERATIONS, "{how}: the escaper started only {started} processes");
    assert_eq!(living, 0, "{how}: {living} of {started} processes of {} outlived the run", trial.display());
    started
}

/// Kills whatever a failed trial left, so that one failure does not leave thousands.
fn clean_up(dir: &Path) {
    let needle = dir.display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

struct CleanUp(PathBuf);
impl Drop for CleanUp {
    fn drop(&mut self) {
        clean_up(&self.0);
    }
}

/// A job that calls `setsid` and keeps forking (a chain of 120 generations, each in a
/// session of its own, each parent alive) leaves no process alive after its run ends, 20
/// trials of each way: the parent exits while its children live; a timeout; `cronrun
/// kill`; the runner's death by SIGKILL. Processes are counted by their pid files
/// (kill -0) and by a scan of /proc for the trial's command lines.
#[tokio::test(flavor = "multi_thread")]
async fn a_forking_setsid_escaper_never_outlives_its_run() {
    let nats = Nats::start().await;
    let dir = nats.dir.path().join("escapers");
    std::fs::create_dir_all(&dir).unwrap();
    let _clean = CleanUp(dir.clone());
    let script = escaper(&dir);
    let store = nats.store().await;
    let mut agent = nats.agent("a", "");
    ready(&agent).await;
    let mut trials = 0;
    let mut processes = 0;
    for (how, then, timeout) in
        [("exits", "exit 0", None), ("timeout", "sleep 600", Some("5s")), ("kill", "sleep 600", None)]
    {
        for batch in 0..TRIALS / BATCH {
            let mut runs = Vec::new();
            for i in 0..BATCH {
                let name = format!("{how}-{batch}-{i}");
                let trial = trial_dir(&dir, &name);
                let mut add = vec!["add".to_string(), name.clone(), "--schedule".into(), "@yearly".into()];
                if let Some(t) = timeout {
                    add.extend(["--timeout".into(), t.into()]);
                }
                add.extend(["--".into(), trial_command(&script, &trial, then)]);
                nats.ok(&add.iter().map(String::as_str).collect::<Vec<_>>());
                runs.push((nats.trigger(&name), trial));
            }
            for (key, trial) in &runs {
                escaped(trial).await;
                if how == "kill" {
                    nats.ok(&["kill", key]);
                }
            }
            for (key, trial) in &runs {
                let record = final_record(&store, key).await;
                let want = match how {
                    "exits" => Status::Succeeded,
                    "timeout" => Status::TimedOut,
                    _ => Status::Cancelled,
                };
                assert_eq!(record.status, want, "{how}: {record:?}");
                if how == "exits" {
                    assert_eq!(record.exit_code, Some(0), "the job's own exit code: {record:?}");
                }
                processes += nothing_left(trial, how).await;
                trials += 1;
            }
        }
    }
    // The runner dies by SIGKILL with the runs going: each batch on an agent of its own.
    agent.kill9();
    for batch in 0..TRIALS / BATCH {
        let mut agent = nats.agent(&format!("dies-{batch}"), "");
        ready(&agent).await;
        let mut runs = Vec::new();
        for i in 0..BATCH {
            let name = format!("dies-{batch}-{i}");
            let trial = trial_dir(&dir, &name);
            nats.ok(&["add", &name, "--schedule", "@yearly", "--", &trial_command(&script, &trial, "sleep 600")]);
            nats.trigger(&name);
            runs.push(trial);
        }
        for trial in &runs {
            escaped(trial).await;
        }
        agent.kill9();
        for trial in &runs {
            processes += nothing_left(trial, "the runner killed").await;
            trials += 1;
        }
    }
    eprintln!("{trials} trials, {processes} processes started, none left");
    assert_eq!(trials, 4 * TRIALS);
}

/// The agent says in one line which containment its shell runs get (a cgroup v2 per run
/// here, as root with cgroup2 mounted).
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_says_which_containment_is_in_force() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    // Said at start, before any run.
    eventually(Duration::from_secs(10), "the containment line at start", || async {
        agent.log().contains("shell run containment:").then_some(())
    })
    .await;
    nats.ok(&["add", "hi", "--schedule", "@yearly", "--", "echo hi"]);
    let record = final_record(&nats.store().await, &nats.trigger("hi")).await;
    assert_eq!(record.output, ["hi"]);
    let log = agent.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("shell run containment:")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    let cgroup2 = std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(" - cgroup2 ");
    if root() && cgroup2 {
        assert!(lines[0].contains("containment: cgroup"), "{}", lines[0]);
    }
}

/// The supervisor alone, as a runner starts it, in each containment a root runner may get
/// (`cgroup` where cgroup2 is writable, as here; `pid-namespace` where it is not, forced
/// with the supervisor's test variable): the escaper leaves nothing when its job exits
/// (with the job's exit code) and nothing when the runner's stop signal ends the run
/// (137), 10 trials each.
#[tokio::test(flavor = "multi_thread")]
async fn each_containment_ends_the_escaper_on_exit_and_on_the_stop_signal() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    if !root() {
        eprintln!("skipped: needs root (cgroups, PID namespaces)");
        return;
    }
    let dir = test_dir();
    let _clean = CleanUp(dir.path().to_path_buf());
    let script = escaper(dir.path());
    // Our cgroup v2, below which the supervisor makes (and must remove) the run's.
    let cgroups = std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        (fs.starts_with("cgroup2 ")).then(|| PathBuf::from(mount.split_whitespace().nth(4).unwrap()))
    });
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let cgroups =
        cgroups.zip(own.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim_start_matches('/').to_string()));
    let cgroups = cgroups.map(|(mount, own)| mount.join(own));
    for containment in ["cgroup", "pid-namespace"] {
        for trial_no in 0..10 {
            for (how, then, code) in [("exits", "exit 3", 3), ("stopped", "sleep 600", 137)] {
                let trial = trial_dir(dir.path(), &format!("{containment}-{how}-{trial_no}"));
                let mut supervisor = std::process::Command::new(env!("CARGO_BIN_EXE_cronrun-supervise"))
                    .args(["shell", &trial_command(&script, &trial, then)])
                    .env("CRONRUN_SUPERVISOR_CONTAINMENT", containment)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .process_group(0)
                    .spawn()
                    .unwrap();
                supervisor.stdin.take().unwrap().write_all(b"\n").unwrap();
                escaped(&trial).await;
                if how == "stopped" {
                    let pid = nix::unistd::Pid::from_raw(supervisor.id() as i32);
                    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR1).unwrap();
                }
                let status = eventually(Duration::from_secs(30), "the supervisor to exit", || {
                    let exited = supervisor.try_wait().unwrap();
                    async move { exited }
                })
                .await;
                assert_eq!(status.code(), Some(code), "{containment} {how}: {status:?}");
                nothing_left(&trial, &format!("{containment} {how}")).await;
                if let Some(parent) = &cgroups {
                    let dir = parent.join(format!("cronrun-run-{}", supervisor.id()));
                    assert!(!dir.exists(), "{containment} {how}: the run's cgroup is left: {}", dir.display());
                }
            }
        }
    }
}
