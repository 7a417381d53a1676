//! Overlap policies and locks: what happens when a fire comes while a run still runs,
//! and mutual exclusion of jobs sharing a lock across agents.

use std::time::Duration;

use crate::support::*;
use chrono::{DateTime, Utc};
use cronrun::record::{RunRecord, Status};

fn job(name: &str, schedule: &str, command: &str, extra: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\nshell = \"{command}\"\n\
         history = {{ succeeded = 1000, failed = 1000 }}\n{extra}\n\n"
    )
}

/// Runs of `jobs` that started, waiting until `count` of them have finished.
async fn finished_runs(nats: &Nats, jobs: &[&str], count: usize) -> Vec<RunRecord> {
    let store = nats.store().await;
    eventually(Duration::from_secs(40), &format!("{count} finished runs"), || async {
        let mut all = Vec::new();
        for job in jobs {
            all.extend(runs(&store, job).await);
        }
        let done = all.iter().filter(|r| r.started_at.is_some() && r.finished_at.is_some()).count();
        (done >= count).then_some(all)
    })
    .await
}

/// Intervals of runs that started, in start order.
fn intervals(runs: &[RunRecord]) -> Vec<(DateTime<Utc>, DateTime<Utc>, String)> {
    let mut v: Vec<_> = runs.iter().filter_map(|r| Some((r.started_at?, r.finished_at?, r.key()))).collect();
    v.sort();
    v
}

fn assert_never_overlapping(runs: &[RunRecord]) {
    for pair in intervals(runs).windows(2) {
        let ((_, end, a), (start, _, b)) = (&pair[0], &pair[1]);
        assert!(start >= end, "{b} started at {start} while {a} ran until {end}");
    }
}

