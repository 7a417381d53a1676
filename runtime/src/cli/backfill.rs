//! `cronrun backfill JOB --from T --to T [--overlap queue|allow] [--max N] [--rerun]
//! [--dry-run]`: the fires of a past range run now, each once however often the command is
//! repeated or interrupted (see `crate::backfill`). With `queue` (the default) one run at
//! a time, in fire order, each dispatched when the one before has ended; with `allow` all
//! at once, the runs neither waiting for nor skipping one another. Ctrl-C stops
//! dispatching; what was dispatched runs on, and the same command goes on from there.

use std::io::{IsTerminal, Write};

use anyhow::{Result, bail};
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use clap::Args;
use serde_json::json;

use super::{Ctx, fmt_time};
use crate::backfill::{MAX_FIRES, Plan, dispatch_fire, fires, mark, neighbours, plan};
use crate::dispatch::Outcome;
use crate::record::Status;
use crate::spec::Overlap;

#[derive(Args)]
pub struct BackfillArgs {
    pub job: String,
    /// Start of the range, included: an RFC 3339 instant, or a date (midnight in the job's
    /// time zone)
    #[arg(long)]
    pub from: String,
    /// End of the range, excluded, not after now: an instant or a date
    #[arg(long)]
    pub to: String,
    /// queue: one run at a time in fire order; allow: all at once
    #[arg(long, default_value = "queue")]
    pub overlap: String,
    /// Refuse a range of more fires than this (at most 100000)
    #[arg(long, default_value_t = 1000)]
    pub max: usize,
    /// Backfill fires the schedule ran already too
    #[arg(long)]
    pub rerun: bool,
    /// Print the fires that would run, and run none
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(ctx: &Ctx, a: BackfillArgs) -> Result<()> {
    // The runs wait for whatever run of the job is going (queue), or for nothing (allow).
    let overlap = match a.overlap.as_str() {
        "queue" => Overlap::Queue,
        "allow" => Overlap::Allow,
        other => bail!(
            "--overlap {other:?}: give queue (one run at a time, in fire order) or allow (all at once); a backfill skips or replaces nothing"
        ),
    };
    if a.max == 0 || a.max > MAX_FIRES {
        bail!("--max {}: give 1 to {MAX_FIRES}", a.max);
    }
    let store = ctx.store().await?;
    let job = store.get_job(&a.job).await?;
    let spec = job.spec?;
    if spec.schedule.trim().is_empty() {
        bail!("job {:?} has no schedule, so no fires to backfill; run it with `cronrun trigger`", a.job);
    }
    let tz = crate::schedule::parse_timezone(&spec.timezone).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (from, to) = (instant("--from", &a.from, tz)?, instant("--to", &a.to, tz)?);
    if from >= to {
        bail!("--from {} is not before --to {}: give the range's start first", a.from, a.to);
    }
    if to > ctx.now() {
        bail!("--to {} is in the future: a backfill runs past fires; the schedule runs the rest", a.to);
    }
    let excluded = store.calendars.excluded(&spec.exclude).await?;
    let Some(all) = fires(&spec, (from, to), &excluded, a.max)? else {
        bail!(
            "{} holds more than {} fires from {} to {}: narrow the range or raise --max (at most {MAX_FIRES})",
            a.job,
            a.max,
            fmt_time(&from),
            fmt_time(&to)
        );
    };
    let plan = plan(&store, &a.job, &all, a.rerun).await?;
    if a.dry_run {
        return print_plan(ctx, &a.job, &plan);
    }
    for fire in &plan.unmarked {
        mark(&store, &a.job, neighbours(&all, *fire), *fire).await?;
    }
    ctx.warn_if_unserved(&store, &spec.pool).await;
    let mut progress = Progress::new(plan.to_run.len());
    let mut outcome = Summary::default();
    // Ctrl-C stops between dispatches, never in the middle of one.
    let cancel = tokio_util::sync::CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    for fire in &plan.to_run {
        if cancel.is_cancelled() {
            break;
        }
        let (key, sent) = dispatch_fire(&store, &ctx.clock, (&spec, job.revision), *fire, Some(overlap)).await?;
        outcome.dispatched += usize::from(sent == Outcome::Dispatched);
        mark(&store, &a.job, neighbours(&all, *fire), *fire).await?;
        if overlap == Overlap::Queue {
            let status = tokio::select! {
                record = super::trigger::wait_final(&store, &key) => record?.status,
                _ = cancel.cancelled() => break,
            };
            if status != Status::Succeeded {
                outcome.not_succeeded.push(format!("{key} {}", status.as_str()));
            }
        }
        progress.step(&key);
    }
    outcome.cancelled = cancel.is_cancelled();
    progress.done();
    report(ctx, &a.job, &plan, &outcome)
}

/// An RFC 3339 instant, or a date as midnight in `tz`.
fn instant(flag: &str, text: &str, tz: chrono_tz::Tz) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.to_utc());
    }
    let midnight = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0));
    // A midnight skipped by a DST change is the first instant after it.
    let local = midnight.and_then(|m| {
        tz.from_local_datetime(&m)
            .earliest()
            .or_else(|| tz.from_local_datetime(&(m + chrono::Duration::hours(1))).earliest())
    });
    local.map(|t| t.to_utc()).ok_or_else(|| {
        anyhow::anyhow!("{flag} {text:?}: give an RFC 3339 instant like 2026-11-01T06:00:00Z or a date like 2026-11-01")
    })
}

