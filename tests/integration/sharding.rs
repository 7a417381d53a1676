//! Sharded scheduling: shards spread evenly over the schedulers, move when schedulers join
//! or leave (SIGTERM or kill -9), and every fire of every job runs exactly once throughout.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::support::*;
use chrono::Utc;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Jobs enough to land in most shards.
const JOBS: usize = 12;

fn every_second_jobs() -> String {
    (0..JOBS)
        .map(|i| {
            format!(
                "[[job]]\nname = \"tick-{i}\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n\
                 overlap = \"allow\"\nhistory = {{ succeeded = 1000, failed = 1000 }}\n"
            )
        })
        .collect()
}

/// The names of the jobs of `every_second_jobs`.
fn every_second_names() -> Vec<String> {
    (0..JOBS).map(|i| format!("tick-{i}")).collect()
}

/// Waits until every shard is held and the holders' loads are `want` (sorted, largest
/// first), then until each of `jobs` ran fires under that assignment; returns how long
/// the spread took and who holds how many.
async fn wait_for_spread(
    store: &cronrun::store::Store,
    want: &[usize],
    what: &str,
    jobs: &[String],
) -> (Duration, BTreeMap<String, usize>) {
    let start = Instant::now();
    let counts = eventually(Duration::from_secs(20), what, || async {
        let counts = shard_counts(store).await?;
        let mut loads: Vec<usize> = counts.values().copied().collect();
        loads.sort_unstable_by(|a, b| b.cmp(a));
        (loads == want).then_some(counts)
    })
    .await;
    let took = start.elapsed();
    println!("{what}: {counts:?} after {} ms", took.as_millis());
    // Some fires under this assignment before the next change: each job's fire of the
    // second whole second after it, run to its end.
    let under = ceil_second(Utc::now()) + chrono::Duration::seconds(1);
    for job in jobs {
        eventually(Duration::from_secs(20), &format!("{job} to fire under this assignment"), || async {
            let runs = runs(store, job).await;
            runs.iter().any(|r| r.scheduled_at.is_some_and(|t| t >= under) && r.status.is_final()).then_some(())
        })
        .await;
    }
    (took, counts)
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_follow_schedulers_joining_and_leaving_and_no_fire_is_lost_or_doubled() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    let shards: BTreeSet<u32> =
        (0..JOBS).map(|i| cronrun::scheduler::shard_of(&format!("tick-{i}"), TEST_SHARDS)).collect();
    assert!(shards.len() >= 5, "the jobs cover only shards {shards:?}");

    let runner = nats.agent("r", "roles = [\"runner\"]");
    let mut schedulers: Vec<Agent> =
        ["s1", "s2", "s3"].iter().map(|n| nats.agent(n, "roles = [\"scheduler\"]")).collect();
    for agent in schedulers.iter().chain([&runner]) {
        ready(agent).await;
    }
    // 8 shards over 3 schedulers.
    wait_for_spread(&store, &[3, 3, 2], "three schedulers", &[]).await;
    apply(&nats, &every_second_jobs());
    eventually(Duration::from_secs(10), "the jobs to run", || async {
        (!runs(&store, "tick-0").await.is_empty()).then_some(())
    })
    .await;
    let from = ceil_second(Utc::now());

    schedulers.push(nats.agent("s4", "roles = [\"scheduler\"]"));
    let ticks = every_second_names();
    let (joined, _) = wait_for_spread(&store, &[2, 2, 2, 2], "a fourth scheduler joined", &ticks).await;
    assert!(joined < Duration::from_secs(10), "rebalancing after a join took {joined:?}");

    let s4 = schedulers.pop().unwrap();
    kill(Pid::from_raw(s4.pid()), Signal::SIGTERM).unwrap();
    let (left, _) = wait_for_spread(&store, &[3, 3, 2], "the fourth stopped (SIGTERM)", &ticks).await;
    assert!(left < Duration::from_secs(5), "rebalancing after a stop took {left:?}");

    schedulers[0].kill9();
    let (died, counts) = wait_for_spread(&store, &[4, 4], "s1 killed (kill -9, lease TTL 2 s)", &ticks).await;
    assert!(!counts.contains_key("s1"), "{counts:?}");
    assert!(died < Duration::from_secs(10), "taking over a dead scheduler's shards took {died:?}");

    // Every fire of every job, through all three changes, ran exactly once.
    let secs = (Utc::now() - from).num_seconds() + 2;
    for i in 0..JOBS {
        assert_each_second_once(&store, &format!("tick-{i}"), from, secs).await;
    }
    println!("{JOBS} jobs x {secs} s: every fire ran exactly once");

    let status: serde_json::Value = serde_json::from_str(&nats.ok(&["status", "--output", "json"])).unwrap();
    assert_eq!(status["shards"]["count"], TEST_SHARDS);
    let members: BTreeSet<&str> =
        status["schedulers"].as_array().unwrap().iter().map(|m| m["holder"].as_str().unwrap()).collect();
    assert_eq!(members.len(), 2, "{status}");
    assert!(members.iter().all(|m| m.starts_with("s2/") || m.starts_with("s3/")), "{members:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_count_other_than_the_deployments_is_refused() {
    let nats = Nats::start().await;
    let first = nats.agent("first", "roles = [\"scheduler\"]");
    ready(&first).await;
    // The test config sets `shards`; a second setting in one file would be a TOML error,
    // so this agent gets a config of its own.
    let config = nats.dir.path().join("other.toml");
    std::fs::write(&config, "name = \"other\"\nroles = [\"scheduler\"]\n[scheduler]\nshards = 16\n").unwrap();
    let out = nats
        .command()
        .args(["agent", "--config"])
        .arg(&config)
        .env("CRONRUN_CREDS", nats.identity("scheduler"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("scheduler.shards is 16 but this deployment was started with {TEST_SHARDS} shards")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().filter(|l| l.contains("shards")).count(), 1, "{stderr}");
}

/// The server files every job under the shard the schedulers compute for it (its own
/// `partition` mapping is `shard_of`), whatever the name; and an index deleted while no
/// scheduler runs is made again and filled before the next one leads: its jobs resume
/// from their shard's watermark, so the fires of the outage run late (a job the leader
/// met only as a change after its first read would start from now, and they would not).
#[tokio::test(flavor = "multi_thread")]
async fn the_index_files_each_job_in_its_shard_and_is_made_again_when_deleted() {
    use cronrun::spec::{JobSpec, ShellSpec};
    let nats = Nats::start().await;
    let store = nats.store().await;
    let mut names: Vec<String> = (0..300).map(|i| format!("job-{i}")).collect();
    names.extend(["a", "Z", "x_y-z", "0"].map(String::from));
    names.push("n".repeat(128));
    for name in &names {
        let spec = JobSpec::shell(name, "0 0 1 1 *", ShellSpec { command: Some("true".into()), ..Default::default() });
        store.put_job(&spec).await.unwrap();
    }
    apply(
        &nats,
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = \"true\"\noverlap = \"allow\"\n\
         history = { succeeded = 1000, failed = 1000 }\n",
    );
    let mut a = nats.agent("a", "");
    ready(&a).await;
    let index = format!("KV_{}", store.names.schedules_bucket());
    let filed = || async {
        let kv = store.js.get_key_value(store.names.schedules_bucket()).await.ok()?;
        let keys: Vec<String> = futures::TryStreamExt::try_collect(kv.keys().await.ok()?).await.ok()?;
        (keys.len() == names.len() + 1).then_some(keys)
    };
    let keys = eventually(Duration::from_secs(10), "every job filed", filed).await;
    for key in &keys {
        let (shard, name) = key.split_once('.').unwrap();
        assert_eq!(shard.parse::<u32>().unwrap(), cronrun::scheduler::shard_of(name, TEST_SHARDS), "{key}");
    }
    let spread: BTreeSet<&str> = keys.iter().map(|k| k.split_once('.').unwrap().0).collect();
    assert_eq!(spread.len(), TEST_SHARDS as usize, "every shard has jobs: {spread:?}");

    eventually(Duration::from_secs(10), "tick to run", || async {
        runs(&store, "tick").await.iter().any(|r| r.status.is_final()).then_some(())
    })
    .await;

    // Deleted while no scheduler runs, the index is made again before any shard is led.
    kill(Pid::from_raw(a.pid()), Signal::SIGTERM).unwrap();
    eventually(Duration::from_secs(20), "agent a to stop", || async { a.exited().then_some(()) }).await;
    a.kill9();
    let stopped = Utc::now();
    store.js.delete_stream(&index).await.unwrap();
    // No scheduler for three seconds more: the outage leaves fires behind.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b = nats.agent("b", "");
    ready(&b).await;
    eventually(Duration::from_secs(10), "the index filled again", filed).await;
    // Each second of the outage ran once, late (within the 60 s deadline); and every since.
    let from = ceil_second(stopped) + chrono::Duration::seconds(1);
    let gap = (Utc::now() - from).num_seconds() + 3;
    assert!(gap >= 4, "the outage leaves fires behind");
    assert_each_second_once(&store, "tick", from, gap).await;
}

/// A scheduler taking shards reads each one's snapshot, written by the pass of the one
/// before, and then only the index's changes since (a job added, one edited, one removed),
/// never the whole index; a snapshot whose chunk is garbage is read from the index instead,
/// and written again.
#[tokio::test(flavor = "multi_thread")]
async fn shards_taken_over_are_read_from_their_snapshots_and_the_changes_since() {
    use cronrun::spec::{JobSpec, ShellSpec};
    let nats = Nats::start().await;
    let store = nats.store().await;
    for i in 0..300 {
        let shell = ShellSpec { command: Some("true".into()), ..Default::default() };
        store.put_job(&JobSpec::shell(&format!("yearly-{i}"), "0 0 1 1 *", shell)).await.unwrap();
    }
    let every_second = |name: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\nshell = \"true\"\noverlap = \"allow\"\n\
             history = {{ succeeded = 1000, failed = 1000 }}\n"
        )
    };
    apply(&nats, &format!("{}{}", every_second("paused-later"), every_second("removed-later")));
    let led = |port: u16| metric(port, "cronrun_schedules_led");

    let runner = nats.agent("r", "roles = [\"runner\"]");
    let port_a = free_port();
    let a = nats.scheduler_snapshotting("a", port_a);
    for agent in [&runner, &a] {
        ready(agent).await;
    }
    eventually(Duration::from_secs(20), "a to read every shard from the index", || async {
        (shard_loads(port_a, "index") == TEST_SHARDS as f64).then_some(())
    })
    .await;
    let snapshots = store.js.get_key_value(store.names.snapshots_bucket()).await.expect("the snapshots bucket");
    eventually(Duration::from_secs(10), "every shard's snapshot written", || async {
        for n in 0..TEST_SHARDS {
            snapshots.get(n.to_string()).await.ok()??;
        }
        Some(())
    })
    .await;
    assert_eq!(shard_loads(port_a, "snapshot"), 0.0);

    // Changes after the snapshots: one job added, one paused, one removed.
    apply(&nats, &every_second("added-later"));
    assert!(nats.cli(&["pause", "paused-later"]).status.success());
    store.delete_job("removed-later").await.unwrap();
    stop(a).await;

    let port_b = free_port();
    let b = nats.scheduler_snapshotting("b", port_b);
    ready(&b).await;
    let taken = Utc::now();
    // The 300 yearly jobs and the one added; neither the paused one nor the removed one.
    eventually(Duration::from_secs(20), "b to lead 301 jobs", || async { (led(port_b)? == 301.0).then_some(()) }).await;
    assert_eq!(shard_loads(port_b, "snapshot"), TEST_SHARDS as f64, "every shard from its snapshot");
    assert_eq!(shard_loads(port_b, "index"), 0.0, "none from the whole index");
    let from = ceil_second(Utc::now()) + chrono::Duration::seconds(1);
    assert_each_second_once(&store, "added-later", from, 3).await;
    for job in ["paused-later", "removed-later"] {
        let late: Vec<_> =
            runs(&store, job).await.into_iter().filter(|r| r.scheduled_at.is_some_and(|t| t > taken)).collect();
        assert!(late.is_empty(), "{job} ran after b took over: {late:?}");
    }

    // A garbage chunk: that read falls back to the whole index and writes the snapshot again.
    let shard = cronrun::scheduler::shard_of("added-later", TEST_SHARDS);
    let head: serde_json::Value =
        serde_json::from_slice(&snapshots.get(shard.to_string()).await.unwrap().unwrap()).unwrap();
    let chunk = format!("{shard}.{}.0", head["slot"]);
    snapshots.put(&chunk, bytes::Bytes::from_static(b"garbage of eight bytes or more")).await.unwrap();
    stop(b).await;
    let port_c = free_port();
    let c = nats.scheduler_snapshotting("c", port_c);
    ready(&c).await;
    eventually(Duration::from_secs(20), "c to lead 301 jobs", || async { (led(port_c)? == 301.0).then_some(()) }).await;
    assert_eq!(shard_loads(port_c, "index") + shard_loads(port_c, "snapshot"), TEST_SHARDS as f64);
    assert!(shard_loads(port_c, "index") >= 1.0, "the shard with the garbage chunk is read from the index");
    assert!(
        c.log().contains(&format!("shard {shard}'s snapshot: chunk 0: of another generation")),
        "c says which snapshot it could not read:\n{}",
        c.log()
    );
    let rewritten = eventually(Duration::from_secs(10), "the snapshot written again", || async {
        let now: serde_json::Value = serde_json::from_slice(&snapshots.get(shard.to_string()).await.ok()??).ok()?;
        (now["generation"] != head["generation"]).then_some(now)
    })
    .await;
    assert_ne!(rewritten["slot"], head["slot"], "written into the other slot");
}

