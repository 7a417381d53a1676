//! The dashboard's JSON API and the SSE of a run's output. Lists come from memory (the
//! agent's catalog and `RunsView`); one job, one run and the status read NATS.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Admin, ApiError, Dashboard, RunsView, STREAM_LIFETIME, Viewer, words};
use crate::catalog::CatalogJob;
use crate::logs::Logged;
use crate::names::validate_job_name;
use crate::schedule::Schedule;
use crate::store::Excluded;

/// Jobs per page at most.
const MAX_PER_PAGE: usize = 500;
/// Runs a job's page shows.
const JOB_RUNS: usize = 100;

pub async fn session(_: Viewer, State(d): State<Arc<Dashboard>>) -> Json<Value> {
    Json(json!({ "actions": d.actions }))
}

#[derive(Deserialize)]
pub struct JobsQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    filter: Filter,
    #[serde(default)]
    page: usize,
    per: Option<usize>,
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Filter {
    #[default]
    All,
    Failing,
    Paused,
    Late,
}

pub async fn jobs(_: Viewer, State(d): State<Arc<Dashboard>>, Query(q): Query<JobsQuery>) -> Json<Value> {
    let now = d.clock.now();
    let needle = q.q.trim().to_lowercase();
    let mut jobs = d.all_jobs();
    jobs.retain(|job| needle.is_empty() || job.name.to_lowercase().contains(&needle));
    let excluded = excluded_of(&d, &jobs).await;
    let excluded = |name: &str| excluded.get(name).cloned().unwrap_or_default();
    if q.filter != Filter::All {
        jobs.retain(|job| match (q.filter, &job.summary) {
            (Filter::Failing, Err(_)) => true,
            (Filter::Failing, Ok(_)) => d.view.summary(&job.name).failing(),
            (Filter::Paused, summary) => summary.as_ref().is_ok_and(|s| s.paused),
            (_, summary) => summary.as_ref().is_ok_and(|s| is_late(&d, &job.name, s, now, &excluded(&job.name))),
        });
    }
    jobs.sort_by(|a, b| a.name.cmp(&b.name));
    let per = q.per.unwrap_or(50).clamp(1, MAX_PER_PAGE);
    let page: Vec<Value> = jobs
        .iter()
        .skip(q.page.saturating_mul(per))
        .take(per)
        .map(|job| job_row(&d, job, now, &excluded(&job.name)))
        .collect();
    Json(json!({ "total": jobs.len(), "page": q.page, "per": per, "jobs": page }))
}

/// The calendars each of `jobs` that excludes some holds (none while NATS is not reached,
/// or one cannot be read: the dashboard then shows the fires as the schedule has them).
async fn excluded_of(d: &Dashboard, jobs: &[Arc<CatalogJob>]) -> HashMap<String, Excluded> {
    let mut excluded = HashMap::new();
    let Ok(store) = d.reader() else { return excluded };
    for job in jobs {
        let Ok(summary) = &job.summary else { continue };
        if !summary.exclude().is_empty()
            && let Ok(calendars) = store.calendars.excluded(summary.exclude()).await
        {
            excluded.insert(job.name.to_string(), calendars);
        }
    }
    excluded
}

/// Whether the job is late now (see `RunsView::is_late`); a job the view has not noted
/// yet is not.
fn is_late(
    d: &Dashboard,
    name: &str,
    job: &crate::catalog::JobSummary,
    now: DateTime<Utc>,
    excluded: &Excluded,
) -> bool {
    let revised = d.view.revised_at(name).unwrap_or(now);
    RunsView::is_late(job, &d.view.summary(name), (revised, now), excluded)
}

fn job_row(d: &Dashboard, job: &CatalogJob, now: DateTime<Utc>, excluded: &Excluded) -> Value {
    let runs = d.view.summary(&job.name);
    let mut row = json!({
        "name": &*job.name,
        "last_status": runs.last_status.map(|s| s.as_str()),
        "last_run": runs.last_run,
        "success_rate": runs.success_rate,
        "durations_ms": runs.durations_ms,
    });
    match &job.summary {
        Err(e) => row["invalid"] = json!(e.to_string()),
        Ok(s) => {
            let fields = json!({
                "kind": if s.wasm { "wasm" } else { "shell" },
                // As it fires: `H` items resolved for the job (its spec keeps them as written).
                "schedule": s.schedule.expr(),
                "timezone": s.tz.name(),
                // As it fires too: `debian` where no choice can matter (`@every`, `@at`).
                "dst": s.schedule.dst().as_str(),
                "schedule_words": words::describe_job(s.schedule.expr(), s.after(), s.on()),
                "next": if s.paused { Vec::new() } else { next_fires(&s.schedule, s.tz, now, 3, excluded) },
                "pool": &*s.pool,
                "paused": s.paused,
                "late": is_late(d, &job.name, s, now, excluded),
            });
            if let (Value::Object(row), Value::Object(fields)) = (&mut row, fields) {
                row.extend(fields);
            }
        }
    }
    row
}

