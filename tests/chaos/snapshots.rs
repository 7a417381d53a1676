//! Snapshots of the schedules index under NATS trouble: nats-server killed while a pass
//! writes them and in the middle of a leader's rewrite, and a leader's stop while NATS is
//! gone. None leaves a snapshot that lies: the scheduler taking the shards over leads
//! exactly the deployment's jobs, which run once per fire.

use super::*;

/// nats-server killed at a random moment while a scheduler reads a large index and writes
/// its shards' snapshots, then started again: the scheduler reads its shards again, and a
/// scheduler taking them over reads their snapshots and the index's changes since (a job
/// added after) and leads exactly the deployment's jobs, which run once per fire.
#[tokio::test(flavor = "multi_thread")]
async fn nats_killed_while_snapshots_are_written_leaves_none_that_lies() {
    const JOBS: usize = 20_000;
    let mut nats = Nats::start().await;
    let store = nats.store().await;
    put_yearly(&store, JOBS, |_| "true".into()).await;
    let runner = nats.agent("r", "roles = [\"runner\"]");
    let port_a = free_port();
    let a = nats.scheduler_snapshotting("a", port_a);
    for agent in [&runner, &a] {
        ready(agent).await;
    }
    // Killed once the first chunk of a snapshot is stored: the pass and its writes are
    // under way.
    let snapshots = format!("KV_{}", store.names.snapshots_bucket());
    eventually(Duration::from_secs(20), "a snapshot's first chunk", || async {
        let info = store.js.get_stream(&snapshots).await.ok()?.info().await.ok()?.state.messages;
        (info > 0).then_some(())
    })
    .await;
    nats.kill_server().await;
    // NATS away for a while (the scheduler lease is 2 s): the outage the scenario is about.
    tokio::time::sleep(Duration::from_secs(2)).await;
    nats.restart_server().await;
    eventually(Duration::from_secs(60), "a to lead every job", || led(port_a, JOBS)).await;
    b_takes_over_from_snapshots_and_fires_once(&nats, &store, a, port_a, JOBS).await;
}

/// A leader frozen, then nats-server killed, as the leader's rewrite of a shard's snapshot
/// has stored its first chunk (seen on the bucket's subjects): the rewrite is cut short,
/// some of its chunks stored and not its head. Once NATS is back and the leader wakes, it
/// leads the shards again from their snapshots, writes what they lack at its stop, and a
/// scheduler taking the shards over reads their snapshots and leads exactly the
/// deployment's jobs, which run once per fire.
#[tokio::test(flavor = "multi_thread")]
async fn a_leaders_rewrite_cut_short_by_a_nats_kill_leaves_no_snapshot_that_lies() {
    // 4 KiB specs, 1,000 a shard: a shard's snapshot takes 16 chunks.
    const JOBS: usize = 8_000;
    const REMOVED: usize = 2_000;
    let mut nats = Nats::start().await;
    let store = nats.store().await;
    put_yearly(&store, JOBS, |i| format!("echo {i} {}", "x".repeat(4_000))).await;
    let runner = nats.agent("r", "roles = [\"runner\"]");
    let port_a = free_port();
    let a = nats.scheduler_snapshotting("a", port_a);
    for agent in [&runner, &a] {
        ready(agent).await;
    }
    eventually(Duration::from_secs(60), "a to lead every job", || led(port_a, JOBS)).await;

    // The pass's snapshots are written: the next chunk stored is a leader's rewrite, made
    // once a shard has an eighth of its jobs changed.
    let chunks = format!("$KV.{}.*.*.*", store.names.snapshots_bucket());
    let mut rewriting = store.client.subscribe(chunks).await.unwrap();
    store.client.flush().await.unwrap();
    let removing = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..REMOVED {
                if store.delete_job(&format!("yearly-{i}")).await.is_err() {
                    return i;
                }
            }
            REMOVED
        })
    };
    let chunk = tokio::time::timeout(Duration::from_secs(30), rewriting.next())
        .await
        .expect("a leader's rewrite to start")
        .unwrap();
    kill(Pid::from_raw(a.pid()), Signal::SIGSTOP).unwrap();
    nats.kill_server().await;
    // NATS away for a while, as in the test above: the outage the scenario is about.
    tokio::time::sleep(Duration::from_secs(2)).await;
    nats.restart_server().await;
    let removed = removing.await.unwrap();
    // `$KV.<bucket>.<shard>.<slot>.<k>`; the shard's head still names the other slot.
    let (shard, slot) = match chunk.subject.split('.').collect::<Vec<_>>()[..] {
        [_, _, shard, slot, _] => (shard.to_string(), slot.parse::<u64>().unwrap()),
        _ => panic!("a chunk's subject: {}", chunk.subject),
    };
    let snapshots = store.js.get_key_value(store.names.snapshots_bucket()).await.unwrap();
    let head: serde_json::Value = serde_json::from_slice(&snapshots.get(&shard).await.unwrap().unwrap()).unwrap();
    assert_ne!(head["slot"].as_u64(), Some(slot), "the kill cut shard {shard}'s rewrite short: {head}");
    kill(Pid::from_raw(a.pid()), Signal::SIGCONT).unwrap();
    // The removal the kill cut short may have been made.
    for i in removed..REMOVED {
        match store.delete_job(&format!("yearly-{i}")).await {
            Err(e) if *e.kind() != cronrun::ErrorKind::NotFound => panic!("removing yearly-{i}: {e}"),
            _ => {}
        }
    }
    eventually(Duration::from_secs(60), "a to lead the jobs as they are", || led(port_a, JOBS - REMOVED)).await;
    b_takes_over_from_snapshots_and_fires_once(&nats, &store, a, port_a, JOBS - REMOVED).await;
}

