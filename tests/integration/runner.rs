//! The shell runner against a real nats-server: kill reaches the whole process group,
//! timeouts, bounded memory and records whatever a job prints, live logs.

use crate::procs::{group_members, parent_of, pgrp_of};

use std::time::Duration;

use crate::support::*;
use cronrun::record::Status;

/// The run's final record (see `final_record`).
async fn run_status(nats: &Nats, key: &str) -> cronrun::record::RunRecord {
    final_record(&nats.store().await, key).await
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_reaches_every_process_of_the_group() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let pidfile = nats.dir.path().join("pid");
    let cmd = format!("echo $$ > {}; sleep 600 & sleep 601 & sh -c 'sleep 602' & wait", pidfile.display());
    nats.ok(&["add", "sleeper", "--schedule", "@yearly", "--", &cmd]);
    let key = nats.trigger("sleeper");
    let shell: i32 = eventually(Duration::from_secs(10), "the job's shell to start", || async {
        std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok())
    })
    .await;
    let pgid = pgrp_of(shell);
    // The run's first process is the small supervisor binary, not the whole agent.
    let supervisor = std::fs::read_link(format!("/proc/{}/exe", parent_of(shell))).unwrap();
    assert!(supervisor.ends_with("cronrun-supervise"), "{supervisor:?}");
    eventually(Duration::from_secs(10), "supervisor, shell and three children in the group", || async {
        (group_members(pgid).len() >= 5).then_some(())
    })
    .await;
    let out = nats.ok(&["kill", &key]);
    assert!(out.contains("sent SIGTERM"), "{out}");
    let record = run_status(&nats, &key).await;
    assert_eq!(record.status, Status::Cancelled);
    assert!(record.error.unwrap().contains("killed on request"));
    eventually(Duration::from_secs(5), "the whole group to be gone", || async {
        group_members(pgid).is_empty().then_some(())
    })
    .await;
    let err = nats.fails(&["kill", &key]);
    assert!(err.contains("is not running"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn timeout_gives_timed_out_and_kills_the_group() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    // The shell ignores TERM, so only the KILL after the grace period ends it.
    nats.ok(&["add", "slow", "--schedule", "@yearly", "--timeout", "1s", "--", "trap '' TERM; sleep 30; sleep 30"]);
    let key = nats.trigger("slow");
    let record = run_status(&nats, &key).await;
    assert_eq!(record.status, Status::TimedOut, "{record:?}");
    assert!(record.error.as_deref().unwrap().contains("timed out after 1s"));
    assert_eq!(record.exit_code, Some(137), "killed by SIGKILL after the grace period");
    assert!(record.duration_ms.unwrap() < 30_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_output_keeps_memory_and_record_bounded() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(
        &nats,
        r#"
[[job]]
name = "flood"
schedule = "@yearly"
output_lines = 20
# 100 MiB in 1 KiB lines, then 100 MiB without a single newline.
shell = "yes $(printf '%01023d' 7) | head -c 104857600; head -c 104857600 /dev/zero | tr '\\0' x; echo; echo the end"
"#,
    );
    let before = agent.peak_rss_kib();
    let key = nats.trigger("flood");
    let record = run_status(&nats, &key).await;
    assert_eq!(record.status, Status::Succeeded, "{record:?}");
    assert_eq!(record.output.len(), 20);
    assert_eq!(record.output.last().unwrap(), "the end");
    let cut = &record.output[18];
    assert!(cut.ends_with("[line cut]") && cut.len() < 9000, "long line kept as {} bytes", cut.len());
    assert!(record.to_json().unwrap().len() < 64 * 1024, "record is {} bytes", record.to_json().unwrap().len());
    let peak = agent.peak_rss_kib();
    println!("agent peak RSS {before} KiB before, {peak} KiB after 200 MiB of output");
    assert!(peak < 200 * 1024, "agent peak RSS {peak} KiB for 200 MiB of output");
}

/// A job sees a clean environment: nothing of the agent's (here its NATS URL, identity
/// file and log level) unless it asks for it with `inherit_env`.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_sees_nothing_of_the_agents_environment_unless_it_inherits_it() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(
        &nats,
        r#"
[[job]]
name = "clean"
schedule = "@yearly"
shell = { command = "env | sort", env = { MINE = "1" } }

[[job]]
name = "inherits"
schedule = "@yearly"
shell = { command = "env | sort", inherit_env = true }
"#,
    );
    let clean = run_status(&nats, &nats.trigger("clean")).await;
    let names: Vec<&str> = clean.output.iter().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    for name in names.iter().filter(|n| !["PATH", "HOME", "LANG", "TZ", "MINE", "PWD", "SHLVL", "_"].contains(n)) {
        assert!(name.starts_with("CRONRUN_"), "the job saw {name}: {:?}", clean.output);
    }
    for name in ["PATH", "MINE", "CRONRUN_JOB", "CRONRUN_RUN_ID", "CRONRUN_ATTEMPT", "CRONRUN_SCHEDULED_AT"] {
        assert!(names.contains(&name), "{name} missing: {:?}", clean.output);
    }
    for agents in ["CRONRUN_NATS", "CRONRUN_CREDS", "RUST_LOG"] {
        assert!(!names.contains(&agents), "the job saw {agents}: {:?}", clean.output);
    }
    let seed = std::fs::read_to_string(nats.identity("agent")).unwrap();
    assert!(!clean.output.iter().any(|l| l.contains(seed.trim())), "{:?}", clean.output);
    let inherits = run_status(&nats, &nats.trigger("inherits")).await;
    assert!(inherits.output.iter().any(|l| l.starts_with("CRONRUN_NATS=nats://")), "{:?}", inherits.output);
    assert!(inherits.output.iter().any(|l| l.starts_with("CRONRUN_CREDS=")), "{:?}", inherits.output);
}

