//! What Wasm host calls do in NATS: the job's private KV (bucket `<namespace>_jobkv`,
//! key `<job>.<key>`, part of the layout) and publishing
//! (JetStream when a stream captures the subject, so `Nats-Msg-Id` deduplicates; core
//! NATS otherwise). Grants are checked by the caller; errors here are readable strings.

use async_nats::HeaderMap;
use async_nats::jetstream::kv;
use tokio::sync::OnceCell;

use crate::store::Store;

/// NATS access shared by every run of one runtime.
pub struct NatsAccess {
    store: Store,
    jobkv: OnceCell<kv::Store>,
}

/// Largest KV value or message payload a job may write.
const MAX_VALUE_BYTES: usize = 1 << 20;

impl NatsAccess {
    pub fn new(store: Store) -> Self {
        Self { store, jobkv: OnceCell::new() }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The name of the bucket that holds every job's private keys.
    pub fn jobkv_bucket(&self) -> String {
        self.store.names.job_kv_bucket()
    }

    async fn jobkv(&self) -> Result<&kv::Store, String> {
        self.jobkv
            .get_or_try_init(|| async {
                // Part of the layout, which whoever opened it first created.
                let bucket = self.jobkv_bucket();
                self.store.js.get_key_value(&bucket).await.map_err(|e| format!("kv unavailable: bucket {bucket}: {e}"))
            })
            .await
    }

    pub async fn kv_get(&self, job: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let kv = self.jobkv().await?;
        kv.get(format!("{job}.{key}")).await.map(|v| v.map(|b| b.to_vec())).map_err(|e| format!("kv get {key}: {e}"))
    }

    pub async fn kv_set(&self, job: &str, key: &str, value: Vec<u8>) -> Result<(), String> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!("kv set {key}: value of {} bytes is over the limit of {MAX_VALUE_BYTES}", value.len()));
        }
        let kv = self.jobkv().await?;
        kv.put(format!("{job}.{key}"), value.into()).await.map(|_| ()).map_err(|e| format!("kv set {key}: {e}"))
    }

    pub async fn kv_delete(&self, job: &str, key: &str) -> Result<(), String> {
        let kv = self.jobkv().await?;
        kv.delete(format!("{job}.{key}")).await.map_err(|e| format!("kv delete {key}: {e}"))
    }

    /// Publishes; waits for the stream's ack when a stream captures `subject`.
    pub async fn publish(&self, subject: &str, payload: Vec<u8>, headers: Vec<(String, String)>) -> Result<(), String> {
        // Checked again here, whatever the grant says (deploy refuses such grants): a
        // guest publishes through the agent's own connection.
        if let Some(reserved) = self.store.names.grant_reaches_reserved(subject) {
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
        let js = &self.store.js;
        if js.stream_by_subject(subject).await.is_ok() {
            let ack = js
                .publish_with_headers(subject.to_string(), map, payload.into())
                .await
                .map_err(|e| format!("publish to {subject}: {e}"))?;
            ack.await.map(|_| ()).map_err(|e| format!("publish to {subject}: not acknowledged: {e}"))
        } else {
            let client = &self.store.client;
            client
                .publish_with_headers(subject.to_string(), map, payload.into())
                .await
                .map_err(|e| format!("publish to {subject}: {e}"))?;
            client.flush().await.map_err(|e| format!("publish to {subject}: {e}"))
        }
    }
}
