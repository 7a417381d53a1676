//! Key-value writes with the guarantees cronrun relies on.
//!
//! async-nats' `create_with_ttl` re-creates a deleted key without its TTL, and `update`
//! cannot carry one; a lease written that way would never expire. `Bucket` publishes to
//! the bucket's subjects with the expected-revision and TTL headers itself.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::{Operation, Store as Kv};
use async_nats::jetstream::{self};
use bytes::Bytes;
use futures::StreamExt;
use tracing::warn;

use crate::error::{Error, ErrorKind};

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

/// A KV bucket with the JetStream context its writes go through.
#[derive(Clone, Debug)]
pub struct Bucket {
    pub kv: Kv,
    js: jetstream::Context,
    /// The `WRITTEN_BY` header of this handle's writes.
    by: Option<std::sync::Arc<str>>,
    /// A bucket the server sources from another (the schedules index): a key's revision
    /// is the one it has in the bucket it was copied from.
    sourced: bool,
}

/// The header of a sourced message: `<stream> <sequence> <filter> <transform> <subject>`.
const STREAM_SOURCE: &str = "Nats-Stream-Source";

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

/// How long an attempt to create a watch's consumer waits for the server's answer when
/// the stream has a replica that looks gone (see `Bucket::create_ordered`), and when none
/// does, first and at most: a large stream makes it slow (a filtered consumer of
/// 10,000,000 entries took over 30 s to make with three others made alongside).
const CREATE_WAIT_PEER_GONE: Duration = Duration::from_secs(1);
const CREATE_WAIT: Duration = Duration::from_secs(10);
const CREATE_WAIT_MAX: Duration = Duration::from_secs(160);
/// The waits of the first attempts on a replicated stream, before a replica killed a
/// moment ago looks gone.
const CREATE_WAITS_FIRST: [Duration; 4] =
    [Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(4), Duration::from_secs(8)];
/// How long a consumer's creation is asked for in all.
const CREATE_GIVE_UP: Duration = Duration::from_secs(300);
/// A replica not heard of for this long looks gone (the stream's leader hears from a live
/// one every second).
const REPLICA_SILENT: Duration = Duration::from_secs(3);

impl Fenced {
    pub fn at(revision: u64) -> Self {
        Self { revision, unconfirmed: Vec::new() }
    }
}

/// One key's latest state as seen by a watch.
#[derive(Debug, Clone)]
pub struct Change {
    pub key: String,
    /// None: deleted, purged or expired.
    pub value: Option<Bytes>,
    pub revision: u64,
    /// True once every entry that existed when the watch began has been delivered.
    pub caught_up: bool,
    /// The key was removed by the server because its TTL ran out.
    pub expired: bool,
    /// Where the change is in the bucket's stream (the revision, unless `sourced`).
    pub sequence: u64,
}

impl Bucket {
    pub fn new(kv: Kv, js: jetstream::Context) -> Self {
        Self { kv, js, by: None, sourced: false }
    }

    /// A bucket the server copies from another one: read only, with the revisions of the
    /// original (see `sourced`).
    pub fn sourced(kv: Kv, js: jetstream::Context) -> Self {
        Self { kv, js, by: None, sourced: true }
    }

    /// This bucket with every write marked as made by `by`.
    pub fn signed_by(mut self, by: &str) -> Self {
        self.by = Some(by.into());
        self
    }

