//! Key-value writes with the guarantees cronrun relies on.
//!
//! async-nats' `create_with_ttl` re-creates a deleted key without its TTL, and `update`
//! cannot carry one; a lease written that way would never expire. `Bucket` publishes to
//! the bucket's subjects with the expected-revision and TTL headers itself.
//!
//! - `mod.rs`: `Bucket`, its reads of one key and its writes.
//! - `watch.rs`: watches of a bucket's keys (ordered consumers), and how they are made.
//! - `read.rs`: reads of every key matching a filter (`keys`, `scan`), through a watch.
//! - `last.rs`: the latest values of a few keys in one direct get, without a consumer.

use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::{Operation, Store as Kv};
use async_nats::jetstream::{self};
use bytes::Bytes;

use crate::error::{Error, ErrorKind};
use crate::model::jsapi::JsApi;

mod last;
mod read;
mod watch;

pub use last::{Listing, MAX_KEYS};
pub use watch::{Change, Watch};

/// How long the marker of a released lease or presence key stays: long enough for every
/// watcher to see the release, short enough that keys named per run or per agent start do
/// not pile up.
pub const RELEASE_MARKER_TTL: Duration = Duration::from_secs(5);

const EXPECTED_LAST_SUBJECT_SEQUENCE: &str = "Nats-Expected-Last-Subject-Sequence";
const MESSAGE_TTL: &str = "Nats-TTL";

/// Who wrote a value (see `auth::actor`): kept with every write of a bucket opened
/// `signed_by`, read back by `history`.
pub const WRITTEN_BY: &str = "Cronrun-By";
const KV_OPERATION: &str = "KV-Operation";

/// Whether a message of a bucket's stream removes its key, read header by header: a
/// delete or purge (`KV-Operation`), or a marker the server wrote (`Nats-Marker-Reason`;
/// `MaxAge`: the key's TTL ran out). Watches and direct gets read the same headers.
#[derive(Debug, Default)]
struct Removal {
    removed: bool,
    expired: bool,
}

impl Removal {
    /// Takes in one header; false when it says nothing of removal.
    fn read(&mut self, name: &str, value: &str) -> bool {
        match name {
            KV_OPERATION => self.removed |= value != "PUT",
            "Nats-Marker-Reason" => (self.removed, self.expired) = (true, value == "MaxAge"),
            _ => return false,
        }
        true
    }
}

/// A KV bucket with the JetStream context its writes go through.
#[derive(Clone, Debug)]
pub struct Bucket {
    /// Shared: every lease and every fire holds a handle, and async-nats's holds the
    /// stream's whole info (cloned at each, with its frees 2-3 % of an agent's CPU).
    pub kv: Arc<Kv>,
    js: jetstream::Context,
    /// The API `js` addresses: the subjects this bucket publishes to itself (writes and
    /// direct gets) take its form, as async-nats's own requests through `js` do.
    api: JsApi,
    /// The `WRITTEN_BY` header of this handle's writes.
    by: Option<std::sync::Arc<str>>,
    /// A bucket the server sources from another (the schedules index): a key's revision
    /// is the one it has in the bucket it was copied from.
    sourced: bool,
}

/// One revision of a key, for its history.
#[derive(Debug, Clone)]
pub struct Revision {
    pub revision: u64,
    pub at: chrono::DateTime<chrono::Utc>,
    /// `put`, `delete` or `purge`.
    pub operation: &'static str,
    pub by: Option<String>,
    pub value: Bytes,
}

/// A live value and its revision (the fencing token of compare-and-set).
#[derive(Debug, Clone)]
pub struct Versioned {
    pub value: Bytes,
    pub revision: u64,
}

/// The revision of a key this process writes by compare-and-set, with the writes whose
/// answer was lost. A write can land while its answer is lost (a leader election, a
/// reconnect); the next compare-and-set from the old revision is then refused although
/// the key holds our own value. `Bucket::update_fenced` reads such a key back: if it holds
/// exactly the bytes of one of those writes, it landed, and its revision is ours.
#[derive(Debug, Clone, Default)]
pub struct Fenced {
    pub revision: u64,
    unconfirmed: Vec<Bytes>,
}

