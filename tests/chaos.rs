//! Chaos: a NATS node dies under load on a 3-node cluster (R3 buckets and streams), a
//! runner is stopped past its run's lease and woken, a single nats-server restarts under
//! running jobs, and ten agents start at once on an empty server. cronrun keeps running
//! every fire exactly once throughout. Select with `cargo test --test chaos`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

#[path = "procs.rs"]
mod procs;
use procs::{group_members, pgrp_of};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use cronrun::record::{RunRecord, Status, Trigger};
use futures::StreamExt;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
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

/// The run's record; None while NATS cannot be asked (it is restarting).
async fn record(store: &cronrun::store::Store, key: &str) -> Option<RunRecord> {
    let (job, run) = cronrun::record::parse_run_key(key).unwrap();
    store.get_run(job, run).await.ok().map(|r| r.record)
}

/// The first line of `path` as a number, once the job has written it.
fn read_pid(path: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.lines().next()?.trim().parse().ok()
}

/// When an event (JSON with `at`) happened.
fn event_at(event: &serde_json::Value) -> chrono::DateTime<Utc> {
    chrono::DateTime::parse_from_rfc3339(event["at"].as_str().unwrap()).unwrap().to_utc()
}

/// A runner frozen (SIGSTOP) past its run's lease loses the run to another runner; woken
/// (SIGCONT), its heartbeat is refused: it kills the run's processes and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_stopped_past_its_lease_kills_its_run_when_woken_and_writes_nothing() {
    let nats = Nats::start().await;
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    let mut runners = [nats.agent("r1", "roles = [\"runner\"]"), nats.agent("r2", "roles = [\"runner\"]")];
    ready(&scheduler).await;
    for r in &runners {
        ready(r).await;
    }
    let dir = nats.dir.path().display().to_string();
    // Each attempt writes its shell's pid and waits for the test's go: a long run, with no
    // sleep to race against.
    apply(
        &nats,
        &format!(
            r#"
[[job]]
name = "long"
schedule = "@yearly"
retries = {{ max = 1, backoff = "1s" }}
shell = 'echo $$ > {dir}/attempt-$CRONRUN_ATTEMPT; until [ -e {dir}/go ]; do sleep 0.1; done; echo done $CRONRUN_ATTEMPT'
"#
        ),
    );
    let store = nats.store().await;
    let key = nats.trigger("long");
    let first = eventually(Duration::from_secs(10), "attempt 1 to run", || async {
        record(&store, &key).await.filter(|r| r.status == Status::Running)
    })
    .await;
    assert_eq!(first.attempt, 1);
    let host = first.host.clone().unwrap();
    let child = eventually(Duration::from_secs(5), "attempt 1's shell", || async { read_pid(&nats.dir.path().join("attempt-1")) }).await;
    let group = pgrp_of(child);
    let stopped = runners.iter().position(|r| r.name == host).unwrap();
    let other = runners[1 - stopped].name.clone();

    let stop_wall = Utc::now();
    let stop = Instant::now();
    kill(Pid::from_raw(runners[stopped].pid()), Signal::SIGSTOP).unwrap();
    // Lease TTL 3 s (three 1 s heartbeats), then the 1 s backoff.
    let second = eventually(Duration::from_secs(30), "attempt 2 running on the other runner", || async {
        record(&store, &key).await.filter(|r| r.attempt == 2 && r.status == Status::Running)
    })
    .await;
    let to_second = stop.elapsed();
    assert_eq!(second.host.as_deref(), Some(other.as_str()));
    assert_eq!(second.trigger, Trigger::Retry);
    let error = second.error.clone().unwrap_or_default();
    assert!(error.contains(&format!("attempt 1 lost: runner {host} stopped renewing")), "{error}");
    let lost = events(&store, "long", "lost").await;
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0]["attempt"], 1);
    let to_lost = event_at(&lost[0]) - stop_wall;
    let child2 = eventually(Duration::from_secs(5), "attempt 2's shell", || async { read_pid(&nats.dir.path().join("attempt-2")) }).await;
    // A frozen runner cannot stop its child: attempt 1 still runs beside attempt 2.
    assert!(alive(child), "attempt 1's shell died while its runner was stopped");
    assert!(!runners[stopped].log().contains("run taken over elsewhere"));

    // Every write to the record from here on, as the server sees them.
    let writes = Arc::new(Mutex::new(Vec::<RunRecord>::new()));
    let mut watch = store.runs.kv.watch(&key).await.unwrap();
    let seen = writes.clone();
    let watcher = tokio::spawn(async move {
        while let Some(Ok(entry)) = watch.next().await {
            if let Ok(r) = RunRecord::from_json(&entry.value) {
                seen.lock().unwrap().push(r);
            }
        }
    });
    eventually(Duration::from_secs(5), "the watch to deliver the current record", || async {
        (!writes.lock().unwrap().is_empty()).then_some(())
    })
    .await;

    let woken = Instant::now();
    kill(Pid::from_raw(runners[stopped].pid()), Signal::SIGCONT).unwrap();
    eventually(Duration::from_secs(10), "attempt 1's processes to be killed", || async {
        (!alive(child) && group_members(group).is_empty()).then_some(())
    })
    .await;
    let to_gone = woken.elapsed();
    // The refused write is the lease renewal (key `run.<job>.<run-id>`), so nothing after it.
    let refused = format!("run.{key} changed since revision");
    let logged = eventually(Duration::from_secs(10), "the woken runner to log its refused renewal", || async {
        let log = runners[stopped].log();
        log.lines().find(|l| l.contains("run taken over elsewhere") && l.contains(&refused)).map(str::to_string)
    })
    .await;
    println!("{host} logged: {logged}");
    assert!(runners[stopped].child.try_wait().unwrap().is_none(), "the woken runner exited");
    assert!(alive(child2), "attempt 2's shell was killed");
    let now = record(&store, &key).await.unwrap();
    assert_eq!((now.attempt, now.status, now.host.as_deref()), (2, Status::Running, Some(other.as_str())));

    std::fs::write(nats.dir.path().join("go"), "").unwrap();
    let done = eventually(Duration::from_secs(15), "attempt 2 to finish", || async {
        record(&store, &key).await.filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!(done.status, Status::Succeeded, "{done:?}");
    assert_eq!((done.attempt, done.host.as_deref()), (2, Some(other.as_str())));
    assert_eq!(done.output, ["done 2"]);
    eventually(Duration::from_secs(5), "the watch to deliver the final record", || async {
        writes.lock().unwrap().last().is_some_and(|w| w.status.is_final()).then_some(())
    })
    .await;
    watcher.abort();
    let writes = writes.lock().unwrap().clone();
    for w in &writes {
        assert_eq!((w.attempt, w.host.as_deref()), (2, Some(other.as_str())), "a write not by attempt 2's runner: {w:?}");
    }
    let mut ends = Vec::new();
    for kind in ["succeeded", "failed", "cancelled", "timed_out", "lost"] {
        for e in events(&store, "long", kind).await {
            ends.push((kind, e["attempt"].as_u64().unwrap()));
        }
    }
    ends.sort();
    assert_eq!(ends, [("lost", 1), ("succeeded", 2)], "one end per attempt, attempt 1's by the scheduler");
    println!(
        "runner {host} stopped: lost after {} ms, attempt 2 running on {other} after {} ms; \
         woken: attempt 1's processes gone after {} ms; {} writes to the record since, all attempt 2 from {other}",
        to_lost.num_milliseconds(),
        to_second.as_millis(),
        to_gone.as_millis(),
        writes.len() - 1
    );
}

/// One nats-server (file store) is killed under a running job and an every-second job, and
/// started again on its port with its store: the agent reconnects, the run that ended
/// meanwhile is recorded, the schedule goes on, and no fire runs twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_nats_restart_keeps_finished_runs_and_doubles_no_fire() {
    let mut nats = Nats::start().await;
    // Heartbeat 5 s, the default: a run's lease (three heartbeats) outlasts the outage and
    // the client's reconnect backoff (up to 4 s between attempts).
    let mut agent = nats.agent_with_heartbeat("a", "", "5s");
    ready(&agent).await;
    let dir = nats.dir.path().display().to_string();
    apply(
        &nats,
        &format!(
            r#"{EVERY_SECOND}
[[job]]
name = "slow"
schedule = "@yearly"
retries = {{ max = 1, backoff = "1s" }}
shell = 'echo $$ > {dir}/slow.pid; until [ -e {dir}/slow.go ]; do sleep 0.1; done; echo done'
"#
        ),
    );
    let store = nats.store().await;
    let first_fire = eventually(Duration::from_secs(15), "tick to run", || async {
        runs(&store, "tick").await.into_iter().filter(|r| r.status == Status::Succeeded).filter_map(|r| r.scheduled_at).min()
    })
    .await;
    let key = nats.trigger("slow");
    eventually(Duration::from_secs(10), "slow to run", || async {
        record(&store, &key).await.filter(|r| r.status == Status::Running)
    })
    .await;
    let shell = eventually(Duration::from_secs(5), "slow's shell", || async { read_pid(&nats.dir.path().join("slow.pid")) }).await;

    // At a random moment relative to the fires, which come on whole seconds.
    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 1000)).await;
    let killed_at = Utc::now();
    let down = Instant::now();
    nats.kill_server().await;
    // The run ends while NATS is away.
    std::fs::write(nats.dir.path().join("slow.go"), "").unwrap();
    eventually(Duration::from_secs(10), "slow's shell to end", || async { (!alive(shell)).then_some(()) }).await;
    // Down for two seconds in all: longer than the scheduler lease (2 s), within the run's.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(down.elapsed())).await;
    assert!(agent.child.try_wait().unwrap().is_none(), "the agent exited while NATS was away");
    nats.restart_server().await;
    let outage = down.elapsed();
    let restarted_at = Utc::now();
    let back = Instant::now();

    let done = eventually(Duration::from_secs(30), "slow's final record", || async {
        record(&store, &key).await.filter(|r| r.status.is_final())
    })
    .await;
    let recorded_after = back.elapsed();
    assert_eq!(done.status, Status::Succeeded, "{done:?}");
    assert_eq!(done.attempt, 1, "{done:?}");
    assert_eq!(done.output, ["done"]);
    assert!(done.finished_at.unwrap() < restarted_at, "slow ended while NATS was away: {done:?}");
    // The first tick started after the restart, then a few more seconds of them.
    let first = eventually(Duration::from_secs(30), "tick to run after the restart", || async {
        runs(&store, "tick").await.into_iter().filter_map(|r| r.started_at).filter(|t| *t > restarted_at).min()
    })
    .await;
    let until = ceil_second(first) + chrono::Duration::seconds(3);
    eventually(Duration::from_secs(30), "ticks for three more seconds", || async {
        let runs = runs(&store, "tick").await;
        runs.iter().any(|r| r.scheduled_at.is_some_and(|t| t >= until) && r.status.is_final()).then_some(())
    })
    .await;
    assert!(agent.child.try_wait().unwrap().is_none(), "the agent exited after NATS came back");
    // Fires due while NATS was away ran late, each once, as the failure model says.
    let from = first_fire.max(ceil_second(killed_at) - chrono::Duration::seconds(2));
    assert_each_second_once(&store, "tick", from, (until - from).num_seconds()).await;

    // No fire twice: one record per fire (its key), attempt 1, started at most once.
    let ticks = runs(&store, "tick").await;
    let started = events(&store, "tick", "started").await;
    let mut starts: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &started {
        *starts.entry(e["run_id"].as_str().unwrap()).or_default() += 1;
    }
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    let mut fires: BTreeMap<_, usize> = BTreeMap::new();
    for r in &ticks {
        assert_eq!((r.attempt, r.trigger), (1, Trigger::Schedule), "{r:?}");
        assert!(starts.get(r.run_id.as_str()).copied().unwrap_or(0) <= 1, "{} started twice", r.run_id);
        *fires.entry(r.scheduled_at.unwrap()).or_default() += 1;
        *statuses.entry(r.status.as_str()).or_default() += 1;
    }
    assert!(fires.values().all(|n| *n == 1), "a fire recorded twice: {fires:?}");
    let slow_starts = events(&store, "slow", "started").await;
    assert_eq!(slow_starts.len(), 1, "{slow_starts:?}");
    // Fires that fell due while NATS was away, as they were recorded.
    let (from, to) = (killed_at, restarted_at);
    let in_outage: Vec<_> = ticks.iter().filter(|r| r.scheduled_at.is_some_and(|t| t >= from && t < to)).collect();
    let late: Vec<_> = in_outage.iter().filter_map(|r| Some((r.started_at? - r.scheduled_at?).num_milliseconds())).collect();
    println!(
        "NATS down {} ms; slow recorded {} ms after the restart; first tick started {} ms after it; \
         ticks {statuses:?}, fires due during the outage: {} recorded ({:?}), started late by {late:?} ms",
        outage.as_millis(),
        recorded_after.as_millis(),
        (first - restarted_at).num_milliseconds(),
        in_outage.len(),
        in_outage.iter().map(|r| r.status.as_str()).collect::<Vec<_>>()
    );
}

