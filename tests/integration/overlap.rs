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