/// Quotes and NULs grow six-fold in JSON: 100 lines of 8 KiB once made the record too large
/// for the server, and a failing run with a retry stayed `running` for ever.
#[tokio::test(flavor = "multi_thread")]
async fn output_that_json_escapes_badly_still_fits_the_record_and_retries_end() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(
        &nats,
        r#"
[[job]]
name = "escapes"
schedule = "@yearly"
retries = { max = 1, backoff = "1s" }
shell = "for i in $(seq 100); do head -c 4000 /dev/zero; head -c 4000 /dev/zero | tr '\\0' '\"'; echo; done; echo the end; exit 3"
"#,
    );
    let key = nats.trigger("escapes");
    let record = run_status(&nats, &key).await;
    assert_eq!((record.status, record.attempt, record.exit_code), (Status::Failed, 2, Some(3)), "{:?}", record.error);
    assert_eq!(record.output.last().unwrap(), "the end");
    assert!(record.output[0].ends_with("earlier lines dropped to fit the run record]"), "{}", record.output[0]);
    let size = record.to_json().unwrap().len();
    assert!((512 * 1024..=1024 * 1024).contains(&size), "record is {size} bytes");
    assert!(record.output[1..record.output.len() - 1].iter().all(|l| l.len() == 8000), "lines kept whole");
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_show_output_and_follow_ends_with_the_run() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    nats.ok(&[
        "add",
        "talk",
        "--schedule",
        "@yearly",
        "--",
        "for i in 1 2 3; do echo line $i; sleep 0.3; done; echo oops >&2; exit 3",
    ]);
    let key = nats.trigger("talk");
    // Follows from the start of the run and returns on its own when the run ends.
    let out = nats.cli(&["logs", &key, "-f"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "line 1\nline 2\nline 3\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
    let record = run_status(&nats, &key).await;
    assert_eq!(record.status, Status::Failed);
    assert_eq!(record.exit_code, Some(3));
    assert_eq!(record.output, ["line 1", "line 2", "line 3", "oops"]);
    assert!(nats.ok(&["runs", "talk"]).contains("exited with code 3"));
}

/// Messages stored in the stream behind a bucket: values and markers alike.
async fn stream_messages(store: &cronrun::store::Store, bucket: &str) -> u64 {
    store.js.get_stream(format!("KV_{bucket}")).await.unwrap().info().await.unwrap().state.messages
}

/// How many of `bucket`'s keys under `prefix` hold a message now.
async fn keys_under(store: &cronrun::store::Store, bucket: &str, prefix: &str) -> u64 {
    use futures::StreamExt;
    let stream = store.js.get_stream(format!("KV_{bucket}")).await.unwrap();
    let mut subjects = stream.info_with_subjects(format!("$KV.{bucket}.{prefix}>")).await.unwrap();
    let mut n = 0;
    while let Some(Ok((_, count))) = subjects.next().await {
        n += count;
    }
    n as u64
}

#[tokio::test(flavor = "multi_thread")]
async fn run_history_and_state_in_nats_stay_bounded() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    // Alternating success and failure, every second; keep 2 of each. `busy` runs for three
    // seconds, so two of its three fires are skipped: skipped records count too.
    apply(
        &nats,
        r#"
[[job]]
name = "flip"
schedule = "* * * * * *"
shell = "test $(( $(date +%s) % 2 )) = 0"
history = { succeeded = 2, failed = 2 }

[[job]]
name = "busy"
schedule = "* * * * * *"
shell = "sleep 2.5"
history = { succeeded = 2, failed = 2 }
"#,
    );
    let store = nats.store().await;
    // Pruning runs after every 5 runs finished on a runner (half the history, at least 5).
    let bound = 2 + 2 + 5;
    let mut most = 0;
    let mut sampled = Vec::new();
    let sample_at = [8, 19];
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        for job in ["flip", "busy"] {
            let runs = runs(&store, job).await;
            let finished: Vec<_> = runs.iter().filter(|r| r.status.is_final()).collect();
            most = most.max(finished.len());
            assert!(finished.len() <= bound, "{job}: {} finished records kept, bound {bound}", finished.len());
        }
        if let Some(&at) = sample_at.get(sampled.len())
            && start.elapsed() >= Duration::from_secs(at)
        {
            // Less the places of the fires standing in line: live, as many as wait then
            // (`busy`'s fires wait behind its long runs), not left behind by runs.
            let in_line = keys_under(&store, "cronrun_leases", "wait.").await;
            let leases = stream_messages(&store, "cronrun_leases").await - in_line;
            let records = stream_messages(&store, "cronrun_runs").await;
            sampled.push((at, leases, records));
        }
        // Looked at every 0.3 s over twenty seconds of runs: the span the bound must hold.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Eleven more seconds of runs (about 15 of them) leave the streams where they were:
    // no tombstone per run lease, records pruned with markers that expire.
    println!("messages in the leases and runs streams (at second, leases, records): {sampled:?}");
    let [(_, leases_before, records_before), (_, leases_after, records_after)] = sampled[..] else {
        panic!("sampled {sampled:?}")
    };
    // Some 15 runs end in between: a message left per run lease would add 15. Under a
    // loaded suite a few more leases are in flight at the second sample (seen: +5).
    assert!(leases_after <= leases_before + 7, "leases stream grew from {leases_before} to {leases_after}");
    // Per job: the records kept, those awaiting the next prune, one in flight, and the
    // markers of the last prunes (they expire after 5 s): the count rises and falls with
    // the prunes, but never past this.
    let per_job = bound as u64 + 2 + 10;
    for records in [records_before, records_after] {
        assert!(records <= 2 * per_job, "runs stream holds {records} messages, bound {}", 2 * per_job);
    }
    let skipped = runs(&store, "busy").await.iter().filter(|r| r.status == Status::Skipped).count();
    assert!(skipped >= 1, "busy's overlapping fires are recorded skipped");
    let events = events(&store, "flip", "started").await.len();
    println!("{events} runs started, at most {most} finished records kept (bound {bound})");
    assert!(events >= 12, "only {events} runs");
    let flips = runs(&store, "flip").await;
    assert!(flips.iter().any(|r| r.status == Status::Succeeded) && flips.iter().any(|r| r.status == Status::Failed));
    // `rm` of an idle job takes its records with it.
    nats.ok(&["pause", "flip"]);
    eventually(Duration::from_secs(5), "flip to be idle", || async {
        runs(&store, "flip").await.iter().all(|r| r.status.is_final()).then_some(())
    })
    .await;
    let out = nats.ok(&["rm", "flip"]);
    assert!(out.contains("run records"), "{out}");
    eventually(Duration::from_secs(5), "flip's records to be gone", || async {
        runs(&store, "flip").await.is_empty().then_some(())
    })
    .await;
}

