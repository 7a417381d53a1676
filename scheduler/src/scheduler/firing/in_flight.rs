//! Dispatches in flight: one task per due fire, a job's fires dispatched in fire order.
//!
//! Each dispatch is a task of its own, so it goes on while the leader awaits its own writes
//! (renewing its lease, moving the watermark). Polled only by the leader's loop, they used
//! to stand still meanwhile, some holding async-nats's publish permits (5,000 per
//! connection, handed out in order to waiters whether polled or not): with thousands in
//! flight, the leader's own write could wait for a permit only they would give back, and
//! the whole agent stopped writing.
//!
//! A dispatch refused while NATS fails over is tried again. Each fire used to retry on its
//! own backoff, so the fires of one job due during the outage reached the work queue in
//! whatever order their retries fell: a later fire, due just as NATS came back, ran before
//! the earlier ones still waiting out a backoff. So a fire of a job is dispatched once the
//! job's fire before it is (or was given up): only the first of a job's pending fires
//! retries, and the others follow it in order.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::queue::Due;
use crate::catalog::JobSummary;
use crate::dispatch::{Outcome, publish_dispatched};
use crate::error::Error;
use crate::record::{Trigger, fire_run_id};
use crate::scheduler::membership::shards;
use crate::store::Store;
use crate::trigger::{Catchup, Schedule, Trigger as _};

/// Dispatches not finished yet, and their fire instants (for the watermark).
#[derive(Default)]
pub(super) struct InFlight {
    pub tasks: JoinSet<()>,
    fires: HashMap<tokio::task::Id, Task>,
    instants: BTreeMap<DateTime<Utc>, usize>,
    /// Per job, the latest of its dispatches in flight: the number it was given and what
    /// tells its end. The job's next fire waits for it.
    last: HashMap<Arc<str>, (u64, oneshot::Receiver<()>)>,
    spawned: u64,
}

/// A task in flight: its fire instant, and its job and number when it is a dispatch.
struct Task {
    at: DateTime<Utc>,
    dispatch: Option<(Arc<str>, u64)>,
}

impl InFlight {
    /// Spawns `task`, for a fire at `at` that dispatches nothing (a missed fire's record).
    pub fn spawn(&mut self, at: DateTime<Utc>, task: impl Future<Output = ()> + Send + 'static) {
        let id = self.tasks.spawn(task).id();
        self.track(id, Task { at, dispatch: None });
    }

    /// Spawns `dispatch`, a fire of `job` at `at`, to start once the job's dispatch spawned
    /// before it has ended.
    pub fn spawn_in_order(
        &mut self,
        (job, at): (Arc<str>, DateTime<Utc>),
        dispatch: impl Future<Output = ()> + Send + 'static,
    ) {
        self.spawned += 1;
        let (ended, end) = oneshot::channel::<()>();
        let before = self.last.insert(job.clone(), (self.spawned, end)).map(|(_, end)| end);
        let id = self
            .tasks
            .spawn(async move {
                if let Some(before) = before {
                    // Sent never: dropped when the dispatch before ends, however it ends.
                    let _ = before.await;
                }
                dispatch.await;
                drop(ended);
            })
            .id();
        self.track(id, Task { at, dispatch: Some((job, self.spawned)) });
    }

