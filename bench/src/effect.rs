//! The job's effect as its user sees it: an event the job publishes into a stream of the
//! user's, timed from the fire to the server storing it (`bench lateness --emit`, the
//! clock component with config `subject`). Each event carries `Nats-Msg-Id:
//! <job>-<fire unix seconds>`, as `emit-event`'s do, so the stream keeps one per fire.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::jetstream::{self, consumer, stream};
use chrono::{DateTime, Utc};
use futures::StreamExt;

/// The user's stream and the subjects its jobs publish to (`benchfx.<job>`).
const STREAM: &str = "BENCHFX";
pub(super) const SUBJECTS: &str = "benchfx.>";

/// The subject job `name` publishes its events to.
pub(super) fn subject(name: &str) -> String {
    format!("benchfx.{name}")
}

/// Makes the user's stream afresh, at `replicas`.
pub(super) async fn create(client: async_nats::Client, replicas: usize) -> Result<()> {
    let js = jetstream::new(client);
    let _ = js.delete_stream(STREAM).await;
    let config = stream::Config {
        name: STREAM.into(),
        subjects: vec![SUBJECTS.into()],
        num_replicas: replicas,
        ..Default::default()
    };
    js.create_stream(config).await.context("creating the events' stream")?;
    Ok(())
}

/// The events stored for fires in `[from, to)`: fire to stored, in ms, sorted, one per
/// job and fire (a second copy is refused by the stream as a duplicate); then the stream
/// is removed.
pub(super) async fn read(client: async_nats::Client, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Vec<f64>> {
    let js = jetstream::new(client);
    let mut events = js.get_stream(STREAM).await.context("opening the events' stream")?;
    let stored = events.info().await?.state.messages as usize;
    let consumer =
        events.create_consumer(consumer::pull::OrderedConfig::default()).await.context("reading the events' stream")?;
    let mut messages = consumer.messages().await?.take(stored);
    let (mut ms, mut seen) = (Vec::new(), HashSet::new());
    while let Some(message) = tokio::time::timeout(Duration::from_secs(10), messages.next()).await.ok().flatten() {
        let message = message.context("reading an event")?;
        let id = message.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")).map(|v| v.as_str().to_string());
        let id = id.ok_or_else(|| anyhow!("an event on {} without its Nats-Msg-Id", message.subject))?;
        let fire = fire_of(&id).ok_or_else(|| anyhow!("an event with Nats-Msg-Id {id:?}, not <job>-<fire>"))?;
        let stored = message.info().map_err(|e| anyhow!("an event without info: {e}"))?.published;
        if fire >= from && fire < to && seen.insert(id) {
            ms.push((stored.unix_timestamp_nanos() - fire.timestamp_nanos_opt().unwrap_or(0) as i128) as f64 / 1e6);
        }
    }
    js.delete_stream(STREAM).await.context("removing the events' stream")?;
    ms.sort_by(f64::total_cmp);
    Ok(ms)
}

/// The fire of an event's id, `<job>-<fire unix seconds>`.
fn fire_of(id: &str) -> Option<DateTime<Utc>> {
    let (_, seconds) = id.rsplit_once('-')?;
    DateTime::from_timestamp(seconds.parse().ok()?, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_id_names_its_fire() {
        let cases = [
            ("late-00001-1796000000", DateTime::from_timestamp(1_796_000_000, 0)),
            ("late-x", None),
            ("1796000000", None),
        ];
        for (id, fire) in cases {
            assert_eq!(fire_of(id), fire, "{id}");
        }
    }
}