/// The next `n` fires after `now` outside the days of `excluded`, in the job's zone.
fn next_fires(schedule: &Schedule, tz: Tz, now: DateTime<Utc>, n: usize, excluded: &Excluded) -> Vec<String> {
    excluded
        .fires_after(schedule, now, tz)
        .take(n)
        .map(|t| t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z").to_string())
        .collect()
}

pub async fn job(
    _: Viewer,
    State(d): State<Arc<Dashboard>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    validate_job_name(&name)?;
    let store = d.reader()?;
    let stored = store.get_job(&name).await?;
    let mut runs: Vec<_> = store.list_runs(&name).await?.into_iter().map(|r| r.record).collect();
    runs.reverse();
    runs.truncate(JOB_RUNS);
    let (spec, words, next, invalid) = match &stored.spec {
        Ok(spec) => {
            let parsed = spec.parsed_schedule();
            let excluded = store.calendars.excluded(&spec.exclude).await?;
            let next = match &parsed {
                Ok((s, tz)) if !spec.paused => next_fires(s, *tz, d.clock.now(), 5, &excluded),
                _ => Vec::new(),
            };
            // In words as it fires: `H` items as the job's slots ("at minute 25").
            let expr = parsed.as_ref().map_or(spec.schedule.as_str(), |(s, _)| s.expr());
            (json!(spec), words::describe_job(expr, &spec.after, spec.on.as_ref()), next, None)
        }
        Err(e) => (Value::Null, String::new(), Vec::new(), Some(e.to_string())),
    };
    Ok(Json(json!({
        "name": name, "revision": stored.revision, "spec": spec, "invalid": invalid,
        "schedule_words": words, "next": next, "runs": runs,
    })))
}

pub async fn run(
    _: Viewer,
    State(d): State<Arc<Dashboard>>,
    Path((job, run_id)): Path<(String, String)>,
) -> Result<Json<crate::record::RunRecord>, ApiError> {
    validate_run(&job, &run_id)?;
    Ok(Json(d.reader()?.get_run(&job, &run_id).await?.record))
}

fn validate_run(job: &str, run_id: &str) -> Result<(), ApiError> {
    validate_job_name(job)?;
    validate_job_name(run_id).map_err(|_| {
        ApiError::from(crate::Error::invalid("run", format!("run id {run_id:?} is not one cronrun writes")))
    })?;
    Ok(())
}

/// The run's output so far, then live until it ends: events `line` (stdout) and
/// `stderr`, each a JSON string, and `end` with the run's final status. At most
/// `MAX_STREAMS` at once, each for at most `STREAM_LIFETIME`, and none past the agent's stop.
pub async fn output(
    _: Viewer,
    State(d): State<Arc<Dashboard>>,
    Path((job, run_id)): Path<(String, String)>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    validate_run(&job, &run_id)?;
    let permit =
        d.streams.clone().try_acquire_owned().map_err(|_| {
            ApiError::unavailable("too many live output streams are open: close some pages and try again")
        })?;
    let store = d.reader()?.clone();
    store.get_run(&job, &run_id).await?;
    let lines = crate::logs::read(&store, &job, &run_id, true).await?;
    let events = futures::stream::unfold(Some((lines, permit)), move |state| {
        let (store, job, run_id) = (store.clone(), job.clone(), run_id.clone());
        async move {
            let (mut lines, permit) = state?;
            match lines.recv().await {
                Some(Ok(Logged::Line(line))) => {
                    // JSON-encoded: an event whose data is empty is not dispatched.
                    let event = Event::default().event(if line.stderr { "stderr" } else { "line" });
                    let event = event.data(Value::from(line.text).to_string());
                    Some((Ok(event), Some((lines, permit))))
                }
                // The end as the log has it: the record may not say it yet.
                Some(Ok(Logged::End(status))) => Some((Ok(Event::default().event("end").data(status)), None)),
                // The stream lost: the page reads the record.
                Some(Err(_)) | None => {
                    let status = store.get_run(&job, &run_id).await.map(|r| r.record.status.as_str()).unwrap_or("");
                    Some((Ok(Event::default().event("end").data(status)), None))
                }
            }
        }
    });
    let cancel = d.cancel.clone();
    let stop = async move {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep(STREAM_LIFETIME) => {}
        }
    };
    Ok(Sse::new(events.take_until(Box::pin(stop))).keep_alive(KeepAlive::default()))
}

pub async fn status(_: Viewer, State(d): State<Arc<Dashboard>>) -> Result<Json<Value>, ApiError> {
    let specs = d.all_jobs();
    let pools =
        crate::status::pools_of(specs.iter().filter_map(|j| j.summary.as_ref().ok()).map(|s| (&*s.pool, s.paused)));
    let store = d.reader()?;
    let report = crate::status::StatusReport::gather(store, pools).await?;
    Ok(Json(report.to_json(&store.names)))
}

#[derive(Deserialize, Default)]
pub struct TriggerBody {
    input: Option<Value>,
}

pub async fn job_action(
    Admin(store, clock): Admin,
    Path((name, action)): Path<(String, String)>,
    body: Option<Json<TriggerBody>>,
) -> Result<Json<Value>, ApiError> {
    validate_job_name(&name)?;
    match action.as_str() {
        "pause" | "resume" => {
            crate::actions::set_paused(&store, &clock, &name, action == "pause").await?;
            Ok(Json(json!({ "ok": true })))
        }
        "trigger" => {
            let input = body.and_then(|Json(b)| b.input);
            let (run, _) = crate::actions::trigger(&store, &clock, &name, input).await?;
            Ok(Json(json!({ "ok": true, "run": run })))
        }
        other => Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            format!("no action {other:?}: use pause, resume or trigger"),
        )),
    }
}

#[derive(Deserialize, Default)]
pub struct KillBody {
    signal: Option<String>,
}

pub async fn kill(
    Admin(store, clock): Admin,
    Path((job, run_id)): Path<(String, String)>,
    body: Option<Json<KillBody>>,
) -> Result<Json<Value>, ApiError> {
    validate_run(&job, &run_id)?;
    let name = body.and_then(|Json(b)| b.signal).unwrap_or_else(|| "TERM".into());
    let signal = crate::runner::exec::parse_signal(&name).ok_or_else(|| {
        ApiError::from(crate::Error::invalid("signal", format!("{name:?} is not a signal name; use TERM or KILL")))
    })?;
    let host = crate::actions::kill(&store, &clock, &job, &run_id, signal).await?;
    Ok(Json(json!({ "ok": true, "host": host })))
}
