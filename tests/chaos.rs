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

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_shard_owner_twenty_times_loses_and_doubles_no_fire() {
    const TRIALS: usize = 20;
    let nats = Nats::start().await;
    let store = nats.store().await;
    // Schedulers apart from the runner: the kills hit scheduling only.
    let scheduler = |name: &str| nats.agent(name, "roles = [\"scheduler\"]");
    let runner = nats.agent("r", "roles = [\"runner\"]");
    let mut schedulers = [scheduler("s0"), scheduler("s1")];
    for agent in schedulers.iter().chain([&runner]) {
        ready(agent).await;
    }
    apply(&nats, EVERY_SECOND);
    eventually(Duration::from_secs(10), "the job to run", || async {
        (!runs(&store, "tick").await.is_empty()).then_some(())
    })
    .await;
    let from = ceil_second(Utc::now());
    let key = shard_key("tick");
    let owner = || async {
        let lease = cronrun::store::lease::holder(&store.leases, &key).await.ok()??;
        Some(lease.holder.split('/').next()?.to_string())
    };
    let mut takeovers = Vec::new();
    for trial in 0..TRIALS {
        let victim = eventually(Duration::from_secs(10), "an owner of the job's shard", owner).await;
        // A random moment relative to the fires, which come on whole seconds.
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 1000)).await;
        let index = schedulers.iter().position(|a| a.name == victim).unwrap();
        let killed = std::time::Instant::now();
        schedulers[index].kill9();
        // A replacement joins, so two schedulers share the shards again.
        schedulers[index] = scheduler(&format!("s{}", trial + 2));
        eventually(Duration::from_secs(10), "another owner of the job's shard", || async {
            owner().await.filter(|o| *o != victim)
        })
        .await;
        takeovers.push(killed.elapsed().as_millis());
    }
    let secs = (Utc::now() - from).num_seconds();
    assert_each_second_once(&store, "tick", from, secs).await;
    takeovers.sort_unstable();
    println!(
        "{TRIALS} kills of the shard owner over {secs} s: every fire ran exactly once; \
         takeover min {} / median {} / max {} ms (lease TTL 2000 ms)",
        takeovers[0],
        takeovers[TRIALS / 2],
        takeovers[TRIALS - 1]
    );
}
