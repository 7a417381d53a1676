//! `cronrun get NAME`: the stored spec; a stored spec that is invalid is shown with why.

use anyhow::{Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;

#[derive(Args)]
pub struct GetArgs {
    pub name: String,
}

pub async fn run(ctx: &Ctx, a: GetArgs) -> Result<()> {
    let store = ctx.store().await?;
    let job = store.get_job(&a.name).await?;
    match job.spec {
        Ok(spec) => ctx.print(&json!({ "revision": job.revision, "spec": spec }), || {
            serde_json::to_string_pretty(&spec).unwrap_or_default()
        }),
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
