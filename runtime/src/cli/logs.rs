//! `cronrun logs JOB.RUN [-f]`: the run's output from `CRONRUN_LOGS`. With `-f` it
//! follows live output and ends when the run ends.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::consumer::{DeliverPolicy, push};
use clap::Args;
use futures::StreamExt;

use super::Ctx;
use crate::record::parse_run_key;
use crate::runner::{EOF_HEADER, STREAM_HEADER};
use crate::store::Store;

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
    let stream = store.js.get_stream(store.names.logs_stream()).await.context("opening the logs stream")?;
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: store.client.new_inbox(),
            filter_subject: store.names.logs_subject(job, run_id),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .context("reading the logs stream")?;
    let mut pending = consumer.cached_info().num_pending;
    if pending == 0 && !a.follow {
        return Ok(());
    }
    let mut messages = consumer.messages().await.context("reading the logs stream")?;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(2), messages.next()).await;
        let message = match next {
            Ok(Some(m)) => m.context("reading the logs stream")?,
            Ok(None) => return Ok(()),
            // Quiet for a while: a run whose runner died never sends its end marker.
            Err(_) if a.follow => {
                if run_is_over(&store, job, run_id).await {
                    return Ok(());
                }
                continue;
            }
            Err(_) => return Ok(()),
        };
        let headers = message.headers.as_ref();
        if headers.and_then(|h| h.get(EOF_HEADER)).is_some() {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&message.payload);
        if headers.and_then(|h| h.get(STREAM_HEADER)).is_some() {
            eprintln!("{line}");
        } else if !super::out(&line)? {
            return Ok(());
        }
        pending = message.info().map(|i| i.pending).unwrap_or(0);
        if pending == 0 && !a.follow {
            return Ok(());
        }
    }
}

async fn run_is_over(store: &Store, job: &str, run_id: &str) -> bool {
    store.get_run(job, run_id).await.map(|r| r.record.status.is_final()).unwrap_or(true)
}
