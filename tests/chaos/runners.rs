//! Runners: one stopped past its run's lease and woken; one frozen with a run claimed ahead;
//! one killed with runs prepared.

use super::*;

/// A runner frozen (SIGSTOP) past its run's lease loses the run to another runner. The
/// run's supervisor sees its runner's renewals stop and kills the run before the lease
/// expires, so it never runs beside its retry; woken (SIGCONT), the runner finds its
/// writes refused and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_stopped_past_its_lease_has_its_run_stopped_before_the_retry_and_writes_nothing() {
    let nats = Nats::start().await;
    let (_scheduler, mut runners) = nats.scheduler_and_two_runners().await;
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
    let child = eventually(Duration::from_secs(5), "attempt 1's shell", || async {
        read_pid(&nats.dir.path().join("attempt-1"))
    })
    .await;
    let group = pgrp_of(child);
    let stopped = runners.iter().position(|r| r.name == host).unwrap();
    let other = runners[1 - stopped].name.clone();

    let stop_wall = Utc::now();
    let stop = Instant::now();
    kill(Pid::from_raw(runners[stopped].pid()), Signal::SIGSTOP).unwrap();
    // Two and a half missed heartbeats: the supervisor stops the run on its own.
    eventually(Duration::from_secs(10), "attempt 1 to be stopped by its supervisor", || async {
        (!alive(child) && group_members(group).is_empty()).then_some(())
    })
    .await;
    let to_self_stop = stop.elapsed();
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
    let child2 = eventually(Duration::from_secs(5), "attempt 2's shell", || async {
        read_pid(&nats.dir.path().join("attempt-2"))
    })
    .await;
    assert!(to_self_stop < to_second, "attempt 1 ran until {to_self_stop:?}, attempt 2 from {to_second:?}");
    assert!(
        to_self_stop < Duration::from_millis(to_lost.num_milliseconds() as u64),
        "attempt 1 ran until {to_self_stop:?}, past its lease ({to_lost})"
    );
    assert!(!runners[stopped].log().contains("run taken over elsewhere"));

    let writes = RecordWrites::watch(&store, &key).await;

    let woken = Instant::now();
    kill(Pid::from_raw(runners[stopped].pid()), Signal::SIGCONT).unwrap();
    eventually(Duration::from_secs(10), "attempt 1's processes to be killed", || async {
        (!alive(child) && group_members(group).is_empty()).then_some(())
    })
    .await;
    let to_gone = woken.elapsed();
    // The refused write is the lease renewal (key `run.<job>.<run-id>`) or the record's
    // (the run's end, seen first on waking): nothing is written after it.
    let refused = format!("{key} changed since revision");
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
        writes.last().is_some_and(|w| w.status.is_final()).then_some(())
    })
    .await;
    let writes = writes.stop();
    for w in &writes {
        assert_eq!(
            (w.attempt, w.host.as_deref()),
            (2, Some(other.as_str())),
            "a write not by attempt 2's runner: {w:?}"
        );
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
         attempt 1 stopped by its supervisor after {} ms; woken: its processes gone after {} ms; \
         {} writes to the record since, all attempt 2 from {other}",
        to_lost.num_milliseconds(),
        to_second.as_millis(),
        to_self_stop.as_millis(),
        to_gone.as_millis(),
        writes.len() - 1
    );
}

/// Run supervisors (`cronrun-supervise`, or `cronrun __supervise`) whose parent is `parent`: pid and the instant
/// each run is for. (Runs get a clean environment: nothing in it names their agent.)
fn supervisors_of(parent: i32) -> Vec<(i32, chrono::DateTime<Utc>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let (program, first) = (args.first().copied().unwrap_or_default(), args.get(1).copied());
        let is_supervisor = program.ends_with(b"cronrun-supervise") || first == Some(b"__supervise".as_slice());
        if !is_supervisor || !alive(pid) {
            continue;
        }
        // Its instant, from its keepalive file `<job>.<run-id>.<attempt>` (a scheduled
        // run's id is its fire instant): the job's environment is no longer the
        // supervisor's own, which starts with PATH alone.
        let Some(at) = args
            .iter()
            .position(|a| *a == b"--alive")
            .and_then(|i| args.get(i + 1))
            .and_then(|path| String::from_utf8_lossy(path).rsplit('/').next().map(str::to_string))
            .and_then(|file| file.split('.').nth(1).map(str::to_string))
            .and_then(|run_id| chrono::NaiveDateTime::parse_from_str(&run_id, "%Y%m%dT%H%M%SZ").ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let ppid: i32 = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().nth(1).unwrap().parse().unwrap();
        if ppid == parent {
            out.push((pid, at.and_utc()));
        }
    }
    out
}

