//! A lease: a key in `cronrun_leases` that expires on the server's clock (per-key TTL)
//! unless its holder renews it. Renewal is a compare-and-set that sets the TTL again, so a
//! holder that stalled past its TTL finds its renewal refused (`ErrorKind::Conflict`) and
//! must stop acting as holder.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::kv::{Bucket, Fenced};
use crate::error::Error;

/// What a lease key holds; readable with `nats kv get`. The acquire and renew times are
/// for people reading the bucket, stamped from the wall clock: nothing decides by them
/// (expiry is the server's TTL), so they are not taken from the injected clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseValue {
    pub holder: String,
    pub acquired_at: DateTime<Utc>,
    pub renewed_at: DateTime<Utc>,
    pub ttl_ms: u64,
    /// When what the lease guards ended, if it has but the lease is still held (a run's
    /// overlap lease, held until its final record is written): the fires behind it judge
    /// by this whether it overlapped them (see `runner::guards`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
}

#[derive(Debug)]
pub struct Lease {
    kv: Bucket,
    key: String,
    value: LeaseValue,
    ttl: Duration,
    fence: Fenced,
    /// See `held_until`.
    held_until: tokio::time::Instant,
}

/// Until when a lease written with `ttl`, asked at `asked`, is surely still ours as far as
/// the server's clock goes: it expires its TTL after the server applied the write, which
/// was after we asked. The TTL as sent (whole seconds), less a tenth for the clocks' drift.
pub fn held_until(asked: tokio::time::Instant, ttl: Duration) -> tokio::time::Instant {
    let ttl = Duration::from_secs(ttl.as_secs().max(1));
    asked + ttl - ttl / 10
}

impl Lease {
    /// Takes the lease if nobody holds it. None: held by someone else.
    pub async fn try_acquire(kv: &Bucket, key: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, Error> {
        let asked = tokio::time::Instant::now();
        let now = Utc::now();
        let value = LeaseValue {
            holder: holder.to_string(),
            acquired_at: now,
            renewed_at: now,
            ttl_ms: ttl.as_millis() as u64,
            ended_at: None,
        };
        let bytes = serde_json::to_vec(&value).map_err(|e| Error::other(&format!("encoding lease {key}"), e))?.into();
        match kv.create(key, bytes, Some(ttl)).await {
            Ok(revision) => Ok(Some(Lease {
                kv: kv.clone(),
                key: key.to_string(),
                value,
                ttl,
                fence: Fenced::at(revision),
                held_until: held_until(asked, ttl),
            })),
            Err(e) if *e.kind() == crate::error::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Extends the lease by its TTL. `ErrorKind::Conflict`: it was lost.
    pub async fn renew(&mut self) -> Result<(), Error> {
        let asked = tokio::time::Instant::now();
        self.value.renewed_at = Utc::now();
        let bytes = serde_json::to_vec(&self.value)
            .map_err(|e| Error::other(&format!("encoding lease {}", self.key), e))?
            .into();
        self.kv.update_fenced(&self.key, bytes, &mut self.fence, Some(self.ttl)).await?;
        self.held_until = held_until(asked, self.ttl);
        Ok(())
    }

    /// Says, with a renewal, that what the lease guards ended `at` (see
    /// [`LeaseValue::ended_at`]).
    pub async fn renew_ended(&mut self, at: DateTime<Utc>) -> Result<(), Error> {
        self.value.ended_at = Some(at);
        self.renew().await
    }

    /// Until when the lease is surely still ours (as of its last write).
    pub fn held_until(&self) -> tokio::time::Instant {
        self.held_until
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
    Ok(holder_at(kv, key).await?.map(|(value, _)| value))
}

/// The holder of `key`, if held, and the revision of the key that says so.
pub async fn holder_at(kv: &Bucket, key: &str) -> Result<Option<(LeaseValue, u64)>, Error> {
    let read = kv.get(key).await?;
    Ok(read.and_then(|v| Some((serde_json::from_slice(&v.value).ok()?, v.revision))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_ours_until_its_ttl_as_sent_less_a_tenth_after_we_asked() {
        let asked = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        // The TTL goes out in whole seconds, at least one: the server counts that.
        let cases = [(ms(10_000), ms(9_000)), (ms(2_500), ms(1_800)), (ms(500), ms(900)), (ms(15_000), ms(13_500))];
        for (ttl, ours) in cases {
            assert_eq!(held_until(asked, ttl) - asked, ours, "a TTL of {ttl:?}");
        }
    }
}
