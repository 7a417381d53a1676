//! Scheduling against a real nats-server: exactly-once per fire across agents and
//! failover, and live edits (pause, resume, rm, schedule change) without reload.

use std::time::Duration;

use crate::support::*;
use chrono::Utc;
use cronrun::record::Status;

// These tests are about dispatch: every fire exactly once. Fires that a new scheduler
// dispatches late after a handover start together, and the default overlap `skip` would
// rightly skip those that find another still running; `allow` keeps them all.
const EVERY_SECOND: &str = r#"
[[job]]
name = "tick"
schedule = "* * * * * *"
shell = "true"
overlap = "allow"
history = { succeeded = 1000, failed = 1000 }
"#;

/// A job beside `tick` that goes on firing while tick is paused or removed: its run of a
/// later instant, ended, shows the scheduler past every instant before.
const WITNESS: &str = r#"
[[job]]
name = "witness"
schedule = "* * * * * *"
shell = "true"
overlap = "allow"
"#;

/// Waits until the witness ran a fire at or after `at` to its end and every run of tick
/// ended: a fire of tick up to `at` would have been recorded, and would show as it ended.
async fn settled_until(store: &cronrun::store::Store, at: chrono::DateTime<Utc>) {
    eventually(Duration::from_secs(15), &format!("the fires up to {at} to be behind"), || async {
        let witnessed =
            runs(store, "witness").await.iter().any(|r| r.scheduled_at.is_some_and(|t| t >= at) && r.status.is_final());
        (witnessed && runs(store, "tick").await.iter().all(|r| r.status.is_final())).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn two_agents_run_every_second_exactly_once() {
    let nats = Nats::start().await;
    let a = nats.agent("a", "");
    let b = nats.agent("b", "");
    ready(&a).await;
    ready(&b).await;
    apply(&nats, EVERY_SECOND);
    let from = ceil_second(Utc::now()) + chrono::Duration::seconds(2);
    let store = nats.store().await;
    assert_each_second_once(&store, "tick", from, 10).await;
    let hosts: std::collections::HashSet<_> = runs(&store, "tick").await.into_iter().filter_map(|r| r.host).collect();
    println!("runs taken by hosts {hosts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduler_failover_loses_and_doubles_nothing() {
    let nats = Nats::start().await;
    // Two schedulers and a separate runner: the test kills the lease holder only.
    let mut schedulers = [nats.agent("s1", "roles = [\"scheduler\"]"), nats.agent("s2", "roles = [\"scheduler\"]")];
    let runner = nats.agent("r", "roles = [\"runner\"]");
    for agent in schedulers.iter().chain([&runner]) {
        ready(agent).await;
    }
    apply(&nats, EVERY_SECOND);
    let store = nats.store().await;
    let holder = |store: cronrun::store::Store| async move {
        cronrun::store::lease::holder(&store.leases, &shard_key("tick")).await.unwrap().map(|l| l.holder)
    };
    // Both own half the shards before the holder of the job's shard is picked.
    let half = TEST_SHARDS as usize / 2;
    eventually(Duration::from_secs(15), "the shards to spread over both schedulers", || async {
        shard_counts(&store).await.filter(|c| c.values().all(|&n| n == half) && c.len() == 2)
    })
    .await;
    let first = eventually(Duration::from_secs(10), "a scheduler lease", || holder(store.clone())).await;
    // Let the job fire a few times, then kill the holder at a random point of a second.
    tokio::time::sleep(Duration::from_millis(4300 + rand::random::<u64>() % 1000)).await;
    let killed_at = Utc::now();
    let index = schedulers.iter().position(|a| first.starts_with(&format!("{}/", a.name))).unwrap();
    schedulers[index].kill9();
    let second = eventually(Duration::from_secs(10), "another scheduler to take over", || {
        let store = store.clone();
        let first = first.clone();
        async move { holder(store).await.filter(|h| *h != first) }
    })
    .await;
    let takeover = Utc::now() - killed_at;
    println!("lease moved from {first} to {second} in {} ms (TTL 2000 ms)", takeover.num_milliseconds());
    assert!(takeover < chrono::Duration::seconds(5), "takeover took {takeover}");
    let from = ceil_second(killed_at) - chrono::Duration::seconds(3);
    assert_each_second_once(&store, "tick", from, 10).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_resume_edit_and_remove_take_effect_live() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(&nats, &format!("{EVERY_SECOND}{WITNESS}"));
    let store = nats.store().await;
    let succeeded_after = |store: cronrun::store::Store, t: chrono::DateTime<Utc>| async move {
        runs(&store, "tick")
            .await
            .into_iter()
            .filter(|r| r.status == Status::Succeeded && r.scheduled_at.is_some_and(|s| s >= t))
            .collect::<Vec<_>>()
    };
    let start = Utc::now();
    eventually(Duration::from_secs(10), "a first run", || async {
        (!succeeded_after(store.clone(), start).await.is_empty()).then_some(())
    })
    .await;

    nats.ok(&["pause", "tick"]);
    let paused_at = Utc::now();
    settled_until(&store, paused_at + chrono::Duration::seconds(3)).await;
    let during = succeeded_after(store.clone(), paused_at + chrono::Duration::seconds(1)).await;
    assert!(during.is_empty(), "runs while paused: {during:?}");
    assert!(nats.ok(&["ls"]).contains("paused"));

    nats.ok(&["resume", "tick"]);
    let resumed_at = Utc::now();
    eventually(Duration::from_secs(15), "runs after resume", || async {
        (!succeeded_after(store.clone(), resumed_at).await.is_empty()).then_some(())
    })
    .await;

    apply(&nats, &EVERY_SECOND.replace("* * * * * *", "*/3 * * * * *"));
    let edited_at = Utc::now();
    let after_edit = eventually(Duration::from_secs(10), "two runs on the new schedule", || async {
        let r = succeeded_after(store.clone(), edited_at + chrono::Duration::seconds(1)).await;
        (r.len() >= 2).then_some(r)
    })
    .await;
    for r in &after_edit {
        let s = r.scheduled_at.unwrap().timestamp();
        assert_eq!(s % 3, 0, "run {} is not on the */3 schedule", r.run_id);
    }

    nats.ok(&["rm", "tick"]);
    let removed_at = Utc::now();
    settled_until(&store, removed_at + chrono::Duration::seconds(4)).await;
    let after_rm = succeeded_after(store.clone(), removed_at + chrono::Duration::seconds(1)).await;
    assert!(after_rm.is_empty(), "runs after rm: {after_rm:?}");
    assert!(nats.fails(&["get", "tick"]).contains("not found"));
}

#[tokio::test(flavor = "multi_thread")]
async fn many_jobs_firing_at_one_instant_all_start_together() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let jobs = 40;
    let file: String = (0..jobs)
        .map(|i| format!("[[job]]\nname = \"same-{i:02}\"\nschedule = \"*/2 * * * * *\"\nshell = \"true\"\n\n"))
        .collect();
    apply(&nats, &file);
    let store = nats.store().await;
    // One instant a couple of seconds ahead, shared by all of them.
    let instant = ceil_second(Utc::now()) + chrono::Duration::seconds(4);
    let instant = instant + chrono::Duration::seconds(instant.timestamp() % 2);
    let started = eventually(Duration::from_secs(20), "every job to run at the shared instant", || async {
        let mut started = Vec::new();
        for i in 0..jobs {
            let runs = runs(&store, &format!("same-{i:02}")).await;
            let run = runs.into_iter().find(|r| r.scheduled_at == Some(instant) && r.status == Status::Succeeded)?;
            started.push(run.started_at?);
        }
        Some(started)
    })
    .await;
    let spread = *started.iter().max().unwrap() - *started.iter().min().unwrap();
    println!("{jobs} runs at {instant}: started within {} ms of each other", spread.num_milliseconds());
    assert!(spread < chrono::Duration::milliseconds(100), "released together, not one by one: {spread}");
}
