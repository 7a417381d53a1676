//! `cronrun kill JOB.RUN [--signal TERM|KILL]`: asks the runner holding the run, over
//! `cronrun.ctl.run.<job>.<run-id>.kill`, to signal the run's process group.

use anyhow::{Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::record::parse_run_key;
use crate::runner::exec::parse_signal;

#[derive(Args)]
pub struct KillArgs {
    /// JOB.RUN_ID as listed by `cronrun runs JOB`
    pub run: String,
    /// TERM (then KILL after the grace period) or KILL, or any signal name
    #[arg(long, default_value = "TERM")]
    pub signal: String,
}

pub async fn run(ctx: &Ctx, a: KillArgs) -> Result<()> {
    let (job, run_id) = parse_run_key(&a.run)?;
    let Some(signal) = parse_signal(&a.signal) else {
        bail!("--signal {:?} is not a signal name; use TERM or KILL", a.signal);
    };
    let store = ctx.store().await?;
    let host = crate::actions::kill(&store, &ctx.clock, job, run_id, signal).await?;
    ctx.print(&json!({ "run": a.run, "signal": signal.as_str(), "host": host }), || {
        format!("sent {signal} to {} on {host}", a.run)
    })
}