/// A leader keeps its shards' snapshots current while jobs change (added, edited, removed
/// as it leads): it writes each shard's snapshot and its changes as a new snapshot, without
/// passing over the index, and a scheduler taking the shards later reads every change from
/// those snapshots and nothing from the index after them. Changes made while no scheduler
/// ran are read after the snapshots by the next one, which then writes them in; a few
/// changes, not yet worth a write, are written when the leader stops.
#[tokio::test(flavor = "multi_thread")]
async fn leaders_keep_their_shards_snapshots_current_as_jobs_change() {
    use cronrun::spec::{JobSpec, ShellSpec};
    // Per shard: 64 jobs at first, 22 more added later, and 128 left alone (changes read
    // after a snapshot are read so while under half the index); each round of changes is
    // 64 a shard, what makes a snapshot's write due.
    const FIRST: usize = 64;
    const ALONE: std::ops::Range<usize> = FIRST + 22..FIRST + 150;
    let nats = Nats::start().await;
    let store = nats.store().await;
    let names: Vec<String> = (0..).map(|i| format!("yearly-{i}")).take(FIRST * 6 * TEST_SHARDS as usize).collect();
    let shards: Vec<Vec<String>> = (0..TEST_SHARDS)
        .map(|n| names.iter().filter(|name| cronrun::scheduler::shard_of(name, TEST_SHARDS) == n).cloned().collect())
        .collect();
    assert!(shards.iter().all(|names| names.len() >= ALONE.end), "names enough for every shard");
    // Per shard, the jobs at `range` of its names: put (paused or not) or removed (None).
    let change = |range: std::ops::Range<usize>, paused: Option<bool>| {
        let (store, shards) = (&store, &shards);
        async move {
            for name in shards.iter().flat_map(|names| &names[range.clone()]) {
                let shell = ShellSpec { command: Some("true".into()), ..Default::default() };
                match paused {
                    Some(paused) => {
                        store.put_job(&JobSpec { paused, ..JobSpec::shell(name, "0 0 1 1 *", shell) }).await.unwrap();
                    }
                    None => store.delete_job(name).await.unwrap(),
                }
            }
        }
    };
    let led = |port: u16| metric(port, "cronrun_schedules_led");
    let written = |port: u16| metric(port, "cronrun_snapshots_written_total{by=\"leader\"}").unwrap_or(0.0);
    // Jobs led with `per_shard` of the changed ones in each shard.
    let shards_of = |per_shard: usize| ((per_shard + ALONE.len()) * TEST_SHARDS as usize) as f64;
    // Starts a scheduler and waits until it leads `jobs`: its port, and the entries it read
    // from the index after the shards' snapshots.
    let start = |name: &'static str, jobs: f64| {
        let nats = &nats;
        async move {
            let port = free_port();
            let agent = nats.scheduler_snapshotting(name, port);
            ready(&agent).await;
            eventually(Duration::from_secs(20), &format!("{name} to lead {jobs} jobs"), || async {
                (led(port)? == jobs).then_some(())
            })
            .await;
            let since =
                agent.log().split(" since=").nth(1).and_then(|rest| rest.split_whitespace().next()?.parse().ok());
            (agent, port, since)
        }
    };

    change(0..FIRST, Some(false)).await;
    change(ALONE, Some(false)).await;
    let (a, port_a, _) = start("a", shards_of(FIRST)).await;
    assert_eq!(shard_loads(port_a, "index"), f64::from(TEST_SHARDS), "a read every shard from the index");
    // While a leads, in each shard: 21 paused, 21 removed, 22 added.
    change(0..21, Some(true)).await;
    change(21..42, None).await;
    change(FIRST..FIRST + 22, Some(false)).await;
    eventually(Duration::from_secs(20), "a to write every shard's snapshot again", || async {
        (written(port_a) == f64::from(TEST_SHARDS)).then_some(())
    })
    .await;
    stop(a).await;

    let (b, port_b, since) = start("b", shards_of(FIRST - 42 + 22)).await;
    assert_eq!(shard_loads(port_b, "snapshot"), f64::from(TEST_SHARDS), "b read every shard from its snapshot");
    assert_eq!(since, Some(0), "b read nothing from the index after the snapshots:\n{}", b.log());
    stop(b).await;

    // While no scheduler runs, in each shard: the 21 paused resumed, the 22 added paused,
    // and 21 of the 22 left alone so far removed.
    change(0..21, Some(false)).await;
    change(FIRST..FIRST + 22, Some(true)).await;
    change(42..63, None).await;
    let (c, port_c, since) = start("c", shards_of(21 + 1)).await;
    assert_eq!(shard_loads(port_c, "snapshot"), f64::from(TEST_SHARDS), "c read every shard from its snapshot");
    assert_eq!(since, Some(64 * u64::from(TEST_SHARDS)), "c read the changes after them:\n{}", c.log());
    eventually(Duration::from_secs(20), "c to write them into every shard's snapshot", || async {
        (written(port_c) == f64::from(TEST_SHARDS)).then_some(())
    })
    .await;
    stop(c).await;
    let (d, port_d, since) = start("d", shards_of(21 + 1)).await;
    assert_eq!(since, Some(0), "d read nothing from the index after the snapshots:\n{}", d.log());

    // A few changes, under what makes a write due, are written when the leader stops.
    change(63..64, None).await;
    let (e, _, since) = {
        assert_eq!(written(port_d), 0.0, "d wrote no snapshot while it led");
        stop(d).await;
        start("e", shards_of(21)).await
    };
    assert_eq!(since, Some(0), "e read nothing from the index after the snapshots:\n{}", e.log());
}

