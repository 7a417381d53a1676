//! Chaos: a NATS node dies under load on a 3-node cluster (R3 buckets and streams), a
//! runner is stopped past its run's lease and woken, a single nats-server restarts under
//! running jobs, and ten agents start at once on an empty server. cronrun keeps running
//! every fire exactly once throughout. Select with `cargo test -p cronrun --test chaos`.
//!
//! - `nats.rs`: a cluster node dies under load; a single server restarts (also in the
//!   middle of a message run and a chain); a stop while it is gone.
//! - `snapshots.rs`: the schedules index's snapshots while nats-server is killed (as a
//!   pass writes them, in the middle of a leader's rewrite) or gone at a leader's stop.
//! - `schedulers.rs`: the shard owner is killed twenty times; ten agents start at once.
//! - `runners.rs`: a runner stopped past its lease; a runner killed with runs prepared.
//! - `soak.rs`: many runs and restarts; state in NATS and the agent stay flat.
//! - `clock.rs`: an agent's wall clock stepped back and forward (libfaketime).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

#[path = "../support/mod.rs"]
mod support;

#[path = "../procs.rs"]
mod procs;

mod clock;
mod nats;
mod runners;
mod schedulers;
mod snapshots;
mod soak;

use procs::{group_members, pgrp_of};

use std::collections::{BTreeMap, HashMap};
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

/// The run's record; None while NATS cannot be asked (it is restarting).
async fn record(store: &cronrun::store::Store, key: &str) -> Option<RunRecord> {
    let (job, run) = cronrun::record::parse_run_key(key).unwrap();
    store.get_run(job, run).await.ok().map(|r| r.record)
}