/// A runner frozen (SIGSTOP) just after it claimed a run ahead of its instant (the run's
/// lease taken, which is the claim; no record, which the run's start creates) loses it
/// when the lease runs out: its dispatch message, unacked, is delivered again after its
/// ack wait, and the other runner runs it, once, as the job itself recorded. Woken (SIGCONT), the frozen
/// runner does not start it: it renews its lease before the start's write, is refused, and
/// writes nothing to the record. A job with `overlap = "allow"`: a run with an overlap
/// policy takes no lease of its own ahead (the next test).
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_frozen_with_a_run_claimed_ahead_loses_it_and_starts_nothing_on_waking() {
    let nats = Nats::start().await;
    let scheduler = scheduler_three_seconds_ahead(&nats);
    let runners = [nats.agent("r1", "roles = [\"runner\"]"), nats.agent("r2", "roles = [\"runner\"]")];
    for agent in runners.iter().chain([&scheduler]) {
        ready(agent).await;
    }
    let store = nats.store().await;
    let (fire, run_id) = once_in_six_seconds(&nats, "overlap = \"allow\"");
    let (key, lease_key) = (format!("once.{run_id}"), cronrun::names::lease_keys::run("once", &run_id));
    // Claimed ahead: its runner is frozen at once.
    let holder = eventually(Duration::from_secs(15), "a runner to claim the run", || async {
        cronrun::store::lease::holder(&store.leases, &lease_key).await.ok()?.map(|l| l.holder)
    })
    .await;
    let frozen = runners.iter().position(|r| r.name == holder).unwrap();
    kill(Pid::from_raw(runners[frozen].pid()), Signal::SIGSTOP).unwrap();
    assert!(Utc::now() < fire, "frozen only after the run's instant: the claim came late");
    // A fire on time is dispatched with no record, and the claim writes none.
    assert!(record(&store, &key).await.is_none(), "a record before the run's start");
    let other = runners[1 - frozen].name.clone();
    let done = eventually(Duration::from_secs(30), "the run to end on the other runner", || async {
        record(&store, &key).await.filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!((done.status, done.host.as_deref(), done.attempt), (Status::Succeeded, Some(other.as_str()), 1));

    woken_runner_gives_the_run_up(&nats, &runners[frozen], &key, &done).await;
}

/// The same with the defaults (`overlap = "skip"`): a run claimed ahead of its instant
/// holds no lease until its overlap lease, which is its lease, so its claim is its
/// dispatch message in hand. Its runner frozen before the instant, the message is
/// delivered again once its ack wait is over, and the other runner runs it, once, as the
/// job recorded. Woken, the frozen runner takes the overlap lease (the run has ended), is
/// refused its start's write, and writes nothing to the record.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_frozen_with_a_run_of_the_defaults_claimed_ahead_loses_it_to_a_redelivery() {
    let nats = Nats::start().await;
    let scheduler = scheduler_three_seconds_ahead(&nats);
    // One runner first: the claim is its.
    let frozen = nats.agent("r1", "roles = [\"runner\"]");
    for agent in [&frozen, &scheduler] {
        ready(agent).await;
    }
    let store = nats.store().await;
    let (fire, run_id) = once_in_six_seconds(&nats, "");
    let key = format!("once.{run_id}");
    let consumer = store.names.pool_consumer("default");
    let dispatch = store.js.get_stream(store.names.dispatch_stream()).await.unwrap();
    eventually(Duration::from_secs(15), "the runner to hold the run's dispatch", || async {
        let info = dispatch.clone().consumer_info(&consumer).await.ok()?;
        (info.num_ack_pending == 1).then_some(())
    })
    .await;
    kill(Pid::from_raw(frozen.pid()), Signal::SIGSTOP).unwrap();
    assert!(Utc::now() < fire, "frozen only after the run's instant: the claim came late");
    let leases = [cronrun::names::lease_keys::run("once", &run_id), cronrun::names::lease_keys::active("once")];
    for lease in &leases {
        assert!(store.leases.get(lease).await.unwrap().is_none(), "{lease} held ahead of the instant");
    }
    let other = nats.agent("r2", "roles = [\"runner\"]");
    ready(&other).await;
    let done = eventually(Duration::from_secs(30), "the run to end on the other runner", || async {
        record(&store, &key).await.filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!((done.status, done.host.as_deref(), done.attempt), (Status::Succeeded, Some("r2"), 1));

    woken_runner_gives_the_run_up(&nats, &frozen, &key, &done).await;
}

/// A scheduler handing runs out three seconds ahead (the tests' lead is half a second): a
/// claim is seen, and its runner frozen, well before the instant, however loaded the
/// machine.
fn scheduler_three_seconds_ahead(nats: &Nats) -> Agent {
    let config = test_config("s").replace("lead = \"500ms\"", "lead = \"3s\"");
    assert!(config.contains("lead = \"3s\""), "{config}");
    nats.agent_with_env("s", &format!("roles = [\"scheduler\"]\n{config}"), &[])
}

/// Job `once` with `lines`, due six seconds from now, recording each run in `once.runs`;
/// its fire and its run id.
fn once_in_six_seconds(nats: &Nats, lines: &str) -> (chrono::DateTime<Utc>, String) {
    let dir = nats.dir.path().display().to_string();
    let fire = ceil_second(Utc::now()) + chrono::Duration::seconds(6);
    let at = fire.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let job =
        format!("[[job]]\nname = \"once\"\nschedule = \"@at {at}\"\n{lines}\nshell = 'echo ran >> {dir}/once.runs'\n");
    apply(nats, &job);
    (fire, cronrun::record::fire_run_id(fire))
}

/// Wakes (SIGCONT) the runner `frozen` that let run `key` go, which another runner ran to
/// `done`: it gives the run up, its start's write refused, and writes nothing to the
/// record; the job `once` ran once, as it recorded.
async fn woken_runner_gives_the_run_up(nats: &Nats, frozen: &Agent, key: &str, done: &RunRecord) {
    let writes = RecordWrites::watch(&nats.store().await, key).await;
    kill(Pid::from_raw(frozen.pid()), Signal::SIGCONT).unwrap();
    let refused = format!("{key} changed since revision");
    let logged = eventually(Duration::from_secs(15), "the woken runner to give the run up", || async {
        let log = frozen.log();
        log.lines().find(|l| l.contains("run taken over elsewhere") && l.contains(&refused)).map(str::to_string)
    })
    .await;
    println!("{} logged: {logged}", frozen.name);
    let writes = writes.stop();
    assert!(writes.iter().all(|w| w == done), "a write after the run's end: {writes:?}");
    let runs = std::fs::read_to_string(nats.dir.path().join("once.runs")).unwrap_or_default();
    assert_eq!(runs, "ran\n", "the job ran once, as it recorded");
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
        let mine = supervisors_of(agent.pid());
        mine.iter().any(|(_, at)| *at > soon).then_some(mine)
    })
    .await;
    agent.kill9();
    let killed = Instant::now();
    // Without close-on-exec release pipes each supervisor held a write end of its own
    // stdin, never saw EOF and lived on, an orphan, for good.
    eventually(Duration::from_secs(5), "every supervisor to exit with its runner", || async {
        prepared.iter().all(|(pid, _)| !alive(*pid)).then_some(())
    })
    .await;
    println!(
        "runner killed with {} run(s) prepared for {:?}: all supervisors gone after {} ms",
        prepared.len(),
        prepared.iter().map(|p| p.1).collect::<Vec<_>>(),
        killed.elapsed().as_millis()
    );
}

/// Every write to a run's record, as the server sees them, from the record as it is when
/// the watch begins (delivered before `watch` returns).
struct RecordWrites {
    writes: Arc<Mutex<Vec<RunRecord>>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl RecordWrites {
    async fn watch(store: &cronrun::store::Store, key: &str) -> Self {
        let writes = Arc::new(Mutex::new(Vec::<RunRecord>::new()));
        let mut watch = store.runs.kv.watch_with_history(key).await.unwrap();
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
        RecordWrites { writes, watcher }
    }

    fn last(&self) -> Option<RunRecord> {
        self.writes.lock().unwrap().last().cloned()
    }

    /// The writes seen, the watch ended.
    fn stop(self) -> Vec<RunRecord> {
        self.watcher.abort();
        self.writes.lock().unwrap().clone()
    }
}