/// Ten agents start at the same moment on a server with nothing on it: every bucket and
/// stream of the layout is created exactly once, all ten come up without an error, and a
/// job then runs once per fire.
#[tokio::test(flavor = "multi_thread")]
async fn ten_agents_starting_at_once_create_the_layout_once() {
    // The server alone: `Nats::start` creates nothing, the agents create the layout.
    let nats = Nats::start().await;
    let client = async_nats::connect(&nats.url).await.unwrap();
    let account = async_nats::jetstream::new(client.clone()).query_account().await.unwrap();
    assert_eq!((account.streams, account.consumers), (0, 0), "the server starts empty");
    // Creation advisories, counted by stream (and by stream.consumer), from before the start.
    let created: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let consumers: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let mut collectors = Vec::new();
    for (filter, counts) in [("$JS.EVENT.ADVISORY.STREAM.CREATED.", &created), ("$JS.EVENT.ADVISORY.CONSUMER.CREATED.", &consumers)] {
        let mut sub = client.subscribe(format!("{filter}>")).await.unwrap();
        let counts = counts.clone();
        collectors.push(tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                *counts.lock().unwrap().entry(m.subject.trim_start_matches(filter).to_string()).or_default() += 1;
            }
        }));
    }
    client.flush().await.unwrap();

    let start = Instant::now();
    let agents: Vec<Agent> = (0..10).map(|i| nats.agent(&format!("a{i}"), "")).collect();
    for agent in &agents {
        ready(agent).await;
    }
    let all_ready = start.elapsed();
    let names = cronrun::names::Names::new("cronrun").unwrap();
    let layout: BTreeMap<String, usize> = [
        format!("KV_{}", names.jobs_bucket()),
        format!("KV_{}", names.runs_bucket()),
        format!("KV_{}", names.leases_bucket()),
        format!("OBJ_{}", names.plugins_store()),
        names.dispatch_stream(),
        names.logs_stream(),
        names.events_stream(),
    ]
    .into_iter()
    .map(|name| (name, 1))
    .collect();
    eventually(Duration::from_secs(10), "an advisory for every stream of the layout", || async {
        let created = created.lock().unwrap();
        layout.keys().all(|name| created.contains_key(name)).then_some(())
    })
    .await;

    // A job afterwards runs once per fire, with ten schedulers and runners about.
    let store = nats.store().await;
    apply(&nats, EVERY_SECOND);
    let first = eventually(Duration::from_secs(15), "tick to run", || async {
        runs(&store, "tick").await.into_iter().filter(|r| r.status == Status::Succeeded).filter_map(|r| r.scheduled_at).min()
    })
    .await;
    assert_each_second_once(&store, "tick", first, 5).await;

    // Judged seconds after the start: any second creation would have been announced by now.
    client.flush().await.unwrap();
    let created = created.lock().unwrap().clone();
    assert_eq!(created, layout, "streams created, and how often");
    let pool = format!("{}.{}", names.dispatch_stream(), names.pool_consumer("default"));
    let consumers = consumers.lock().unwrap().clone();
    assert_eq!(consumers.get(&pool), Some(&1), "the pool's durable consumer, created once: {consumers:?}");
    let mut warnings = 0;
    for agent in &agents {
        let log = agent.log();
        let level = |l: &&str| l.split_whitespace().nth(1).unwrap_or_default().to_string();
        let errors: Vec<_> = log.lines().filter(|l| level(l) == "ERROR").collect();
        assert!(errors.is_empty(), "agent {} logged errors: {errors:#?}", agent.name);
        assert!(log.contains("runner ready"), "agent {}'s runner is not up", agent.name);
        warnings += log.lines().filter(|l| level(l) == "WARN").count();
    }
    for c in collectors {
        c.abort();
    }
    println!(
        "10 agents ready {} ms after their start; layout created once ({} streams), pool consumer once; \
         no ERROR logged, {warnings} WARN lines in all",
        all_ready.as_millis(),
        created.len()
    );
}

