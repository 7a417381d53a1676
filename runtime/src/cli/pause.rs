//! `cronrun pause|resume NAME|--all`: the flag is part of the spec, so it survives
//! restarts and is seen by every scheduler.

use anyhow::{Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;

#[derive(Args)]
pub struct PauseArgs {
    /// The job (or --all)
    pub name: Option<String>,
    /// Every job
    #[arg(long, conflicts_with = "name")]
    pub all: bool,
}

pub async fn run(ctx: &Ctx, a: PauseArgs, paused: bool) -> Result<()> {
    let names = match (&a.name, a.all) {
        (Some(name), false) => vec![name.clone()],
        (None, true) => {
            let store = ctx.store().await?;
            store.list_jobs().await?.into_iter().filter(|j| j.spec.is_ok()).map(|j| j.name).collect()
        }
        _ => bail!("name a job or pass --all"),
    };
    let store = ctx.store().await?;
    let mut changed = Vec::new();
    for name in &names {
        if crate::actions::set_paused(&store, &ctx.clock, name, paused).await? {
            changed.push(name.clone());
        }
    }
    let verb = if paused { "paused" } else { "resumed" };
    ctx.print(&json!({ verb: changed }), || {
        if changed.is_empty() {
            format!("nothing to do: {} already {verb}", if a.all { "all jobs" } else { "the job" })
        } else {
            format!("{verb} {}", changed.join(", "))
        }
    })
}
