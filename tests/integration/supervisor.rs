//! A shell run's first process, `cronrun-supervise`: its stop signal ends the run's whole
//! tree, a plain command starts as `/bin/sh -c` would start it, and one left from another
//! build beside `cronrun` is not used.

use std::time::Duration;

use crate::procs::group_members;
use crate::support::*;
use cronrun::record::Status;

/// The supervisor alone, as a runner starts it: the runner's stop signal (USR1, to the
/// supervisor only) ends the whole tree even when the job ignores it and TERM, and a
/// process that left the group dies too; the supervisor exits 137 at once.
#[tokio::test(flavor = "multi_thread")]
async fn the_stop_signal_ends_the_tree_of_a_job_that_ignores_it() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("escaped");
    let job = format!("trap '' TERM USR1; setsid sh -c 'echo $$ > {}; exec sleep 600' & sleep 600", file.display());
    let mut supervisor = std::process::Command::new(env!("CARGO_BIN_EXE_cronrun-supervise"))
        .args(["shell", &job])
        .stdin(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    supervisor.stdin.take().unwrap().write_all(b"\n").unwrap();
    let escaped: i32 = eventually(Duration::from_secs(10), "the escaped process to start", || async {
        std::fs::read_to_string(&file).ok()?.trim().parse().ok()
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(supervisor.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR1).unwrap();
    let status = eventually(Duration::from_secs(5), "the supervisor to exit", || {
        let exited = supervisor.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert_eq!(status.code(), Some(137), "{status:?}");
    eventually(Duration::from_secs(5), "the escaped process to die", || async { (!alive(escaped)).then_some(()) })
        .await;
    assert!(group_members(pid.as_raw()).is_empty(), "the run's group outlived it");
}

/// A plain shell command starts without the shell where `/bin/sh` is dash (the
/// supervisor's `command`), and must not be told from one `/bin/sh -c` ran: the same
/// output, the same environment (dash's `PWD`: kept when it names the directory, else the
/// directory's path; variables dash drops or resets, and no `PATH`, as dash has them),
/// and, when it cannot start (not found, not executable, a script without `#!`), the
/// shell's own messages and exit codes.
#[test]
fn a_plain_command_runs_as_sh_would_run_it() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let linked = dir.path().join("linked");
    std::os::unix::fs::symlink(&work, &linked).unwrap();
    let script = |name: &str, text: &str, mode: u32| {
        let path = work.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    script("no-shebang", "echo ran as a script in $PWD\n", 0o755);
    script("not-executable", "#!/bin/sh\necho never\n", 0o644);
    script("missing-interpreter", "#!/nonexistent/interpreter\n", 0o755);
    // stdout, stderr and exit code of COMMAND under `/bin/sh -c` (`reference`) or the
    // supervisor, in `work` with `PWD` set to `pwd` and the variables `env`.
    let run = |command: &str, pwd: &std::path::Path, env: &[(&str, &str)], reference: bool| {
        let mut cmd = match reference {
            true => std::process::Command::new("/bin/sh"),
            false => std::process::Command::new(env!("CARGO_BIN_EXE_cronrun-supervise")),
        };
        cmd.args(if reference { ["-c", command] } else { ["shell", command] })
            .current_dir(&work)
            .env_clear()
            .envs(env.iter().copied())
            .env("PWD", pwd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(b"\n");
        let out = child.wait_with_output().unwrap();
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
        lines.sort();
        (lines, String::from_utf8_lossy(&out.stderr).into_owned(), out.status.code())
    };
    let path = [("PATH", "/usr/local/bin:/usr/bin:/bin")];
    for (command, pwd, env) in [
        ("env", dir.path(), &path[..]),
        ("env", linked.as_path(), &path),
        ("env", work.as_path(), &path),
        ("env", work.as_path(), &[("A-B", "1"), ("PATH", "/usr/bin:/bin"), ("x1", "2")]),
        ("env", work.as_path(), &[("IFS", "x"), ("OPTIND", "3"), ("PATH", "/usr/bin:/bin")]),
        ("env", work.as_path(), &[]),
        ("/usr/bin/printf %s,%s a b", work.as_path(), &path),
        ("./no-shebang", dir.path(), &path),
        ("./not-executable", work.as_path(), &path),
        ("./missing-interpreter", work.as_path(), &path),
        ("no-such-command-anywhere --flag", work.as_path(), &path),
        ("/bin/false", work.as_path(), &path),
        ("ls -d . no-such-file", work.as_path(), &path),
    ] {
        let (ours, sh) = (run(command, pwd, env, false), run(command, pwd, env, true));
        assert_eq!(ours, sh, "{command:?} with PWD={pwd:?} and {env:?}: the supervisor's run, then /bin/sh -c's");
        assert!(!ours.0.is_empty() || !ours.1.is_empty() || ours.2 != Some(0), "{command:?} did nothing: {ours:?}");
    }
}

/// A `cronrun-supervise` from another build left beside `cronrun` (an upgrade that missed
/// it) is asked its protocol, not used: the agent says so, and shell jobs run through
/// `cronrun __supervise` as well as ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_supervisor_from_another_build_is_not_used_and_jobs_still_run() {
    use std::os::unix::fs::PermissionsExt;
    let nats = Nats::start().await;
    let install = nats.dir.path().join("install");
    std::fs::create_dir_all(&install).unwrap();
    let cronrun = install.join("cronrun");
    std::fs::copy(BIN, &cronrun).unwrap();
    // Answers any protocol question wrongly; leaves a mark when asked to supervise a run.
    let stale = install.join("cronrun-supervise");
    let script = "#!/bin/sh\nif [ \"$1\" != --protocol ]; then touch \"$0.used\"; fi\necho 'cronrun-supervise 0'\n";
    std::fs::write(&stale, script).unwrap();
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = nats.agent_from(&cronrun, "a");
    ready(&agent).await;
    nats.ok(&["add", "hi", "--schedule", "@yearly", "--", "echo", "still runs"]);
    let record = final_record(&nats.store().await, &nats.trigger("hi")).await;
    assert_eq!((record.status, record.output.as_slice()), (Status::Succeeded, &["still runs".to_string()][..]));
    assert!(!install.join("cronrun-supervise.used").exists(), "the stale supervisor ran a job");
    let log = agent.log();
    assert!(log.contains("is from another build") && log.contains("cronrun-supervise 0"), "{log}");
}
