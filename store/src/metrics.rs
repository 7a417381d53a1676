//! Prometheus metrics of an agent, rendered at `/metrics` (see `http`). Names follow
//! Prometheus conventions: base units, `_total` counters, histograms with explicit buckets,
//! and no run ids as labels (a label per run would grow without bound).
//!
//! Who owns which series, so that a sum over agents is right:
//! - run series (`cronrun_runs_total`, `cronrun_run_duration_seconds`,
//!   `cronrun_fire_lateness_seconds`, `cronrun_runs_running`, `cronrun_runs_skipped_total`
//!   for overlap, lock and pause) come from the runner that held the run;
//! - `cronrun_fires_missed_total`, `cronrun_job_next_fire_timestamp_seconds` and
//!   `cronrun_shards_led` from the scheduler leading the job's shard (a shard that moves
//!   takes its jobs' next-fire series along);
//! - `cronrun_job_last_success_timestamp_seconds` from the runner that ran the success:
//!   aggregate it with `max`, not `sum`;
//! - `cronrun_runner_slots`, `cronrun_nats_connected` and `cronrun_build_info` describe
//!   the agent itself;
//! - `cronrun_stream_use_ratio{stream}` describes the deployment's streams as this agent
//!   last read them (every agent reports the same streams: aggregate with `max`).
//!
//! The recorder is process-wide (the `metrics` facade): an agent is one process.
//! A job's series leave `/metrics` with the job (`without_removed_jobs`, at each scrape:
//! the facade cannot remove a series, so the recorder keeps a removed job's few series in
//! memory until the agent restarts; a job created again under the same name shows its
//! counters where they stopped, which Prometheus counters allow). At most
//! `[http] metrics_jobs` jobs have series of their own (`JobSeries`): a deployment of tens
//! of thousands of jobs does not make every scrape tens of megabytes.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::record::Status;

/// Run durations: a second-scale cron job to an hours-long batch.
const DURATION_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0];
/// Fire to start: milliseconds when all is well, seconds when something waits.
const LATENESS_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

/// The process's recorder, installed on first use (the agent's start: what is recorded
/// before goes nowhere); None if another recorder was installed.
pub fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full("cronrun_run_duration_seconds".into()), DURATION_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full("cronrun_fire_lateness_seconds".into()), LATENESS_BUCKETS)
                })
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            metrics::gauge!("cronrun_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            Some(handle)
        })
        .as_ref()
}

/// How often the histograms' samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Folds the histograms' samples into their buckets every `UPKEEP_EVERY`, until `cancel`.
/// The exporter keeps every sample recorded until a scrape or an upkeep folds it: without
/// this, an agent nobody scrapes grows by two samples a run (lateness and duration, about
/// 16 bytes) for as long as it lives: at 1,000 runs a second, over a GiB a day.
pub async fn upkeep(cancel: tokio_util::sync::CancellationToken) {
    let Some(handle) = handle() else { return cancel.cancelled().await };
    let mut every = tokio::time::interval(UPKEEP_EVERY);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = every.tick() => handle.run_upkeep(),
        }
    }
}

/// A run that started: its lateness (fire to start, if it has a fire) is observed now, and it counts as
/// running until the returned guard drops.
pub fn run_started(scheduled_at: Option<DateTime<Utc>>, started: DateTime<Utc>) -> Running {
    if let Some(scheduled_at) = scheduled_at {
        let late = (started - scheduled_at).to_std().unwrap_or_default();
        metrics::histogram!("cronrun_fire_lateness_seconds").record(late.as_secs_f64());
    }
    metrics::gauge!("cronrun_runs_running").increment(1.0);
    Running
}

/// Counts as one running run while it lives.
pub struct Running;

impl Drop for Running {
    fn drop(&mut self) {
        metrics::gauge!("cronrun_runs_running").decrement(1.0);
    }
}

/// The `job` label of the runs of jobs past `[http] metrics_jobs`: not a job name
/// (parentheses), so it is never taken for one.
pub const OTHER_JOBS: &str = "(other)";

/// The jobs with series of their own, at most `max`: the first seen since the agent
/// started, a removed job's place given up at the next scrape. A job's series are some
/// twenty lines (its duration histogram sixteen): at 60,000 jobs, `/metrics` was 69 MB and
/// took 1.0 s to render, each scrape, and every job's series stayed in memory.
#[derive(Debug)]
struct JobSeries {
    max: usize,
    jobs: HashSet<String>,
}

