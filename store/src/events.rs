//! Publishing events on `CRONRUN_EVENTS`. Best effort: an event that cannot be published
//! is logged, never blocks a run. The kinds live in `cronrun_model::event`.

use tracing::warn;

pub use crate::model::event::{Event, EventKind};
use crate::store::Store;

/// How long publishing an event may wait for room in the client's buffer.
const PUBLISH_MAX: std::time::Duration = std::time::Duration::from_millis(100);
/// How long the CLI waits for an event to reach the server before it exits.
const CLI_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// Publishes `event`, with the store's actor as `by` when it has one (the CLI). The CLI
/// flushes it too: a process that exits right after a core publish may lose it.
pub async fn publish_event(store: &Store, event: &Event) {
    let subject = store.names.event_subject(&event.job, event.event.as_str());
    let body = match &store.actor {
        Some(by) if event.by.is_none() => serde_json::to_vec(&Event { by: Some(by.to_string()), ..event.clone() }),
        _ => serde_json::to_vec(event),
    }
    .unwrap_or_default();
    // With NATS away, a core publish waits once the client's buffer is full: an event is
    // not worth holding up a run's start or end, or a dispatch.
    match tokio::time::timeout(PUBLISH_MAX, store.client.publish(subject, body.into())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(job = %event.job, run = %event.run_id, "event {} not published: {e}", event.event),
        Err(_) => warn!(job = %event.job, run = %event.run_id, "event {} not published: NATS is away", event.event),
    }
    if store.actor.is_some() && tokio::time::timeout(CLI_FLUSH, store.client.flush()).await.is_err() {
        warn!(job = %event.job, "event {} may not have reached NATS", event.event);
    }
}
