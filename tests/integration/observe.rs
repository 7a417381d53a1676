//! The agent's HTTP listener against a real nats-server and real runs: `/livez`,
//! `/readyz` (ready, then not once NATS is gone, with the reason) and `/metrics` (what the
//! runs did, in Prometheus text); a taken address is refused with one line.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn health_and_metrics_say_what_the_agent_did() {
    let mut nats = Nats::start().await;
    let port = free_port();
    let agent = nats.agent("a", &format!("http.listen = \"127.0.0.1:{port}\"\nhttp.metrics_jobs = 3"));
    ready(&agent).await;
    assert_eq!(http_get(port, "/livez"), Some((200, "ok\n".into())));
    eventually(Duration::from_secs(10), "/readyz to say ready", || async {
        http_get(port, "/readyz").filter(|(code, _)| *code == 200)
    })
    .await;

    // `slow` runs until the test has read what it shows while running.
    let go = nats.dir.path().join("go");
    let slow_command = format!("until [ -e {} ]; do sleep 0.1; done", go.display());
    for (name, command) in [("ok", "true"), ("bad", "exit 3"), ("slow", slow_command.as_str())] {
        nats.ok(&["add", name, "--schedule", "@yearly", "--", command]);
    }
    // A job that does not run during the test (it would take one of the 3 places).
    nats.ok(&["add", "yearly", "--schedule", "@yearly", "--", "true"]);
    nats.ok(&["trigger", "ok", "--wait"]);
    assert!(!nats.cli(&["trigger", "bad", "--wait"]).status.success());
    let slow = nats.trigger("slow");
    let store = nats.store().await;
    let (job, run) = cronrun::record::parse_run_key(&slow).unwrap();
    eventually(Duration::from_secs(10), "slow to run", || async {
        let status = store.get_run(job, run).await.ok()?.record.status;
        (status == cronrun::record::Status::Running).then_some(())
    })
    .await;
    assert!(!nats.cli(&["trigger", "slow", "--wait"]).status.success(), "skipped: slow is still running");

    // The leader publishes its shards' next fires with each lease renewal.
    let new_year = |year: i32| {
        chrono::NaiveDate::from_ymd_opt(year, 1, 1).unwrap().and_time(chrono::NaiveTime::MIN).and_utc().timestamp()
    };
    let next_year = chrono::Datelike::year(&chrono::Utc::now()) + 1;
    let next_fire = eventually(Duration::from_secs(10), "the yearly job's next fire", || async {
        metric(port, r#"cronrun_job_next_fire_timestamp_seconds{job="yearly"}"#)
    })
    .await;
    // The year may turn while the test runs.
    assert!([new_year(next_year), new_year(next_year + 1)].contains(&(next_fire as i64)), "{next_fire}");
    let (code, text) = http_get(port, "/metrics").unwrap();
    assert_eq!(code, 200);
    let m = samples(&text);
    let value = |key: &str| *m.get(key).unwrap_or_else(|| panic!("no {key} in\n{text}"));
    assert_eq!(value(r#"cronrun_runs_total{job="ok",status="succeeded"}"#), 1.0);
    assert_eq!(value(r#"cronrun_runs_total{job="bad",status="failed"}"#), 1.0);
    assert_eq!(value(r#"cronrun_runs_total{job="slow",status="skipped"}"#), 1.0);
    assert_eq!(value(r#"cronrun_runs_skipped_total{job="slow",reason="overlap"}"#), 1.0);
    assert_eq!(value(r#"cronrun_run_duration_seconds_count{job="ok"}"#), 1.0);
    assert!(value(r#"cronrun_run_duration_seconds_bucket{job="ok",le="+Inf"}"#) >= 1.0);
    assert_eq!(value("cronrun_fire_lateness_seconds_count"), 3.0, "ok, bad and the first slow started");
    assert_eq!(value("cronrun_runs_running"), 1.0, "slow is running");
    let success = value(r#"cronrun_job_last_success_timestamp_seconds{job="ok"}"#);
    assert!((chrono::Utc::now().timestamp() as f64 - success).abs() < 60.0, "{success}");
    // The skipped run's slot is freed just after its record says `skipped`.
    let slots = eventually(Duration::from_secs(5), "one slot used, by slow", || async {
        let m = samples(&http_get(port, "/metrics")?.1);
        let (used, free) =
            (m.get(r#"cronrun_runner_slots{state="used"}"#)?, m.get(r#"cronrun_runner_slots{state="free"}"#)?);
        (*used == 1.0).then_some((*used, used + free))
    })
    .await;
    assert_eq!(slots, (1.0, 4096.0));
    assert_eq!(value("cronrun_shards_led"), f64::from(TEST_SHARDS), "the one agent leads every shard");
    assert_eq!(value("cronrun_nats_connected"), 1.0);
    assert_eq!(value(&format!(r#"cronrun_build_info{{version="{}"}}"#, env!("CARGO_PKG_VERSION"))), 1.0);
    assert!(!text.contains(&slow), "a run id became a label");
    std::fs::write(&go, "").unwrap();

    // Past `metrics_jobs` (3: ok, bad and slow have the places), a job's runs count under
    // (other), and the job has no series of its own.
    // The next-fire gauge has its own bound, and extra has a next fire.
    let series_of = |job: &'static str, text: &str| {
        let label = format!("job=\"{job}\"");
        text.lines().filter(|l| l.contains(&label) && !l.starts_with("cronrun_job_next_fire")).count()
    };
    nats.ok(&["add", "extra", "--schedule", "@yearly", "--", "true"]);
    nats.ok(&["trigger", "extra", "--wait"]);
    let text = eventually(Duration::from_secs(10), "extra's run under (other)", || async {
        http_get(port, "/metrics")
            .map(|r| r.1)
            .filter(|t| t.contains(r#"cronrun_runs_total{job="(other)",status="succeeded"} 1"#))
    })
    .await;
    assert_eq!(series_of("extra", &text), 0, "{text}");

    // A removed job's series leave with it; the others stay.
    nats.ok(&["rm", "bad"]);
    let text = eventually(Duration::from_secs(10), "bad's series to leave /metrics", || async {
        http_get(port, "/metrics").map(|r| r.1).filter(|text| !text.contains(r#"job="bad""#))
    })
    .await;
    assert_eq!(samples(&text)[r#"cronrun_runs_total{job="ok",status="succeeded"}"#], 1.0);
    // Its place went to the next job seen.
    nats.ok(&["add", "late", "--schedule", "@yearly", "--", "true"]);
    nats.ok(&["trigger", "late", "--wait"]);
    let text = eventually(Duration::from_secs(10), "late's series", || async {
        http_get(port, "/metrics")
            .map(|r| r.1)
            .filter(|t| t.contains(r#"cronrun_runs_total{job="late",status="succeeded"} 1"#))
    })
    .await;
    assert!(series_of("late", &text) > 1, "{text}");
    assert_eq!(samples(&text)[r#"cronrun_runs_total{job="(other)",status="succeeded"}"#], 1.0, "{text}");

    // NATS gone: not ready, saying why; alive all the same.
    nats.kill_server().await;
    let (_, why) = eventually(Duration::from_secs(10), "/readyz to say not ready", || async {
        http_get(port, "/readyz").filter(|(code, _)| *code == 503)
    })
    .await;
    assert_eq!(why, "not ready: NATS is not connected\n");
    assert_eq!(http_get(port, "/livez").map(|r| r.0), Some(200));
    assert_eq!(samples(&http_get(port, "/metrics").unwrap().1)["cronrun_nats_connected"], 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_address_already_taken_is_refused_with_one_line() {
    let nats = Nats::start().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = nats.command().args(["agent", "--http", &addr]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let last = err.trim_end().lines().last().unwrap_or("");
    assert!(last.contains(&format!("--http {addr}: cannot listen")) && last.contains("pick another address"), "{err}");
}

/// A job whose pool no live runner serves would wait silently for ever: the CLI warns
/// when it writes or triggers one. A run that fails shows its last lines with the error.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_warns_of_an_unserved_pool_and_shows_a_failed_runs_last_lines() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    eventually(Duration::from_secs(10), "the runner's presence", || async {
        nats.ok(&["status"]).contains("default").then_some(())
    })
    .await;
    let warning = "warning: no live runner serves pool \"nosuch\": its runs wait until one does";
    let add = |args: &[&str]| {
        let out = nats.cli(args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stderr).unwrap()
    };
    assert!(add(&["add", "nowhere", "--schedule", "@yearly", "--pool", "nosuch", "--", "true"]).contains(warning));
    // Both lines on stdout: stdout and stderr are read apart, so their order between
    // them is not kept.
    let served = add(&["add", "loud", "--schedule", "@yearly", "--", "echo one; echo two; exit 2"]);
    assert!(!served.contains("warning"), "{served}");
    let on_host = add(&["add", "pinned", "--schedule", "@yearly", "--pool", "a", "--", "true"]);
    assert!(!on_host.contains("warning"), "every runner serves the pool named after it: {on_host}");

    let out = nats.cli(&["trigger", "loud", "--wait"]);
    assert!(!out.status.success());
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(" failed\n  one\n  two"), "{stdout}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("failed: exited with code 2"), "{stderr}");

    // Waiting is bounded when asked: a run nobody takes is left to go on.
    let out = nats.cli(&["trigger", "nowhere", "--wait", "--timeout", "1s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert!(lines.len() == 2 && lines[0].contains(warning), "the pool warning, then the error: {err}");
    assert!(lines[1].contains("did not end within 1s; it goes on"), "{err}");
}

/// `--log-format json`: every line an agent logs is one JSON object with its level.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line() {
    let nats = Nats::start().await;
    let mut agent = nats
        .command()
        .args(["--log-format", "json", "agent", "--name", "j"])
        .env("CRONRUN_CREDS", nats.identity("agent"))
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(agent.stderr.take().unwrap());
    let (lines, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || std::io::BufRead::lines(stderr).map_while(Result::ok).try_for_each(|l| lines.send(l)));
    let mut seen = Vec::new();
    loop {
        let line = read.recv_timeout(Duration::from_secs(20)).expect("the runner ready within 20 s");
        let object: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(object["level"].is_string() && object["fields"]["message"].is_string(), "{line}");
        let ready = object["fields"]["message"] == "runner ready";
        seen.push(object);
        if ready {
            break;
        }
    }
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(seen.iter().any(|o| o["fields"]["message"] == "agent starting"), "{seen:?}");
}