/// The run's record, None if it has none: a read that fails (NATS electing a leader) is
/// tried again for up to 20 s, not taken for an absent record.
async fn stored_record(store: &cronrun::store::Store, key: &str) -> Option<RunRecord> {
    let (job, run) = cronrun::record::parse_run_key(key).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match store.get_run(job, run).await {
            Ok(run) => return Some(run.record),
            Err(e) if *e.kind() == cronrun::ErrorKind::NotFound => return None,
            Err(e) if Instant::now() > deadline => panic!("reading {key}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The first line of `path` as a number, once the job has written it.
fn read_pid(path: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.lines().next()?.trim().parse().ok()
}

/// When an event (JSON with `at`) happened.
fn event_at(event: &serde_json::Value) -> chrono::DateTime<Utc> {
    chrono::DateTime::parse_from_rfc3339(event["at"].as_str().unwrap()).unwrap().to_utc()
}

/// The fires of `[from, from + secs)` that a job of `names` (see `recording_job`) ran after
/// a later fire of the window, as (job, fire, the later fire that ran before it), by the
/// order of the lines of the job's own file: its runs cannot overlap (`overlap = "skip"`),
/// so each line is written before the next run starts.
fn fires_out_of_order(
    names: &[String],
    dir: &std::path::Path,
    from: chrono::DateTime<Utc>,
    secs: i64,
) -> Vec<(String, chrono::DateTime<Utc>, chrono::DateTime<Utc>)> {
    let to = from + chrono::Duration::seconds(secs);
    let mut wrong = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.fires"))).unwrap_or_default();
        let fires = text.lines().filter_map(|l| chrono::DateTime::parse_from_rfc3339(l).ok()).map(|t| t.to_utc());
        let mut latest: Option<chrono::DateTime<Utc>> = None;
        for fire in fires.filter(|f| *f >= from && *f < to) {
            match latest {
                Some(later) if later > fire => wrong.push((name.clone(), fire, later)),
                _ => latest = Some(fire),
            }
        }
    }
    wrong
}

/// Asserts that the fires of `[from, from + secs)` of the jobs of `names` that waited for
/// one another's overlap lease started in fire order: no fire started while an earlier
/// fire of its job was waiting at its guards on the runner that ran it (as the agents'
/// logs in `dir` say). The failure names the fires that came out of order; `what` says
/// what befell them. A fire that reached its guards only after a later one started is
/// not held to it: dispatched after it (the scheduler's retries while NATS failed over
/// are not in fire order), or handed on from a runner that died or lost it (dispatched
/// again once the run's lease ran out, or redelivered after the ack wait). Those are
/// returned, to be shown.
async fn assert_waiting_fires_in_order(
    what: &str,
    store: &cronrun::store::Store,
    (names, dir): (&[String], &std::path::Path),
    from: chrono::DateTime<Utc>,
    secs: i64,
) -> Vec<String> {
    let waiting = waiting_since(dir);
    let (mut wrong, mut late, mut first_wrong) = (Vec::new(), Vec::new(), None);
    for (name, fire, later) in fires_out_of_order(names, dir, from, secs) {
        let later_id = cronrun::record::fire_run_id(later);
        let later_started =
            runs(store, name.as_str()).await.into_iter().find(|r| r.run_id == later_id).and_then(|r| r.started_at);
        let since = waiting.get(&(name.clone(), cronrun::record::fire_run_id(fire))).copied();
        match (since, later_started) {
            // Standing in line half a second before the later fire started: a place written
            // in the same instant as the later fire's look may not be seen yet.
            (Some(since), Some(started)) if since + chrono::Duration::milliseconds(500) < started => {
                first_wrong.get_or_insert((name.clone(), fire));
                wrong.push(format!("{name}: {fire}, waiting since {since}, ran after {later}, started {started}"));
            }
            _ => late.push(format!("{name} {fire} (after {later})")),
        }
    }
    let evidence = first_wrong.map(|(name, fire)| job_log_around(dir, &name, fire)).unwrap_or_default();
    assert!(
        wrong.is_empty(),
        "{what}: fires that ran after a later fire of the same job:\n{}\nthe first one's job in the agents' logs:\n{evidence}",
        wrong.join("\n")
    );
    late
}

/// Since when each run (job, run id) stood in line for its job's overlap lease (`runner::guards`)
/// where it ran, from the agents' logs in `dir`: its first such line on the agent that ran
/// it since that agent last handed it back (NATS trouble: it came back to its guards later).
fn waiting_since(dir: &std::path::Path) -> HashMap<(String, String), chrono::DateTime<Utc>> {
    let mut waiting = HashMap::new();
    for path in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let mut here: HashMap<(String, String), chrono::DateTime<Utc>> = HashMap::new();
        for line in log.lines() {
            let Some((at, run, said)) = run_line(line) else { continue };
            // In line once its place is written: NATS away, a run waits without one (its
            // fires behind cannot see it) until it is written, and says so.
            let in_line = (said.starts_with("cronrun_runner::runner::guards: waiting")
                && said.contains("in_line=true"))
                || said.starts_with(
                    "cronrun_runner::runner::waiting: standing in line for the job's overlap lease at last",
                );
            if in_line {
                here.entry(run).or_insert(at);
            } else if said.contains("handing it back") || said.contains("handing the run back") {
                here.remove(&run);
            } else if said.starts_with("cronrun_runner::runner::finish: run finished")
                && let Some(since) = here.remove(&run)
            {
                waiting.insert(run, since);
            }
        }
    }
    waiting
}

/// What the agents' logs in `dir` say of job `job`'s runs from four seconds before `at` to
/// four seconds after, each line led by its agent's name: a failure shows its evidence
/// (CI keeps no agent's log).
fn job_log_around(dir: &std::path::Path, job: &str, at: chrono::DateTime<Utc>) -> String {
    let near = |t: chrono::DateTime<Utc>| (t - at).num_milliseconds().abs() <= 4_000;
    let mut lines = Vec::new();
    for path in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "log") {
            continue;
        }
        let agent = path.file_stem().unwrap_or_default().to_string_lossy().to_string();
        for line in std::fs::read_to_string(&path).unwrap_or_default().lines() {
            if let Some((t, (name, _), _)) = run_line(line)
                && name == job
                && near(t)
            {
                lines.push((t, format!("{agent}: {line}")));
            }
        }
    }
    lines.sort();
    lines.into_iter().map(|(_, line)| line).collect::<Vec<_>>().join("\n")
}

/// A log line of a run: when, which run (job, run id), and what it says after the span.
fn run_line(line: &str) -> Option<(chrono::DateTime<Utc>, (String, String), &str)> {
    let at = chrono::DateTime::parse_from_rfc3339(line.split_whitespace().next()?).ok()?.to_utc();
    let (span, said) = line.split_once("run{")?.1.split_once("}: ")?;
    let field = |name: &str| span.split(' ').find_map(|f| f.strip_prefix(name)).map(str::to_string);
    Some((at, (field("job=")?, field("run=")?), said))
}
