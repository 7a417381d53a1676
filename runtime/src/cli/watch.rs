//! `cronrun watch [JOB]`: events as they happen (runs starting and ending, retries,
//! missed fires, CLI writes, notifications), one line each, until interrupted.

use anyhow::{Context, Result};
use async_nats::jetstream::consumer::{DeliverPolicy, push};
use clap::Args;
use futures::StreamExt;

use super::{Ctx, out};
use crate::model::event::Event;
use crate::names::validate_job_name;

#[derive(Args)]
pub struct WatchArgs {
    /// Only this job's events
    pub job: Option<String>,
}

pub async fn run(ctx: &Ctx, a: WatchArgs) -> Result<()> {
    if let Some(job) = &a.job {
        validate_job_name(job)?;
    }
    let store = ctx.store().await?;
    let stream = store.js.get_stream(store.names.events_stream()).await.context("opening the events stream")?;
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: store.client.new_inbox(),
            filter_subject: store.names.event_subject(a.job.as_deref().unwrap_or("*"), "*"),
            deliver_policy: DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .context("reading the events stream")?;
    let mut messages = consumer.messages().await.context("reading the events stream")?;
    loop {
        let next = tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            next = messages.next() => next,
        };
        let message = match next {
            Some(Ok(m)) => m,
            Some(Err(e)) => return Err(anyhow::Error::new(e).context("reading the events stream")),
            None => return Ok(()),
        };
        let Ok(event) = serde_json::from_slice::<Event>(&message.payload) else { continue };
        let line = match ctx.json() {
            true => serde_json::to_string(&event)?,
            false => line(&event),
        };
        if !out(&line)? {
            return Ok(());
        }
    }
}

/// `<at>  <job>.<run>  <event>  [attempt N]  <detail>  [by WHO]`
fn line(e: &Event) -> String {
    let run = if e.run_id.is_empty() { e.job.clone() } else { format!("{}.{}", e.job, e.run_id) };
    let mut line = format!("{}  {run}  {}", e.at, e.event.as_str());
    if e.attempt > 1 {
        line.push_str(&format!("  attempt {}", e.attempt));
    }
    if let Some(detail) = e.detail.as_deref().filter(|d| !d.is_empty()) {
        line.push_str(&format!("  {detail}"));
    }
    if let Some(by) = &e.by {
        line.push_str(&format!("  by {by}"));
    }
    line
}
