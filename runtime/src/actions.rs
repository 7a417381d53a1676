//! What an admin does to jobs and runs: pause, resume, trigger, kill. One implementation
//! for the CLI and the dashboard, so both write the same records and audit events.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::clock::SharedClock;
use crate::error::{Error, ErrorKind};
use crate::events::{Event, EventKind, publish_event};
use crate::record::{Status, manual_run_id, run_key};
use crate::store::Store;
use crate::trigger::{Manual, Trigger as _};

/// How long a kill waits for the runner holding the run to answer.
const KILL_ANSWER: Duration = Duration::from_secs(5);

/// Publishes the audit event of an admin's write to `job` (`by` is the store's actor),
/// stamped by `clock`.
pub async fn audit(store: &Store, clock: &SharedClock, job: &str, kind: EventKind, detail: String) {
    let event = Event::new(job, "", kind, 0, clock.now()).with_detail(detail);
    publish_event(store, &event).await;
}

/// Sets the job's `paused` flag (part of the spec, so it survives restarts and every
/// scheduler sees it). True when it changed.
pub async fn set_paused(store: &Store, clock: &SharedClock, name: &str, paused: bool) -> Result<bool, Error> {
    let (revision, changed) = store.modify_job(name, |spec| spec.paused = paused).await?;
    if changed {
        let detail = format!("{}, revision {revision}", if paused { "paused" } else { "resumed" });
        audit(store, clock, name, EventKind::Changed, detail).await;
    }
    Ok(changed)
}

/// A manual run of `name` now, given `input` (checked against the job's schema), through
/// the same dispatch as a scheduled run (see `trigger`), `now` by `clock`. Returns the
/// run's key and the job's pool.
pub async fn trigger(
    store: &Store,
    clock: &SharedClock,
    name: &str,
    input: Option<serde_json::Value>,
) -> Result<(String, String), Error> {
    if let Some(input) = &input {
        crate::input::fits(input, store.record_budget)?;
    }
    let job = store.get_job(name).await?;
    let spec = job.spec?;
    crate::input::check(&spec, input.as_ref())?;
    let now = clock.now();
    let msg = Manual::first(&spec.name, manual_run_id(now), now, job.revision);
    Manual::start(store, &spec.pool, &msg, input, now).await?;
    Ok((run_key(&msg.job, &msg.run_id), spec.pool))
}

/// Asks the runner holding a running run to signal its process group (the request's
/// event stamped by `clock`). Returns that runner's host.
pub async fn kill(
    store: &Store,
    clock: &SharedClock,
    job: &str,
    run_id: &str,
    signal: Signal,
) -> Result<String, Error> {
    let key = run_key(job, run_id);
    let run = store.get_run(job, run_id).await?.record;
    if run.status != Status::Running {
        return Err(Error::conflict(format!(
            "run {key} is not running (status {}); nothing to kill",
            run.status.as_str()
        )));
    }
    let host = run.host.unwrap_or_default();
    let event = Event::new(job, run_id, EventKind::KillRequested, run.attempt, clock.now())
        .with_detail(format!("{} on {host}", signal.as_str()));
    publish_event(store, &event).await;
    let subject = store.names.kill_subject(job, run_id);
    match store.ask_control(subject, signal.as_str().to_string().into(), KILL_ANSWER).await {
        Ok(Some(_)) => Ok(host),
        _ => Err(Error::new(
            ErrorKind::Other,
            format!("no runner answered for run {key} (host {host}): it may have just ended, or its runner is down"),
        )),
    }
}
