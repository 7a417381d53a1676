//! `cronrun runs [JOB]`: kept runs, oldest first: one job's, or every job's, filtered by
//! status and age.

use anyhow::{Result, bail};
use clap::Args;

use super::{Ctx, fmt_time, table};
use crate::names::validate_job_name;
use crate::record::{RunRecord, Status};

#[derive(Args)]
pub struct RunsArgs {
    /// Only this job's runs [default: every job's]
    pub job: Option<String>,
    /// Only runs with this status (queued, running, succeeded, failed, timed_out, lost,
    /// cancelled, skipped); repeat for several
    #[arg(long, value_name = "STATUS")]
    pub status: Vec<String>,
    /// Only runs due this recently, e.g. 1h, 2d
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Show only the last N runs
    #[arg(short = 'n', long)]
    pub limit: Option<usize>,
}

pub async fn run(ctx: &Ctx, a: RunsArgs) -> Result<()> {
    if let Some(job) = &a.job {
        validate_job_name(job)?;
    }
    let statuses = a.status.iter().map(|s| parse_status(s)).collect::<Result<Vec<_>>>()?;
    let since = match &a.since {
        Some(d) => {
            let d = humantime::parse_duration(d)
                .map_err(|e| anyhow::anyhow!("--since {d:?}: {e}: write it like 30m, 1h or 7d"))?;
            let d = chrono::TimeDelta::from_std(d).map_err(|_| anyhow::anyhow!("--since {d:?} is too long"))?;
            Some(ctx.now().checked_sub_signed(d).unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC))
        }
        None => None,
    };
    let store = ctx.store().await?;
    let mut runs: Vec<RunRecord> = match &a.job {
        Some(job) => store.list_runs(job).await?.into_iter().map(|r| r.record).collect(),
        None => store.list_all_runs().await?,
    };
    runs.retain(|r| {
        (statuses.is_empty() || statuses.contains(&r.status))
            && since.is_none_or(|t| r.scheduled_at.or(r.dispatched_at).is_some_and(|at| at >= t))
    });
    if let Some(n) = a.limit {
        runs.drain(..runs.len().saturating_sub(n));
    }
    ctx.print(&runs, || {
        let t = |t: &Option<chrono::DateTime<chrono::Utc>>| t.as_ref().map(fmt_time).unwrap_or_else(|| "-".into());
        let rows: Vec<Vec<String>> = runs
            .iter()
            .map(|r| {
                vec![
                    r.key(),
                    r.status.as_str().into(),
                    format!("{:?}", r.trigger).to_lowercase(),
                    r.attempt.to_string(),
                    t(&r.scheduled_at),
                    t(&r.started_at),
                    r.duration_ms.map(|d| format!("{d}ms")).unwrap_or_else(|| "-".into()),
                    r.host.clone().unwrap_or_else(|| "-".into()),
                    r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                    r.error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        table(
            &["RUN", "STATUS", "TRIGGER", "ATTEMPT", "SCHEDULED", "STARTED", "DURATION", "HOST", "EXIT", "ERROR"],
            &rows,
        )
    })
}

fn parse_status(s: &str) -> Result<Status> {
    match serde_json::from_value(serde_json::Value::from(s)) {
        Ok(status) => Ok(status),
        Err(_) => bail!(
            "--status {s:?} is not a run status: one of queued, running, succeeded, failed, timed_out, lost, cancelled, skipped"
        ),
    }
}