    fn track(&mut self, id: tokio::task::Id, task: Task) {
        *self.instants.entry(task.at).or_default() += 1;
        self.fires.insert(id, task);
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn earliest(&self) -> Option<DateTime<Utc>> {
        self.instants.keys().next().copied()
    }

    /// Waits for one task to end; false when none is in flight (never resolves in
    /// `select!`'s pattern `true = ...` then).
    pub async fn join_next(&mut self) -> bool {
        let id = match self.tasks.join_next_with_id().await {
            None => return false,
            Some(Ok((id, _))) => id,
            Some(Err(e)) => {
                error!("a dispatch task ended abnormally: {e}");
                e.id()
            }
        };
        let Some(task) = self.fires.remove(&id) else { return true };
        if let Some(n) = self.instants.get_mut(&task.at) {
            *n -= 1;
            if *n == 0 {
                self.instants.remove(&task.at);
            }
        }
        // The job's last dispatch ended: none waits for it.
        if let Some((job, number)) = task.dispatch
            && self.last.get(&job).is_some_and(|(last, _)| *last == number)
        {
            self.last.remove(&job);
        }
        true
    }
}

/// The longest wait between two tries of a refused dispatch: the first of a job's pending
/// fires goes out within this of NATS's return, and the others right after it.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Dispatches one due fire, tried again while NATS refuses it, until `give_up`: its
/// starting deadline (`default_deadline` if it sets none, a minute at most) after it was
/// spawned.
pub(super) async fn fire(store: Store, default_deadline: Duration, due: Due, trigger: Trigger, now: DateTime<Utc>) {
    let Some(summary) = due.summary() else { return };
    let name = &due.job.name;
    let run_id = fire_run_id(due.fire);
    let span = info_span!("fire", job = %name, run = %run_id);
    let deadline = summary.starting_deadline.unwrap_or(default_deadline);
    let give_up = Instant::now() + deadline.min(Duration::from_secs(60));
    async {
        let at = due.fire.checked_add_signed(jitter(name, due.fire, summary.jitter)).unwrap_or(due.fire);
        // The verdicts run `schedule` or `catchup` (see `catchup`).
        let msg = match trigger {
            Trigger::Catchup => Catchup::first(name, run_id.clone(), at, due.job.revision),
            _ => Schedule::first(name, run_id.clone(), at, due.job.revision),
        };
        // A fire on time needs no record before its runner's (see `dispatch`), unless
        // its `late` check is to find it.
        let recorded = trigger != Trigger::Schedule || late_checked(&store, summary);
        let mut backoff = Duration::from_millis(100);
        loop {
            let outcome = match excluded_by(&store, summary, due.fire).await {
                Ok(Some(calendar)) => {
                    return info!(calendar, "fire not run: its date is in a calendar the job excludes");
                }
                Ok(None) if recorded => Schedule::start(&store, &summary.pool, &msg, None, now).await,
                Ok(None) => Schedule::start_unrecorded(&store, &summary.pool, &msg, now).await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(outcome) => {
                    if outcome == Outcome::Dispatched && needs_dispatched_event(&store, summary) {
                        publish_dispatched(&store, &msg, now).await;
                    }
                    return debug!(?outcome, "dispatch");
                }
                Err(e) if Instant::now() + backoff < give_up => {
                    warn!("dispatch failed, retrying in {backoff:?}: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RETRY_MAX);
                }
                Err(e) => return error!("dispatch failed, fire lost: {e}"),
            }
        }
    }
    .instrument(span)
    .await;
}

/// Whether a fire's `dispatched` event goes out though `dispatch` publishes none (no
/// `[events] lifecycle`): the `late` check of the job's notification rules rides on it.
fn needs_dispatched_event(store: &Store, job: &JobSummary) -> bool {
    !store.lifecycle.every_run && late_checked(store, job)
}

/// Whether the notifier checks the job's fires for being `late` (it reads their records).
fn late_checked(store: &Store, job: &JobSummary) -> bool {
    match job.notify() {
        [] => store.lifecycle.late_by_default,
        rules => rules.iter().any(|rule| rule.late.is_some()),
    }
}

/// The calendar of those the job excludes whose days hold `fire`'s local date, read now
/// (through the calendars' cache of a second): a calendar changed counts from the next fire.
async fn excluded_by(store: &Store, job: &JobSummary, fire: DateTime<Utc>) -> Result<Option<String>, Error> {
    if job.exclude().is_empty() {
        return Ok(None);
    }
    let excluded = store.calendars.excluded(job.exclude()).await?;
    Ok(excluded.by(fire, job.tz).map(str::to_string))
}

/// A delay in `[0, max)` fixed by job and fire, so every scheduler picks the same one:
/// FNV-1a of the job name and the fire's Unix milliseconds (little-endian), mixed, modulo
/// `max` in milliseconds. The formula is part of the contract between scheduler versions.
fn jitter(job: &str, fire: DateTime<Utc>, max: Duration) -> TimeDelta {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms == 0 {
        return TimeDelta::zero();
    }
    let h = shards::mix(shards::fnv1a(&[job.as_bytes(), &fire.timestamp_millis().to_le_bytes()]));
    TimeDelta::try_milliseconds(i64::try_from(h % max_ms).unwrap_or(i64::MAX)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_jobs_fires_are_dispatched_in_fire_order_whatever_each_waits() {
        let done = Arc::new(Mutex::new(Vec::new()));
        let mut in_flight = InFlight::default();
        let at = |s| DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap();
        // (job, fire, how long its dispatch takes): the first fire of `a` retries longest.
        let fires: [(&str, i64, u64); 5] = [("a", 0, 3_000), ("b", 0, 10), ("a", 1, 10), ("a", 2, 500), ("b", 1, 0)];
        for (job, second, takes) in fires {
            let done = done.clone();
            let dispatch = async move {
                tokio::time::sleep(Duration::from_millis(takes)).await;
                done.lock().unwrap().push(format!("{job}{second}"));
            };
            in_flight.spawn_in_order((job.into(), at(second)), dispatch);
        }
        assert_eq!(in_flight.earliest(), Some(at(0)));
        while in_flight.join_next().await {}
        // Each job in its fire order; `b` not held up by `a`.
        assert_eq!(*done.lock().unwrap(), ["b0", "b1", "a0", "a1", "a2"]);
        assert!(in_flight.last.is_empty(), "nothing kept of the jobs once their dispatches ended");
        assert_eq!((in_flight.len(), in_flight.earliest()), (0, None));
    }

    #[test]
    fn jitter_is_fixed_by_job_and_fire_and_stays_below_its_maximum() {
        let fire = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let max = Duration::from_secs(60);
        // Pinned: a new Rust release or cronrun version must not move a job's delay.
        assert_eq!(jitter("backup", fire, max), TimeDelta::milliseconds(30_939));
        assert_eq!(jitter("backup", fire, Duration::ZERO), TimeDelta::zero());
        let delays: Vec<TimeDelta> =
            (0..1000).map(|i| jitter(&format!("job-{i}"), fire + TimeDelta::seconds(i), max)).collect();
        assert!(delays.iter().all(|d| *d >= TimeDelta::zero() && *d < TimeDelta::seconds(60)));
        // Spread over the range, not clustered: every 6-second tenth is hit.
        for tenth in 0..10 {
            let (lo, hi) = (TimeDelta::seconds(6 * tenth), TimeDelta::seconds(6 * (tenth + 1)));
            assert!(delays.iter().any(|d| *d >= lo && *d < hi), "no delay in [{lo}, {hi})");
        }
    }
}