/// Writes with a lost answer remembered per key. All are compare-and-sets from one
/// revision, so at most one lands, and the first ones sent are the likeliest.
const UNCONFIRMED_MAX: usize = 4;

impl Fenced {
    pub fn at(revision: u64) -> Self {
        Self { revision, unconfirmed: Vec::new() }
    }
}

impl Bucket {
    /// `kv` written through `js`, a context opened for `api` (see `Store::open`).
    pub fn new(kv: Kv, js: jetstream::Context, api: &JsApi) -> Self {
        Self { kv: Arc::new(kv), js, api: api.clone(), by: None, sourced: false }
    }

    /// A bucket the server copies from another one: read only, with the revisions of the
    /// original (see `sourced`).
    pub fn sourced(kv: Kv, js: jetstream::Context, api: &JsApi) -> Self {
        Self { kv: Arc::new(kv), js, api: api.clone(), by: None, sourced: true }
    }

    /// This bucket with every write marked as made by `by`.
    pub fn signed_by(mut self, by: &str) -> Self {
        self.by = Some(by.into());
        self
    }

    /// Every revision of `key` the bucket keeps, oldest first, with who wrote each.
    pub async fn history(&self, key: &str) -> Result<Vec<Revision>, Error> {
        let subject = format!("$KV.{}.{key}", self.name());
        let mut revisions = Vec::new();
        let mut next = 1;
        loop {
            let message = match self.kv.stream.direct_get_next_for_subject(&subject, Some(next)).await {
                Ok(message) => message,
                Err(e) if e.kind() == async_nats::jetstream::stream::DirectGetErrorKind::NotFound => break,
                Err(e) => return Err(Error::nats(&format!("reading the history of {key}"), e)),
            };
            let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_string());
            let operation = match header(KV_OPERATION).as_deref() {
                Some("DEL") => "delete",
                Some("PURGE") => "purge",
                _ => "put",
            };
            let at = chrono::DateTime::from_timestamp(message.time.unix_timestamp(), message.time.nanosecond())
                .unwrap_or_default();
            next = message.sequence + 1;
            revisions.push(Revision {
                revision: message.sequence,
                at,
                operation,
                by: header(WRITTEN_BY),
                value: message.payload,
            });
        }
        Ok(revisions)
    }

    pub fn name(&self) -> &str {
        &self.kv.name
    }

    /// The value of `key`, or None if absent, deleted or expired.
    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, Error> {
        let entry =
            self.kv.entry(key).await.map_err(|e| Error::nats(&format!("reading {key} from {}", self.name()), e))?;
        Ok(entry.and_then(|e| match e.operation {
            Operation::Put => Some(Versioned { value: e.value, revision: e.revision }),
            Operation::Delete | Operation::Purge => None,
        }))
    }

    /// The value of `key` as the bucket's leader holds it, or None if absent, deleted or
    /// expired. Any replica answers `get`, one behind from its past: after a create
    /// refused because the key exists, `get` may still find nothing.
    pub async fn get_from_leader(&self, key: &str) -> Result<Option<Versioned>, Error> {
        use async_nats::jetstream::stream::LastRawMessageErrorKind;
        let subject = format!("$KV.{}.{key}", self.name());
        let message = match self.kv.stream.get_last_raw_message_by_subject(&subject).await {
            Ok(message) => message,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
            Err(e) => return Err(Error::nats(&format!("reading {key} from {}'s leader", self.name()), e)),
        };
        let removed = message.headers.get(KV_OPERATION).is_some_and(|op| op.as_str() != "PUT");
        Ok((!removed).then_some(Versioned { value: message.payload, revision: message.sequence }))
    }

    /// The revision of `key` and when the server stored it, by the server's clock (see
    /// `server_time`); None if absent, deleted or expired.
    pub async fn stamp(&self, key: &str) -> Result<Option<(u64, chrono::DateTime<chrono::Utc>)>, Error> {
        let entry =
            self.kv.entry(key).await.map_err(|e| Error::nats(&format!("reading {key} from {}", self.name()), e))?;
        Ok(entry.filter(|e| e.operation == Operation::Put).and_then(|e| {
            let at = chrono::DateTime::from_timestamp(e.created.unix_timestamp(), e.created.nanosecond())?;
            Some((e.revision, at))
        }))
    }

    /// Writes `value` only if `key` is still at `revision` (0: absent). A lost race is
    /// `ErrorKind::Conflict`. With `ttl` the key expires unless written again.
    pub async fn update(&self, key: &str, value: Bytes, revision: u64, ttl: Option<Duration>) -> Result<u64, Error> {
        self.write(key, value, Some(revision), ttl).await
    }

    /// `update` from `fence.revision`, moving it on success. A write whose answer is lost is
    /// read back at once, and remembered if that fails too; a later conflict is no conflict
    /// when the key holds one of those writes (see `Fenced`).
    pub async fn update_fenced(
        &self,
        key: &str,
        value: Bytes,
        fence: &mut Fenced,
        ttl: Option<Duration>,
    ) -> Result<u64, Error> {
        loop {
            match self.update(key, value.clone(), fence.revision, ttl).await {
                Ok(revision) => {
                    fence.revision = revision;
                    fence.unconfirmed.clear();
                    return Ok(revision);
                }
                Err(e) if e.is_conflict() => {
                    if fence.unconfirmed.is_empty() {
                        return Err(e);
                    }
                    let stored = match self.get(key).await {
                        Ok(stored) => stored,
                        // Not known yet: the next conflict asks again.
                        Err(read) => return Err(read),
                    };
                    match stored {
                        // Ours after all: write again from there.
                        Some(v) if fence.unconfirmed.contains(&v.value) => {
                            fence.revision = v.revision;
                            fence.unconfirmed.clear();
                        }
                        _ => return Err(e),
                    }
                }
                Err(e) => {
                    if let Ok(Some(v)) = self.get(key).await
                        && v.value == value
                    {
                        fence.revision = v.revision;
                        fence.unconfirmed.clear();
                        return Ok(v.revision);
                    }
                    // Writes from one revision: of those queued while NATS was away, the first
                    // to reach the server is the one that can land. Keep the first ones.
                    if fence.unconfirmed.len() < UNCONFIRMED_MAX {
                        fence.unconfirmed.push(value);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Writes `value` whatever is there, with an optional TTL.
    pub async fn put(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<u64, Error> {
        self.write(key, value, None, ttl).await
    }

    async fn write(&self, key: &str, value: Bytes, expect: Option<u64>, ttl: Option<Duration>) -> Result<u64, Error> {
        self.publish(key, value, HeaderMap::new(), expect, ttl).await
    }

    /// Publishes a value (or, with `KV-Operation` in `headers`, a marker) to `key`.
    async fn publish(
        &self,
        key: &str,
        value: Bytes,
        mut headers: HeaderMap,
        expect: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<u64, Error> {
        if let Some(by) = &self.by {
            headers.insert(WRITTEN_BY, by.as_ref());
        }
        if let Some(revision) = expect {
            headers.insert(EXPECTED_LAST_SUBJECT_SEQUENCE, revision.to_string().as_str());
        }
        if let Some(ttl) = ttl {
            headers.insert(MESSAGE_TTL, format!("{}s", ttl.as_secs().max(1)).as_str());
        }
        let subject = self.api.kv_put(self.name(), key);
        let ack = self
            .js
            .publish_with_headers(subject, headers, value)
            .await
            .map_err(|e| Error::nats(&format!("writing {key}"), e))?
            .await;
        match ack {
            Ok(ack) => Ok(ack.sequence),
            Err(e) if is_wrong_last_sequence(&e) => {
                Err(Error::conflict(format!("{key} changed since revision {}", expect.unwrap_or(0))))
            }
            Err(e) => Err(Error::nats(&format!("writing {key}"), e)),
        }
    }

    /// Creates `key` if it is absent, deleted or expired. A live key is
    /// `ErrorKind::AlreadyExists`.
    pub async fn create(&self, key: &str, value: Bytes, ttl: Option<Duration>) -> Result<u64, Error> {
        match self.update(key, value.clone(), 0, ttl).await {
            Err(e) if e.is_conflict() => {}
            other => return other,
        }
        // The key has history: a delete or expiry marker may be overwritten, by
        // compare-and-set on the marker's revision; a live value means taken.
        let entry = self.kv.entry(key).await.map_err(|e| Error::nats(&format!("reading {key}"), e))?;
        let already_exists = || Error::new(ErrorKind::AlreadyExists, format!("{key} already exists"));
        match entry {
            Some(e) if e.operation != Operation::Put => self
                .update(key, value, e.revision, ttl)
                .await
                .map_err(|err| if err.is_conflict() { already_exists() } else { err }),
            _ => Err(already_exists()),
        }
    }

    /// Deletes `key` if it is still at `revision` (a delete marker, as `nats kv del`
    /// writes, with who deleted it).
    pub async fn delete_at(&self, key: &str, revision: u64) -> Result<(), Error> {
        let mut headers = HeaderMap::new();
        headers.insert(KV_OPERATION, "DEL");
        self.publish(key, Bytes::new(), headers, Some(revision), None).await.map(|_| ())
    }

    /// Removes `key` if it is still at `revision`, leaving a marker that expires after
    /// `RELEASE_MARKER_TTL`: a lease given up leaves nothing behind for long (a plain
    /// delete would leave a tombstone per run, for ever). Needs a bucket with TTL markers.
    pub async fn release_at(&self, key: &str, revision: u64) -> Result<(), Error> {
        self.kv
            .purge_expect_revision_with_ttl(key, revision, RELEASE_MARKER_TTL)
            .await
            .map_err(|e| Error::nats(&format!("releasing {key}"), e))
    }

    /// Removes `key` and its history; the marker left behind expires after `ttl`.
    pub async fn purge(&self, key: &str, ttl: Duration) -> Result<(), Error> {
        self.kv.purge_with_ttl(key, ttl).await.map_err(|e| Error::nats(&format!("purging {key}"), e))
    }
}

/// A lost compare-and-set. A clustered stream also answers one that raced another write
/// to the same key still being replicated with code 10164 ("wrong last sequence", no
/// number), which async-nats does not map to `WrongLastSequence`: seen as two agents
/// starting at once on a 3-node cluster both creating the same key, and the loser failing.
fn is_wrong_last_sequence(e: &async_nats::jetstream::context::PublishError) -> bool {
    use async_nats::jetstream::ErrorCode;
    e.kind() == PublishErrorKind::WrongLastSequence
        || std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>())
            .is_some_and(|j| j.error_code() == ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT)
}

#[cfg(test)]
mod tests {
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};

    fn answer(err_code: u64) -> PublishError {
        let json = format!(r#"{{"code":400,"err_code":{err_code},"description":"wrong last sequence"}}"#);
        let error: async_nats::jetstream::Error = serde_json::from_str(&json).unwrap();
        PublishError::with_source(PublishErrorKind::Other, error)
    }

    #[test]
    fn both_wrong_last_sequence_answers_are_lost_races() {
        assert!(super::is_wrong_last_sequence(&PublishError::new(PublishErrorKind::WrongLastSequence)));
        assert!(super::is_wrong_last_sequence(&answer(10164)));
        assert!(!super::is_wrong_last_sequence(&answer(10077)));
        assert!(!super::is_wrong_last_sequence(&PublishError::new(PublishErrorKind::TimedOut)));
    }
}