fn skipped_with<'a>(runs: &'a [RunRecord], reason: &str) -> Vec<&'a RunRecord> {
    runs.iter()
        .filter(|r| r.status == Status::Skipped && r.error.as_deref().is_some_and(|e| e.contains(reason)))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn skip_allow_queue_and_replace() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let file = [
        job("skipper", "* * * * * *", "sleep 2.5", "overlap = \"skip\""),
        job("allower", "* * * * * *", "sleep 2.5", "overlap = \"allow\""),
        job("queuer", "* * * * * *", "sleep 1.5", "overlap = \"queue\""),
        job("replacer", "*/2 * * * * *", "sleep 10", "overlap = \"replace\""),
    ]
    .concat();
    apply(&nats, &file);

    let skipper = finished_runs(&nats, &["skipper"], 3).await;
    assert_never_overlapping(&skipper);
    assert!(
        // Behind the run going at its instant, or (a run started late, on a loaded
        // machine, makes a backlog) behind the backlog's runs for its time in line.
        !skipped_with(&skipper, "still running").is_empty(),
        "no fire was skipped: {:#?}",
        skipper
            .iter()
            .map(|r| (&r.run_id, r.status, r.scheduled_at, r.dispatched_at, r.started_at, r.finished_at, &r.error))
            .collect::<Vec<_>>()
    );

    let allower = finished_runs(&nats, &["allower"], 3).await;
    let iv = intervals(&allower);
    assert!(iv.windows(2).any(|w| w[1].0 < w[0].1), "overlap allow should let runs overlap: {iv:?}");

    let queuer = finished_runs(&nats, &["queuer"], 4).await;
    assert_never_overlapping(&queuer);
    let waited = queuer.iter().filter(|r| {
        let (Some(at), Some(started)) = (r.scheduled_at, r.started_at) else { return false };
        started - at > chrono::Duration::milliseconds(300)
    });
    assert!(waited.count() >= 1, "a queued run should have waited for its predecessor");
    assert!(!skipped_with(&queuer, "another waits (overlap queue)").is_empty(), "at most one may wait");

    let replacer = finished_runs(&nats, &["replacer"], 2).await;
    assert_never_overlapping(&replacer);
    let replaced: Vec<_> = replacer.iter().filter(|r| r.status == Status::Cancelled).collect();
    assert!(!replaced.is_empty(), "runs in progress are stopped by the next fire");
    assert!(replaced[0].error.as_deref().unwrap().contains("killed on request"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_shared_by_two_jobs_on_two_agents_excludes() {
    let nats = Nats::start().await;
    let a = nats.agent("a", "");
    let b = nats.agent("b", "");
    ready(&a).await;
    ready(&b).await;
    // Not left to a race for the lock, which one job may keep winning: left runs at
    // seconds 0, 4, 8, .. for 1.5 s, so right (at odd seconds, 0.3 s) finds the lock
    // held at second 1 and free at second 3, and left finds it free again at 4. Each job
    // is pinned to one agent (the pool named after it), so the lock spans two agents.
    let file = [
        job("left", "0-59/4 * * * * *", "sleep 1.5", "lock = \"shared\"\noverlap = \"allow\"\npool = \"a\""),
        job("right", "1-59/2 * * * * *", "sleep 0.3", "lock = \"shared\"\noverlap = \"allow\"\npool = \"b\""),
    ]
    .concat();
    apply(&nats, &file);
    let all = finished_runs(&nats, &["left", "right"], 6).await;
    assert_never_overlapping(&all);
    let hosts: std::collections::HashSet<_> =
        all.iter().filter(|r| r.started_at.is_some()).filter_map(|r| r.host.clone()).collect();
    let jobs: std::collections::HashSet<_> =
        all.iter().filter(|r| r.started_at.is_some()).map(|r| r.job.clone()).collect();
    println!("lock held in turn by jobs {jobs:?} on hosts {hosts:?}");
    assert_eq!(jobs.len(), 2, "both jobs got the lock at some point");
    assert_eq!(hosts, ["a", "b"].map(String::from).into(), "the lock was held from both agents");
    assert!(!skipped_with(&all, "lock shared is held by run").is_empty());
}

/// Under `skip`, a fire on time behind a backlog's last run (started late, just before
/// this fire's instant) waits for it one period, its time in line. The run ahead ended
/// its code long before, but its runner is slow to write its end and let go (its lease
/// marked ended, as a runner does then). When the time in line is over, the fire finds
/// out whether that run lives while standing in line: its place is never removed until it
/// runs, so the next fire, due as the lease is let go, cannot take the lease first. It
/// runs, once, before the next fire. (A fire that left the line to look lost its turn so,
/// and was recorded skipped behind a run long over.) The run ahead is written here as its
/// runner would have: its record, its run's lease and the job's overlap lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_fire_whose_time_in_line_ends_keeps_its_place_and_runs_before_the_next() {
    use cronrun::names::lease_keys;
    use cronrun::record::{Trigger, fire_run_id};
    use cronrun::store::lease::Lease;
    use futures::StreamExt;
    let nats = Nats::start().await;
    let store = nats.store().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let ms = chrono::Duration::milliseconds;
    // Two fires, `fire` and `next`, two seconds apart in one minute: one period.
    let mut fire = ceil_second(Utc::now()) + chrono::Duration::seconds(6);
    while chrono::Timelike::second(&fire) > 57 {
        fire += chrono::Duration::seconds(1);
    }
    let next = fire + chrono::Duration::seconds(2);
    let at = |t: DateTime<Utc>| format!("{}", t.format("%-S"));
    let dir = nats.dir.path();
    let schedule = format!("{},{} {} {} * * *", at(fire), at(next), fire.format("%-M"), fire.format("%-H"));
    // The run ahead: the fire before, started late (a takeover's backlog), 200 ms before
    // this fire's instant, still running as far as its record and lease say.
    let (job, ahead_id) = ("lag", fire_run_id(fire - chrono::Duration::seconds(2)));
    let ahead = format!("{job}.{ahead_id}");
    let mut record = RunRecord::queued(job, &ahead_id, Trigger::Schedule, fire - chrono::Duration::seconds(2), 1);
    record.status = Status::Running;
    record.host = Some("elsewhere".into());
    (record.dispatched_at, record.started_at) = (Some(fire - ms(300)), Some(fire - ms(200)));
    store.create_run(&record).await.unwrap();
    let ttl = Duration::from_secs(30);
    let take = |key: String| {
        let (leases, ahead) = (store.leases.clone(), ahead.clone());
        async move { Lease::try_acquire(&leases, &key, &ahead, ttl).await.unwrap().expect("free") }
    };
    let run_lease = take(lease_keys::run(job, &ahead_id)).await;
    let mut overlap = take(lease_keys::active(job)).await;
    let places = format!("$KV.{}.{}", store.names.leases_bucket(), lease_keys::waiting(job, "*"));
    let mut line = store.client.subscribe(places).await.unwrap();
    store.client.flush().await.unwrap();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"{job}\"\nschedule = \"{schedule}\"\n\
             shell = 'echo $CRONRUN_SCHEDULED_AT >> {}/{job}.fires'\n",
            dir.display()
        ),
    );
    // Its code ends after this fire's instant was judged, its end slow to be written.
    tokio::time::sleep(((fire + ms(600)) - Utc::now()).to_std().unwrap_or_default()).await;
    overlap.renew_ended(fire + ms(500)).await.unwrap();
    // Let go just after the time in line is over, as the next fire comes.
    tokio::time::sleep(((next + ms(300)) - Utc::now()).to_std().unwrap_or_default()).await;
    let mut ended = store.get_run(job, &ahead_id).await.unwrap();
    (ended.record.status, ended.record.finished_at) = (Status::Succeeded, Some(fire + ms(500)));
    store.update_run_fenced(&ended.record, &mut cronrun::store::kv::Fenced::at(ended.revision)).await.unwrap();
    overlap.release().await.unwrap();
    run_lease.release().await.unwrap();

    let store_ = store.clone();
    let records = eventually(Duration::from_secs(20), "both fires' runs to end", || async {
        let records = runs(&store_, job).await;
        let ours = |at: DateTime<Utc>| records.iter().find(|r| r.scheduled_at == Some(at)).cloned();
        match (ours(fire), ours(next)) {
            (Some(a), Some(b)) if a.status.is_final() && b.status.is_final() => Some((a, b)),
            _ => None,
        }
    })
    .await;
    let (this, after) = records;
    assert_eq!(this.status, Status::Succeeded, "the fire behind the run ahead: {this:?}");
    assert_eq!(after.status, Status::Succeeded, "the next fire: {after:?}");
    assert!(this.started_at < after.started_at, "in fire order: {this:?}\n{after:?}");
    let text = std::fs::read_to_string(dir.join(format!("{job}.fires"))).unwrap_or_default();
    let ran: Vec<DateTime<Utc>> =
        text.lines().filter_map(|l| DateTime::parse_from_rfc3339(l).ok()).map(|t| t.to_utc()).collect();
    assert_eq!(ran, vec![fire, next], "each fire ran once, in fire order, as the job recorded");
    // Its place, written when it began to wait, was removed only once it took the lease.
    let place = lease_keys::waiting(job, &fire_run_id(fire));
    let mut removed = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(200), line.next()).await {
        let op = message.headers.as_ref().and_then(|h| h.get("KV-Operation")).map(|v| v.to_string());
        if message.subject.ends_with(&place) && op.is_some() {
            removed.push(op);
        }
    }
    assert_eq!(removed.len(), 1, "the fire's place was removed {removed:?}, once only when it ran");
}

