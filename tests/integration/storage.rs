//! The layout fits the storage JetStream gives: sized down on a small server, refused with
//! one line below its floor (and completed by a later start on a bigger server), and each
//! stream's use against its limits in `cronrun status`, `/readyz` and `/metrics`.

use std::time::Duration;

use crate::support::*;

/// The max_bytes of a stream, read as the test identity.
async fn max_bytes(nats: &Nats, stream: &str) -> i64 {
    let js = async_nats::jetstream::new(nats.client().await);
    js.get_stream(stream).await.unwrap().cached_info().config.max_bytes
}

/// The streams that reserve storage take at most half of `limit` together (the rest is the
/// buckets'), each at least the floor.
async fn assert_sized_within(nats: &Nats, limit: i64) {
    let (dispatch, logs) = (max_bytes(nats, "CRONRUN_DISPATCH").await, max_bytes(nats, "CRONRUN_LOGS").await);
    assert!(dispatch + logs <= limit / 2, "dispatch {dispatch} + logs {logs} > half of {limit}");
    let floor = cronrun::store::MIN_STREAM_BYTES;
    assert!(dispatch >= floor && logs >= floor, "dispatch {dispatch}, logs {logs}: under the floor");
}

/// How many lines `path` has (0 if absent).
fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_on_a_256mb_server_sizes_its_streams_within_and_runs_a_shell_job() {
    let nats = Nats::start_with_jetstream("max_file_store: 256MB").await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    assert_sized_within(&nats, 256 << 20).await;
    let log = agent.log();
    assert!(log.contains("sized the layout down"), "one warning of the sizes: {log}");
    assert_eq!(log.matches("sized the layout down").count(), 1, "{log}");

    apply(&nats, &recording_job("tick", nats.dir.path()));
    let fires = nats.dir.path().join("tick.fires");
    eventually(Duration::from_secs(20), "tick to run three times", || async { (lines(&fires) >= 3).then_some(()) })
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_on_a_server_too_small_for_the_floor_says_so_in_one_line_and_a_bigger_server_completes_it() {
    let mut nats = Nats::start_with_jetstream("max_file_store: 8MB").await;
    let refusal = |agent: &Agent| {
        let log = agent.log();
        let errors: Vec<&str> = log.lines().filter(|l| l.to_lowercase().contains("error")).collect();
        assert_eq!(errors.len(), 1, "one line of error: {log}");
        errors[0].to_string()
    };
    let mut first = nats.agent("a", "");
    assert!(!wait_exit(&mut first.child, Duration::from_secs(30)).await.success());
    let line = refusal(&first);
    for names in ["max_file_store", "max_file", "dispatch_max_bytes", "logs_max_bytes", "64 MiB"] {
        assert!(line.contains(names), "{names} in: {line}");
    }
    // A second start on the same server finds what the first left, and says the same.
    let mut second = nats.agent("b", "");
    assert!(!wait_exit(&mut second.child, Duration::from_secs(30)).await.success());
    assert_eq!(refusal(&second), line);

    // On more storage, a start completes the layout the refusals began.
    nats.kill_server().await;
    nats.restart_server_with_jetstream("max_file_store: 256MB").await;
    let agent = nats.agent("c", "");
    ready(&agent).await;
    assert_sized_within(&nats, 256 << 20).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_each_streams_use_and_a_stream_past_90_percent_warns_in_readyz_and_the_metric() {
    let nats = Nats::start().await;
    let port = free_port();
    let tables = format!("[layout]\nlogs_max_bytes = 1048576\n[http]\nlisten = \"127.0.0.1:{port}\"\n");
    let agent = nats.agent_with_tables("a", &tables);
    ready(&agent).await;
    // Output of 1.1 MiB into a stream of 1 MiB, its oldest dropped.
    let js = async_nats::jetstream::new(nats.client().await);
    for i in 0..1100 {
        js.publish(format!("cronrun.logs.fill.r{}", i % 10), vec![b'x'; 1024].into()).await.unwrap().await.unwrap();
    }

    let status: serde_json::Value = serde_json::from_str(&nats.ok(&["status", "--output", "json"])).unwrap();
    let stream = |name: &str| {
        status["streams"].as_array().unwrap().iter().find(|s| s["stream"] == name).unwrap_or_else(|| panic!("{name}"))
    };
    let logs = stream("CRONRUN_LOGS");
    assert_eq!(logs["max_bytes"], 1_048_576, "{logs}");
    assert!(logs["bytes"].as_f64().unwrap() >= 0.9 * 1_048_576.0, "{logs}");
    assert!(logs["messages"].as_u64().unwrap() > 0 && logs["max_messages"].is_null(), "{logs}");
    assert!(logs["use_ratio"].as_f64().unwrap() >= 0.9, "{logs}");
    assert!(logs["warning"].as_str().unwrap().contains("oldest output lines"), "{logs}");
    // Unlimited storage: the defaults as they are.
    let dispatch = stream("CRONRUN_DISPATCH");
    assert_eq!((dispatch["max_bytes"].as_i64(), dispatch["max_messages"].as_i64()), (Some(1 << 30), Some(1_000_000)));
    assert!(dispatch["warning"].is_null(), "{dispatch}");
    let jobs = stream("KV_cronrun_jobs");
    assert!(jobs["max_bytes"].is_null() && jobs["use_ratio"] == 0.0, "a bucket has no limit: {jobs}");
    let text = nats.ok(&["status"]);
    assert!(text.contains("STREAM") && text.contains("stream CRONRUN_LOGS is"), "{text}");

    let body = eventually(Duration::from_secs(10), "/readyz to warn of CRONRUN_LOGS", || async {
        http_get(port, "/readyz").filter(|(_, body)| body.contains("warning: stream CRONRUN_LOGS"))
    })
    .await;
    assert_eq!(body.0, 200, "a stream nearly full leaves the agent ready: {}", body.1);
    assert!(body.1.starts_with("ready\n") && !body.1.contains("CRONRUN_DISPATCH"), "{}", body.1);
    let ratio = |stream: &str| metric(port, &format!("cronrun_stream_use_ratio{{stream=\"{stream}\"}}"));
    assert!(ratio("CRONRUN_LOGS").unwrap() >= 0.9);
    assert!(ratio("CRONRUN_DISPATCH").unwrap() < 0.9);
}
