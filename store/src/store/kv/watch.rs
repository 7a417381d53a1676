//! Watches of a bucket's keys: an ordered consumer of the bucket's stream, filtered by
//! key, whose messages are read as changes (see `Change`).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::stream::RawMessageErrorKind;
use async_nats::jetstream::{self};
use bytes::Bytes;
use futures::StreamExt;
use tracing::warn;

use super::{Bucket, Removal};
use crate::error::Error;

/// The header of a sourced message: `<stream> <sequence> <filter> <transform> <subject>`.
const STREAM_SOURCE: &str = "Nats-Stream-Source";

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

    /// The latest values of the keys matching any of `filters`, in one pass over the
    /// bucket's stream however many filters there are, then their changes.
    pub async fn watch_all_of(&self, filters: &[String]) -> Result<Watch, Error> {
        self.follow_filters(filters, self.latest(), false).await
    }

    /// Changes of keys matching `filter` after `sequence` of the bucket's stream.
    pub async fn changes_after(&self, filter: &str, sequence: u64) -> Result<Watch, Error> {
        self.changes_after_all_of(&[filter.to_string()], sequence).await
    }

    /// Changes of keys matching any of `filters` after `sequence` of the bucket's stream,
    /// in one pass however many filters there are.
    pub async fn changes_after_all_of(&self, filters: &[String], sequence: u64) -> Result<Watch, Error> {
        let from = DeliverPolicy::ByStartSequence { start_sequence: sequence + 1 };
        self.follow_filters(filters, from, false).await
    }

    /// The entry at `sequence` of the bucket's stream, as a watch delivers it (never
    /// `caught_up`); None when there is none there (replaced or removed since).
    pub async fn entry_at(&self, sequence: u64) -> Result<Option<Change>, Error> {
        let prefix = format!("$KV.{}.", self.name());
        match self.kv.stream.get_raw_message(sequence).await {
            Ok(m) => {
                let entry = Entry { subject: &m.subject, headers: Some(&m.headers), sequence: m.sequence };
                entry.change(&prefix, self.sourced, &m.payload, false).map(Some)
            }
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(Error::nats(&format!("reading entry {sequence} of {}", self.name()), e)),
        }
    }

    /// The keys matching `filter`, from each one's latest state, without their values.
    pub(super) async fn keys_watch(&self, filter: &str) -> Result<Watch, Error> {
        self.follow(filter, self.latest(), true).await
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
        // Each attempt to create it gives the consumer its own inbox (`create_ordered`).
        let config = push::OrderedConfig {
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
            // Whether a replica looks gone is asked only once an attempt has failed: the
            // first wait is a second then anyway, and most watches are made at once.
            let gone = replicated && attempt > 0 && self.replica_gone().await;
            let wait = match (gone, CREATE_WAITS_FIRST.get(attempt)) {
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
    /// A leader elected after a replica died has never heard from it: nats-server reports
    /// it not current and active 0 s ago (not heard from at all), which counts as gone too.
    /// A live replica merely behind is not current but heard from: it does not count.
    async fn replica_gone(&self) -> bool {
        let mut stream = self.kv.stream.clone();
        match tokio::time::timeout(CREATE_WAIT_PEER_GONE * 2, stream.info()).await {
            Ok(Ok(info)) => info
                .cluster
                .as_ref()
                .is_some_and(|c| c.replicas.iter().any(|r| r.offline || r.active > REPLICA_SILENT || never_heard(r))),
            _ => true,
        }
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
            Err(e) => return Some(Err(Error::nats_boxed("watch", e))),
        };
        let entry = Entry { subject: &message.subject, headers: message.headers.as_ref(), sequence: stream_sequence };
        Some(entry.change(&self.prefix, self.sourced, &message.payload, pending == 0))
    }
}

/// A message of a bucket's stream, as a watch or a read of one sequence gives it.
struct Entry<'a> {
    subject: &'a str,
    headers: Option<&'a HeaderMap>,
    sequence: u64,
}

impl Entry<'_> {
    /// The change it is, for a bucket whose keys are under `prefix`.
    fn change(&self, prefix: &str, sourced: bool, payload: &Bytes, caught_up: bool) -> Result<Change, Error> {
        let key = self.subject.strip_prefix(prefix).unwrap_or_default().to_string();
        // One pass over the headers: `HeaderMap::get` makes a name and hashes it each time.
        let (mut source, mut removal) = (None, Removal::default());
        for (name, values) in self.headers.iter().flat_map(|h| h.iter()) {
            let Some(value) = values.first().map(|v| v.as_str()) else { continue };
            let name: &str = name.as_ref();
            if !removal.read(name, value) && name == STREAM_SOURCE {
                source = Some(value);
            }
        }
        let revision = match sourced {
            false => self.sequence,
            true => source
                .and_then(source_sequence)
                .ok_or_else(|| Error::nats_msg("watch", format!("{key}: no {STREAM_SOURCE} header with a sequence")))?,
        };
        Ok(Change {
            sequence: self.sequence,
            key,
            value: (!removal.removed).then(|| payload.clone()),
            revision,
            caught_up,
            expired: removal.expired,
        })
    }
}

/// A replica the stream's leader has not heard from since it was elected.
fn never_heard(replica: &jetstream::stream::PeerInfo) -> bool {
    !replica.current && replica.active.is_zero()
}

/// The sequence a sourced message had in the stream it was copied from.
fn source_sequence(header: &str) -> Option<u64> {
    header.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sourced_messages_original_sequence_is_read_from_its_header() {
        // As nats-server 2.14 writes it for the schedules index.
        let header = "KV_cronrun_jobs 42 $KV.cronrun_jobs.* $KV.cronrun_schedules.{{partition(64,1)}}.{{wildcard(1)}} \
                      $KV.cronrun_jobs.backup";
        assert_eq!(super::source_sequence(header), Some(42));
        assert_eq!(super::source_sequence("KV_cronrun_jobs"), None);
        assert_eq!(super::source_sequence("KV_cronrun_jobs x"), None);
    }
}
