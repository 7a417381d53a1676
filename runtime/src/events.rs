//! Events on `CRONRUN_EVENTS` (`cronrun.events.<job>.<event>`): dispatched, started,
//! succeeded, failed, timed_out, cancelled, skipped, missed, lost. Best effort: an event
//! that cannot be published is logged, never blocks a run.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use tracing::warn;

use crate::store::Store;

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub job: String,
    pub run_id: String,
    pub event: String,
    pub attempt: u32,
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    pub fn new(job: &str, run_id: &str, event: &str, attempt: u32, at: DateTime<Utc>) -> Self {
        Self {
            job: job.into(),
            run_id: run_id.into(),
            event: event.into(),
            attempt,
            at: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            detail: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

pub async fn publish_event(store: &Store, event: &Event) {
    let subject = store.names.event_subject(&event.job, &event.event);
    let body = serde_json::to_vec(event).unwrap_or_default();
    if let Err(e) = store.client.publish(subject, body.into()).await {
        warn!(job = %event.job, run = %event.run_id, "event {} not published: {e}", event.event);
    }
}