/// A leader told to stop while NATS is gone cannot bring its shards' snapshots up to date:
/// its stop stays bounded all the same, and the scheduler taking the shards once NATS is
/// back reads the changes those snapshots lack from the index, and leads the jobs as they
/// are.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_while_nats_is_gone_leaves_what_the_snapshots_lack_to_the_index() {
    const JOBS: usize = 200;
    let mut nats = Nats::start().await;
    let store = nats.store().await;
    put_yearly(&store, JOBS, |_| "true".into()).await;
    let port_a = free_port();
    let mut a = nats.scheduler_snapshotting("a", port_a);
    ready(&a).await;
    eventually(Duration::from_secs(20), "a to lead every job", || led(port_a, JOBS)).await;
    // Fewer changes than make a write due: a writes them at its stop, when it can.
    for i in 0..10 {
        store.delete_job(&format!("yearly-{i}")).await.unwrap();
    }
    eventually(Duration::from_secs(20), "a to follow the removals", || led(port_a, JOBS - 10)).await;

    nats.kill_server().await;
    let bound = Duration::from_secs(5 + 1 + 2) + cronrun::agent::STOP_MARGIN;
    let asked = Instant::now();
    kill(Pid::from_raw(a.pid()), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut a.child, bound).await;
    println!("scheduler a stopped {:?} after SIGTERM with NATS gone ({status})", asked.elapsed());
    nats.restart_server().await;

    let port_b = free_port();
    let b = nats.scheduler_snapshotting("b", port_b);
    ready(&b).await;
    eventually(Duration::from_secs(30), "b to lead the jobs as they are", || led(port_b, JOBS - 10)).await;
    assert_eq!(shard_loads(port_b, "snapshot"), f64::from(TEST_SHARDS), "b read every shard from its snapshot");
    let since = b.log().split(" since=").nth(1).and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok());
    assert_eq!(since, Some(10), "b read the removals from the index after the snapshots:\n{}", b.log());
}

/// Jobs `yearly-0` to `yearly-<jobs - 1>`, running `command(i)` once a year.
async fn put_yearly(store: &cronrun::store::Store, jobs: usize, command: impl Fn(usize) -> String) {
    use cronrun::spec::{JobSpec, ShellSpec};
    let specs: Vec<JobSpec> = (0..jobs)
        .map(|i| {
            let shell = ShellSpec { command: Some(command(i)), ..Default::default() };
            JobSpec::shell(&format!("yearly-{i}"), "0 0 1 1 *", shell)
        })
        .collect();
    for batch in specs.chunks(500) {
        futures::future::try_join_all(batch.iter().map(|spec| store.put_job(spec))).await.unwrap();
    }
}

/// Whether the scheduler serving metrics on `port` leads `jobs` jobs.
async fn led(port: u16, jobs: usize) -> Option<()> {
    (metric(port, "cronrun_schedules_led")? == jobs as f64).then_some(())
}

/// Scheduler `a`, leading `jobs` jobs, is given an every-second job and stopped; a
/// scheduler `b` started then reads every shard from its snapshot, leads the same jobs
/// and the every-second job, which runs once a second.
async fn b_takes_over_from_snapshots_and_fires_once(
    nats: &Nats,
    store: &cronrun::store::Store,
    mut a: Agent,
    port_a: u16,
    jobs: usize,
) {
    apply(nats, EVERY_SECOND);
    eventually(Duration::from_secs(20), "a to lead tick too", || led(port_a, jobs + 1)).await;
    kill(Pid::from_raw(a.pid()), Signal::SIGTERM).unwrap();
    eventually(Duration::from_secs(20), "a to stop", || async { a.exited().then_some(()) }).await;
    a.kill9();
    let port_b = free_port();
    let b = nats.scheduler_snapshotting("b", port_b);
    ready(&b).await;
    eventually(Duration::from_secs(30), "b to lead every job and tick", || led(port_b, jobs + 1)).await;
    assert_eq!(shard_loads(port_b, "snapshot"), f64::from(TEST_SHARDS), "b read every shard from its snapshot");
    let from = ceil_second(Utc::now()) + chrono::Duration::seconds(1);
    assert_each_second_once(store, "tick", from, 3).await;
}
