//! `cronrun up` as a user runs it: its own nats-server, the example jobs, and a clean
//! stop on SIGTERM or SIGINT that takes the server child along.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn nats_server_children(parent: u32) -> Vec<u32> {
    let out = Command::new("pgrep").args(["-P", &parent.to_string(), "nats-server"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Builds the example plugins once, so `up` finds `hello.wasm` beside its binary.
fn build_plugins() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/build.sh");
        let out = Command::new("bash").arg(script).output().unwrap();
        assert!(out.status.success(), "plugins/build.sh: {}", String::from_utf8_lossy(&out.stderr));
    });
}

/// Who gets the signal: `up` alone (a service manager), or its whole process group, as a
/// terminal's Ctrl-C does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum To {
    Process,
    Group,
}

async fn up_runs_examples_and_stops_on(signal: Signal, to: To) {
    build_plugins();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The default data directory, under XDG_DATA_HOME: the CLI finds the admin identity there.
    let up = Command::new(BIN)
        .args(["up", "--port", &port.to_string()])
        .env("XDG_DATA_HOME", dir.path())
        .env_remove("CRONRUN_NATS")
        .env_remove("CRONRUN_CREDS")
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut up = scopeguard(up);
    let url = format!("nats://127.0.0.1:{port}");
    let cli = |args: &[&str]| {
        let mut command = Command::new(BIN);
        command.args(args).env("CRONRUN_NATS", &url).env("XDG_DATA_HOME", dir.path()).env_remove("CRONRUN_CREDS");
        command.output().unwrap()
    };
    let listed = eventually(Duration::from_secs(20), "cronrun up to list its example jobs", || async {
        let out = cli(&["ls"]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.success() && ["hello ", "disk-usage", "hello-wasm"].iter().all(|j| text.contains(j)))
            .then_some(text)
    })
    .await;
    assert!(listed.contains("*/10 * * * * *"), "{listed}");
    // The banner names the health and metrics address, and it answers.
    let stdout = std::io::BufReader::new(up.0.stdout.as_mut().unwrap());
    let banner = std::io::BufRead::lines(stdout).map(Result::unwrap).find(|l| l.starts_with("cronrun is up")).unwrap();
    let http = banner.split("metrics at http://").nth(1).and_then(|r| r.split('/').next()).unwrap();
    let http_port: u16 = http.rsplit_once(':').unwrap().1.parse().unwrap();
    let ready = eventually(Duration::from_secs(10), "up's /readyz", || async {
        http_get(http_port, "/readyz").filter(|(code, _)| *code == 200)
    })
    .await;
    assert_eq!(
        ready.1,
        "ready
",
        "{banner}"
    );
    // The banner's dashboard login works, and acts as the admin: `up` made the token.
    let login = banner.split(&format!("http://{http}/login?token=")).nth(1).unwrap();
    let token = login.split([',', ' ']).next().unwrap();
    let token_file = dir.path().join("cronrun/dashboard.token");
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), token);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&token_file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let cookie = format!("Cookie: {}", login_cookie(http_port, token));
    assert_eq!(http_request(http_port, "GET", "/api/session", &[&cookie], ""), (200, r#"{"actions":true}"#.into()));
    assert_eq!(http_request(http_port, "GET", "/api/session", &[], "").0, 401);
    let server = nats_server_children(up.0.id());
    assert_eq!(server.len(), 1, "one nats-server child");
    // Secure by default: identities only their owner reads, and no entry without one.
    for name in ["admin", "viewer", "scheduler", "runner", "agent"] {
        let path = dir.path().join(format!("cronrun/identities/{name}.nk"));
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
    }
    let elsewhere = tempfile::tempdir().unwrap();
    let anonymous = Command::new(BIN)
        .args(["ls"])
        .env("CRONRUN_NATS", &url)
        .env("XDG_DATA_HOME", elsewhere.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&anonymous.stderr);
    assert!(!anonymous.status.success(), "a client without credentials is refused");
    assert!(err.contains("requires credentials") && err.trim_end().lines().count() == 1, "{err}");
    eventually(Duration::from_secs(20), "the hello example to succeed", || async {
        let out = cli(&["runs", "hello"]);
        String::from_utf8_lossy(&out.stdout).contains("succeeded").then_some(())
    })
    .await;
    let out = cli(&["logs", &format!("hello.{}", first_run_id(&cli(&["runs", "hello", "--output", "json"]).stdout))]);
    // As root, `up` runs shell jobs that name no user as nobody, never as root.
    let who = if nix::unistd::geteuid().is_root() { "nobody".to_string() } else { whoami() };
    let logs = String::from_utf8_lossy(&out.stdout);
    assert!(logs.contains(&format!("hello from {who}@")), "{logs}");
    let wasm_run = eventually(Duration::from_secs(20), "the hello-wasm example to succeed", || async {
        let out = cli(&["runs", "hello-wasm", "--output", "json"]);
        let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        runs.into_iter().find(|r| r["status"] == "succeeded")
    })
    .await;
    let output = wasm_run["output"].to_string();
    assert!(output.contains("hello from wasm from hello-wasm"), "{output}");
    // Fired by its manifest's schedule (`*/10 * * * * *`), not by hand.
    assert_eq!(wasm_run["trigger"], "schedule");
    let at = chrono::DateTime::parse_from_rfc3339(wasm_run["scheduled_at"].as_str().unwrap()).unwrap();
    assert_eq!(chrono::Timelike::second(&at) % 10, 0, "{at}");

    let target = match to {
        To::Process => up.0.id() as i32,
        To::Group => -(up.0.id() as i32),
    };
    kill(Pid::from_raw(target), signal).unwrap();
    let status = wait_exit(&mut up.0, Duration::from_secs(20)).await;
    assert!(status.success(), "cronrun up exited with {status} after {signal} to {to:?}");
    let gone = std::path::Path::new(&format!("/proc/{}", server[0])).exists();
    assert!(!gone, "nats-server child still running after cronrun up stopped");

    // A second start finds its data and does not add the examples again.
    let again = Command::new(BIN)
        .args(["up", "--port", &port.to_string()])
        .env("XDG_DATA_HOME", dir.path())
        .env_remove("CRONRUN_NATS")
        .env_remove("CRONRUN_CREDS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut again = scopeguard(again);
    let jobs = eventually(Duration::from_secs(20), "the restarted server", || async {
        let out = cli(&["ls", "--output", "json"]);
        out.status.success().then(|| serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap())
    })
    .await;
    assert_eq!(jobs.len(), 3);
    kill(Pid::from_raw(again.0.id() as i32), Signal::SIGTERM).unwrap();
    assert!(again.0.wait().unwrap().success());
}

fn first_run_id(json: &[u8]) -> String {
    let runs: Vec<serde_json::Value> = serde_json::from_slice(json).unwrap();
    runs.iter().find(|r| r["status"] == "succeeded").unwrap()["run_id"].as_str().unwrap().to_string()
}

/// Kills the child if the test fails before it is stopped.
struct Guard(std::process::Child);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
fn scopeguard(child: std::process::Child) -> Guard {
    Guard(child)
}

#[tokio::test(flavor = "multi_thread")]
async fn up_stops_cleanly_on_sigterm() {
    up_runs_examples_and_stops_on(Signal::SIGTERM, To::Process).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn up_stops_cleanly_on_ctrl_c_to_its_process_group() {
    up_runs_examples_and_stops_on(Signal::SIGINT, To::Group).await;
}

#[test]
fn up_says_how_to_get_nats_server_when_missing() {
    let out = Command::new(BIN)
        .args(["up", "--port", &free_port().to_string(), "--data-dir", "/tmp/cronrun-never"])
        .env("CRONRUN_NATS_SERVER", "/nonexistent/nats-server")
        .env_remove("CRONRUN_NATS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/nats-server"), "{err}");
}

fn whoami() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
