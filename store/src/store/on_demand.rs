//! A bucket outside the layout, made by the first write that needs it (secrets,
//! calendars): absent until then, so that no role's start-up check hands out its
//! stream's info. Opened at its first use and kept: opening asks for the stream's info,
//! a round trip each read would otherwise pay.

use std::sync::Arc;

use async_nats::jetstream::{self, kv};

use crate::error::Error;
use crate::model::jsapi::JsApi;
use crate::names::Names;

use super::kv::Bucket;

/// A handle on one such bucket. Clones share the opened bucket.
#[derive(Clone, Debug)]
pub struct OnDemand {
    js: jetstream::Context,
    /// The API `js` addresses (see `Bucket::new`).
    api: JsApi,
    name: String,
    /// What it holds, for errors: "secrets", "calendars".
    what: &'static str,
    /// The jobs bucket's stream, whose placement the bucket takes when created.
    jobs_stream: String,
    opened: Arc<tokio::sync::OnceCell<kv::Store>>,
}

impl OnDemand {
    pub fn new(js: jetstream::Context, names: &Names, name: String, what: &'static str) -> Self {
        let (api, jobs_stream) = (names.js_api().clone(), format!("KV_{}", names.jobs_bucket()));
        Self { js, api, name, what, jobs_stream, opened: Arc::default() }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bucket, or None when nothing was ever written (it does not exist).
    pub async fn open(&self) -> Result<Option<&kv::Store>, Error> {
        if let Some(store) = self.opened.get() {
            return Ok(Some(store));
        }
        match self.js.get_key_value(&self.name).await {
            Ok(store) => Ok(Some(self.opened.get_or_init(|| async { store }).await)),
            Err(e) if names_a_missing_stream(&e) => Ok(None),
            Err(e) => Err(Error::nats(&format!("opening the {} bucket {}", self.what, self.name), e)),
        }
    }

    /// `store` as a `Bucket` of this deployment's API.
    pub fn bucket(&self, store: kv::Store) -> Bucket {
        Bucket::new(store, self.js.clone(), &self.api)
    }

    /// The bucket, created with `config` (its name and placement set here: where the
    /// layout is) if it does not exist yet; one created meanwhile is used as it is.
    pub async fn open_or_create(&self, config: kv::Config) -> Result<kv::Store, Error> {
        if let Some(store) = self.open().await? {
            return Ok(store.clone());
        }
        let placement = super::layout::placement_of(&self.js, &self.jobs_stream).await;
        let config = kv::Config { bucket: self.name.clone(), placement, ..config };
        let store = match self.js.create_key_value(config).await {
            Ok(store) => store,
            Err(create) => self
                .js
                .get_key_value(&self.name)
                .await
                .map_err(|_| Error::nats(&format!("creating the {} bucket {}", self.what, self.name), create))?,
        };
        Ok(self.opened.get_or_init(|| async { store }).await.clone())
    }
}

/// Whether opening a bucket failed because its stream does not exist (rather than NATS
/// being away, or the identity lacking the right to ask).
fn names_a_missing_stream(e: &async_nats::jetstream::context::KeyValueError) -> bool {
    use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind};
    let asked = std::error::Error::source(e).and_then(|s| s.downcast_ref::<GetStreamError>());
    asked.is_some_and(|e| {
        matches!(e.kind(), GetStreamErrorKind::JetStream(js)
            if js.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND)
    })
}
