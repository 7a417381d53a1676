//! NATS trouble: a node of a 3-node cluster dies, freezes or restarts under load; a single
//! server restarts.

use super::*;

/// What befalls one node of a fresh 3-node cluster under every-second load.
#[derive(Debug, Clone, Copy)]
enum NodeFault {
    /// The node leading this stream is killed (-9).
    KillLeaderOf(&'static str),
    /// A node chosen at random is killed.
    KillAny,
    /// A node chosen at random is stopped (SIGSTOP) for 10 s, then goes on.
    Freeze,
    /// A node chosen at random is killed and started again on its store: it rejoins.
    Restart,
}

/// A node of a 3-node cluster (R3 buckets and streams) fails at a random moment under
/// every-second load of jobs with the defaults users get (`overlap = "skip"`): killed
/// while it leads, in turn, the jobs, runs and leases buckets and the dispatch stream, or
/// any node; frozen for 10 s; killed and restarted. Counted by the jobs' own files, every
/// fire runs once, and the fires that waited for one another started in fire order. (Once
/// a third of the fires of ten seconds never ran: delayed while leaders moved, they were
/// released together and skipped one another.)
#[tokio::test(flavor = "multi_thread")]
async fn a_nats_node_failing_under_load_loses_and_doubles_no_fire() {
    let faults = [
        NodeFault::KillLeaderOf("KV_cronrun_jobs"),
        NodeFault::KillLeaderOf("KV_cronrun_runs"),
        NodeFault::KillLeaderOf("KV_cronrun_leases"),
        NodeFault::KillLeaderOf("CRONRUN_DISPATCH"),
        NodeFault::KillAny,
        NodeFault::Freeze,
        NodeFault::Restart,
    ];
    let mut lateness = Vec::new();
    for fault in faults {
        lateness.push((fault, fail_a_node_under_load(fault).await));
    }
    for (fault, late) in lateness {
        println!("{fault:?}: every fire ran once; the latest start {late} ms after its fire");
    }
}

/// One trial of `a_nats_node_failing_under_load_loses_and_doubles_no_fire`. Returns the
/// largest lateness (fire to start, from the run records) over the judged window, in ms.
async fn fail_a_node_under_load(fault: NodeFault) -> i64 {
    let mut cluster = Cluster::start(3).await;
    // The layout, with three replicas, exists before any agent starts.
    let store = cluster.store().await;
    let index_stream = format!("KV_{}", store.names.schedules_bucket());
    let agents = [cluster.agent("a", ""), cluster.agent("b", "")];
    for agent in &agents {
        ready(agent).await;
    }
    let index = store.js.get_stream(&index_stream).await.unwrap().info().await.unwrap().clone();
    // Schedulers cannot lead without the index: on one node, it stopped them all while
    // that node was down.
    assert_eq!(index.config.num_replicas, 3, "the index has the jobs bucket's replicas");
    // Eight jobs that record their own executions, and `tick`.
    let names: Vec<String> = (0..8).map(|i| format!("j{i}")).collect();
    let jobs: String = names.iter().map(|name| recording_job(name, cluster.dir.path())).collect();
    let path = cluster.dir.path().join("jobs.toml");
    std::fs::write(&path, format!("{EVERY_SECOND}\n{jobs}")).unwrap();
    assert!(cluster.cli(&["apply", "-f", path.to_str().unwrap()]).status.success());
    eventually(Duration::from_secs(15), "the job to run", || async {
        runs(&store, "tick").await.iter().any(|r| r.status == Status::Succeeded).then_some(())
    })
    .await;
    // Three seconds and more of load before the fault (the window starts two seconds
    // before it), at a random moment relative to the fires, which come on whole seconds.
    tokio::time::sleep(Duration::from_millis(3000 + rand::random::<u64>() % 1000)).await;
    let at = Utc::now();
    let any = rand::random::<u64>() as usize % 3;
    let victim = match fault {
        NodeFault::KillLeaderOf(stream) => {
            let info = store.js.get_stream(stream).await.unwrap().info().await.unwrap().clone();
            let leader = info.cluster.and_then(|c| c.leader).expect("the stream has a leader");
            leader.strip_prefix('n').and_then(|n| n.parse::<usize>().ok()).expect("a node named n<i>")
        }
        _ => any,
    };
    match fault {
        NodeFault::Freeze => cluster.freeze(victim, Duration::from_secs(10)).await,
        NodeFault::Restart => {
            cluster.kill(victim);
            // Down three seconds, the outage it then rejoins from.
            tokio::time::sleep(Duration::from_secs(3)).await;
            cluster.restart(victim).await;
        }
        _ => cluster.kill(victim),
    }
    println!("{fault:?}: node n{victim} at {at}");
    // Until the others count a killed node gone (up to 150 s), the server may put a
    // watch's consumer on the dead node, where it is never made: a third of the time,
    // here. Watches are made all the same (each at most a few seconds late). (The test's
    // own client may sit on a frozen node: the agents' watches are judged by the fires.)
    if matches!(fault, NodeFault::KillLeaderOf(_) | NodeFault::KillAny) {
        for _ in 0..6 {
            let watch = tokio::time::timeout(Duration::from_secs(40), store.jobs.watch(">")).await;
            assert!(matches!(watch, Ok(Ok(_))), "a watch opened after the kill: {:?}", watch.map(|w| w.err()));
        }
    }
    // From two seconds before the fault to twelve after it ended, judged once the jobs
    // recorded a fire after that.
    let from = ceil_second(at) - chrono::Duration::seconds(2);
    let secs = (Utc::now() - from).num_seconds() + 12;
    let wrong = fires_not_run_once(&names, cluster.dir.path(), from, secs).await;
    if !wrong.is_empty() {
        let mut why = String::new();
        for (name, fire, _) in &wrong {
            let run_id = cronrun::record::fire_run_id(*fire);
            let run = stored_record(&store, &format!("{name}.{run_id}")).await;
            why.push_str(&format!("{name} {fire}: {run:?}\n"));
            why.extend(agents.iter().map(|a| trouble_since(a, at, &run_id)));
        }
        panic!("{fault:?} of node n{victim}: (job, fire, times it ran) {wrong:?}\n{why}");
    }
    let what = format!("{fault:?} of node n{victim}");
    let late = assert_waiting_fires_in_order(&what, &store, (&names, cluster.dir.path()), from, secs).await;
    if !late.is_empty() {
        println!("{fault:?}: fires that reached their guards after a later fire had started: {late:?}");
    }
    for agent in &agents {
        assert!(agent.log().contains("job catalog loaded"));
    }
    let to = from + chrono::Duration::seconds(secs);
    let mut latest = 0;
    for name in &names {
        for run in runs(&store, name).await {
            if let (Some(fire), Some(started)) = (run.scheduled_at, run.started_at)
                && fire >= from
                && fire < to
            {
                latest = latest.max((started - fire).num_milliseconds());
            }
        }
    }
    latest
}

/// An agent's log lines naming `run_id`, and its warnings and errors from `since` on: where
/// a fire went, when one did not run.
fn trouble_since(agent: &Agent, since: chrono::DateTime<Utc>, run_id: &str) -> String {
    let since = since.format("%Y-%m-%dT%H:%M:%S").to_string();
    let log = agent.log();
    let lines = log.lines().filter(|l| {
        l.contains(run_id) || ((l.contains("WARN") || l.contains("ERROR")) && l.get(..19).is_some_and(|t| *t >= *since))
    });
    lines.map(|l| format!("{}: {l}\n", agent.name)).collect()
}

/// One nats-server (file store) is killed under a running job and an every-second job, and
/// started again on its port with its store: the agent reconnects (both connections, as
/// `cronrun up` runs it: the scheduler's and the runner's), the run that ended meanwhile
/// is recorded, the schedule goes on, and no fire runs twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_nats_restart_keeps_finished_runs_and_doubles_no_fire() {
    let mut nats = Nats::start().await;
    // Heartbeat 5 s, the default: a run's lease (three heartbeats) outlasts the outage and
    // the client's reconnect backoff (up to 4 s between attempts).
    let mut agent = nats.agent_with_scheduler_creds("a", "5s", &nats.identity("scheduler"));
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
        runs(&store, "tick")
            .await
            .into_iter()
            .filter(|r| r.status == Status::Succeeded)
            .filter_map(|r| r.scheduled_at)
            .min()
    })
    .await;
    let key = nats.trigger("slow");
    eventually(Duration::from_secs(10), "slow to run", || async {
        record(&store, &key).await.filter(|r| r.status == Status::Running)
    })
    .await;
    let shell =
        eventually(Duration::from_secs(5), "slow's shell", || async { read_pid(&nats.dir.path().join("slow.pid")) })
            .await;

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
    let late: Vec<_> =
        in_outage.iter().filter_map(|r| Some((r.started_at? - r.scheduled_at?).num_milliseconds())).collect();
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

