//! `cronrun logs JOB.RUN [-f]`: the run's output from `CRONRUN_LOGS` (see `crate::logs`).
//! With `-f` it follows live output and ends when the run ends.

use anyhow::Result;
use clap::Args;

use super::Ctx;
use crate::record::parse_run_key;

#[derive(Args)]
pub struct LogsArgs {
    /// JOB.RUN_ID as listed by `cronrun runs JOB`
    pub run: String,
    /// Follow the output until the run ends
    #[arg(short = 'f', long)]
    pub follow: bool,
}

pub async fn run(ctx: &Ctx, a: LogsArgs) -> Result<()> {
    let (job, run_id) = parse_run_key(&a.run)?;
    let store = ctx.store().await?;
    store.get_run(job, run_id).await?;
    let mut lines = crate::logs::read(&store, job, run_id, a.follow).await?;
    while let Some(logged) = lines.recv().await {
        let crate::logs::Logged::Line(line) = logged? else { break };
        if line.stderr {
            eprintln!("{}", line.text);
        } else if !super::out(&line.text)? {
            return Ok(());
        }
    }
    Ok(())
}
