//! What Wasm host calls do in NATS: the job's private KV (bucket `<namespace>_jobkv`,
//! key `<job>.<key>`, part of the layout, within the job's quota) and publishing
//! (JetStream when a stream captures the subject, so `Nats-Msg-Id` deduplicates; core
//! NATS otherwise). Grants are checked by the caller; errors here are [`HostCallError`]s,
//! whose text the guest gets.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::{self, kv};
use tokio::sync::OnceCell;

use cronrun_model::names::Names;

/// The agent's NATS connection, as guests reach it.
#[derive(Clone)]
pub struct HostNats {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub names: Names,
}

/// NATS access shared by every run of one runtime.
pub struct NatsAccess {
    nats: HostNats,
    jobkv: OnceCell<kv::Store>,
    quota: KvQuota,
    captured: Captured,
}

/// Whether a stream captures a subject, as the JetStream API said within
/// [`CAPTURED_FOR`]: asking it at every publish was a request per run that queues under
/// load (1,000 guests a second each publishing an event: stored some 60 ms after the
/// guest's code ran). A stream made since a subject was found uncaptured still stores
/// what is published there, unacknowledged until the answer is asked again; one removed
/// since is noticed at the publish (no responders).
#[derive(Default)]
struct Captured(std::sync::Mutex<HashMap<String, (Instant, bool)>>);

/// How long an answer of the JetStream API about a subject is kept.
const CAPTURED_FOR: Duration = Duration::from_secs(10);
/// Subjects whose answer is kept at most: past it, the answers kept are dropped at once.
const CAPTURED_MAX: usize = 4096;

impl Captured {
    async fn of(&self, js: &jetstream::Context, subject: &str) -> bool {
        let kept =
            self.lock().get(subject).filter(|(at, _)| at.elapsed() < CAPTURED_FOR).map(|(_, captured)| *captured);
        if let Some(captured) = kept {
            return captured;
        }
        use async_nats::jetstream::context::GetStreamByNameErrorKind;
        let captured = match js.stream_by_subject(subject).await {
            Ok(_) => true,
            Err(e) if matches!(e.kind(), GetStreamByNameErrorKind::NotFound) => false,
            // No answer (NATS busy or away): published plainly, and asked again next time.
            Err(_) => return false,
        };
        let mut answers = self.lock();
        if answers.len() >= CAPTURED_MAX {
            answers.clear();
        }
        answers.insert(subject.to_string(), (Instant::now(), captured));
        captured
    }

    fn forget(&self, subject: &str) {
        self.lock().remove(subject);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, bool)>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What one job may keep in its KV store (`[wasm] kv_max_keys`, `kv_max_value_bytes`): at
/// most their product in bytes, so that one guest cannot fill the JetStream storage every
/// job and cronrun itself share. Counted when a key is added; runs of one job adding keys
/// at the same instant on several runners may pass it by one key each.
#[derive(Debug, Clone, Copy)]
pub struct KvQuota {
    pub max_keys: usize,
    pub max_value_bytes: usize,
}

/// Why a KV or publish host call failed: refused by a limit, or NATS failed (the
/// async-nats error kept as the source). The guest gets the text.
#[derive(Debug, thiserror::Error)]
pub enum HostCallError {
    #[error("kv unavailable: bucket {bucket}: {source}")]
    KvUnavailable { bucket: String, source: jetstream::context::KeyValueError },
    #[error("kv {op} {key}: {source}")]
    Kv { op: &'static str, key: String, source: async_nats::Error },
    #[error("kv set {key}: value of {len} bytes is over the limit of {max} ([wasm] kv_max_value_bytes)")]
    ValueTooLarge { key: String, len: usize, max: usize },
    #[error("kv set {key}: counting the job's keys: {source}")]
    CountingKeys { key: String, source: async_nats::Error },
    #[error("kv set {key}: the job holds {held} keys, its quota ([wasm] kv_max_keys); delete some first")]
    OverQuota { key: String, held: usize },
    #[error("publish to {subject} denied: {reserved} is reserved and no job may publish there")]
    Reserved { subject: String, reserved: String },
    #[error("publish to {subject}: payload of {len} bytes is over the limit of {MAX_VALUE_BYTES}")]
    PayloadTooLarge { subject: String, len: usize },
    #[error("publish to {subject}: invalid header name {name:?}")]
    HeaderName { subject: String, name: String },
    #[error("publish to {subject}: header {name} has a line break")]
    HeaderLineBreak { subject: String, name: String },
    #[error("publish to {subject}: {source}")]
    Publish { subject: String, source: async_nats::Error },
    #[error("publish to {subject}: not acknowledged: {source}")]
    NotAcknowledged { subject: String, source: async_nats::Error },
}

/// Largest message payload a job may publish.
const MAX_VALUE_BYTES: usize = 1 << 20;

/// How long the marker of a deleted key stays (and counts against the quota).
const DELETE_MARKER_TTL: std::time::Duration = std::time::Duration::from_secs(5);

impl NatsAccess {
    pub fn new(nats: HostNats, quota: KvQuota) -> Self {
        Self { nats, jobkv: OnceCell::new(), quota, captured: Captured::default() }
    }