/// NATS is gone when the agent is told to stop: the stop ends within its bound
/// (`drain_timeout` + the stop margin) instead of hanging; a second signal ends it at once,
/// and the run's process dies with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_while_nats_is_gone_is_bounded_and_a_second_signal_ends_it_at_once() {
    let mut nats = Nats::start().await;
    let agents = [nats.agent("a", "roles = [\"runner\"]"), nats.agent("b", "roles = [\"runner\"]")];
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    for agent in agents.iter().chain([&scheduler]) {
        ready(agent).await;
    }
    let dir = nats.dir.path().display().to_string();
    let jobs: String = ["a", "b"]
        .iter()
        .map(|host| {
            format!(
                "[[job]]\nname = \"long-{host}\"\nschedule = \"@yearly\"\npool = \"{host}\"\n\
                 shell = 'echo $$ > {dir}/{host}.pid; exec sleep 600'\n"
            )
        })
        .collect();
    apply(&nats, &jobs);
    nats.trigger("long-a");
    nats.trigger("long-b");
    let pids: Vec<i32> = futures::future::join_all(["a", "b"].map(|host| {
        let path = nats.dir.path().join(format!("{host}.pid"));
        eventually(Duration::from_secs(15), "the long run to start", move || {
            let path = path.clone();
            async move { read_pid(&path) }
        })
    }))
    .await;
    nats.kill_server().await;
    let [mut a, mut b] = agents;

    // drain_timeout 5 s, kill_grace 1 s (the test config), the supervisors' 2 s, the margin.
    let bound = Duration::from_secs(5 + 1 + 2) + cronrun::agent::STOP_MARGIN;
    let asked = Instant::now();
    kill(Pid::from_raw(a.pid()), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut a.child, bound + Duration::from_secs(5)).await;
    println!("agent a stopped {:?} after SIGTERM with NATS gone ({status})", asked.elapsed());

    kill(Pid::from_raw(b.pid()), Signal::SIGTERM).unwrap();
    // The second signal is one only once b took the first and began its orderly stop.
    eventually(Duration::from_secs(10), "b to take the first SIGTERM", || async {
        b.log().contains("SIGTERM received, shutting down").then_some(())
    })
    .await;
    assert!(b.child.try_wait().unwrap().is_none(), "b waits for its run to drain");
    let second = Instant::now();
    kill(Pid::from_raw(b.pid()), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut b.child, Duration::from_secs(3)).await;
    println!("agent b exited {:?} after a second SIGTERM ({status})", second.elapsed());
    assert_eq!(status.code(), Some(cronrun::shutdown::FORCED_EXIT));
    for pid in pids {
        eventually(Duration::from_secs(5), "the run's process to die with its runner", || async {
            (!alive(pid)).then_some(())
        })
        .await;
    }
}

