//! The dashboard's picture of recent runs, per job: fed by one watch on the runs bucket
//! and held in memory, so that listing, searching and filtering 10,000 jobs never asks
//! NATS. It holds at most `RECENT` runs per job, whatever the number of runs.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio_util::sync::CancellationToken;

use crate::catalog::JobSummary;
use crate::record::{RunRecord, Status, Trigger};
use crate::store::Excluded;
use crate::store::Store;

/// Runs kept per job: the last status, the success rate and the durations sparkline.
pub const RECENT: usize = 20;

/// How long past its fire (and jitter) a job may go without a run, or a run may stay
/// queued, before the dashboard calls the job late.
pub const LATE_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
struct Brief {
    run_id: String,
    scheduled_at: Option<DateTime<Utc>>,
    status: Status,
    duration_ms: Option<u64>,
    /// When it was queued, while it is (a retry waits out its backoff: not counted).
    queued_since: Option<DateTime<Utc>>,
}

#[derive(Debug, Default)]
struct JobRuns {
    /// Oldest fire first.
    recent: Vec<Brief>,
    /// The latest fire that has had a run (scheduled, retried or caught up), kept when
    /// the record is pruned.
    last_fire: Option<DateTime<Utc>>,
}

type Jobs = HashMap<String, JobRuns>;

/// What the jobs table shows of a job's runs.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RunsSummary {
    /// Of the latest run that left the queue (the latest run if none has).
    pub last_status: Option<Status>,
    pub last_run: Option<String>,
    /// Succeeded among the recent runs that ended (skipped ones aside); None before any.
    pub success_rate: Option<f64>,
    pub durations_ms: Vec<u64>,
    pub last_fire: Option<DateTime<Utc>>,
    pub queued_since: Option<DateTime<Utc>>,
}

impl RunsSummary {
    /// The last run that ended failed, timed out or was lost.
    pub fn failing(&self) -> bool {
        matches!(self.last_status, Some(Status::Failed | Status::TimedOut | Status::Lost))
    }
}

#[derive(Default)]
pub struct RunsView {
    jobs: RwLock<Jobs>,
    /// Each job's revision and when the view first saw it at that revision.
    revisions: RwLock<HashMap<String, (u64, DateTime<Utc>)>>,
}

impl RunsView {
    /// Takes in a record as written (a new run or a later state of one).
    pub fn apply(&self, record: &RunRecord) {
        let mut jobs = self.jobs.write().unwrap_or_else(PoisonError::into_inner);
        apply(&mut jobs, record);
    }

    /// A record deleted (pruned, or its job removed).
    pub fn remove(&self, job: &str, run_id: &str) {
        if let Some(runs) = self.jobs.write().unwrap_or_else(PoisonError::into_inner).get_mut(job) {
            runs.recent.retain(|b| b.run_id != run_id);
        }
    }

    pub fn summary(&self, job: &str) -> RunsSummary {
        let jobs = self.jobs.read().unwrap_or_else(PoisonError::into_inner);
        let Some(runs) = jobs.get(job) else { return RunsSummary::default() };
        let ended: Vec<&Brief> =
            runs.recent.iter().filter(|b| b.status.is_final() && b.status != Status::Skipped).collect();
        let succeeded = ended.iter().filter(|b| b.status == Status::Succeeded).count();
        // A run queued ahead of its fire is not news; one left queued shows as late.
        let last = runs.recent.iter().rev().find(|b| b.status != Status::Queued).or(runs.recent.last());
        RunsSummary {
            last_status: last.map(|b| b.status),
            last_run: last.map(|b| crate::record::run_key(job, &b.run_id)),
            success_rate: (!ended.is_empty()).then(|| succeeded as f64 / ended.len() as f64),
            durations_ms: runs.recent.iter().filter_map(|b| b.duration_ms).collect(),
            last_fire: runs.last_fire,
            queued_since: runs.recent.iter().filter_map(|b| b.queued_since).min(),
        }
    }