    /// The name of the bucket that holds every job's private keys.
    pub fn jobkv_bucket(&self) -> String {
        self.nats.names.job_kv_bucket()
    }

    async fn jobkv(&self) -> Result<&kv::Store, HostCallError> {
        self.jobkv
            .get_or_try_init(|| async {
                // Part of the layout, which whoever opened it first created.
                let bucket = self.jobkv_bucket();
                self.nats
                    .js
                    .get_key_value(&bucket)
                    .await
                    .map_err(|source| HostCallError::KvUnavailable { bucket, source })
            })
            .await
    }

    pub async fn kv_get(&self, job: &str, key: &str) -> Result<Option<Vec<u8>>, HostCallError> {
        let kv = self.jobkv().await?;
        kv.get(format!("{job}.{key}")).await.map(|v| v.map(|b| b.to_vec())).map_err(kv_failed("get", key))
    }

    pub async fn kv_set(&self, job: &str, key: &str, value: Vec<u8>) -> Result<(), HostCallError> {
        let max = self.quota.max_value_bytes;
        if value.len() > max {
            return Err(HostCallError::ValueTooLarge { key: key.to_string(), len: value.len(), max });
        }
        let kv = self.jobkv().await?;
        let full = format!("{job}.{key}");
        let exists = kv.get(&full).await.map_err(kv_failed("set", key))?.is_some();
        if !exists {
            let held = self
                .keys_of(kv, job)
                .await
                .map_err(|source| HostCallError::CountingKeys { key: key.to_string(), source })?;
            if held >= self.quota.max_keys {
                return Err(HostCallError::OverQuota { key: key.to_string(), held });
            }
        }
        kv.put(full, value.into()).await.map(|_| ()).map_err(kv_failed("set", key))
    }

    /// Removes the key with its history; the marker left behind expires, so a deleted key
    /// stops counting against the quota. A bucket created without markers gets a plain
    /// delete (its marker stays and counts).
    pub async fn kv_delete(&self, job: &str, key: &str) -> Result<(), HostCallError> {
        let kv = self.jobkv().await?;
        let full = format!("{job}.{key}");
        if kv.purge_with_ttl(&full, DELETE_MARKER_TTL).await.is_ok() {
            return Ok(());
        }
        kv.delete(full).await.map_err(kv_failed("delete", key))
    }

    /// Keys (and recent delete markers) the job has in its KV store.
    async fn keys_of(&self, kv: &kv::Store, job: &str) -> Result<usize, async_nats::Error> {
        use futures::TryStreamExt;
        let filter = format!("{}{job}.>", kv.prefix);
        let subjects = kv.stream.info_with_subjects(filter).await?;
        Ok(subjects.try_fold(0, |n, _| async move { Ok(n + 1) }).await?)
    }

    /// Publishes; waits for the stream's ack when a stream captures `subject` (see
    /// [`Captured`]).
    pub async fn publish(
        &self,
        subject: &str,
        payload: Vec<u8>,
        headers: Vec<(String, String)>,
    ) -> Result<(), HostCallError> {
        let subject_name = || subject.to_string();
        // Checked again here, whatever the grant says (deploy refuses such grants): a
        // guest publishes through the agent's own connection.
        if let Some(reserved) = self.nats.names.grant_reaches_reserved(subject) {
            return Err(HostCallError::Reserved { subject: subject_name(), reserved });
        }
        if payload.len() > MAX_VALUE_BYTES {
            return Err(HostCallError::PayloadTooLarge { subject: subject_name(), len: payload.len() });
        }
        let mut map = HeaderMap::new();
        for (name, value) in &headers {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(HostCallError::HeaderName { subject: subject_name(), name: name.clone() });
            }
            if value.contains(['\r', '\n']) {
                return Err(HostCallError::HeaderLineBreak { subject: subject_name(), name: name.clone() });
            }
            map.append(name.as_str(), value.as_str());
        }
        let failed = |e: async_nats::Error| HostCallError::Publish { subject: subject_name(), source: e };
        if self.captured.of(&self.nats.js, subject).await {
            let js = &self.nats.js;
            let ack = js
                .publish_with_headers(subject.to_string(), map, payload.into())
                .await
                .map_err(|e| failed(e.into()))?;
            return match ack.await {
                Ok(_) => Ok(()),
                // The stream went since it was looked up: published, as to no stream.
                Err(e) if e.kind() == PublishErrorKind::StreamNotFound => {
                    self.captured.forget(subject);
                    Ok(())
                }
                Err(e) => Err(HostCallError::NotAcknowledged { subject: subject_name(), source: e.into() }),
            };
        }
        let client = &self.nats.client;
        client.publish_with_headers(subject.to_string(), map, payload.into()).await.map_err(|e| failed(e.into()))?;
        client.flush().await.map_err(|e| failed(e.into()))
    }
}

/// The error of a KV `op` on `key`, the async-nats error as its source.
fn kv_failed<E: Into<async_nats::Error>>(op: &'static str, key: &str) -> impl FnOnce(E) -> HostCallError {
    let key = key.to_string();
    move |e| HostCallError::Kv { op, key, source: e.into() }
}
