//! What a shard's leader and its stand-by need of a lease, as traits: the leases bucket
//! and `store::lease::Lease` are the ones used; the unit tests drive the lease keeping and
//! the takeover with an in-memory table of their own (`fake_leases.rs`), on tokio's paused
//! clock, with no nats-server.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::store::kv::{Bucket, Change, Watch};
use crate::store::lease::Lease;

/// A shard's lease, held.
pub(super) trait ShardLease: Send + Sync {
    /// Until when the lease is surely still ours (as of its last answered write).
    fn held_until(&self) -> Instant;
    fn ttl(&self) -> Duration;
    /// Extends the lease by its TTL. `ErrorKind::Conflict`: it was lost.
    fn renew(&mut self) -> impl Future<Output = Result<(), Error>> + Send;
    /// Gives the lease up at once (nothing if it is no longer ours).
    fn release(self) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Where shard leases are taken, and their keys' changes watched.
pub(super) trait ShardLeases: Sync {
    type Lease: ShardLease;
    type Watch: KeyWatch;
    /// Takes the lease if nobody holds it. None: held by someone else.
    fn try_acquire(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<Self::Lease>, Error>> + Send;
    /// The changes of `key`, starting with its latest value.
    fn watch(&self, key: &str) -> impl Future<Output = Result<Self::Watch, Error>> + Send;
}

/// A watch of one lease key.
pub(super) trait KeyWatch: Send {
    /// The next change (a value of None: released or expired); None when the watch ended.
    fn next(&mut self) -> impl Future<Output = Option<Result<Change, Error>>> + Send;
}

impl ShardLease for Lease {
    fn held_until(&self) -> Instant {
        Lease::held_until(self)
    }
    fn ttl(&self) -> Duration {
        Lease::ttl(self)
    }
    fn renew(&mut self) -> impl Future<Output = Result<(), Error>> + Send {
        Lease::renew(self)
    }
    fn release(self) -> impl Future<Output = Result<(), Error>> + Send {
        Lease::release(self)
    }
}

impl ShardLeases for Bucket {
    type Lease = Lease;
    type Watch = Watch;
    fn try_acquire(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<Lease>, Error>> + Send {
        Lease::try_acquire(self, key, holder, ttl)
    }
    fn watch(&self, key: &str) -> impl Future<Output = Result<Watch, Error>> + Send {
        Bucket::watch(self, key)
    }
}

impl KeyWatch for Watch {
    fn next(&mut self) -> impl Future<Output = Option<Result<Change, Error>>> + Send {
        Watch::next(self)
    }
}
