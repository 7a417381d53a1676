//! Schedulers: the owner of a shard killed again and again; ten agents starting at once.

use super::*;

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

/// The agent leading the shard of every-second jobs with the defaults users get
/// (`overlap = "skip"`), scheduler and runner in one, killed with -9 ten times, a new one
/// joining each time. The fires of each takeover window are dispatched late, together:
/// each must wait for the run before it rather than be skipped by it, and run once, as the
/// jobs themselves recorded. (Once 1 to 8 of the 9 fires of a window never ran: recorded
/// skipped behind a later fire of the same job.) The one fire allowed not to run is one
/// whose run had started on the killed agent when it died, recorded `lost` (the failure
/// model); the fires after it wait for the dead run's overlap lease to run out rather than
/// skip behind it, and a run the agent had only claimed is dispatched again. The fires that
/// waited for one another started in fire order, whichever runner took each.
#[tokio::test(flavor = "multi_thread")]
async fn killing_the_leading_agent_ten_times_loses_no_fire_of_the_takeover_windows() {
    const TRIALS: usize = 10;
    let nats = Nats::start().await;
    let store = nats.store().await;
    let names: Vec<String> = (0..3).map(|i| format!("j{i}")).collect();
    apply(&nats, &names.iter().map(|name| recording_job(name, nats.dir.path())).collect::<String>());
    let mut agents = vec![nats.agent("a0", ""), nats.agent("a1", "")];
    for agent in &agents {
        ready(agent).await;
    }
    let from = ceil_second(Utc::now()) + chrono::Duration::seconds(1);
    let key = shard_key("j0");
    let owner = || async {
        let lease = cronrun::store::lease::holder(&store.leases, &key).await.ok()??;
        Some(lease.holder.split('/').next()?.to_string())
    };
    let mut killed = Vec::new();
    let mut takeovers = Vec::new();
    for trial in 0..TRIALS {
        let victim = eventually(Duration::from_secs(10), "a leader of j0's shard", owner).await;
        // A fire or so under this leader, killed at a random moment relative to the fires.
        tokio::time::sleep(Duration::from_millis(500 + rand::random::<u64>() % 1000)).await;
        let index = agents.iter().position(|a| a.name == victim).unwrap();
        let at = Instant::now();
        agents[index].kill9();
        killed.push(victim.clone());
        agents[index] = nats.agent(&format!("a{}", trial + 2), "");
        eventually(Duration::from_secs(15), "another leader of j0's shard", || async {
            owner().await.filter(|o| *o != victim)
        })
        .await;
        takeovers.push(at.elapsed().as_millis());
    }
    let secs = (Utc::now() - from).num_seconds() - 1;
    // Started on a killed agent (its code may have run): `lost`, by the failure model. A run
    // it had only claimed is dispatched again, and must have run.
    let died_with_victim = |run: &Option<RunRecord>| {
        run.as_ref().is_some_and(|r| {
            r.status == Status::Lost && r.started_at.is_some() && r.host.as_ref().is_some_and(|h| killed.contains(h))
        })
    };
    let mut died = Vec::new();
    for (name, at, times) in fires_not_run_once(&names, nats.dir.path(), from, secs).await {
        assert_eq!(times, 0, "{name} ran {times} times for {at}");
        let run = stored_record(&store, &format!("{name}.{}", cronrun::record::fire_run_id(at))).await;
        let log = || job_log_around(nats.dir.path(), &name, at);
        assert!(
            died_with_victim(&run),
            "{name} did not run for {at}: {run:?}\nits runs in the agents' logs:\n{}",
            log()
        );
        died.push(format!("{name} {at}"));
    }
    assert!(died.len() <= TRIALS, "more started runs died than agents were killed: {died:?}");
    let late = assert_waiting_fires_in_order("kills", &store, (&names, nats.dir.path()), from, secs).await;
    takeovers.sort_unstable();
    println!(
        "{TRIALS} kills of the leading agent over {secs} s, {} jobs: every fire ran once but {} whose run had \
         started on the killed agent {died:?}, in fire order but {} that reached their guards after a later \
         fire had started {late:?}; takeover min {} / median {} / max {} ms (lease TTL 2000 ms)",
        names.len(),
        died.len(),
        late.len(),
        takeovers[0],
        takeovers[TRIALS / 2],
        takeovers[TRIALS - 1]
    );
}

/// Ten agents start at the same moment on a server with nothing on it: every bucket and
/// stream of the layout is created exactly once, all ten come up without an error, and a
/// job then runs once per fire.
#[tokio::test(flavor = "multi_thread")]
async fn ten_agents_starting_at_once_create_the_layout_once() {
    // The server alone: `Nats::start` creates nothing, the agents create the layout.
    let nats = Nats::start().await;
    let client = nats.client().await;
    let account = async_nats::jetstream::new(client.clone()).query_account().await.unwrap();
    assert_eq!((account.streams, account.consumers), (0, 0), "the server starts empty");
    // Creation advisories, counted by stream (and by stream.consumer), from before the start.
    let created: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let consumers: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let mut collectors = Vec::new();
    for (filter, counts) in
        [("$JS.EVENT.ADVISORY.STREAM.CREATED.", &created), ("$JS.EVENT.ADVISORY.CONSUMER.CREATED.", &consumers)]
    {
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
    let mut layout: BTreeMap<String, usize> = names.layout_streams().into_iter().map(|name| (name, 1)).collect();
    // And the schedules index, made by the schedulers once the shard count is fixed, and
    // its snapshots.
    layout.insert(format!("KV_{}", names.schedules_bucket()), 1);
    layout.insert(format!("KV_{}", names.snapshots_bucket()), 1);
    eventually(Duration::from_secs(10), "an advisory for every stream of the layout", || async {
        let created = created.lock().unwrap();
        layout.keys().all(|name| created.contains_key(name)).then_some(())
    })
    .await;

    // A job afterwards runs once per fire, with ten schedulers and runners about.
    let store = nats.store().await;
    apply(&nats, EVERY_SECOND);
    let first = eventually(Duration::from_secs(15), "tick to run", || async {
        runs(&store, "tick")
            .await
            .into_iter()
            .filter(|r| r.status == Status::Succeeded)
            .filter_map(|r| r.scheduled_at)
            .min()
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

/// Two agents started at the same moment on a deployment with twenty every-second jobs:
/// every shard gets a leader, and every fire after the start runs exactly once, judged
/// by what the jobs did (each appends its fire instant to a file of its own). Once a
/// shard stayed unled for a lease TTL and its fires were never run nor recorded missed.
#[tokio::test(flavor = "multi_thread")]
async fn two_agents_starting_together_run_every_fire_once() {
    for trial in 0..3 {
        let nats = Nats::start().await;
        let names: Vec<String> = (0..20).map(|i| format!("j{i}")).collect();
        let jobs: String = names.iter().map(|name| recording_job(name, nats.dir.path())).collect();
        apply(&nats, &jobs);
        let started = Utc::now();
        let agents = [nats.agent("a", ""), nats.agent("b", "")];
        for agent in &agents {
            ready(agent).await;
        }
        // From the first whole second after both started, eight seconds.
        let from = ceil_second(started) + chrono::Duration::seconds(1);
        assert_jobs_ran_each_second_once(&names, nats.dir.path(), from, 8).await;
        println!("trial {trial} passed");
    }
}