/// A compare-and-set whose answer is lost (the server stalls past the client's timeout,
/// then applies the write) is read back: the next write from the old revision finds the
/// key holding our own value and goes on, instead of taking it for a lost race (which
/// made a runner kill a healthy run during a cluster election).
#[tokio::test(flavor = "multi_thread")]
async fn a_write_whose_answer_was_lost_is_read_back_not_taken_for_a_lost_race() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    let revision = store.leases.create("fenced", "v0".into(), None).await.unwrap();
    let mut fence = cronrun::store::kv::Fenced::at(revision);
    let server = Pid::from_raw(nats.server.as_ref().unwrap().pid().unwrap() as i32);

    kill(server, Signal::SIGSTOP).unwrap();
    eventually(Duration::from_secs(5), "nats-server to stop", || async {
        procs::all_threads_stopped(server.as_raw()).then_some(())
    })
    .await;
    let stalled = store.leases.update_fenced("fenced", "v1".into(), &mut fence, None).await;
    assert!(stalled.is_err(), "a write to a stopped server cannot be acknowledged");
    kill(server, Signal::SIGCONT).unwrap();
    // The server applies the write it received while stopped.
    eventually(Duration::from_secs(10), "the stalled write to land", || async {
        store.leases.get("fenced").await.ok().flatten().filter(|v| v.value == "v1").map(|_| ())
    })
    .await;
    assert_eq!(fence.revision, revision, "the answer was lost: the fence still has the old revision");

    let next = store.leases.update_fenced("fenced", "v2".into(), &mut fence, None).await.unwrap();
    assert_eq!(next, fence.revision);
    assert_eq!(store.leases.get("fenced").await.unwrap().unwrap().value, "v2");
    // Someone else's write is still a conflict.
    store.leases.put("fenced", "theirs".into(), None).await.unwrap();
    let err = store.leases.update_fenced("fenced", "v3".into(), &mut fence, None).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
}