    /// Notes the revision of every job in `catalog`, stamping those it has not seen at
    /// that revision with `now`, and forgets removed jobs. Called every few seconds: a new,
    /// changed or resumed job is scheduled from its change on, so earlier fires are not
    /// its to miss.
    pub fn note_revisions(&self, catalog: &crate::catalog::AllJobs, now: DateTime<Utc>) {
        let jobs = catalog.snapshot();
        let mut seen = self.revisions.write().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|name, _| catalog.get(name).is_some());
        for job in jobs {
            let known = seen.get(&*job.name).is_some_and(|(revision, _)| *revision == job.revision);
            if !known {
                seen.insert(job.name.to_string(), (job.revision, now));
            }
        }
    }

    /// Since when the view has known `name` at its current revision (None: not yet).
    pub fn revised_at(&self, name: &str) -> Option<DateTime<Utc>> {
        self.revisions.read().unwrap_or_else(PoisonError::into_inner).get(name).map(|(_, at)| *at)
    }

    /// Whether `job` is late at `now`: a run (not a retry in its backoff) queued longer
    /// than `LATE_AFTER`, or a fire after the later of `revised` (since when the view has
    /// known the job as it is) and its last fire with a run, that has no run `LATE_AFTER`
    /// (and its jitter) past it. A paused job is never late.
    /// Fires on the days of the calendars it excludes (`excluded`) are no fires.
    pub fn is_late(
        job: &JobSummary,
        runs: &RunsSummary,
        (revised, now): (DateTime<Utc>, DateTime<Utc>),
        excluded: &Excluded,
    ) -> bool {
        let grace = TimeDelta::from_std(LATE_AFTER + job.jitter).unwrap_or(TimeDelta::MAX);
        if job.paused {
            return false;
        }
        if runs.queued_since.is_some_and(|at| at + grace < now) {
            return true;
        }
        let from = runs.last_fire.map_or(revised, |fire| fire.max(revised));
        excluded.next_after(&job.schedule, from, job.tz).is_some_and(|due| due + grace < now)
    }

    /// Follows the runs bucket until `cancel`, watching again after a lost watch.
    pub async fn follow(&self, store: &Store, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                ended = self.watch_once(store) => {
                    if let Err(e) = ended {
                        tracing::debug!("the dashboard's watch on runs ended: {e}");
                    }
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// One watch: the records as they are now go into a fresh map, which replaces the
    /// view's once caught up (so nothing pruned while no watch ran stays); then changes
    /// apply to the view.
    async fn watch_once(&self, store: &Store) -> Result<(), crate::Error> {
        let mut watch = store.runs.watch(">").await?;
        let mut fresh = (!watch.initially_empty).then(Jobs::new);
        if fresh.is_none() {
            self.replace(Jobs::new());
        }
        while let Some(change) = watch.next().await {
            let change = change?;
            let record = change.value.as_deref().and_then(|v| RunRecord::from_json(v).ok());
            match (&mut fresh, record) {
                (Some(jobs), Some(record)) => apply(jobs, &record),
                (Some(_), None) => {}
                (None, Some(record)) => self.apply(&record),
                (None, None) => {
                    if let Ok((job, run_id)) = crate::record::parse_run_key(&change.key) {
                        self.remove(job, run_id);
                    }
                }
            }
            if change.caught_up
                && let Some(jobs) = fresh.take()
            {
                self.replace(jobs);
            }
        }
        Ok(())
    }

    /// Swaps in a rebuilt map, keeping the last fires it does not know (pruned records').
    fn replace(&self, mut fresh: Jobs) {
        let mut jobs = self.jobs.write().unwrap_or_else(PoisonError::into_inner);
        for (name, old) in jobs.drain() {
            let runs = fresh.entry(name).or_default();
            runs.last_fire = runs.last_fire.max(old.last_fire);
        }
        *jobs = fresh;
    }
}

fn apply(jobs: &mut Jobs, record: &RunRecord) {
    let runs = jobs.entry(record.job.clone()).or_default();
    let queued = record.status == Status::Queued && record.trigger != Trigger::Retry;
    let brief = Brief {
        run_id: record.run_id.clone(),
        scheduled_at: record.scheduled_at,
        status: record.status,
        duration_ms: record.duration_ms,
        queued_since: queued.then_some(record.dispatched_at).flatten(),
    };
    // Fires only, their retries included: a retry keeps its run's id, which for a fire is
    // its instant, where manual, chained and message runs add a `-` suffix.
    let fire = match record.trigger {
        Trigger::Schedule | Trigger::Catchup => true,
        Trigger::Retry => !record.run_id.contains('-'),
        Trigger::Manual | Trigger::Chain | Trigger::Message | Trigger::Backfill => false,
    };
    if fire {
        runs.last_fire = runs.last_fire.max(record.scheduled_at);
    }
    match runs.recent.iter_mut().find(|b| b.run_id == brief.run_id) {
        Some(known) => *known = brief,
        None => {
            runs.recent.push(brief);
            runs.recent.sort_by(|a, b| (a.scheduled_at, &a.run_id).cmp(&(b.scheduled_at, &b.run_id)));
            let over = runs.recent.len().saturating_sub(RECENT);
            runs.recent.drain(..over);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{JobSpec, ShellSpec};

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn record(job: &str, run_id: &str, fire: &str, status: Status, trigger: Trigger) -> RunRecord {
        let mut r = RunRecord::queued(job, run_id, trigger, at(fire), 1);
        r.status = status;
        r.dispatched_at = Some(at(fire));
        r.duration_ms = status.is_final().then_some(1000);
        r
    }

    fn hourly(paused: bool) -> JobSummary {
        let shell = ShellSpec { command: Some("true".into()), ..Default::default() };
        let mut spec = JobSpec::shell("j", "0 * * * *", shell);
        spec.paused = paused;
        JobSummary::of(&spec).unwrap()
    }

    #[test]
    fn a_view_whose_follower_panicked_holding_it_goes_on_being_updated() {
        let view = RunsView::default();
        view.apply(&record("j", "r1", "2026-01-01T00:00:00Z", Status::Succeeded, Trigger::Schedule));
        std::thread::scope(|s| {
            let panicked = s.spawn(|| {
                let _held = view.jobs.write().unwrap();
                panic!("a bug meeting a record");
            });
            assert!(panicked.join().is_err());
        });
        assert!(view.jobs.is_poisoned());
        view.apply(&record("j", "r2", "2026-01-01T00:01:00Z", Status::Failed, Trigger::Schedule));
        assert_eq!(view.summary("j").last_status, Some(Status::Failed), "the follower started again is heard");
    }

    #[test]
    fn a_summary_counts_the_recent_runs_only() {
        let view = RunsView::default();
        for i in 0..30 {
            let fire = format!("2026-01-01T{:02}:{:02}:00Z", i / 60, i % 60);
            let status = if i % 2 == 0 { Status::Succeeded } else { Status::Failed };
            view.apply(&record("j", &format!("r{i:02}"), &fire, status, Trigger::Schedule));
        }
        let s = view.summary("j");
        assert_eq!(s.durations_ms.len(), RECENT);
        assert_eq!(s.success_rate, Some(0.5));
        assert_eq!((s.last_status, s.last_run.as_deref()), (Some(Status::Failed), Some("j.r29")));
        assert!(s.failing());
        // A later state of a run replaces it.
        view.apply(&record("j", "r29", "2026-01-01T00:29:00Z", Status::Succeeded, Trigger::Schedule));
        assert_eq!(view.summary("j").success_rate, Some(11.0 / 20.0));
        assert!(!view.summary("j").failing());
        // Pruned records leave the summary; the last fire they had stays.
        for i in 0..30 {
            view.remove("j", &format!("r{i:02}"));
        }
        let pruned = view.summary("j");
        assert_eq!((pruned.last_status, pruned.success_rate, pruned.durations_ms.len()), (None, None, 0));
        assert_eq!(pruned.last_fire, Some(at("2026-01-01T00:29:00Z")));
    }

    #[test]
    fn a_run_queued_ahead_of_its_fire_does_not_hide_the_last_status() {
        let view = RunsView::default();
        view.apply(&record("j", "a", "2026-01-01T01:00:00Z", Status::Failed, Trigger::Schedule));
        view.apply(&record("j", "b", "2026-01-01T02:00:00Z", Status::Queued, Trigger::Schedule));
        assert_eq!(view.summary("j").last_status, Some(Status::Failed));
    }

    #[test]
    fn a_fire_on_a_day_the_job_excludes_is_never_late() {
        let (job, none, revised) = (hourly(false), RunsSummary::default(), at("2026-01-01T00:30:00Z"));
        let calendar = crate::spec::calendar::Calendar::parse("holidays", "2026-01-01", "t").unwrap();
        let holidays = Excluded::of(vec![calendar]);
        assert!(RunsView::is_late(&job, &none, (revised, at("2026-01-01T02:01:00Z")), &Excluded::default()));
        assert!(!RunsView::is_late(&job, &none, (revised, at("2026-01-01T23:59:00Z")), &holidays), "all day excluded");
        assert!(
            RunsView::is_late(&job, &none, (revised, at("2026-01-02T00:01:00Z")), &holidays),
            "the next day's fire"
        );
    }

    #[test]
    fn late_means_a_fire_without_a_run_or_a_run_left_queued() {
        let job = hourly(false);
        let none = RunsSummary::default();
        let revised = at("2026-01-01T00:30:00Z");
        // (now, late)
        let cases = [("2026-01-01T00:59:00Z", false), ("2026-01-01T01:00:20Z", false), ("2026-01-01T01:00:31Z", true)];
        for (now, late) in cases {
            assert_eq!(RunsView::is_late(&job, &none, (revised, at(now)), &Excluded::default()), late, "{now}");
        }
        assert!(
            !RunsView::is_late(&hourly(true), &none, (revised, at("2026-01-01T05:00:00Z")), &Excluded::default()),
            "paused"
        );
        // Added (or changed, or resumed) at 11:30: the 11:00 fire was not its to miss.
        assert!(!RunsView::is_late(
            &job,
            &none,
            (at("2026-01-01T11:30:00Z"), at("2026-01-01T11:40:00Z")),
            &Excluded::default()
        ));

        let view = RunsView::default();
        view.apply(&record("j", "a", "2026-01-01T01:00:00Z", Status::Succeeded, Trigger::Schedule));
        let runs = view.summary("j");
        assert!(
            !RunsView::is_late(&job, &runs, (revised, at("2026-01-01T01:59:00Z")), &Excluded::default()),
            "the 01:00 fire ran"
        );
        assert!(
            RunsView::is_late(&job, &runs, (revised, at("2026-01-01T02:01:00Z")), &Excluded::default()),
            "02:00 has no run"
        );
        // A manual, chained, message or backfilled run is not the fire, nor is its retry.
        for (run, trigger) in [
            ("m", Trigger::Manual),
            ("c", Trigger::Chain),
            ("s", Trigger::Message),
            ("20260101T020000Z-b", Trigger::Backfill),
            ("x-m1234", Trigger::Retry),
        ] {
            view.apply(&record("j", run, "2026-01-01T02:00:30Z", Status::Succeeded, trigger));
        }
        assert!(RunsView::is_late(
            &job,
            &view.summary("j"),
            (revised, at("2026-01-01T02:01:00Z")),
            &Excluded::default()
        ));
        // Its record pruned (history 0), the fire that ran is still known.
        view.remove("j", "a");
        assert!(!RunsView::is_late(
            &job,
            &view.summary("j"),
            (revised, at("2026-01-01T01:59:00Z")),
            &Excluded::default()
        ));

        view.apply(&record("j", "b", "2026-01-01T02:00:00Z", Status::Queued, Trigger::Schedule));
        let runs = view.summary("j");
        assert!(
            !RunsView::is_late(&job, &runs, (revised, at("2026-01-01T02:00:20Z")), &Excluded::default()),
            "queued, not for long"
        );
        assert!(
            RunsView::is_late(&job, &runs, (revised, at("2026-01-01T02:00:40Z")), &Excluded::default()),
            "queued 40 s"
        );
        // A retry waits out its backoff queued: not late for that.
        view.apply(&record("j", "b", "2026-01-01T02:00:00Z", Status::Queued, Trigger::Retry));
        assert!(!RunsView::is_late(
            &job,
            &view.summary("j"),
            (revised, at("2026-01-01T02:05:00Z")),
            &Excluded::default()
        ));
    }
}
