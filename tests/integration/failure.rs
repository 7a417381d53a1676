//! Failure semantics: retries with backoff after failed attempts, and runs whose runner
//! dies are marked `lost` from their expired lease and retried elsewhere.

use crate::procs::{group_members, pgrp_of};

use std::time::Duration;

use crate::support::*;
use cronrun::record::{Status, Trigger};

async fn record(nats: &Nats, key: &str) -> cronrun::record::RunRecord {
    dispatched(nats, key).await.unwrap()
}

/// The record of run `key`, once its run is dispatched.
async fn dispatched(nats: &Nats, key: &str) -> Option<cronrun::record::RunRecord> {
    let (job, run) = cronrun::record::parse_run_key(key).unwrap();
    nats.store().await.get_run(job, run).await.ok().map(|stored| stored.record)
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_attempts_are_retried_with_backoff_until_one_succeeds() {
    let nats = Nats::start().await;
    // Runners with the runner identity, which may not publish dispatches: the scheduler
    // dispatches each retry when the failed attempt's run lease expires.
    let (_scheduler, _runners) = nats.scheduler_and_two_runners().await;
    let counter = nats.dir.path().join("attempts");
    apply(
        &nats,
        &format!(
            r#"
[[job]]
name = "flaky"
schedule = "@yearly"
retries = {{ max = 3, backoff = "1s" }}
shell = "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; echo attempt $n; test $n -ge 3"

[[job]]
name = "hopeless"
schedule = "@yearly"
retries = {{ max = 1, backoff = "1s" }}
shell = "echo no; exit 4"
"#,
            c = counter.display()
        ),
    );
    let flaky = nats.trigger("flaky");
    let hopeless = nats.trigger("hopeless");
    let done = eventually(Duration::from_secs(30), "flaky to succeed", || async {
        Some(record(&nats, &flaky).await).filter(|r| r.status == Status::Succeeded)
    })
    .await;
    assert_eq!(done.attempt, 3);
    assert_eq!(done.trigger, Trigger::Retry);
    assert_eq!(done.output, ["attempt 3"]);
    // The job itself ran three times, no more.
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "3");
    assert!(done.error.is_none() || done.error.as_deref().unwrap().contains("attempt 2 failed"), "{:?}", done.error);
    let store = nats.store().await;
    let retrying = events(&store, "flaky", "retrying").await;
    assert_eq!(retrying.len(), 2, "{retrying:?}");
    let started = events(&store, "flaky", "started").await;
    let at = |i: usize| chrono::DateTime::parse_from_rfc3339(started[i]["at"].as_str().unwrap()).unwrap();
    assert!(at(1) - at(0) >= chrono::Duration::milliseconds(1000), "first backoff 1s");
    assert!(at(2) - at(1) >= chrono::Duration::milliseconds(2000), "second backoff doubled");

    let failed = eventually(Duration::from_secs(30), "hopeless to fail for good", || async {
        Some(record(&nats, &hopeless).await).filter(|r| r.status == Status::Failed)
    })
    .await;
    assert_eq!(failed.attempt, 2, "one retry, then failed");
    assert_eq!(failed.exit_code, Some(4));
}

/// How a test's run comes: triggered by hand (it takes a lease of its own at its claim),
/// or a scheduled fire on time, whose overlap lease (the default `skip`) is its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Came {
    Triggered,
    OnTime,
}

