//! Chaos on a 3-node NATS cluster (R3 buckets and streams): cronrun keeps running every
//! fire exactly once while a node dies under load. Select with `cargo test --test chaos`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

use std::time::Duration;

use chrono::Utc;
use cronrun::record::Status;
use support::*;

const EVERY_SECOND: &str = "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n\
    overlap = \"allow\"\nhistory = { succeeded = 1000, failed = 1000 }\n";

#[tokio::test(flavor = "multi_thread")]
async fn killing_a_nats_node_under_load_loses_and_doubles_no_run() {
    let mut cluster = Cluster::start(3).await;
    // The layout, with three replicas, exists before any agent starts.
    let store = cluster.store().await;
    let agents = [cluster.agent("a", ""), cluster.agent("b", "")];
    for agent in &agents {
        ready(agent).await;
    }
    let path = cluster.dir.path().join("jobs.toml");
    std::fs::write(&path, EVERY_SECOND).unwrap();
    assert!(cluster.cli(&["apply", "-f", path.to_str().unwrap()]).status.success());
    eventually(Duration::from_secs(15), "the job to run", || async {
        runs(&store, "tick").await.iter().any(|r| r.status == Status::Succeeded).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(3000 + rand::random::<u64>() % 1000)).await;
    let killed_at = Utc::now();
    let victim = rand::random::<u64>() as usize % 3;
    cluster.kill(victim);
    println!("killed NATS node n{victim} at {killed_at}");
    // The store's client reconnects to a live node as the agents' do.
    let from = ceil_second(killed_at) - chrono::Duration::seconds(2);
    assert_each_second_once(&store, "tick", from, 12).await;
    for agent in &agents {
        assert!(agent.log().contains("job catalog loaded"));
    }
}
