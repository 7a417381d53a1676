//! `cronrun get NAME`: the stored spec; a stored spec that is invalid is shown with why.
//! `--history`: every revision the jobs bucket keeps, when, and who wrote it.

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;

#[derive(Args)]
pub struct GetArgs {
    pub name: String,
    /// The job's revisions (as many as the jobs bucket keeps): when, what, and by whom
    #[arg(long)]
    pub history: bool,
}

pub async fn run(ctx: &Ctx, a: GetArgs) -> Result<()> {
    let store = ctx.store().await?;
    if a.history {
        return history(ctx, &store, &a.name).await;
    }
    let job = store.get_job(&a.name).await?;
    match job.spec {
        Ok(spec) => {
            let text = serde_json::to_string_pretty(&spec).context("encoding the spec")?;
            ctx.print(&json!({ "revision": job.revision, "spec": spec }), || text)
        }
        Err(e) => {
            let raw = store.jobs.get(&a.name).await?.map(|v| String::from_utf8_lossy(&v.value).into_owned());
            if let Some(raw) = raw {
                super::out(&raw)?;
            }
            bail!(
                "job {:?} (revision {}) is stored but invalid, so it never runs: {e}; fix it with `cronrun apply`",
                a.name,
                job.revision
            )
        }
    }
}

async fn history(ctx: &Ctx, store: &crate::store::Store, name: &str) -> Result<()> {
    crate::names::validate_job_name(name)?;
    let revisions = store.jobs.history(name).await?;
    if revisions.is_empty() {
        bail!("no job {name:?}: `cronrun ls` lists the jobs");
    }
    let rows: Vec<_> = revisions
        .iter()
        .map(|r| json!({ "revision": r.revision, "at": super::fmt_time(&r.at), "operation": r.operation, "by": r.by }))
        .collect();
    ctx.print(&rows, || {
        let mut text = String::from("REVISION  AT                        OPERATION  BY\n");
        for r in &revisions {
            let by = r.by.as_deref().unwrap_or("-");
            text += &format!("{:<9} {:<25} {:<10} {by}\n", r.revision, super::fmt_time(&r.at), r.operation);
        }
        text
    })
}