#[derive(Default)]
struct Summary {
    dispatched: usize,
    not_succeeded: Vec<String>,
    cancelled: bool,
}

fn print_plan(ctx: &Ctx, job: &str, plan: &Plan) -> Result<()> {
    let times = |fires: &[DateTime<Utc>]| fires.iter().map(fmt_time).collect::<Vec<_>>();
    let value = json!({ "job": job, "to_run": times(&plan.to_run),
        "ran_on_schedule": times(&plan.ran_on_schedule), "backfilled_before": times(&plan.backfilled) });
    ctx.print(&value, || {
        let mut lines: Vec<String> = plan.to_run.iter().map(fmt_time).collect();
        lines.push(left_out(plan.to_run.len(), plan));
        lines.join("\n")
    })
}

fn left_out(runs: usize, plan: &Plan) -> String {
    format!(
        "{runs} to run; left out: {} the schedule ran (--rerun to run them too), {} backfilled before",
        plan.ran_on_schedule.len(),
        plan.backfilled.len()
    )
}

fn report(ctx: &Ctx, job: &str, plan: &Plan, s: &Summary) -> Result<()> {
    let value = json!({ "job": job, "fires": plan.to_run.len(), "dispatched": s.dispatched,
        "ran_on_schedule": plan.ran_on_schedule.len(), "backfilled_before": plan.backfilled.len(),
        "not_succeeded": s.not_succeeded, "cancelled": s.cancelled });
    ctx.print(&value, || {
        format!("backfill of {job}: {} dispatched of {}", s.dispatched, left_out(plan.to_run.len(), plan))
    })?;
    if s.cancelled {
        bail!(
            "backfill of {job} stopped after {} of {} fires; what was dispatched runs on: give the same command again to go on",
            s.dispatched,
            plan.to_run.len()
        );
    }
    if !s.not_succeeded.is_empty() {
        bail!("{} backfilled runs did not succeed: {}", s.not_succeeded.len(), s.not_succeeded.join(", "));
    }
    Ok(())
}

/// A progress line on a terminal's stderr, rewritten in place; nothing elsewhere.
struct Progress {
    total: usize,
    done: usize,
    shown: bool,
}

impl Progress {
    fn new(total: usize) -> Progress {
        Progress { total, done: 0, shown: std::io::stderr().is_terminal() }
    }

    fn step(&mut self, key: &str) {
        self.done += 1;
        if self.shown {
            let filled = self.done * 30 / self.total.max(1);
            eprint!("\r[{}{}] {}/{} {key}", "#".repeat(filled), ".".repeat(30 - filled), self.done, self.total);
            let _ = std::io::stderr().flush();
        }
    }

    fn done(&self) {
        if self.shown && self.done > 0 {
            eprintln!();
        }
    }
}
