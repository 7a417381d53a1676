//! What an operator uses beside metrics, against real agents: `runs` across jobs by
//! status and age, `watch` as events happen, `status` naming pools no runner serves,
//! completions and the man page, systemd readiness and watchdog, and a stop before the
//! layout exists.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

async fn ended(nats: &Nats, key: &str) {
    let (job, run) = cronrun::record::parse_run_key(key).unwrap();
    let store = nats.store().await;
    eventually(Duration::from_secs(20), &format!("{key} to end"), || async {
        store.get_run(job, run).await.ok().filter(|s| s.record.status.is_final()).map(|_| ())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_across_jobs_are_filtered_by_status_and_age() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(
        &nats,
        "[[job]]\nname = \"good\"\nschedule = \"@yearly\"\nshell = \"true\"\n\
         [[job]]\nname = \"bad\"\nschedule = \"@yearly\"\nshell = \"false\"\n",
    );
    for job in ["good", "bad", "good"] {
        let key = nats.trigger(job);
        ended(&nats, &key).await;
    }
    let failed = nats.ok(&["runs", "--status", "failed"]);
    assert!(failed.contains("bad.") && !failed.contains("good."), "{failed}");
    let recent = nats.ok(&["runs", "--since", "1h", "--output", "json"]);
    let recent: Vec<serde_json::Value> = serde_json::from_str(&recent).unwrap();
    assert_eq!(recent.len(), 3, "{recent:?}");
    let last = nats.ok(&["runs", "--status", "succeeded", "--status", "failed", "-n", "1"]);
    assert_eq!(last.lines().count(), 2, "a header and one run: {last}");
    let old = nats.ok(&["runs", "--since", "1ms", "--output", "json"]);
    assert_eq!(old.trim(), "[]");
    let err = nats.fails(&["runs", "--status", "broken"]);
    assert!(err.contains("--status \"broken\" is not a run status"), "{err}");
    let err = nats.fails(&["runs", "--since", "soon"]);
    assert!(err.contains("--since \"soon\""), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_prints_events_as_they_happen() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(&nats, "[[job]]\nname = \"seen\"\nschedule = \"@yearly\"\nshell = \"true\"\n");
    let mut watch = nats.command().args(["watch", "seen"]).stdout(Stdio::piped()).spawn().unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The watch starts with new events only, and may begin in the middle of a run:
    // trigger until it has shown one run from its start to its end.
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let watched_whole = |lines: &[String], key: &str| {
        let shown = |event: &str| lines.iter().any(|l| l.contains(&format!("  {key}  {event}")));
        shown("started") && shown("succeeded")
    };
    let key = loop {
        assert!(std::time::Instant::now() < deadline, "no whole run watched: {lines:?}");
        let key = nats.trigger("seen");
        ended(&nats, &key).await;
        lines.extend(rx.recv_timeout(Duration::from_secs(1)).into_iter());
        lines.extend(rx.try_iter());
        if watched_whole(&lines, &key) {
            break key;
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();
    let end = lines.iter().find(|l| l.contains(&format!("  {key}  succeeded"))).unwrap();
    assert!(end.starts_with("20"), "{end}");
}

#[tokio::test(flavor = "multi_thread")]
async fn status_names_pools_no_runner_serves_and_shards_as_ranges() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(
        &nats,
        "[[job]]\nname = \"lost-pool\"\nschedule = \"@yearly\"\npool = \"nosuch\"\nshell = \"true\"\n\
         [[job]]\nname = \"served\"\nschedule = \"@yearly\"\nshell = \"true\"\n",
    );
    let status = eventually(Duration::from_secs(10), "every shard led", || async {
        let status = nats.ok(&["status"]);
        status.contains(&format!("0-{}", TEST_SHARDS - 1)).then_some(status)
    })
    .await;
    assert!(status.contains("pool \"nosuch\" has 1 job(s) and no live runner"), "{status}");
    assert!(!status.contains("pool \"default\""), "{status}");
    let json: serde_json::Value = serde_json::from_str(&nats.ok(&["status", "--output", "json"])).unwrap();
    assert_eq!(json["unserved_pools"], serde_json::json!([{ "pool": "nosuch", "jobs": 1 }]));
}

#[test]
fn completions_and_the_man_page_are_generated_from_the_commands() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(BIN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef cronrun"), ("fish", "complete -c cronrun")] {
        let script = run(&["completions", shell]);
        assert!(script.contains(marker) && script.contains("notifications"), "{shell}: {}", &script[..200]);
    }
    let man = run(&["man"]);
    assert!(man.starts_with(".ie") || man.contains(".TH cronrun"), "{}", &man[..200]);
    assert!(man.contains("Distributed cron"), "the about line is in the page");
    let out = std::process::Command::new(BIN).args(["completions", "tcsh"]).output().unwrap();
    assert!(!out.status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_tells_systemd_it_is_ready_and_pings_its_watchdog() {
    let nats = Nats::start().await;
    let socket_path = nats.dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let socket_env = socket_path.to_str().unwrap().to_string();
    let env = [("NOTIFY_SOCKET", socket_env.as_str()), ("WATCHDOG_USEC", "200000")];
    let mut agent = nats.agent_with_env("a", &test_config("a"), &env);
    let mut said = Vec::new();
    let mut buf = [0u8; 256];
    while !(said.iter().any(|s: &String| s.contains("READY=1")) && said.iter().any(|s| s.contains("WATCHDOG=1"))) {
        let n = socket.recv(&mut buf).unwrap_or_else(|e| panic!("nothing from the agent ({e}); got {said:?}"));
        said.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(agent.log().contains("job catalog loaded"), "ready only once the catalog is loaded");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.pid()), nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopping = loop {
        let n = socket.recv(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        if !text.contains("WATCHDOG") {
            break text;
        }
    };
    assert!(stopping.contains("STOPPING=1"), "{stopping}");
    wait_exit(&mut agent.child, Duration::from_secs(30)).await;
}

/// A runner started before any scheduler waits for the layout; a stop meanwhile is an
/// orderly stop (exit 0, as a service manager expects), not a failure.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_stopped_while_it_waits_for_the_layout_exits_cleanly() {
    let nats = Nats::start().await;
    let mut runner = nats.runner_with("r", "");
    eventually(Duration::from_secs(20), "the runner to wait for the layout", || async {
        runner.log().contains("waiting for the layout").then_some(())
    })
    .await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(runner.pid()), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut runner.child, Duration::from_secs(20)).await;
    assert!(status.success(), "{status}; its log:\n{}", runner.log());
}
