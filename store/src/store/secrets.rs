//! Secrets, in the `<ns>_secrets` bucket: written by admins (`cronrun secret set|rm`),
//! read one at a time by name by runners when a run starts and by schedulers when they
//! deliver a notice; viewers have no route to it (`model::roles`). Values are read at
//! each use and never kept: a secret set anew is what the next run or delivery reads.
//!
//! The bucket is not part of the layout (`layout.rs`): the first `secret set` creates it,
//! so that no other role's start-up check hands out its stream's info. It keeps one
//! revision per name (history 1): a value rotated or removed is gone from the bucket.

use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures::future::try_join_all;

use super::kv::{Bucket, WRITTEN_BY};
use super::layout::LEASE_MARKER_TTL;
use super::on_demand::OnDemand;
use crate::error::{Error, ErrorKind};
use crate::names::Names;
use crate::spec::secret::{MAX_SECRET_BYTES, SecretValues, check_secret_value, validate_secret_name};

/// What the server's bound on a secret's message leaves for its headers beyond the value.
const HEADERS_ROOM: usize = 4096;

/// A handle on the secrets bucket. Clones share the opened bucket (never a value).
#[derive(Clone, Debug)]
pub struct Secrets {
    bucket: OnDemand,
    /// Who this handle's writes are made by (the CLI's identity), for `secret ls`.
    by: Option<Arc<str>>,
}

/// One secret as `secret ls` lists it: never its value.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SecretInfo {
    pub name: String,
    pub updated: chrono::DateTime<chrono::Utc>,
    /// The identity that set it (`Cronrun-By`), when it was set through the CLI.
    pub by: Option<String>,
}

impl Secrets {
    pub fn new(js: jetstream::Context, names: &Names) -> Self {
        Self { bucket: OnDemand::new(js, names, names.secrets_bucket(), "secrets"), by: None }
    }

    /// This handle with every write marked as made by `by`.
    pub fn signed_by(mut self, by: &str) -> Self {
        self.by = Some(by.into());
        self
    }

    pub fn bucket(&self) -> &str {
        self.bucket.name()
    }

    /// The bucket, or None when no secret was ever set (it does not exist).
    async fn open(&self) -> Result<Option<&kv::Store>, Error> {
        self.bucket.open().await
    }

    /// The value of secret `name`, None if there is none. A value not as `secret set`
    /// writes it (put by other means) is an error naming the secret.
    pub async fn get(&self, name: &str) -> Result<Option<String>, Error> {
        validate_secret_name(name)?;
        let Some(store) = self.open().await? else { return Ok(None) };
        let entry = store.entry(name).await.map_err(|e| Error::nats(&format!("reading secret {name}"), e))?;
        match entry {
            Some(entry) if entry.operation == kv::Operation::Put => check_secret_value(name, entry.value.to_vec())
                .map(Some)
                .map_err(|e| Error::invalid("secret", format!("{e} (set it again with `cronrun secret set {name}`)"))),
            _ => Ok(None),
        }
    }

    /// The values of every secret of `names`, read now: a missing one is a `NotFound`
    /// error naming it and what to do. Read all at once.
    pub async fn resolve<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<SecretValues, Error> {
        let reads = names.into_iter().map(|name| async move {
            match self.get(name).await? {
                Some(value) => Ok((name.to_string(), value)),
                None => Err(missing(name)),
            }
        });
        Ok(try_join_all(reads).await?.into_iter().collect())
    }

    /// The names of `names` that hold no secret (an admin's check at `apply`).
    pub async fn missing<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, Error> {
        let reads = names.into_iter().map(|name| async move { Ok::<_, Error>((name, self.exists(name).await?)) });
        let found = try_join_all(reads).await?;
        Ok(found.into_iter().filter(|(_, exists)| !exists).map(|(name, _)| name.to_string()).collect())
    }

    async fn exists(&self, name: &str) -> Result<bool, Error> {
        let Some(store) = self.open().await? else { return Ok(false) };
        let entry = store.entry(name).await.map_err(|e| Error::nats(&format!("reading secret {name}"), e))?;
        Ok(entry.is_some_and(|e| e.operation == kv::Operation::Put))
    }

    /// Sets secret `name` to `value` (checked as `check_secret_value` does), creating the
    /// bucket with `replicas` if it does not exist yet. Returns the revision.
    pub async fn set(&self, name: &str, value: &str, replicas: usize) -> Result<u64, Error> {
        validate_secret_name(name)?;
        let store = self.bucket.open_or_create(config(replicas)).await?;
        self.writer(store).put(name, Bytes::copy_from_slice(value.as_bytes()), None).await
    }

    /// Removes secret `name` and its history. False when there was none.
    pub async fn remove(&self, name: &str) -> Result<bool, Error> {
        validate_secret_name(name)?;
        if !self.exists(name).await? {
            return Ok(false);
        }
        let Some(store) = self.open().await? else { return Ok(false) };
        self.writer(store.clone()).purge(name, LEASE_MARKER_TTL).await?;
        Ok(true)
    }

    /// Every secret's name, when it was set and by whom, by name; never a value (the
    /// names are read without values, then each one's last write for its time).
    pub async fn list(&self) -> Result<Vec<SecretInfo>, Error> {
        let Some(store) = self.open().await? else { return Ok(Vec::new()) };
        let keys = self.bucket.bucket(store.clone()).keys(">").await?;
        let infos = keys.into_iter().map(|name| async move {
            let subject = format!("$KV.{}.{name}", self.bucket.name());
            let last = store.stream.direct_get_last_for_subject(&subject).await;
            let last = last.map_err(|e| Error::nats(&format!("reading when secret {name} was set"), e))?;
            let updated = chrono::DateTime::from_timestamp(last.time.unix_timestamp(), last.time.nanosecond())
                .unwrap_or_default();
            let by = last.headers.get(WRITTEN_BY).map(|v| v.as_str().to_string());
            Ok::<_, Error>(SecretInfo { name, updated, by })
        });
        let mut infos = try_join_all(infos).await?;
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(infos)
    }

    fn writer(&self, store: kv::Store) -> Bucket {
        let bucket = self.bucket.bucket(store);
        match &self.by {
            Some(by) => bucket.signed_by(by),
            None => bucket,
        }
    }
}

/// The secrets bucket as the first `secret set` makes it, with `replicas`.
fn config(replicas: usize) -> kv::Config {
    kv::Config {
        description: "cronrun secrets: read by runners and schedulers, never by viewers".into(),
        history: 1,
        // The server refuses a much larger value however it is written (`nats kv put`);
        // it counts the headers too (`Cronrun-By`), hence the room.
        max_value_size: i32::try_from(MAX_SECRET_BYTES + HEADERS_ROOM).unwrap_or(i32::MAX),
        num_replicas: replicas.max(1),
        // A removed secret's marker does not stay for ever.
        limit_markers: Some(LEASE_MARKER_TTL),
        ..Default::default()
    }
}

/// The error of a secret a spec names and the bucket does not hold.
pub fn missing(name: &str) -> Error {
    Error::new(ErrorKind::NotFound, format!("secret {name} does not exist: set it with `cronrun secret set {name}`"))
}
