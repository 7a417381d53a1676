//! The scheduler: while it holds the shard lease it turns due fires into dispatched runs.
//!
//! - `queue.rs`: next fires of every job (heap).
//! - `leader.rs`: the work done while holding the lease.
//! - `reaper.rs`: runs whose runner died become `lost`, and are retried.
//! - `catchup.rs`: late fires: run, catch up or record as missed.
//!
//! One shard for now (`shard.0`); every agent runs a scheduler and all but one stand by.
//! A standby watches the lease key and takes over as soon as it is released or its TTL
//! runs out on the server. The holder keeps a watermark beside the lease (all fires up to
//! it are dispatched), so a successor resumes exactly where it stopped; a fire dispatched
//! twice is refused by its run record's create-if-absent and the `Nats-Msg-Id`.

mod catchup;
mod leader;
mod queue;
mod reaper;

use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::catalog::{Catalog, CatalogEvent};
use crate::clock::SharedClock;
use crate::names::lease_keys;
use crate::store::Store;
use crate::store::lease::Lease;

pub use queue::{Due, FireQueue};

/// Scheduler settings (`[scheduler]` in `cronrun.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Lease TTL: how long a dead scheduler holds up its successor. Default 10s.
    #[serde(with = "crate::spec::codec::duration")]
    pub lease_ttl: Duration,
    /// Runs are handed to runners this long before their fire instant, and started on
    /// the runner's own timer, so lateness does not grow with the number of fires at
    /// one instant. Default 1s.
    #[serde(with = "crate::spec::codec::duration")]
    pub lead: Duration,
    /// A fire found later than this (e.g. after an outage) is recorded as missed instead
    /// of run, unless its job sets `starting_deadline`. Default 60s.
    #[serde(with = "crate::spec::codec::duration")]
    pub default_deadline: Duration,
    /// Dispatches in flight at once. Default 256.
    pub max_in_flight: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(10),
            lead: Duration::from_secs(1),
            default_deadline: Duration::from_secs(60),
            max_in_flight: 256,
        }
    }
}

pub struct Scheduler {
    pub store: Store,
    pub catalog: Catalog,
    pub events: mpsc::UnboundedReceiver<CatalogEvent>,
    pub config: SchedulerConfig,
    pub clock: SharedClock,
    /// Who we are in lease values: `<host>/<instance>`.
    pub holder: String,
    pub shard: u32,
}

impl Scheduler {
    /// Stands by and leads in turn until `cancel`; releases the lease on the way out.
    pub async fn run(mut self, cancel: CancellationToken) {
        let key = lease_keys::shard(self.shard);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = self.catalog.wait_loaded() => {}
        }
        loop {
            let lease = tokio::select! {
                _ = cancel.cancelled() => return,
                lease = self.acquire(&key) => lease,
            };
            info!(shard = self.shard, holder = %self.holder, "scheduler lease acquired");
            match leader::lead(&mut self, lease, &cancel).await {
                Ok(()) => return,
                Err(e) => warn!(shard = self.shard, "scheduler stepped down: {e}"),
            }
        }
    }

    /// Waits for the lease: tries whenever the key changes (release, expiry) and at
    /// least every second, draining catalog events meanwhile (the leader rebuilds its
    /// queue from the catalog).
    async fn acquire(&mut self, key: &str) -> Lease {
        let mut lease_watch = self.store.leases.watch(key).await.ok();
        loop {
            match Lease::try_acquire(&self.store.leases, key, &self.holder, self.config.lease_ttl).await {
                Ok(Some(lease)) => return lease,
                Ok(None) => {}
                Err(e) => warn!("scheduler lease: {e}"),
            }
            let retry = tokio::time::sleep(Duration::from_secs(1));
            tokio::pin!(retry);
            loop {
                tokio::select! {
                    _ = &mut retry => break,
                    Some(_) = self.events.recv() => {}
                    change = async {
                        match lease_watch.as_mut() {
                            Some(w) => w.next().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        match change {
                            Some(Ok(c)) if c.value.is_none() => break,
                            Some(Ok(_)) => {}
                            _ => lease_watch = None,
                        }
                    }
                }
            }
        }
    }
}
