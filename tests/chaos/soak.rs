//! A compressed soak: many runs, an agent restart and a nats-server restart; afterwards
//! what NATS holds and what the agent holds (memory, file descriptors) stay flat.

use super::*;

/// What is measured at one moment: messages per stream, the agent's RSS and open fds.
#[derive(Debug, Clone, Copy)]
struct Sample {
    leases: u64,
    runs: u64,
    dispatch: u64,
    rss_kib: u64,
    fds: usize,
}

async fn stream_messages(store: &cronrun::store::Store, name: &str) -> u64 {
    store.js.get_stream(name).await.unwrap().info().await.unwrap().state.messages
}

async fn sample(store: &cronrun::store::Store, agent: &Agent) -> Sample {
    Sample {
        leases: stream_messages(store, "KV_cronrun_leases").await,
        runs: stream_messages(store, "KV_cronrun_runs").await,
        dispatch: stream_messages(store, "CRONRUN_DISPATCH").await,
        rss_kib: agent.rss_kib(),
        fds: agent.open_fds(),
    }
}

/// Twenty every-second jobs (history 3 + 3) for about 50 s: the agent is restarted, then
/// nats-server is killed and started again on its store. From after the restarts to the
/// end (more than 300 more runs) the streams, the agent's memory and its descriptors do
/// not grow with the runs; every job ran in every second of the last stretch exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn many_runs_and_restarts_leave_state_and_agent_flat() {
    let mut nats = Nats::start().await;
    let names: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    let jobs: String = names
        .iter()
        .map(|name| format!("{}history = {{ succeeded = 3, failed = 3 }}\n", recording_job(name, nats.dir.path())))
        .collect();
    // Heartbeat 5 s: a run's lease outlives the nats-server restart.
    let mut first = nats.agent_with_heartbeat("a", "", "5s");
    ready(&first).await;
    apply(&nats, &jobs);
    // The soak's pace: eight seconds of runs (160) on the first agent, then its restart.
    tokio::time::sleep(Duration::from_secs(8)).await;
    kill(Pid::from_raw(first.pid()), Signal::SIGTERM).unwrap();
    let stopped = wait_exit(&mut first.child, Duration::from_secs(30)).await;
    assert!(stopped.success(), "the first agent stopped with {stopped}");
    let agent = nats.agent_with_heartbeat("a2", "", "5s");
    ready(&agent).await;
    // Five seconds of runs on the second agent, then the nats-server restart.
    tokio::time::sleep(Duration::from_secs(5)).await;
    nats.kill_server().await;
    nats.restart_server().await;
    let store = nats.store().await;
    // Warmed up: history full, the restarts behind, ten seconds on (what is measured
    // from here must not count what the restarts left in flight).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let from = ceil_second(Utc::now());
    let before = sample(&store, &agent).await;
    // The span measured: 360 runs between the two samples.
    tokio::time::sleep(Duration::from_secs(18)).await;
    let after = sample(&store, &agent).await;
    println!("soak: after the restarts {before:?}, 18 s (360 runs) later {after:?}");
    assert_jobs_ran_each_second_once(&names, nats.dir.path(), from, 15).await;
    // Per job: 6 records kept, up to 5 awaiting the next prune, the markers of the last
    // prune (5 s), two in flight: 18, and a quarter more for timing. Leases: a few per job
    // and shard, not one per run.
    let runs_bound = 20 * 18 * 5 / 4;
    assert!(after.runs <= runs_bound, "runs stream: {} messages, bound {runs_bound}", after.runs);
    assert!(after.leases <= before.leases + 20, "leases stream grew from {} to {}", before.leases, after.leases);
    assert!(after.dispatch <= 60, "dispatch stream holds {} messages", after.dispatch);
    assert!(after.fds <= before.fds + 8, "open fds grew from {} to {}", before.fds, after.fds);
    assert!(
        after.rss_kib <= before.rss_kib + before.rss_kib / 4,
        "RSS grew from {} to {} KiB",
        before.rss_kib,
        after.rss_kib
    );
}