/// The trade-off of `run_ttl`: with one-second heartbeats a run's lease lives 3 s, so a
/// six-second NATS outage stops a plain run (its supervisor sees no renewal for 2.5 s),
/// while a job with `run_ttl = "30s"` rides it out and finishes its one attempt.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_with_a_longer_run_ttl_rides_out_a_nats_outage() {
    let mut nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let dir = nats.dir.path().display().to_string();
    let job = |name: &str, extra: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"@yearly\"\n{extra}\n\
             shell = 'echo $$ > {dir}/{name}.pid; until [ -e {dir}/go ]; do sleep 0.1; done; echo done'\n"
        )
    };
    apply(&nats, &(job("patient", "run_ttl = \"30s\"") + &job("plain", "")));
    let store = nats.store().await;
    let keys = [nats.trigger("patient"), nats.trigger("plain")];
    let mut pids = Vec::new();
    for name in ["patient", "plain"] {
        let path = nats.dir.path().join(format!("{name}.pid"));
        pids.push(eventually(Duration::from_secs(10), "the run to start", || async { read_pid(&path) }).await);
    }
    nats.kill_server().await;
    // The outage: longer than the default run TTL (3 s), shorter than patient's 30 s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(alive(pids[0]), "patient's run was stopped during the outage");
    assert!(!alive(pids[1]), "plain's run outlived its lease");
    nats.restart_server().await;
    std::fs::write(nats.dir.path().join("go"), "").unwrap();
    let done = eventually(Duration::from_secs(30), "patient to finish", || async {
        record(&store, &keys[0]).await.filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!((done.status, done.attempt), (Status::Succeeded, 1), "{done:?}");
    assert_eq!(done.output, ["done"]);
    println!("patient: {:?} after a 6 s outage; plain was stopped by its supervisor", done.status);
}

/// A run prints as fast as it can while NATS is gone: its lines cannot go out live, and
/// that must not hold up its supervision. Its 4 s timeout ends it while NATS is still
/// away (its run TTL of 60 s keeps its supervisor from doing so), and once NATS is back
/// its record says timed out, with the tail of what it printed.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_printing_without_pause_while_nats_is_gone_still_ends_at_its_timeout() {
    let mut nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let dir = nats.dir.path().display().to_string();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"chatty\"\nschedule = \"@yearly\"\nrun_ttl = \"60s\"\ntimeout = \"4s\"\n\
             shell = 'echo $$ > {dir}/chatty.pid; exec yes \"a line of output, again and again\"'\n"
        ),
    );
    let store = nats.store().await;
    let key = nats.trigger("chatty");
    let path = nats.dir.path().join("chatty.pid");
    let pid = eventually(Duration::from_secs(10), "the run to start", || async { read_pid(&path) }).await;
    nats.kill_server().await;
    let gone = Instant::now();
    // Its timeout is at most 4 s away; a supervision held up by a write waiting for NATS
    // (5 s and more) would miss this.
    eventually(Duration::from_secs(6), "the run's timeout to end it with NATS away", || async {
        (!alive(pid)).then_some(())
    })
    .await;
    println!("the run ended {:?} after NATS went away", gone.elapsed());
    nats.restart_server().await;
    let done = eventually(Duration::from_secs(30), "the run's final record", || async {
        record(&store, &key).await.filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!((done.status, done.attempt), (Status::TimedOut, 1), "{done:?}");
    assert!(done.output.iter().any(|line| line == "a line of output, again and again"), "{:?}", done.output);
}

/// NATS is killed while a message's run and a chained job's upstream run are in flight;
/// both end while it is away. Once it is back, the message has run once and is acked,
/// the chained job has run once after its upstream, and a message published after the
/// restart runs once too: judged by the lines the jobs wrote themselves.
#[tokio::test(flavor = "multi_thread")]
async fn a_nats_restart_in_the_middle_of_a_message_run_and_a_chain_runs_each_once() {
    let mut nats = Nats::start().await;
    let agent = nats.agent_with_heartbeat("a", "", "5s");
    ready(&agent).await;
    let dir = nats.dir.path().display().to_string();
    // Each run that waited for `go` says so once it ends: `e <run id>`.
    let wait_go = format!("until [ -e {dir}/go ]; do sleep 0.1; done; echo \"e $CRONRUN_RUN_ID\" >> {dir}/jobs.log");
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"upstream\"\nschedule = \"@yearly\"\n\
             shell = 'echo \"u $CRONRUN_RUN_ID\" >> {dir}/jobs.log; {wait_go}'\n\
             [[job]]\nname = \"downstream\"\nafter = [{{ job = \"upstream\" }}]\n\
             shell = 'echo \"d $CRONRUN_RUN_ID\" >> {dir}/jobs.log'\n\
             [[job]]\nname = \"listener\"\non = {{ subject = \"chaos.in\" }}\n\
             shell = 'echo \"m $CRONRUN_RUN_ID $(cat)\" >> {dir}/jobs.log; {wait_go}'\n"
        ),
    );
    let store = nats.store().await;
    eventually(Duration::from_secs(15), "the agent to follow listener's subject", || async {
        let stream = store.js.get_stream("CRONRUN_MESSAGES").await.ok()?;
        stream.consumer_info("on-listener").await.ok().map(drop)
    })
    .await;
    following_chains(&store, &["downstream"]).await;
    let client = nats.client().await;
    let js = async_nats::jetstream::new(client.clone());
    js.publish("chaos.in", "before".into()).await.unwrap().await.unwrap();
    let upstream = nats.trigger("upstream");
    let log = nats.dir.path().join("jobs.log");
    let lines = || std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_string).collect::<Vec<_>>();
    eventually(Duration::from_secs(20), "the upstream and message runs to start", || async {
        let seen = lines();
        (seen.iter().any(|l| l.starts_with("u ")) && seen.iter().any(|l| l.starts_with("m "))).then_some(())
    })
    .await;

    let down = Instant::now();
    nats.kill_server().await;
    std::fs::write(nats.dir.path().join("go"), "").unwrap();
    eventually(Duration::from_secs(10), "both runs to end while NATS is away", || async {
        (lines().iter().filter(|l| l.starts_with("e ")).count() == 2).then_some(())
    })
    .await;
    // Away for two seconds in all, as in `a_nats_restart_keeps_finished_runs_...`.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(down.elapsed())).await;
    nats.restart_server().await;

    let done = final_record(&store, &upstream).await;
    assert_eq!(done.status, Status::Succeeded, "{done:?}");
    eventually(Duration::from_secs(30), "the chained run", || async {
        lines().iter().any(|l| l.starts_with("d ")).then_some(())
    })
    .await;
    js.publish("chaos.in", "after".into()).await.unwrap().await.unwrap();
    eventually(Duration::from_secs(30), "the message published after the restart to run", || async {
        lines().iter().any(|l| l.contains(r#""payload":"after""#)).then_some(())
    })
    .await;
    eventually(Duration::from_secs(40), "both messages acked", || async {
        let mut stream = store.js.get_stream("CRONRUN_MESSAGES").await.ok()?;
        (stream.info().await.ok()?.state.messages == 0).then_some(())
    })
    .await;
    // Counted once nothing more can run: anything run twice has run by then.
    nothing_left_to_run(&store, &["upstream", "downstream", "listener"]).await;
    let seen = lines();
    let count = |prefix: &str| seen.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!((count("u "), count("d ")), (1, 1), "the upstream and its chained run once each: {seen:?}");
    let message = |payload: &str| {
        let needle = format!(r#""payload":"{payload}""#);
        seen.iter().filter(|l| l.starts_with("m ") && l.contains(&needle)).count()
    };
    let (before, after) = (message("before"), message("after"));
    assert_eq!((before, after), (1, 1), "each message ran once: {seen:?}");
    let message_runs: Vec<RunRecord> = runs(&store, "listener").await;
    assert_eq!(message_runs.len(), 2, "{message_runs:?}");
    assert!(message_runs.iter().all(|r| r.status == Status::Succeeded && r.attempt == 1), "{message_runs:?}");
    let chained = runs(&store, "downstream").await;
    assert_eq!(chained.len(), 1, "{chained:?}");
    assert_eq!((chained[0].trigger, chained[0].status), (Trigger::Chain, Status::Succeeded), "{chained:?}");
}
