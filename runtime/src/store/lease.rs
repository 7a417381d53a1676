//! A lease: a key in `cronrun_leases` that expires on the server's clock (per-key TTL)
//! unless its holder renews it. Renewal is a compare-and-set that sets the TTL again, so a
//! holder that stalled past its TTL finds its renewal refused (`ErrorKind::Conflict`) and
//! must stop acting as holder.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::kv::{Bucket, Fenced};
use crate::error::Error;

/// What a lease key holds; readable with `nats kv get`. The times are for people reading
/// the bucket, stamped from the wall clock: nothing decides by them (expiry is the
/// server's TTL), so they are not taken from the injected clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseValue {
    pub holder: String,
    pub acquired_at: DateTime<Utc>,
    pub renewed_at: DateTime<Utc>,
    pub ttl_ms: u64,
}

#[derive(Debug)]
pub struct Lease {
    kv: Bucket,
    key: String,
    value: LeaseValue,
    ttl: Duration,
    fence: Fenced,
}

impl Lease {
    /// Takes the lease if nobody holds it. None: held by someone else.
    pub async fn try_acquire(kv: &Bucket, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, Error> {
        let now = Utc::now();
        let value = LeaseValue {
            holder: holder.to_string(),
            acquired_at: now,
            renewed_at: now,
            ttl_ms: ttl.as_millis() as u64,
        };
        let bytes = serde_json::to_vec(&value).unwrap_or_default().into();
        match kv.create(key, bytes, Some(ttl)).await {
            Ok(revision) => {
                Ok(Some(Lease { kv: kv.clone(), key: key.to_string(), value, ttl, fence: Fenced::at(revision) }))
            }
            Err(e) if *e.kind() == crate::error::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Extends the lease by its TTL. `ErrorKind::Conflict`: it was lost.
    pub async fn renew(&mut self) -> Result<(), Error> {
        self.value.renewed_at = Utc::now();
        let bytes = serde_json::to_vec(&self.value).unwrap_or_default().into();
        self.kv.update_fenced(&self.key, bytes, &mut self.fence, Some(self.ttl)).await?;
        Ok(())
    }

    /// Gives the lease up at once, so a successor need not wait for the TTL.
    pub async fn release(self) -> Result<(), Error> {
        self.kv.release_at(&self.key, self.fence.revision).await
    }

    pub fn key(&self) -> &str {
        &self.key
    }
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
    /// The TTL set again by the next renewal.
    pub fn set_ttl(&mut self, ttl: Duration) {
        self.ttl = ttl;
        self.value.ttl_ms = ttl.as_millis() as u64;
    }
    pub fn revision(&self) -> u64 {
        self.fence.revision
    }
}

/// The holder of `key`, if held.
pub async fn holder(kv: &Bucket, key: &str) -> Result<Option<LeaseValue>, Error> {
    Ok(kv.get(key).await?.and_then(|v| serde_json::from_slice(&v.value).ok()))
}