impl JobSeries {
    /// `job`'s label: its name while it has a place, else `OTHER_JOBS`.
    fn label(&mut self, job: &str) -> String {
        if self.jobs.contains(job) || (self.jobs.len() < self.max && self.jobs.insert(job.to_string())) {
            return job.to_string();
        }
        OTHER_JOBS.to_string()
    }
}

fn job_series() -> std::sync::MutexGuard<'static, JobSeries> {
    static SERIES: OnceLock<Mutex<JobSeries>> = OnceLock::new();
    let series = SERIES.get_or_init(|| Mutex::new(JobSeries { max: JOB_SERIES_DEFAULT, jobs: HashSet::new() }));
    series.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The default of `[http] metrics_jobs`.
pub const JOB_SERIES_DEFAULT: usize = 1_000;

/// At most `max` jobs have series of their own (`[http] metrics_jobs`).
pub fn set_job_series_max(max: usize) {
    job_series().max = max;
}

/// Gives up the places of the jobs `removed` says are gone.
pub fn forget_removed_jobs(removed: impl Fn(&str) -> bool) {
    job_series().jobs.retain(|job| !removed(job));
}

fn job_label(job: &str) -> String {
    job_series().label(job)
}

/// A run (or attempt) that reached a final status, started or not.
pub fn run_ended(job: &str, status: Status, duration: Option<Duration>, at: DateTime<Utc>) {
    let job = job_label(job);
    metrics::counter!("cronrun_runs_total", "job" => job.clone(), "status" => status.as_str()).increment(1);
    if let Some(d) = duration {
        metrics::histogram!("cronrun_run_duration_seconds", "job" => job.clone()).record(d.as_secs_f64());
    }
    if status == Status::Succeeded {
        metrics::gauge!("cronrun_job_last_success_timestamp_seconds", "job" => job).set(at.timestamp() as f64);
    }
}

/// A run that did not start, with why: the reason label is one of a few words.
pub fn run_skipped(job: &str, why: &str) {
    let reason = if why.contains("paused") {
        "paused"
    } else if why.contains("lock") {
        "lock"
    } else if why.contains("overlap") || why.contains("still running") {
        "overlap"
    } else {
        "other"
    };
    metrics::counter!("cronrun_runs_skipped_total", "job" => job_label(job), "reason" => reason).increment(1);
}

/// Fires found past their deadline and recorded missed.
pub fn fires_missed(job: &str, n: u64) {
    metrics::counter!("cronrun_fires_missed_total", "job" => job_label(job)).increment(n);
}

/// This agent leads one shard more (or, with -1, less).
pub fn shards_led(change: f64) {
    metrics::gauge!("cronrun_shards_led").increment(change);
}

/// Jobs in the fire queues of the shards this agent leads: up (or, negative, down) by
/// `change`.
pub fn schedules_led(change: f64) {
    metrics::gauge!("cronrun_schedules_led").increment(change);
}

/// The runner's slots, used and free.
pub fn runner_slots(used: usize, total: usize) {
    metrics::gauge!("cronrun_runner_slots", "state" => "used").set(used as f64);
    metrics::gauge!("cronrun_runner_slots", "state" => "free").set(total.saturating_sub(used) as f64);
}

/// How full `stream` is: the larger share of its byte and message limits in use (0 to 1,
/// 0 without limits), set at each reading of the streams (see `store::StreamUseCache`).
pub fn stream_use_ratio(stream: &str, ratio: f64) {
    metrics::gauge!("cronrun_stream_use_ratio", "stream" => stream.to_string()).set(ratio);
}

/// Whether the agent's NATS connection is up, set at each scrape.
pub fn nats_connected(up: bool) {
    metrics::gauge!("cronrun_nats_connected").set(if up { 1.0 } else { 0.0 });
}

/// The next fire of each job of the shards led here, by shard: rendered at each scrape
/// as `cronrun_job_next_fire_timestamp_seconds`, so that a shard led elsewhere now takes
/// its series with it (the facade cannot remove a series). A shard shows the
/// `NEXT_FIRE_SERIES_PER_SHARD` jobs that fire soonest: a series per job of a deployment
/// of millions would make every scrape hundreds of megabytes.
#[derive(Clone, Default)]
pub struct NextFires(Arc<Mutex<HashMap<u32, JobInstants>>>);