/// A scheduler whose identity may not use the snapshots (nats-server given the
/// authorization of a version without them) says so once and schedules from the index.
#[tokio::test(flavor = "multi_thread")]
async fn a_scheduler_without_rights_to_the_snapshots_says_so_and_reads_the_whole_index() {
    let nats = Nats::start_without_rights("_snapshots").await;
    let store = nats.store().await;
    let runner = nats.agent("r", "roles = [\"runner\"]");
    let port = free_port();
    let a = nats.scheduler_snapshotting("a", port);
    let said = "no snapshots of the schedules index";
    // It tries for 30 s (requests refused by the server go unanswered).
    eventually(Duration::from_secs(90), "a to say it goes without snapshots", || async {
        a.log().contains(said).then_some(())
    })
    .await;
    for agent in [&runner, &a] {
        ready(agent).await;
    }
    apply(
        &nats,
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = \"true\"\noverlap = \"allow\"\n\
         history = { succeeded = 1000, failed = 1000 }\n",
    );
    eventually(Duration::from_secs(20), "a to read every shard from the index", || async {
        (shard_loads(port, "index") == f64::from(TEST_SHARDS)).then_some(())
    })
    .await;
    assert_eq!(shard_loads(port, "snapshot"), 0.0);
    let from = ceil_second(Utc::now()) + chrono::Duration::seconds(1);
    assert_each_second_once(&store, "tick", from, 3).await;
    let log = a.log();
    assert_eq!(log.matches(said).count(), 1, "said once:\n{log}");
    assert!(log.contains("cronrun auth init"), "says what to do:\n{log}");
}

