//! The latest values of many keys in one request: JetStream's direct get with
//! `multi_last`, answered by any replica from its store, without a consumer.
//!
//! Listing a job's runs used to create an ordered consumer each time. The sweep lists every
//! led job's runs every few minutes and a runner lists a job's runs to prune them: at tens
//! of thousands of jobs those consumers were made and deleted by the thousand, and the
//! server stalled for a minute at each sweep (docs/benchmarks.md). A direct get costs the
//! server what a key read does. It answers at most `MAX_KEYS` keys; above that, the caller
//! falls back to a watch.

use std::time::Duration;

use futures::StreamExt;

use super::{Bucket, Removal, Versioned};
use crate::error::Error;

/// The most keys nats-server answers one `multi_last` request with (`maxAllowedResponses`
/// in its `getDirectMulti`); more is refused with status 413.
pub const MAX_KEYS: usize = 1024;

/// How long each message of the answer is waited for.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// What one answer listed: the live keys that matched and their values, and how far the
/// replica that answered had got (see [`Bucket::listing`]).
#[derive(Debug, Default)]
pub struct Listing {
    pub values: Vec<(String, Versioned)>,
    /// The last revision of the bucket that replica held when it answered; 0 when nothing
    /// matched (its answer then does not say).
    pub as_of: u64,
}

impl Bucket {
    /// The keys matching `filter` (NATS wildcards) that hold a value, with their values;
    /// None when one answer cannot hold them: more than `MAX_KEYS` keys match (deleted ones
    /// included), or their values pass the server's limit on one answer's bytes.
    pub async fn last_values(&self, filter: &str) -> Result<Option<Vec<(String, Versioned)>>, Error> {
        Ok(self.listing(&[filter]).await?.map(|listing| listing.values))
    }

    /// `last_values` of several filters in one answer, with how far the replica that
    /// answered had got. Any replica answers a direct get from what it holds, and one that
    /// has fallen behind (a node thawed after a freeze, a follower catching up) answers
    /// from its past: a caller that must see what was written before a write of its own
    /// compares `as_of` with that write's revision.
    pub async fn listing(&self, filters: &[&str]) -> Result<Option<Listing>, Error> {
        let context = format!("reading {filters:?} from {}", self.name());
        let fail = |why: &dyn std::fmt::Display| Error::nats_msg(&context, why);
        let prefix = format!("$KV.{}.", self.name());
        let client = self.js.client();
        let inbox = client.new_inbox();
        let mut answers = client.subscribe(inbox.clone()).await.map_err(|e| Error::nats(&context, e))?;
        let subjects: Vec<String> = filters.iter().map(|filter| format!("{prefix}{filter}")).collect();
        let request = serde_json::json!({ "multi_last": subjects }).to_string();
        let subject = self.api.request(&format!("DIRECT.GET.KV_{}", self.name()));
        client.publish_with_reply(subject, inbox, request.into()).await.map_err(|e| Error::nats(&context, e))?;
        let mut values = Vec::new();
        loop {
            let message = match tokio::time::timeout(ANSWER_WAIT, answers.next()).await {
                Ok(Some(message)) => message,
                Ok(None) => return Err(fail(&"the answer ended early")),
                Err(_) => return Err(fail(&format!("no answer within {ANSWER_WAIT:?}"))),
            };
            let header = |name: &str| message.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str());
            let description = message.description.as_deref().unwrap_or_default();
            match message.status.map(|s| s.as_u16()) {
                None => {}
                // The end of the answer; with messages still pending, it was cut short.
                Some(204) => {
                    let number = |name| header(name).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
                    let as_of = number("Nats-UpTo-Sequence");
                    return Ok((number("Nats-Num-Pending") == 0).then_some(Listing { values, as_of }));
                }
                Some(404) if values.is_empty() && description == "No Results" => return Ok(Some(Listing::default())),
                Some(413) => return Ok(None),
                Some(code) => return Err(fail(&format!("status {code} {description}"))),
            }
            let (mut key, mut revision, mut removal) = (None, None, Removal::default());
            for (name, value) in message.headers.iter().flat_map(|h| h.iter()) {
                let Some(value) = value.first().map(|v| v.as_str()) else { continue };
                match name.as_ref() {
                    "Nats-Subject" => key = value.strip_prefix(prefix.as_str()).map(str::to_string),
                    "Nats-Sequence" => revision = value.parse::<u64>().ok(),
                    other => _ = removal.read(other, value),
                }
            }
            let (Some(key), Some(revision)) = (key, revision) else {
                return Err(fail(&"an answer without its subject or sequence"));
            };
            if !removal.removed {
                values.push((key, Versioned { value: message.payload, revision }));
            }
        }
    }

    /// `last_values`, or a watch's pass when one answer cannot hold them or the request
    /// fails (a replica not ready, a node dead and not yet noticed): a watch's creation is
    /// asked again for minutes (see `watch.rs`).
    pub async fn scan_last(&self, filter: &str) -> Result<Vec<(String, Versioned)>, Error> {
        match self.last_values(filter).await {
            Ok(Some(values)) => Ok(values),
            Ok(None) => self.scan(filter).await,
            Err(e) => {
                tracing::debug!("{e}; reading them with a watch");
                self.scan(filter).await
            }
        }
    }
}