/// Applies job `name` with `lines` (its spec but its schedule) and has a run of it come as
/// `came` says; the run's key.
async fn start_run(nats: &Nats, name: &str, lines: &str, came: Came) -> String {
    let schedule = |s: &str| format!("[[job]]\nname = \"{name}\"\nschedule = \"{s}\"\n{lines}\n");
    match came {
        Came::Triggered => {
            apply(nats, &schedule("@yearly"));
            nats.trigger(name)
        }
        Came::OnTime => {
            let fire = ceil_second(chrono::Utc::now()) + chrono::Duration::seconds(3);
            apply(nats, &schedule(&format!("@at {}", fire.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))));
            cronrun::record::run_key(name, &cronrun::record::fire_run_id(fire))
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_runner_dies_is_lost_and_retried_on_another() {
    runner_dies(Came::Triggered).await;
}

/// The same for a fire on time with the defaults: its lease is its job's overlap lease,
/// whose expiry has the reaper settle the job's runs that no lease names.
#[tokio::test(flavor = "multi_thread")]
async fn a_fire_whose_runner_dies_is_lost_by_its_overlap_lease_and_retried_on_another() {
    runner_dies(Came::OnTime).await;
}

async fn runner_dies(came: Came) {
    let nats = Nats::start().await;
    let (scheduler, mut runners) = nats.scheduler_and_two_runners().await;
    let lines = r#"retries = { max = 1, backoff = "1s" }
shell = "echo $$ > {dir}/attempt-$CRONRUN_ATTEMPT; sleep 60 & sleep 61""#
        .replace("{dir}", &nats.dir.path().display().to_string());
    let key = start_run(&nats, "long", &lines, came).await;
    let first = eventually(Duration::from_secs(10), "the run to start", || async {
        dispatched(&nats, &key).await.filter(|r| r.status == Status::Running)
    })
    .await;
    let host = first.host.clone().unwrap();
    // Its lease: its own, or the overlap lease naming it.
    let store = nats.store().await;
    let own = store.leases.get(&format!("run.{key}")).await.unwrap().is_some();
    let overlap = cronrun::store::lease::holder(&store.leases, "active.long").await.unwrap().map(|h| h.holder);
    match came {
        Came::Triggered => assert!(own, "a triggered run holds a lease of its own"),
        Came::OnTime => {
            assert_eq!((own, overlap.as_deref()), (false, Some(key.as_str())), "its overlap lease is its lease")
        }
    }
    let pidfile = nats.dir.path().join("attempt-1");
    let shell: i32 = eventually(Duration::from_secs(5), "attempt 1's shell", || async {
        std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok())
    })
    .await;
    let group = pgrp_of(shell);
    // The shell writes its pid before it forks its child.
    eventually(Duration::from_secs(5), "supervisor, shell and its child in one group", || async {
        (group_members(group).len() >= 3).then_some(())
    })
    .await;
    let killed_at = std::time::Instant::now();
    runners.iter_mut().find(|r| r.name == host).unwrap().kill9();
    // Never two at once: the dead runner's run goes with it, before any retry can start.
    eventually(Duration::from_secs(2), "attempt 1's processes to die with their runner", || async {
        group_members(group).is_empty().then_some(())
    })
    .await;
    assert!(!nats.dir.path().join("attempt-2").exists(), "attempt 2 started while attempt 1 lived");
    // Run lease TTL is 3 heartbeats (3 s here); the retry waits its 1 s backoff.
    let second = eventually(Duration::from_secs(15), "attempt 2 running on the other runner", || async {
        Some(record(&nats, &key).await).filter(|r| r.attempt == 2 && r.status == Status::Running)
    })
    .await;
    let took = killed_at.elapsed();
    println!("runner {host} killed; attempt 2 running on {:?} after {} ms", second.host, took.as_millis());
    assert_ne!(second.host.as_deref(), Some(host.as_str()));
    assert!(took < Duration::from_secs(3 + 1 + 2 + 2), "lost and retried in {took:?}");
    assert!(
        second.error.as_deref().unwrap().contains(&format!("attempt 1 lost: runner {host} stopped renewing")),
        "{:?}",
        second.error
    );
    let lost = events(&nats.store().await, "long", "lost").await;
    assert_eq!(lost.len(), 1, "{lost:?}");
    if came == Came::OnTime {
        let settled = "overlap lease of long expired: 1 of its runs settled";
        assert!(scheduler.log().contains(settled), "the reaper, not the sweep: {}", scheduler.log());
    }
}

/// A failed attempt of a fire on time, whose overlap lease was its lease, hands its retry
/// over with a lease of its own: its expiry after the backoff has the scheduler dispatch
/// the next attempt, and the job's overlap lease is free meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_attempt_of_a_fire_on_time_is_retried_after_its_backoff() {
    let nats = Nats::start().await;
    let (_scheduler, runners) = nats.scheduler_and_two_runners().await;
    let executions = nats.dir.path().join("attempts");
    let lines = format!(
        "retries = {{ max = 1, backoff = \"1s\" }}\nshell = \"echo $CRONRUN_ATTEMPT >> {}; test $CRONRUN_ATTEMPT -ge 2\"",
        executions.display()
    );
    let key = start_run(&nats, "flaky", &lines, Came::OnTime).await;
    let done = eventually(Duration::from_secs(20), "attempt 2 to succeed", || async {
        dispatched(&nats, &key).await.filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!((done.status, done.attempt), (Status::Succeeded, 2), "{done:?}");
    assert_eq!(std::fs::read_to_string(&executions).unwrap(), "1\n2\n", "each attempt ran once");
    let kept = "the run's overlap lease is kept until its retry";
    assert!(runners.iter().all(|r| !r.log().contains(kept)), "the retry was handed over with the overlap lease");
}

/// A run whose runner died while no scheduler ran, its lease's expiry marker gone by the
/// time one came back (here purged by hand; in life, after the marker TTL), would stay
/// `running` for ever: the sweep finds it, records it lost and retries it.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_left_without_an_owner_or_a_trace_is_settled_by_the_sweep() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    let mut first = nats.agent("s1", "roles = [\"scheduler\"]");
    let mut runners = [nats.agent("r1", "roles = [\"runner\"]"), nats.agent("r2", "roles = [\"runner\"]")];
    for agent in runners.iter().chain([&first]) {
        ready(agent).await;
    }
    let (key, host) = a_long_run_with_a_retry(&nats, "orphan", "").await;
    // No scheduler, then no runner: nobody sees the run's lease expire.
    first.kill9();
    runners.iter_mut().find(|r| r.name == host).unwrap().kill9();
    // Its own lease and its overlap lease (the default `skip`): no marker of either left.
    for lease in [format!("run.{key}"), "active.orphan".to_string()] {
        eventually(Duration::from_secs(10), "the run's leases to expire", || async {
            store.leases.get(&lease).await.unwrap().is_none().then_some(())
        })
        .await;
        store.leases.purge(&lease, Duration::from_secs(5)).await.unwrap();
    }
    let second = nats.scheduler_with("s2", "reconcile_every = \"1s\"");
    ready(&second).await;
    let retried = eventually(Duration::from_secs(20), "attempt 2 running on the other runner", || async {
        Some(record(&nats, &key).await).filter(|r| r.attempt == 2 && r.status == Status::Running)
    })
    .await;
    assert_ne!(retried.host.as_deref(), Some(host.as_str()));
    assert!(retried.error.as_deref().unwrap().contains("attempt 1 lost"), "{:?}", retried.error);
    // What the job did: one execution per attempt.
    assert_eq!(executions_of(&nats, "orphan", 2).await, "1\n2\n");
    assert!(second.log().contains("sweep settled runs left without an owner"), "the sweep, not the reaper");
}

/// A retry that comes while its dead predecessor's overlap lease still lives (here: the
/// sweep settles the run at once, and the job's 10 s run TTL keeps that lease) waits for
/// it to run out instead of being skipped by its own earlier attempt.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_is_never_skipped_by_its_own_earlier_attempt() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    let scheduler = nats.scheduler_with("s", "reconcile_every = \"1s\"");
    let mut runners = [nats.agent("r1", "roles = [\"runner\"]"), nats.agent("r2", "roles = [\"runner\"]")];
    for agent in runners.iter().chain([&scheduler]) {
        ready(agent).await;
    }
    let (key, host) =
        a_long_run_with_a_retry(&nats, "guarded", "overlap = \"skip\"\nlock = true\nrun_ttl = \"10s\"").await;
    runners.iter_mut().find(|r| r.name == host).unwrap().kill9();
    // The run's own lease goes at once; its overlap and lock leases live on for 10 s.
    store.leases.purge(&format!("run.{key}"), Duration::from_secs(5)).await.unwrap();
    let retried = eventually(Duration::from_secs(30), "attempt 2 to run", || async {
        Some(record(&nats, &key).await).filter(|r| r.attempt == 2 && r.status != Status::Queued)
    })
    .await;
    assert_eq!(retried.status, Status::Running, "{retried:?}");
    assert_eq!(executions_of(&nats, "guarded", 2).await, "1\n2\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_running_jobs_and_hands_the_shards_over_at_once() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let nats = Nats::start().await;
    // First's shard leases live 10 s: a handover well under that is a release, not an
    // expiry, however loaded the machine.
    let mut first =
        nats.agent_with_env("first", &test_config("first").replace("lease_ttl = \"2s\"", "lease_ttl = \"10s\""), &[]);
    ready(&first).await;
    let store = nats.store().await;
    let all = TEST_SHARDS as usize;
    let held_by = |agent: &'static str, n: usize| {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move { shard_counts(&store).await.filter(|c| c.get(agent) == Some(&n)) }
        }
    };
    eventually(Duration::from_secs(10), "first to lead every shard", held_by("first", all)).await;
    // A second scheduler joining takes half the shards.
    let second = nats.agent("second", "roles = [\"scheduler\"]");
    ready(&second).await;
    eventually(Duration::from_secs(10), "second to take half the shards", held_by("second", all / 2)).await;
    nats.ok(&["add", "slow", "--schedule", "@yearly", "--", "sleep 2; echo done"]);
    let key = nats.trigger("slow");
    eventually(Duration::from_secs(10), "the run to start on first", || async {
        Some(record(&nats, &key).await).filter(|r| r.status == Status::Running && r.host.as_deref() == Some("first"))
    })
    .await;
    kill(Pid::from_raw(first.pid()), Signal::SIGTERM).unwrap();
    let signalled = std::time::Instant::now();
    eventually(
        Duration::from_secs(8),
        "second to lead every shard once first released its leases",
        held_by("second", all),
    )
    .await;
    println!("{} shard leases handed over {} ms after SIGTERM (TTL 10 s)", all / 2, signalled.elapsed().as_millis());
    assert!(signalled.elapsed() < Duration::from_secs(5), "the leases were released, not left to expire");
    let done = eventually(Duration::from_secs(10), "the running job to finish", || async {
        Some(record(&nats, &key).await).filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!(done.status, Status::Succeeded, "{done:?}");
    assert_eq!(done.output, ["done"]);
    let status = first.child.wait().unwrap();
    assert!(status.success(), "agent exited with {status}");
}

/// Job `name` (with `spec_lines`) runs for a minute, records each execution's attempt
/// (see `executions_of`) and may be retried once; it is triggered and its run is running.
/// Returns the run's key and the host running it.
async fn a_long_run_with_a_retry(nats: &Nats, name: &str, spec_lines: &str) -> (String, String) {
    let executions = nats.dir.path().join(format!("{name}.executions"));
    apply(
        nats,
        &format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"@yearly\"\nretries = {{ max = 1, backoff = \"1s\" }}\n{spec_lines}\n\
             shell = \"echo $CRONRUN_ATTEMPT >> {}; sleep 60\"\n",
            executions.display()
        ),
    );
    let key = nats.trigger(name);
    let running = eventually(Duration::from_secs(10), "the run to start", || async {
        Some(record(nats, &key).await).filter(|r| r.status == Status::Running)
    })
    .await;
    let host = running.host.clone().unwrap();
    (key, host)
}