/// A job's records are read in one direct get of their latest values; past the keys one
/// answer may hold, with a watch. Either way: every record kept, in fire order, with its
/// revision, none removed, none of a job whose name only begins like this one's.
#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_runs_are_listed_whole_below_and_above_what_one_read_answers() {
    use cronrun::record::{RunRecord, Trigger};
    use cronrun::store::kv::MAX_KEYS;
    use futures::StreamExt;
    let nats = Nats::start().await;
    let store = nats.store().await;
    let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    let record = |job: &str, i: usize| {
        RunRecord::queued(job, &format!("r{i:05}"), Trigger::Manual, at + chrono::Duration::seconds(i as i64), 1)
    };
    // (job, records): `few` loses one of its three, `few-more` and `fewer` begin like it.
    let jobs = [("few", 3), ("few-more", 2), ("fewer", 1), ("many", MAX_KEYS + 5)];
    let records: Vec<RunRecord> = jobs.iter().flat_map(|&(job, n)| (0..n).map(move |i| record(job, i))).collect();
    let revisions: std::collections::HashMap<String, u64> = futures::stream::iter(records)
        .map(|r| {
            let store = store.clone();
            async move { (r.key(), store.create_run(&r).await.unwrap()) }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let removed = record("few", 1).key();
    store.runs.delete_at(&removed, revisions[&removed]).await.unwrap();

    let few = store.list_runs("few").await.unwrap();
    let listed: Vec<(String, u64)> = few.iter().map(|r| (r.record.key(), r.revision)).collect();
    let kept = [record("few", 0).key(), record("few", 2).key()];
    assert_eq!(listed, kept.iter().map(|k| (k.clone(), revisions[k])).collect::<Vec<_>>());
    assert!(store.runs.last_values("few.*").await.unwrap().is_some(), "one answer holds few's records");
    // One answer for several filters says how far the replica that answered had got: here
    // the last write, the removal, after every record.
    let listing = store.runs.listing(&["few.*", "none.*"]).await.unwrap().unwrap();
    assert_eq!(listing.values.len(), 2, "{:?}", listing.values);
    assert!(listing.as_of > *revisions.values().max().unwrap(), "answered as of {}", listing.as_of);
    // The leader's answer: a live key's value at its revision, nothing for a removed or
    // absent one.
    let live = store.runs.get_from_leader(&kept[0]).await.unwrap().map(|v| v.revision);
    assert_eq!(live, Some(revisions[&kept[0]]));
    assert!(store.runs.get_from_leader(&removed).await.unwrap().is_none(), "removed");
    assert!(store.runs.get_from_leader("none.absent").await.unwrap().is_none(), "absent");
    assert!(store.list_runs("none").await.unwrap().is_empty());
    assert!(store.runs.last_values("many.*").await.unwrap().is_none(), "one answer holds at most {MAX_KEYS} keys");
    let many = store.list_runs("many").await.unwrap();
    assert_eq!(many.len(), MAX_KEYS + 5);
    assert!(many.windows(2).all(|w| w[0].record.scheduled_at < w[1].record.scheduled_at), "in fire order");
    // The CLI as a viewer reads them the same way.
    let mut viewer = nats.command();
    let out = viewer
        .args(["runs", "few", "--output", "json"])
        .env("CRONRUN_CREDS", nats.identity("viewer"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown.len(), 2, "{shown:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_pool_picks_the_runners_that_may_take_it() {
    let nats = Nats::start().await;
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    let gpu = nats.runner_in_pools("gpu-host", &["gpu"]);
    let plain = nats.runner_in_pools("plain-host", &["default"]);
    for agent in [&scheduler, &gpu, &plain] {
        ready(agent).await;
    }
    // A tag pool, the default pool, and a pool named after one runner's agent name.
    nats.ok(&["add", "train", "--schedule", "@yearly", "--pool", "gpu", "--", "true"]);
    nats.ok(&["add", "report", "--schedule", "@yearly", "--", "true"]);
    nats.ok(&["add", "pinned", "--schedule", "@yearly", "--pool", "gpu-host", "--", "true"]);
    let mut hosts = std::collections::BTreeMap::new();
    for _ in 0..4 {
        for job in ["train", "report", "pinned"] {
            let key = nats.trigger(job);
            let done = run_status(&nats, &key).await;
            assert_eq!(done.status, Status::Succeeded, "{done:?}");
            hosts.entry(job).or_insert_with(std::collections::BTreeSet::new).insert(done.host.unwrap());
        }
    }
    assert_eq!(hosts["train"], ["gpu-host".to_string()].into());
    assert_eq!(hosts["report"], ["plain-host".to_string()].into());
    assert_eq!(hosts["pinned"], ["gpu-host".to_string()].into());
}

#[tokio::test(flavor = "multi_thread")]
async fn runners_take_runs_only_into_free_slots() {
    let nats = Nats::start().await;
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    let narrow = nats.runner_with("narrow", "slots = 1");
    let wide = nats.runner_with("wide", "slots = 8");
    for agent in [&scheduler, &narrow, &wide] {
        ready(agent).await;
    }
    nats.ok(&["add", "work", "--schedule", "@yearly", "--overlap", "allow", "--", "sleep 1"]);
    let keys: Vec<String> = (0..6).map(|_| nats.trigger("work")).collect();
    let mut runs = Vec::new();
    for key in &keys {
        runs.push(run_status(&nats, key).await);
    }
    assert!(runs.iter().all(|r| r.status == Status::Succeeded), "{runs:?}");
    // The narrow runner never held two runs at once; the wide one took the rest.
    let on = |host: &str| runs.iter().filter(|r| r.host.as_deref() == Some(host)).collect::<Vec<_>>();
    let narrow_runs = on("narrow");
    for (i, a) in narrow_runs.iter().enumerate() {
        for b in &narrow_runs[i + 1..] {
            let apart =
                a.finished_at.unwrap() <= b.started_at.unwrap() || b.finished_at.unwrap() <= a.started_at.unwrap();
            assert!(apart, "narrow ran {} and {} at once", a.run_id, b.run_id);
        }
    }
    println!(
        "six one-second runs: {} on the 1-slot runner, {} on the 8-slot runner",
        narrow_runs.len(),
        on("wide").len()
    );
    assert!(on("wide").len() > narrow_runs.len(), "the runner with free slots takes more");
}

/// A process that leaves the run's process group (`setsid`) ends with the run all the
/// same: when the job exits, and when it times out, also when it ignores TERM and USR1.
#[tokio::test(flavor = "multi_thread")]
async fn processes_that_leave_the_group_die_with_the_run() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let dir = nats.dir.path().display().to_string();
    let escape = |file: &str| format!("setsid sh -c 'echo $$ > {dir}/{file}; exec sleep 600' &");
    apply(
        &nats,
        &format!(
            r#"
[[job]]
name = "leaves"
schedule = "@yearly"
shell = "{}  until [ -s {dir}/left ]; do sleep 0.05; done; echo bye"

[[job]]
name = "hangs"
schedule = "@yearly"
timeout = "2s"
shell = "{}  sleep 600"

[[job]]
name = "deaf"
schedule = "@yearly"
timeout = "2s"
shell = "trap '' TERM USR1; {}  sleep 600"
"#,
            escape("left"),
            escape("hung"),
            escape("deaf")
        ),
    );
    let jobs = [
        ("leaves", "left", Status::Succeeded),
        ("hangs", "hung", Status::TimedOut),
        ("deaf", "deaf", Status::TimedOut),
    ];
    for (job, file, status) in jobs {
        let record = run_status(&nats, &nats.trigger(job)).await;
        assert_eq!(record.status, status, "{record:?}");
        let pid: i32 = std::fs::read_to_string(nats.dir.path().join(file)).unwrap().trim().parse().unwrap();
        eventually(Duration::from_secs(5), &format!("{job}'s escaped process to die"), || async {
            (!alive(pid)).then_some(())
        })
        .await;
    }
}

/// A runner's pull still open at the server when the runner stops, and a run dispatched
/// into it before the server hears the runner's unsubscribe (held here in a proxy): the run
/// is not started there, and reaches another runner when that pull expires, not after the
/// consumer's ack wait.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_dispatched_into_the_pull_of_a_stopping_runner_is_handed_on_not_started() {
    use async_nats::jetstream::{self, consumer::pull, stream};
    use cronrun::store::pull::{PullLimits, pull_into_slots};
    use futures::StreamExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let nats = Nats::start().await;
    let js = jetstream::new(nats.client().await);
    let config = stream::Config {
        name: "PULLS".into(),
        subjects: vec!["pulls.>".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        ..Default::default()
    };
    let stream = js.create_stream(config).await.unwrap();
    let consumer_config = pull::Config {
        durable_name: Some("runners".into()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(60),
        ..Default::default()
    };
    let consumer = stream.create_consumer(consumer_config).await.unwrap();

    let proxy = Proxy::start(&nats.url).await;
    let stopping_client =
        cronrun::connect::connect(&proxy.url, Some(&nats.identity("test")), "stopping").await.unwrap();
    let stopping_js = jetstream::new(stopping_client);
    let stopping_consumer: jetstream::consumer::PullConsumer =
        stopping_js.get_stream("PULLS").await.unwrap().get_consumer("runners").await.unwrap();
    let expires = Duration::from_secs(4);
    let cancel = tokio_util::sync::CancellationToken::new();
    let started = Arc::new(AtomicUsize::new(0));
    let stopping = tokio::spawn({
        let (cancel, started) = (cancel.clone(), started.clone());
        async move {
            let limits = PullLimits { max_batch: 4, expires };
            let slots = Arc::new(tokio::sync::Semaphore::new(4));
            pull_into_slots(&stopping_consumer, &slots, &limits, &cancel, |_, _| {
                started.fetch_add(1, Ordering::SeqCst);
            })
            .await
        }
    });
    let info = |wanted: fn(&jetstream::consumer::Info) -> bool| {
        let consumer = consumer.clone();
        move || {
            let mut consumer = consumer.clone();
            async move { consumer.info().await.ok().filter(|i| wanted(i)).map(|_| ()) }
        }
    };
    eventually(Duration::from_secs(5), "the runner's pull waiting at the server", info(|i| i.num_waiting > 0)).await;
    proxy.hold_sends(true);
    cancel.cancel();
    let stopped = std::time::Instant::now();
    js.publish("pulls.run", "run".into()).await.unwrap().await.unwrap();
    eventually(Duration::from_secs(5), "the run delivered into that pull", info(|i| i.num_ack_pending == 1)).await;
    proxy.hold_sends(false);

    let mut other = consumer.fetch().max_messages(1).expires(Duration::from_secs(15)).messages().await.unwrap();
    let msg = other.next().await.expect("the run reaches the other runner").unwrap();
    msg.ack().await.unwrap();
    let waited = stopped.elapsed();
    println!("the run reached the other runner {waited:?} after the stop");
    assert!(
        waited < expires + Duration::from_secs(2),
        "handed on {waited:?} after the stop, not when the pull expired"
    );
    let ended = tokio::time::timeout(Duration::from_secs(5), stopping).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "the stopping puller ends once its pull expired: {ended:?}");
    assert_eq!(started.load(Ordering::SeqCst), 0, "nothing is started after the stop");
}