/// A runner whose link to NATS stalls just as it writes a run's start (ahead of the
/// instant, its job's overlap lease taken: the record says the run started at its
/// instant) starts that run's code late, once the write lands, and it runs past the next
/// fire's instant. That fire, on the other runner, is not skipped behind it: its record
/// is written again with the start its code had, and the fires behind it judge it as a
/// run started late, by its own fire and how long it lasted. Every fire runs once, as the
/// job recorded; the stalled one started late. (Recorded at its planned start, the run
/// was judged to have run from its instant over the next fire's, which was skipped.)
#[tokio::test(flavor = "multi_thread")]
async fn a_start_recorded_late_by_a_stalled_link_skips_no_fire_behind_it() {
    use futures::StreamExt;
    let nats = Nats::start().await;
    let store = nats.store().await;
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    // Two runners, each behind a proxy: the one that claims the fire is stalled. Their
    // runs' leases live 9 s: a 2 s stall loses none.
    let proxies = [Proxy::start(&nats.url).await, Proxy::start(&nats.url).await];
    let runners: Vec<Agent> = ["r1", "r2"]
        .iter()
        .zip(&proxies)
        .map(|(name, proxy)| {
            let config = test_config(name).replace("heartbeat = \"1s\"", "heartbeat = \"3s\"");
            nats.agent_via(&proxy.url, name, &format!("roles = [\"runner\"]\n{config}"), &[])
        })
        .collect();
    ready(&scheduler).await;
    for runner in &runners {
        ready(runner).await;
    }
    let runs = nats.dir.path().join("j.runs");
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"j\"\nschedule = \"*/2 * * * * *\"\n\
             shell = 'echo \"$CRONRUN_SCHEDULED_AT $(date +%s%N)\" >> {}; sleep 0.4'\n",
            runs.display()
        ),
    );
    // (fire, when its code ran) as the job recorded them.
    let recorded = || -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let text = std::fs::read_to_string(&runs).unwrap_or_default();
        let parse = |line: &str| {
            let (fire, nanos) = line.split_once(' ')?;
            let fire = DateTime::parse_from_rfc3339(fire).ok()?.to_utc();
            Some((fire, DateTime::from_timestamp_nanos(nanos.trim().parse().ok()?)))
        };
        text.lines().filter_map(parse).collect()
    };
    eventually(Duration::from_secs(15), "the job to run", || async { (!recorded().is_empty()).then_some(()) }).await;
    // Held from the write of the start of `stalled`'s run to 200 ms before the next fire
    // (two seconds later), so that the run goes when that fire comes.
    let second = chrono::Duration::seconds;
    let mut stalled = ceil_second(Utc::now()) + second(2);
    if chrono::Timelike::second(&stalled) % 2 == 1 {
        stalled += second(1);
    }
    let subject = format!("$KV.{}.j.{}", store.names.runs_bucket(), cronrun::record::fire_run_id(stalled));
    let mut revisions = store.client.subscribe(subject.clone()).await.unwrap();
    store.client.flush().await.unwrap();
    let start = format!("PUB {subject} ");
    for proxy in &proxies {
        proxy.hold_sends_from(&start);
    }
    let proxy = eventually(Duration::from_secs(5), "the run's start write to be held", || async {
        proxies.iter().find(|p| p.holding())
    })
    .await;
    let next = stalled + second(2) - chrono::Duration::milliseconds(200);
    tokio::time::sleep((next - Utc::now()).to_std().unwrap_or_default()).await;
    proxy.hold_sends(false);

    let (from, to) = (stalled - second(2), stalled + second(8));
    eventually(Duration::from_secs(30), "the job to run past the window", || async {
        recorded().iter().any(|(fire, _)| *fire >= to).then_some(())
    })
    .await;
    let ran = recorded();
    let late = ran.iter().find(|(fire, _)| *fire == stalled).map(|(fire, at)| *at - *fire);
    assert!(
        late.is_some_and(|late| late > chrono::Duration::milliseconds(1500)),
        "the stalled fire's code ran {late:?} after it"
    );
    // While it ran, its record said when its code started, not its instant.
    let mut running = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(500), revisions.next()).await {
        // (A removal, should the record be pruned, has no payload.)
        match RunRecord::from_json(&message.payload) {
            Ok(record) if record.status == Status::Running => running.push(record.started_at),
            _ => {}
        }
    }
    let last = running.last().copied().flatten();
    assert!(
        last.is_some_and(|at| at - stalled > chrono::Duration::milliseconds(1500)),
        "the stalled run's record said it was running from {running:?}"
    );
    let wrong: Vec<(DateTime<Utc>, usize)> = (0..5)
        .map(|n| from + second(2 * n))
        .map(|at| (at, ran.iter().filter(|(fire, _)| *fire == at).count()))
        .filter(|(_, n)| *n != 1)
        .collect();
    let mut why = String::new();
    for (fire, _) in &wrong {
        let record = store.get_run("j", &cronrun::record::fire_run_id(*fire)).await.map(|s| s.record);
        why.push_str(&format!("{fire}: {record:?}\n"));
    }
    assert!(wrong.is_empty(), "fires not run once (fire, times): {wrong:?}; ran {ran:?}\n{why}");
}