    /// Every revision of `key` the bucket keeps, oldest first, with who wrote each.
    pub async fn history(&self, key: &str) -> Result<Vec<Revision>, Error> {
        let subject = format!("$KV.{}.{key}", self.name());
        let read = |e: &dyn std::fmt::Display| Error::nats(&format!("reading the history of {key}"), e.to_string());
        let mut revisions = Vec::new();
        let mut next = 1;
        loop {
            let message = match self.kv.stream.direct_get_next_for_subject(&subject, Some(next)).await {
                Ok(message) => message,
                Err(e) if e.kind() == async_nats::jetstream::stream::DirectGetErrorKind::NotFound => break,
                Err(e) => return Err(read(&e)),
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
        let subject = format!("$KV.{}.{key}", self.name());
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

    /// Changes of keys matching `filter` (NATS wildcards), starting with each key's
    /// latest value.
    pub async fn watch(&self, filter: &str) -> Result<Watch, Error> {
        self.follow(filter, self.latest(), false).await
    }

    /// From each key's latest value. A sourced bucket keeps nothing else (one message per
    /// subject), and reading it all costs the server a third of finding the last ones.
    fn latest(&self) -> DeliverPolicy {
        match self.sourced {
            true => DeliverPolicy::All,
            false => DeliverPolicy::LastPerSubject,
        }
    }

    /// Changes of keys matching `filter` from now on, nothing of before.
    pub async fn changes(&self, filter: &str) -> Result<Watch, Error> {
        self.follow(filter, DeliverPolicy::New, false).await
    }

    /// The keys matching `filter` that hold a value now (their values are not read).
    pub async fn keys(&self, filter: &str) -> Result<Vec<String>, Error> {
        let mut w = self.follow(filter, self.latest(), true).await?;
        let mut keys = Vec::new();
        while !w.initially_empty
            && let Some(change) = w.next().await
        {
            let change = change?;
            if change.value.is_some() {
                keys.push(change.key);
            }
            if change.caught_up {
                break;
            }
        }
        Ok(keys)
    }

    /// The latest values of the keys matching any of `filters`, in one pass over the
    /// bucket's stream however many filters there are, then their changes.
    pub async fn watch_all_of(&self, filters: &[String]) -> Result<Watch, Error> {
        self.follow_filters(filters, self.latest(), false).await
    }

    /// Changes of keys matching `filter` after `sequence` of the bucket's stream.
    pub async fn changes_after(&self, filter: &str, sequence: u64) -> Result<Watch, Error> {
        let from = DeliverPolicy::ByStartSequence { start_sequence: sequence + 1 };
        self.follow(filter, from, false).await
    }

    async fn follow(&self, filter: &str, deliver_policy: DeliverPolicy, headers_only: bool) -> Result<Watch, Error> {
        self.follow_filters(&[filter.to_string()], deliver_policy, headers_only).await
    }

    async fn follow_filters(
        &self,
        filters: &[String],
        deliver_policy: DeliverPolicy,
        headers_only: bool,
    ) -> Result<Watch, Error> {
        let prefix = format!("$KV.{}.", self.name());
        let mut filters: Vec<String> = filters.iter().map(|f| format!("{prefix}{f}")).collect();
        let (filter_subject, filter_subjects) = match filters.len() {
            1 => (filters.remove(0), Vec::new()),
            _ => (String::new(), filters),
        };
        let config = push::OrderedConfig {
            deliver_subject: self.js.client().new_inbox(),
            filter_subject,
            filter_subjects,
            deliver_policy,
            headers_only,
            replay_policy: ReplayPolicy::Instant,
            ..Default::default()
        };
        let consumer = self.create_ordered(config).await?;
        let initially_empty = consumer.cached_info().num_pending == 0;
        let messages = consumer.messages().await.map_err(|e| Error::nats(&format!("watching {}", self.name()), e))?;
        Ok(Watch { initially_empty, messages, prefix, sourced: self.sourced })
    }

    /// Creates an ordered consumer, asking again on a failure that passes (see `passing`).
    /// The server puts a one-replica consumer on a replica of the stream picked at random,
    /// and counts a node that died without a word (killed, cut off) as live for up to
    /// 150 s: a consumer put there is never made and its request only times out. So while
    /// a replica looks gone, an attempt waits a second, and the next is another pick. A
    /// replica killed a moment ago does not look gone yet: the first attempts wait 1, 2, 4
    /// and 8 s. Then attempts wait 10 s, twice as long each time up to 160 s: a request
    /// lost with a server that restarted is asked again soon, and a server that is only
    /// slow (a large stream) is given few consumers to make again.
    async fn create_ordered(
        &self,
        config: push::OrderedConfig,
    ) -> Result<jetstream::consumer::Consumer<push::OrderedConfig>, Error> {
        let what = || format!("watching {}", self.name());
        let started = std::time::Instant::now();
        let replicated = self.kv.stream.cached_info().config.num_replicas > 1;
        let (mut attempt, mut long) = (0, CREATE_WAIT);
        loop {
            let wait = match (replicated && self.replica_gone().await, CREATE_WAITS_FIRST.get(attempt)) {
                (true, _) => CREATE_WAIT_PEER_GONE,
                (false, Some(&first)) if replicated => first,
                _ => {
                    let wait = long;
                    long = (long * 2).min(CREATE_WAIT_MAX);
                    wait
                }
            };
            // The request itself waits this long (the connection's default is shorter).
            let mut js = self.js.clone();
            js.set_timeout(wait);
            let name = &self.kv.stream.cached_info().config.name;
            let stream = js.get_stream_no_info(name).await.map_err(|e| Error::nats(&what(), e))?;
            attempt += 1;
            // An inbox of its own: an attempt given up may still be made, and must not
            // deliver into the watch that another attempt made.
            let config = push::OrderedConfig { deliver_subject: self.js.client().new_inbox(), ..config.clone() };
            match stream.create_consumer(config.clone()).await {
                Err(e) if passing(&e) && started.elapsed() < CREATE_GIVE_UP => {
                    warn!("{}: a consumer's creation, asked again: {e}", what());
                    // Not at once when it failed at once (no server to take it).
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(Error::nats(&what(), e)),
                // The consumer makes itself again (after missed heartbeats) through the
                // context it holds: the connection's, with its usual wait, not this one.
                Ok(created) => {
                    let info = created.cached_info().clone();
                    return Ok(jetstream::consumer::Consumer::new(config, info, self.js.clone()));
                }
            }
        }
    }

    /// Whether a replica of the bucket's stream looks gone, or the stream's state cannot
    /// be read (JetStream electing a leader): a consumer may be put where it is never made.
    async fn replica_gone(&self) -> bool {
        let mut stream = self.kv.stream.clone();
        match tokio::time::timeout(CREATE_WAIT_PEER_GONE * 2, stream.info()).await {
            Ok(Ok(info)) => {
                info.cluster.as_ref().is_some_and(|c| c.replicas.iter().any(|r| r.offline || r.active > REPLICA_SILENT))
            }
            _ => true,
        }
    }

    /// The latest live value of every key matching `filter`.
    pub async fn scan(&self, filter: &str) -> Result<Vec<(String, Versioned)>, Error> {
        let mut w = self.watch(filter).await?;
        let mut out = Vec::new();
        if w.initially_empty {
            return Ok(out);
        }
        while let Some(change) = w.next().await {
            let change = change?;
            if let Some(value) = change.value {
                out.push((change.key, Versioned { value, revision: change.revision }));
            }
            if change.caught_up {
                break;
            }
        }
        Ok(out)
    }
}

/// Whether a consumer's creation may succeed when asked again: no answer in time, no
/// server to take the request, or JetStream without a leader for a moment (an election).
fn passing(e: &jetstream::stream::ConsumerError) -> bool {
    use jetstream::stream::ConsumerErrorKind;
    match e.kind() {
        ConsumerErrorKind::TimedOut | ConsumerErrorKind::Request => true,
        ConsumerErrorKind::JetStream(js) => {
            js.error_code() == jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE || js.code() == 503
        }
        _ => false,
    }
}

/// A running watch. `initially_empty`: there was nothing to catch up on.
pub struct Watch {
    pub initially_empty: bool,
    messages: push::Ordered,
    prefix: String,
    sourced: bool,
}

impl Watch {
    /// The next change; None when the watch ended for good.
    pub async fn next(&mut self) -> Option<Result<Change, Error>> {
        let message = match self.messages.next().await? {
            Ok(m) => m,
            Err(e) => return Some(Err(Error::nats("watch", e))),
        };
        let (stream_sequence, pending) = match message.info() {
            Ok(info) => (info.stream_sequence, info.pending),
            Err(e) => return Some(Err(Error::nats("watch", e))),
        };
        let key = message.subject.strip_prefix(self.prefix.as_str()).unwrap_or_default().to_string();
        let revision = match self.sourced {
            false => stream_sequence,
            true => match message
                .headers
                .as_ref()
                .and_then(|h| h.get(STREAM_SOURCE))
                .and_then(|v| source_sequence(v.as_str()))
            {
                Some(original) => original,
                None => {
                    return Some(Err(Error::nats(
                        "watch",
                        format!("{key}: no {STREAM_SOURCE} header with a sequence"),
                    )));
                }
            },
        };
        let deleted = message.headers.as_ref().is_some_and(|h| {
            h.get("KV-Operation").is_some_and(|op| op.as_str() != "PUT") || h.get("Nats-Marker-Reason").is_some()
        });
        let expired =
            message.headers.as_ref().and_then(|h| h.get("Nats-Marker-Reason")).is_some_and(|r| r.as_str() == "MaxAge");
        Some(Ok(Change {
            sequence: stream_sequence,
            key,
            value: (!deleted).then(|| message.payload.clone()),
            revision,
            caught_up: pending == 0,
            expired,
        }))
    }
}

/// The sequence a sourced message had in the stream it was copied from.
fn source_sequence(header: &str) -> Option<u64> {
    header.split_whitespace().nth(1)?.parse().ok()
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
    fn a_sourced_messages_original_sequence_is_read_from_its_header() {
        // As nats-server 2.14 writes it for the schedules index.
        let header = "KV_cronrun_jobs 42 $KV.cronrun_jobs.* $KV.cronrun_schedules.{{partition(64,1)}}.{{wildcard(1)}} \
                      $KV.cronrun_jobs.backup";
        assert_eq!(super::source_sequence(header), Some(42));
        assert_eq!(super::source_sequence("KV_cronrun_jobs"), None);
        assert_eq!(super::source_sequence("KV_cronrun_jobs x"), None);
    }

    #[test]
    fn both_wrong_last_sequence_answers_are_lost_races() {
        assert!(super::is_wrong_last_sequence(&PublishError::new(PublishErrorKind::WrongLastSequence)));
        assert!(super::is_wrong_last_sequence(&answer(10164)));
        assert!(!super::is_wrong_last_sequence(&answer(10077)));
        assert!(!super::is_wrong_last_sequence(&PublishError::new(PublishErrorKind::TimedOut)));
    }
}
