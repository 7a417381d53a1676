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
