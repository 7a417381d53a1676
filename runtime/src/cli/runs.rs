//! `cronrun runs JOB`: the job's kept runs, oldest first.

use anyhow::Result;
use clap::Args;

use super::{Ctx, fmt_time, table};
use crate::names::validate_job_name;

#[derive(Args)]
pub struct RunsArgs {
    pub job: String,
    /// Show only the last N runs
    #[arg(short = 'n', long)]
    pub limit: Option<usize>,
}

pub async fn run(ctx: &Ctx, a: RunsArgs) -> Result<()> {
    validate_job_name(&a.job)?;
    let store = ctx.store().await?;
    let mut runs: Vec<_> = store.list_runs(&a.job).await?.into_iter().map(|r| r.record).collect();
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