/// The attempts job `name` of `a_long_run_with_a_retry` executed, one per line, once
/// there are `n` (or after a bound).
async fn executions_of(nats: &Nats, name: &str, n: usize) -> String {
    let path = nats.dir.path().join(format!("{name}.executions"));
    eventually(Duration::from_secs(5), &format!("{n} executions of {name}"), || async {
        std::fs::read_to_string(&path).ok().filter(|s| s.lines().count() == n)
    })
    .await
}

/// A run whose record moved on under its dispatch message, still queued at its attempt
/// (in life: a claim of ours that landed unseen, met by a redelivery that read the record
/// from a follower not yet up to date), is still its runner's while the runner holds the
/// run's lease: the refused `running` write is made again from the record as it is, and
/// the run runs once, rather than being dropped as taken over and later recorded `lost`.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_record_moved_on_while_it_stayed_queued_runs_once() {
    let nats = Nats::start().await;
    let dir = nats.dir.path().display().to_string();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"moved\"\nschedule = \"@yearly\"\nshell = 'echo $CRONRUN_ATTEMPT >> {dir}/moved.executions'\n"
        ),
    );
    // Dispatched with no runner up: the message waits, holding the record's revision.
    let key = nats.trigger("moved");
    let (job, run) = cronrun::record::parse_run_key(&key).unwrap();
    let store = nats.store().await;
    let stored = store.get_run(job, run).await.unwrap();
    assert_eq!(stored.record.status, Status::Queued);
    store.update_run(&stored.record, stored.revision).await.unwrap();
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let done = eventually(Duration::from_secs(20), "the run to finish", || async {
        Some(record(&nats, &key).await).filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!((done.status, done.attempt), (Status::Succeeded, 1), "{done:?}");
    assert_eq!(executions_of(&nats, "moved", 1).await, "1\n");
    assert!(agent.log().contains("the run's record moved on while it stayed ours"), "{}", agent.log());
}