/// A pass over the schedules index gives each live job of the shards it reads once, and
/// no removed one, whichever entry is the index's first: a pass reads that one apart and
/// consumes from the next (see `loader.rs`). Read for every shard, for the first entry's
/// shard alone, and for all the others, as the index changes step by step.
#[tokio::test(flavor = "multi_thread")]
async fn a_pass_gives_each_live_job_of_its_shards_once_whichever_entry_is_the_indexs_first() {
    use cronrun::scheduler::{loader, shard_of};
    use cronrun::spec::{JobSpec, ShellSpec};
    let nats = Nats::start().await;
    let store = nats.store().await;
    let index = store.schedules_index(TEST_SHARDS).await.unwrap();
    // Each step's own schedule: a job put again is changed, and written.
    let put = |name: String, step: usize| {
        let store = &store;
        async move {
            let schedule = format!("0 0 {} 1 *", step + 1);
            let spec =
                JobSpec::shell(&name, &schedule, ShellSpec { command: Some("true".into()), ..Default::default() });
            assert!(store.put_job(&spec).await.unwrap().1, "{name} written");
        }
    };
    let jobs: Vec<String> = (0..30).map(|i| format!("job-{i}")).collect();
    let (mut live, mut written) = (BTreeSet::<String>::new(), 0u64);
    // The index's first entry after the step (a job's, and whether it is its removal); the
    // jobs put, then those removed.
    type Step = (Option<(&'static str, bool)>, Vec<String>, Vec<String>);
    let steps: [Step; 6] = [
        (None, vec![], vec![]),
        (Some(("first", false)), vec!["first".into()], vec![]),
        (Some(("first", false)), jobs.clone(), vec![]),
        (Some(("job-0", false)), vec!["first".into()], vec![]),
        (Some(("job-1", false)), vec![], vec!["job-0".into()]),
        (Some(("job-0", true)), vec![], jobs[1..].iter().cloned().chain(["first".into()]).collect()),
    ];
    for (step, (first_entry, puts, deletes)) in steps.into_iter().enumerate() {
        for name in puts {
            put(name.clone(), step).await;
            live.insert(name);
            written += 1;
        }
        for name in deletes {
            store.delete_job(&name).await.unwrap();
            live.remove(&name);
            written += 1;
        }
        let first = eventually(Duration::from_secs(10), "the index to file every write", || async {
            let mut stream = index.kv.stream.clone();
            let info = stream.info().await.ok()?;
            (info.state.last_sequence == written).then_some(info.state.first_sequence)
        })
        .await;
        let entry = match written {
            0 => None,
            _ => index.entry_at(first).await.unwrap(),
        };
        let (first_shard, name) = entry.as_ref().map_or((0, None), |e| {
            let (n, name) = e.key.split_once('.').unwrap();
            (n.parse::<u32>().unwrap(), Some((name, e.value.is_none())))
        });
        assert_eq!(name, first_entry, "the index's first entry");
        let all: Vec<u32> = (0..TEST_SHARDS).collect();
        let others: Vec<u32> = all.iter().copied().filter(|&n| n != first_shard).collect();
        for wanted in [all.clone(), vec![first_shard], others] {
            let (read, after) = loader::read(&index, TEST_SHARDS, &wanted).await.unwrap();
            assert!(after >= written, "first entry {first_entry:?}: read up to {after} of {written}");
            let mut got: Vec<String> = read.values().flatten().map(|job| job.name.to_string()).collect();
            got.sort();
            let want: Vec<String> =
                live.iter().filter(|name| wanted.contains(&shard_of(name, TEST_SHARDS))).cloned().collect();
            assert_eq!(got, want, "first entry {first_entry:?}, shards {wanted:?}");
            for (n, jobs) in &read {
                assert!(
                    jobs.iter().all(|job| shard_of(&job.name, TEST_SHARDS) == *n),
                    "first entry {first_entry:?}: filed by shard"
                );
            }
        }
    }
}

/// Stops `agent` with SIGTERM and waits for it to exit.
async fn stop(mut agent: Agent) {
    kill(Pid::from_raw(agent.pid()), Signal::SIGTERM).unwrap();
    eventually(Duration::from_secs(20), "the agent to stop", || async { agent.exited().then_some(()) }).await;
    agent.kill9();
}
