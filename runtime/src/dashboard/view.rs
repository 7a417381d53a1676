//! The dashboard's picture of recent runs, per job: fed by one watch on the runs bucket
//! and held in memory, so that listing, searching and filtering 10,000 jobs never asks
//! NATS. It holds at most `RECENT` runs per job, whatever the number of runs.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio_util::sync::CancellationToken;

use crate::catalog::JobSummary;
use crate::record::{RunRecord, Status, Trigger};
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
    /// When it was queued, while it is.
    queued_since: Option<DateTime<Utc>>,
}

#[derive(Debug, Default)]
struct JobRuns {
    /// Oldest fire first.
    recent: Vec<Brief>,
    /// The latest fire that has a run (scheduled, retried or caught up).
    last_fire: Option<DateTime<Utc>>,
}

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

pub struct RunsView {
    jobs: RwLock<HashMap<String, JobRuns>>,
    /// When the view started: fires before it are not judged late.
    since: DateTime<Utc>,
}

impl RunsView {
    pub fn new(since: DateTime<Utc>) -> Self {
        Self { jobs: RwLock::new(HashMap::new()), since }
    }

    /// Takes in a record as written (a new run or a later state of one).
    pub fn apply(&self, record: &RunRecord) {
        let Ok(mut jobs) = self.jobs.write() else { return };
        let runs = jobs.entry(record.job.clone()).or_default();
        let brief = Brief {
            run_id: record.run_id.clone(),
            scheduled_at: record.scheduled_at,
            status: record.status,
            duration_ms: record.duration_ms,
            queued_since: (record.status == Status::Queued).then_some(record.dispatched_at).flatten(),
        };
        if record.trigger != Trigger::Manual {
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

    /// A record deleted (pruned, or its job removed).
    pub fn remove(&self, job: &str, run_id: &str) {
        let Ok(mut jobs) = self.jobs.write() else { return };
        if let Some(runs) = jobs.get_mut(job) {
            runs.recent.retain(|b| b.run_id != run_id);
            if runs.recent.is_empty() {
                jobs.remove(job);
            }
        }
    }

    pub fn summary(&self, job: &str) -> RunsSummary {
        let Ok(jobs) = self.jobs.read() else { return RunsSummary::default() };
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

    /// Whether `job` is late at `now`: a run queued longer than `LATE_AFTER`, or a fire
    /// since the view started (after the last fire with a run) that has no run
    /// `LATE_AFTER` past it and its jitter. A paused job is never late.
    pub fn is_late(&self, job: &JobSummary, runs: &RunsSummary, now: DateTime<Utc>) -> bool {
        let grace = TimeDelta::from_std(LATE_AFTER + job.jitter).unwrap_or(TimeDelta::MAX);
        if job.paused {
            return false;
        }
        if runs.queued_since.is_some_and(|at| at + grace < now) {
            return true;
        }
        let from = runs.last_fire.map_or(self.since, |fire| fire.max(self.since));
        job.schedule.next_after(from, job.tz).is_some_and(|due| due + grace < now)
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

    async fn watch_once(&self, store: &Store) -> Result<(), crate::Error> {
        let mut watch = store.runs.watch(">").await?;
        while let Some(change) = watch.next().await {
            let change = change?;
            match change.value {
                Some(value) => {
                    if let Ok(record) = RunRecord::from_json(&value) {
                        self.apply(&record);
                    }
                }
                None => {
                    if let Ok((job, run_id)) = crate::record::parse_run_key(&change.key) {
                        self.remove(job, run_id);
                    }
                }
            }
        }
        Ok(())
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
    fn a_summary_counts_the_recent_runs_only() {
        let view = RunsView::new(at("2026-01-01T00:00:00Z"));
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
        for i in 0..30 {
            view.remove("j", &format!("r{i:02}"));
        }
        assert_eq!(view.summary("j"), RunsSummary::default());
    }

    #[test]
    fn late_means_a_fire_without_a_run_or_a_run_left_queued() {
        let view = RunsView::new(at("2026-01-01T00:30:00Z"));
        let job = hourly(false);
        let none = RunsSummary::default();
        let cases = [
            // (now, runs, late)
            ("2026-01-01T00:59:00Z", none.clone(), false),
            ("2026-01-01T01:00:20Z", none.clone(), false),
            ("2026-01-01T01:00:31Z", none.clone(), true),
        ];
        for (now, runs, late) in cases {
            assert_eq!(view.is_late(&job, &runs, at(now)), late, "{now}");
        }
        assert!(!view.is_late(&hourly(true), &none, at("2026-01-01T05:00:00Z")), "paused");

        view.apply(&record("j", "a", "2026-01-01T01:00:00Z", Status::Succeeded, Trigger::Schedule));
        let runs = view.summary("j");
        assert!(!view.is_late(&job, &runs, at("2026-01-01T01:59:00Z")), "the 01:00 fire ran");
        assert!(view.is_late(&job, &runs, at("2026-01-01T02:01:00Z")), "02:00 has no run");
        // A manual run is not the fire.
        view.apply(&record("j", "m", "2026-01-01T02:00:30Z", Status::Succeeded, Trigger::Manual));
        assert!(view.is_late(&job, &view.summary("j"), at("2026-01-01T02:01:00Z")));

        view.apply(&record("j", "b", "2026-01-01T02:00:00Z", Status::Queued, Trigger::Schedule));
        let runs = view.summary("j");
        assert!(!view.is_late(&job, &runs, at("2026-01-01T02:00:20Z")), "queued, not for long");
        assert!(view.is_late(&job, &runs, at("2026-01-01T02:00:40Z")), "queued 40 s");
    }
}
