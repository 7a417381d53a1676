//! `cronrun next EXPR [--tz ZONE] [--dst CHOICE] [--from INSTANT] [-n N] [--job NAME]`:
//! fire times, computed offline. Fires are searched as far as the grammar reaches (a year
//! field's years up to 2199); with none at all after the start, one line says why and the
//! exit is non-zero. `H` items resolve for `--job` as the scheduler resolves that job's;
//! `--dst` places fixed times in a skipped or repeated hour as a job's `dst` does (the
//! spec is not read: give the job's choice). `--exclude CALENDAR` passes over the days of
//! a stored calendar as a job's `exclude` does (the one case that reads NATS).

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use clap::Args;
use serde_json::json;

use super::{Ctx, fmt_time};
use crate::schedule::{Dst, Schedule, parse_timezone};
use crate::store::Excluded;

#[derive(Args)]
pub struct NextArgs {
    /// The schedule expression (quote it)
    pub expr: String,
    /// IANA time zone [default: UTC]
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// What a fixed time in a skipped or repeated hour does, as a job's `dst`: debian
    /// (once, at the gap's end or in the first pass), skip or twice [default: debian]
    #[arg(long)]
    pub dst: Option<String>,
    /// Start after this RFC 3339 instant [default: now]
    #[arg(long)]
    pub from: Option<String>,
    /// How many fire times
    #[arg(short = 'n', default_value_t = 5)]
    pub count: usize,
    /// The job whose name resolves `H` items (JSON output is then an object with the
    /// resolved expression and the fires)
    #[arg(long)]
    pub job: Option<String>,
    /// A stored calendar whose days are passed over, as a job's `exclude` (repeatable)
    #[arg(long = "exclude", value_name = "CALENDAR")]
    pub exclude: Vec<String>,
}

pub async fn run(ctx: &Ctx, a: NextArgs) -> Result<()> {
    let schedule = parse(&a.expr, a.job.as_deref())?.with_dst(parse_dst(a.dst.as_deref())?);
    crate::spec::calendar::validate_exclude(&a.exclude).map_err(|e| anyhow::anyhow!("--exclude: {e}"))?;
    let excluded = match a.exclude.is_empty() {
        true => Excluded::default(),
        false => excluded(ctx, &a.exclude).await?,
    };
    let tz = parse_timezone(&a.tz).map_err(|e| anyhow::anyhow!("--tz: {e}"))?;
    let mut at: DateTime<Utc> = match &a.from {
        Some(s) => DateTime::parse_from_rfc3339(s)
            .with_context(|| format!("--from {s:?} is not an RFC 3339 instant like 2026-03-29T00:00:00Z"))?
            .with_timezone(&Utc),
        None => ctx.now(),
    };
    let first = schedule.first_fire_after(at, tz).map_err(|why| anyhow::anyhow!("schedule {:?}: {why}", a.expr))?;
    let mut fires = Vec::new();
    let mut next = match excluded.by(first, tz) {
        None => Some(first),
        Some(_) => excluded.next_after(&schedule, first, tz),
    };
    while fires.len() < a.count {
        let Some(fire) = next else {
            eprintln!("no more fires after {} (fewer than the {} asked for)", fmt_time(&at), a.count);
            break;
        };
        fires.push(fire);
        at = fire;
        next = excluded.next_after(&schedule, at, tz);
    }
    let utc: Vec<String> = fires.iter().map(fmt_time).collect();
    let text = || {
        let resolved = (schedule.expr() != a.expr).then(|| format!("resolved: {}", schedule.expr()));
        let lines =
            fires.iter().map(|t| format!("{}  {}", fmt_time(t), t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z")));
        resolved.into_iter().chain(lines).collect::<Vec<_>>().join("\n")
    };
    match &a.job {
        Some(job) => ctx.print(&json!({ "job": job, "resolved": schedule.expr(), "fires": utc }), text),
        None => ctx.print(&utc, text),
    }
}

/// The calendars of `--exclude`, each of which must exist.
async fn excluded(ctx: &Ctx, names: &[String]) -> Result<Excluded> {
    let store = ctx.store().await?;
    if let Some(missing) = store.calendars.missing(names).await?.first() {
        anyhow::bail!("--exclude {missing}: no such calendar; `cronrun calendar ls` lists them");
    }
    Ok(store.calendars.excluded(names).await?)
}

/// `--dst`: a job's `dst` choice by name, the default without one.
pub fn parse_dst(dst: Option<&str>) -> Result<Dst> {
    dst.map_or(Ok(Dst::default()), |d| d.parse().map_err(|e| anyhow::anyhow!("--dst: {e}")))
}

/// `expr`, its `H` items resolved for `job` (refused without one, saying to give it).
pub fn parse(expr: &str, job: Option<&str>) -> Result<Schedule> {
    let parsed = match job {
        Some(job) => {
            crate::names::validate_job_name(job).map_err(|e| anyhow::anyhow!("--job: {e}"))?;
            Schedule::parse_for(expr, job)
        }
        None => Schedule::parse(expr),
    };
    parsed.map_err(|e| anyhow::anyhow!("schedule: {e}"))
}
