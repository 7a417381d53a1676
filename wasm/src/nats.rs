//! What Wasm host calls do in NATS: the job's private KV (bucket `<namespace>_jobkv`,
//! key `<job>.<key>`, part of the layout, within the job's quota) and publishing
//! (JetStream when a stream captures the subject, so `Nats-Msg-Id` deduplicates; core
//! NATS otherwise). Grants are checked by the caller; errors here are readable strings.

use async_nats::HeaderMap;
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

/// Largest message payload a job may publish.
const MAX_VALUE_BYTES: usize = 1 << 20;

/// How long the marker of a deleted key stays (and counts against the quota).
const DELETE_MARKER_TTL: std::time::Duration = std::time::Duration::from_secs(5);

impl NatsAccess {
    pub fn new(nats: HostNats, quota: KvQuota) -> Self {
        Self { nats, jobkv: OnceCell::new(), quota }
    }

    /// The name of the bucket that holds every job's private keys.
    pub fn jobkv_bucket(&self) -> String {
        self.nats.names.job_kv_bucket()
    }

    async fn jobkv(&self) -> Result<&kv::Store, String> {
        self.jobkv
            .get_or_try_init(|| async {
                // Part of the layout, which whoever opened it first created.
                let bucket = self.jobkv_bucket();
                self.nats.js.get_key_value(&bucket).await.map_err(|e| format!("kv unavailable: bucket {bucket}: {e}"))
            })
            .await
    }

    pub async fn kv_get(&self, job: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let kv = self.jobkv().await?;
        kv.get(format!("{job}.{key}")).await.map(|v| v.map(|b| b.to_vec())).map_err(|e| format!("kv get {key}: {e}"))
    }

    pub async fn kv_set(&self, job: &str, key: &str, value: Vec<u8>) -> Result<(), String> {
        let max = self.quota.max_value_bytes;
        if value.len() > max {
            return Err(format!(
                "kv set {key}: value of {} bytes is over the limit of {max} ([wasm] kv_max_value_bytes)",
                value.len()
            ));
        }
        let kv = self.jobkv().await?;
        let full = format!("{job}.{key}");
        let exists = kv.get(&full).await.map_err(|e| format!("kv set {key}: {e}"))?.is_some();
        if !exists {
            let held =
                self.keys_of(kv, job).await.map_err(|e| format!("kv set {key}: counting the job's keys: {e}"))?;
            if held >= self.quota.max_keys {
                return Err(format!(
                    "kv set {key}: the job holds {held} keys, its quota ([wasm] kv_max_keys); delete some first"
                ));
            }
        }
        kv.put(full, value.into()).await.map(|_| ()).map_err(|e| format!("kv set {key}: {e}"))
    }

    /// Removes the key with its history; the marker left behind expires, so a deleted key
    /// stops counting against the quota. A bucket created without markers gets a plain
    /// delete (its marker stays and counts).
    pub async fn kv_delete(&self, job: &str, key: &str) -> Result<(), String> {
        let kv = self.jobkv().await?;
        let full = format!("{job}.{key}");
        if kv.purge_with_ttl(&full, DELETE_MARKER_TTL).await.is_ok() {
            return Ok(());
        }
        kv.delete(full).await.map_err(|e| format!("kv delete {key}: {e}"))
    }

    /// Keys (and recent delete markers) the job has in its KV store.
    async fn keys_of(&self, kv: &kv::Store, job: &str) -> Result<usize, String> {
        use futures::TryStreamExt;
        let filter = format!("{}{job}.>", kv.prefix);
        let subjects = kv.stream.info_with_subjects(filter).await.map_err(|e| e.to_string())?;
        subjects.try_fold(0, |n, _| async move { Ok(n + 1) }).await.map_err(|e| e.to_string())
    }

    /// Publishes; waits for the stream's ack when a stream captures `subject`.
    pub async fn publish(&self, subject: &str, payload: Vec<u8>, headers: Vec<(String, String)>) -> Result<(), String> {
        // Checked again here, whatever the grant says (deploy refuses such grants): a
        // guest publishes through the agent's own connection.
        if let Some(reserved) = self.nats.names.grant_reaches_reserved(subject) {
            return Err(format!("publish to {subject} denied: {reserved} is reserved and no job may publish there"));
        }
        if payload.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "publish to {subject}: payload of {} bytes is over the limit of {MAX_VALUE_BYTES}",
                payload.len()
            ));
        }
        let mut map = HeaderMap::new();
        for (name, value) in &headers {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(format!("publish to {subject}: invalid header name {name:?}"));
            }
            if value.contains(['\r', '\n']) {
                return Err(format!("publish to {subject}: header {name} has a line break"));
            }
            map.append(name.as_str(), value.as_str());
        }
        let js = &self.nats.js;
        if js.stream_by_subject(subject).await.is_ok() {
            let ack = js
                .publish_with_headers(subject.to_string(), map, payload.into())
                .await
                .map_err(|e| format!("publish to {subject}: {e}"))?;
            ack.await.map(|_| ()).map_err(|e| format!("publish to {subject}: not acknowledged: {e}"))
        } else {
            let client = &self.nats.client;
            client
                .publish_with_headers(subject.to_string(), map, payload.into())
                .await
                .map_err(|e| format!("publish to {subject}: {e}"))?;
            client.flush().await.map_err(|e| format!("publish to {subject}: {e}"))
        }
    }
}