/// Series of `cronrun_job_next_fire_timestamp_seconds` per shard at most: every job's up
/// to 64,000 jobs with the default 64 shards.
pub const NEXT_FIRE_SERIES_PER_SHARD: usize = 1_000;

/// Job names and instants in Unix milliseconds.
type JobInstants = Vec<(Arc<str>, i64)>;

impl NextFires {
    /// Shard `shard`'s jobs and their next fires (Unix milliseconds).
    pub fn set(&self, shard: u32, fires: JobInstants) {
        if let Ok(mut all) = self.0.lock() {
            all.insert(shard, fires);
        }
    }

    /// Shard `shard` is not led here any more.
    pub fn clear(&self, shard: u32) {
        if let Ok(mut all) = self.0.lock() {
            all.remove(&shard);
        }
    }

    /// The gauge family in Prometheus text.
    pub fn render(&self) -> String {
        let Ok(all) = self.0.lock() else { return String::new() };
        let mut out = String::from(
            "# HELP cronrun_job_next_fire_timestamp_seconds The job's next fire, from its shard's leader.\n\
             # TYPE cronrun_job_next_fire_timestamp_seconds gauge\n",
        );
        for (job, at) in all.values().flatten() {
            // Job names are [A-Za-z0-9_-]: nothing to escape in a label value.
            let _ = writeln!(out, "cronrun_job_next_fire_timestamp_seconds{{job=\"{job}\"}} {}", *at as f64 / 1000.0);
        }
        out
    }
}

/// The jobs that `text` (Prometheus exposition) has samples of.
pub fn jobs_named(text: &str) -> std::collections::HashSet<&str> {
    text.lines().filter_map(label_of_line).collect()
}

/// `text` (Prometheus exposition) without the samples whose `job` label names a job that
/// `exists` says is gone. Lines without a `job` label, comments included, are kept.
pub fn without_removed_jobs(text: &str, exists: impl Fn(&str) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if label_of_line(line).is_none_or(&exists) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The value of a sample line's `job` label. Job names are [A-Za-z0-9_-], so the value
/// holds no quote or escape.
fn label_of_line(line: &str) -> Option<&str> {
    if line.starts_with('#') {
        return None;
    }
    let labels = &line[line.find('{')? + 1..line.find('}')?];
    labels.split(',').find_map(|pair| pair.strip_prefix("job=\"")?.strip_suffix('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_past_the_most_with_series_of_their_own_share_one() {
        let mut series = JobSeries { max: 2, jobs: HashSet::new() };
        // (job, its label)
        for (job, want) in [("a", "a"), ("b", "b"), ("c", OTHER_JOBS), ("a", "a"), ("b", "b"), ("d", OTHER_JOBS)] {
            assert_eq!(series.label(job), want, "{job}");
        }
        series.jobs.retain(|j| j != "b");
        assert_eq!((series.label("c"), series.label("b")), ("c".into(), OTHER_JOBS.into()), "b's place went to c");
        let mut none = JobSeries { max: 0, jobs: HashSet::new() };
        assert_eq!(none.label("a"), OTHER_JOBS);
    }

    #[test]
    fn a_removed_jobs_samples_leave_and_everything_else_stays() {
        let cases = [
            // (line, kept when only "kept" exists)
            ("# TYPE cronrun_runs_total counter", true),
            ("cronrun_runs_running 1", true),
            (r#"cronrun_build_info{version="0.1.0"} 1"#, true),
            (r#"cronrun_runs_total{job="kept",status="succeeded"} 3"#, true),
            (r#"cronrun_runs_total{job="gone",status="failed"} 1"#, false),
            (r#"cronrun_run_duration_seconds_bucket{job="gone",le="+Inf"} 1"#, false),
            (r#"cronrun_runs_skipped_total{reason="overlap",job="gone"} 1"#, false),
            (r#"cronrun_runs_total{job="kept-not",status="succeeded"} 1"#, false),
            (r#"cronrun_runner_slots{state="used"} 0"#, true),
        ];
        for (line, kept) in cases {
            let out = without_removed_jobs(line, |job| job == "kept");
            assert_eq!(out == format!("{line}\n"), kept, "{line}");
            assert_eq!(out.is_empty(), !kept, "{line}");
        }
    }
}
