//! Publishing events on `CRONRUN_EVENTS`. Best effort: an event that cannot be published
//! is logged, never blocks a run. The kinds live in `cronrun_model::event`.

use tracing::warn;

pub use crate::model::event::{Event, EventKind};
use crate::store::Store;

pub async fn publish_event(store: &Store, event: &Event) {
    let subject = store.names.event_subject(&event.job, event.event.as_str());
    let body = serde_json::to_vec(event).unwrap_or_default();
    if let Err(e) = store.client.publish(subject, body.into()).await {
        warn!(job = %event.job, run = %event.run_id, "event {} not published: {e}", event.event);
    }
}
