//! `cronrun kill JOB.RUN [--signal TERM|KILL]`: asks the runner holding the run, over
//! `cronrun.ctl.run.<job>.<run-id>.kill`, to signal the run's process group.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::events::{Event, EventKind, publish_event};
use crate::record::{Status, parse_run_key};
use crate::runner::exec::shell::parse_signal;

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
    let run = store.get_run(job, run_id).await?.record;
    if run.status != Status::Running {
        bail!("run {} is not running (status {}); nothing to kill", a.run, run.status.as_str());
    }
    let subject = store.names.kill_subject(job, run_id);
    let host = run.host.unwrap_or_default();
    let event = Event::new(job, run_id, EventKind::KillRequested, run.attempt, chrono::Utc::now())
        .with_detail(format!("{} on {host}", signal.as_str()));
    publish_event(&store, &event).await;
    let reply =
        tokio::time::timeout(Duration::from_secs(5), store.client.request(subject, signal.as_str().to_string().into()))
            .await;
    match reply {
        Ok(Ok(_)) => ctx.print(&json!({ "run": a.run, "signal": signal.as_str(), "host": host }), || {
            format!("sent {signal} to {} on {host}", a.run)
        }),
        _ => bail!("no runner answered for run {} (host {host}): it may have just ended, or its runner is down", a.run),
    }
}
