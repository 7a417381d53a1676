//! `cronrun notifications [JOB]`: deliveries of notifications and their failures, from
//! the `notified` and `notify_failed` events, oldest first.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::consumer::{DeliverPolicy, push};
use clap::Args;
use futures::StreamExt;

use super::{Ctx, table};
use crate::model::event::{Event, EventKind};
use crate::names::validate_job_name;

#[derive(Args)]
pub struct NotificationsArgs {
    /// Only this job's
    pub job: Option<String>,
    /// The last N
    #[arg(short = 'n', long, default_value_t = 20)]
    pub limit: usize,
}

/// How long reading the events may take.
const READ_BOUND: Duration = Duration::from_secs(10);

pub async fn run(ctx: &Ctx, a: NotificationsArgs) -> Result<()> {
    if let Some(job) = &a.job {
        validate_job_name(job)?;
    }
    let store = ctx.store().await?;
    let job = a.job.as_deref().unwrap_or("*");
    let stream = store.js.get_stream(store.names.events_stream()).await.context("opening the events stream")?;
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: store.client.new_inbox(),
            filter_subjects: [EventKind::Notified, EventKind::NotifyFailed]
                .iter()
                .map(|k| store.names.event_subject(job, k.as_str()))
                .collect(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .context("reading the events stream")?;
    let mut last: VecDeque<Event> = VecDeque::new();
    if consumer.cached_info().num_pending > 0 {
        let mut messages = consumer.messages().await.context("reading the events stream")?;
        let read = async {
            while let Some(Ok(m)) = messages.next().await {
                if let Ok(event) = serde_json::from_slice::<Event>(&m.payload) {
                    if last.len() == a.limit.max(1) {
                        last.pop_front();
                    }
                    last.push_back(event);
                }
                if m.info().map(|i| i.pending == 0).unwrap_or(true) {
                    break;
                }
            }
        };
        tokio::time::timeout(READ_BOUND, read).await.context("reading the events stream took too long")?;
    }
    let events: Vec<Event> = last.into();
    ctx.print(&events, || {
        let rows: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                let outcome = if e.event == EventKind::Notified { "delivered" } else { "failed" };
                vec![
                    e.at.clone(),
                    format!("{}.{}", e.job, e.run_id),
                    outcome.into(),
                    e.detail.clone().unwrap_or_default(),
                ]
            })
            .collect();
        if rows.is_empty() { "no notifications".into() } else { table(&["AT", "RUN", "OUTCOME", "DETAIL"], &rows) }
    })
}