/// Run supervisors (`cronrun __supervise`) of the agents on `url`: pid, parent and the
/// instant each run is for.
fn supervisors(url: &str) -> Vec<(i32, i32, chrono::DateTime<Utc>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let var = |name: &str| {
            environ.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(format!("{name}=").as_bytes()).map(|v| String::from_utf8_lossy(v).into_owned()))
        };
        let is_supervisor = cmdline.split(|b| *b == 0).nth(1) == Some(b"__supervise".as_slice());
        if !is_supervisor || var("CRONRUN_NATS").as_deref() != Some(url) || !alive(pid) {
            continue;
        }
        let Some(at) = var("CRONRUN_SCHEDULED_AT").and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let ppid = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().nth(1).unwrap().parse().unwrap();
        out.push((pid, ppid, at.to_utc()));
    }
    out
}

/// A runner killed (SIGKILL) while runs wait prepared for their instant leaves no process
/// behind: every prepared supervisor finds its release pipe closed and exits unreleased.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_killed_with_runs_prepared_leaves_no_process() {
    let nats = Nats::start().await;
    let mut agent = nats.agent("a", "");
    ready(&agent).await;
    apply(&nats, EVERY_SECOND);
    // Runs are handed out half a second ahead (test `lead`): wait for one prepared well
    // before its instant, so that it is still unreleased when the runner dies.
    let prepared = eventually(Duration::from_secs(15), "a run prepared ahead of its instant", || async {
        let soon = Utc::now() + chrono::Duration::milliseconds(150);
        let mine: Vec<_> = supervisors(&nats.url).into_iter().filter(|(_, ppid, at)| *ppid == agent.pid() && *at > soon).collect();
        (!mine.is_empty()).then_some(mine)
    })
    .await;
    agent.kill9();
    let killed = Instant::now();
    // Without close-on-exec release pipes each supervisor held a write end of its own
    // stdin, never saw EOF and lived on, an orphan, for good.
    eventually(Duration::from_secs(5), "every supervisor to exit with its runner", || async {
        supervisors(&nats.url).is_empty().then_some(())
    })
    .await;
    println!(
        "runner killed with {} run(s) prepared for {:?}: all supervisors gone after {} ms",
        prepared.len(),
        prepared.iter().map(|p| p.2).collect::<Vec<_>>(),
        killed.elapsed().as_millis()
    );
}
