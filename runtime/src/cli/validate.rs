//! `cronrun validate -f FILE | --schedule EXPR [--tz] | NAME`: checks without writing.

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::schedule::{Schedule, parse_timezone};
use crate::spec::parse_jobs_file;

#[derive(Args)]
pub struct ValidateArgs {
    /// A stored job to check
    pub name: Option<String>,
    /// A TOML jobs file to check
    #[arg(short = 'f', long = "file", conflicts_with = "name")]
    pub file: Option<std::path::PathBuf>,
    /// A schedule expression to check
    #[arg(long, conflicts_with_all = ["name", "file"])]
    pub schedule: Option<String>,
    /// Time zone for --schedule
    #[arg(long, default_value = "UTC")]
    pub tz: String,
}

pub async fn run(ctx: &Ctx, a: ValidateArgs) -> Result<()> {
    if let Some(path) = &a.file {
        let origin = path.display().to_string();
        let text = super::read_definitions(path)?;
        let jobs = parse_jobs_file(&text, &origin)?;
        for spec in &jobs {
            crate::input::check_schema(spec).with_context(|| origin.clone())?;
        }
        let names: Vec<_> = jobs.iter().map(|j| j.name.as_str()).collect();
        return ctx
            .print(&json!({ "file": origin, "valid": names }), || format!("{origin}: {} jobs valid", jobs.len()));
    }
    if let Some(expr) = &a.schedule {
        Schedule::parse(expr).map_err(|e| anyhow::anyhow!("schedule: {e}"))?;
        parse_timezone(&a.tz).map_err(|e| anyhow::anyhow!("--tz: {e}"))?;
        return ctx.print(&json!({ "schedule": expr, "valid": true }), || format!("{expr:?} is valid"));
    }
    let Some(name) = &a.name else {
        bail!("give a job name, -f FILE or --schedule EXPR");
    };
    let store = ctx.store().await?;
    let job = store.get_job(name).await?;
    match job.spec {
        Ok(_) => ctx.print(&json!({ "name": name, "revision": job.revision, "valid": true }), || {
            format!("{name} (revision {}) is valid", job.revision)
        }),
        Err(e) => bail!("job {name:?} (revision {}) is invalid and skipped by schedulers: {e}", job.revision),
    }
}
