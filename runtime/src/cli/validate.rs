//! `cronrun validate -f FILE | --schedule EXPR [--tz] [--job NAME] | NAME`: checks without writing,
//! as a write would: a schedule with no fire after now is refused too (the spec's
//! `validate_at`), the clock read once here.

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::schedule::parse_timezone;
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
    /// The job whose name resolves the `H` items of --schedule
    #[arg(long, requires = "schedule")]
    pub job: Option<String>,
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
    let now = ctx.now();
    if let Some(expr) = &a.schedule {
        let schedule = super::next::parse(expr, a.job.as_deref())?;
        let tz = parse_timezone(&a.tz).map_err(|e| anyhow::anyhow!("--tz: {e}"))?;
        // As for a job: an `@at` in the past is a one-shot that is done, not an error.
        if schedule.once().is_none()
            && let Err(why) = schedule.first_fire_after(now, tz)
        {
            bail!("schedule {expr:?}: {why}");
        }
        let resolved = schedule.expr();
        return ctx.print(&json!({ "schedule": expr, "resolved": resolved, "valid": true }), || {
            match resolved == expr {
                true => format!("{expr:?} is valid"),
                false => format!("{expr:?} is valid (resolved: {resolved})"),
            }
        });
    }
    let Some(name) = &a.name else {
        bail!("give a job name, -f FILE or --schedule EXPR");
    };
    let store = ctx.store().await?;
    let job = store.get_job(name).await?;
    let spec = match job.spec {
        Ok(spec) => spec,
        Err(e) => bail!("job {name:?} (revision {}) is invalid and skipped by schedulers: {e}", job.revision),
    };
    if let Err(e) = spec.validate_at(now) {
        bail!(
            "job {name:?} (revision {}) is stored and scheduled as it is, but would be refused if written now: {e}",
            job.revision
        );
    }
    ctx.print(&json!({ "name": name, "revision": job.revision, "valid": true }), || {
        format!("{name} (revision {}) is valid", job.revision)
    })
}
