//! Runner presence: `runner.<host>` in the leases bucket, with a TTL of three heartbeats,
//! so `cronrun status` lists live runners and a dead one disappears by itself.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::RunnerCtx;
use crate::names::lease_keys;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunnerPresence {
    pub host: String,
    pub pools: Vec<String>,
    pub slots: usize,
    pub running: usize,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub version: String,
}

pub(super) async fn publish(ctx: Arc<RunnerCtx>, cancel: CancellationToken) {
    let started_at = ctx.clock.now();
    let key = lease_keys::runner(&ctx.host);
    let ttl = ctx.config.heartbeat * 3;
    let mut tick = tokio::time::interval(ctx.config.heartbeat);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let presence = RunnerPresence {
            host: ctx.host.clone(),
            pools: ctx.config.pools.clone(),
            slots: ctx.config.slots,
            running: ctx.running.load(Ordering::SeqCst),
            started_at,
            heartbeat_at: ctx.clock.now(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let body = match serde_json::to_vec(&presence) {
            Ok(body) => body.into(),
            Err(e) => {
                warn!("runner presence not written: cannot encode it: {e}");
                continue;
            }
        };
        let write = (key.as_str(), body, Some(ttl));
        if let Err(e) = ctx.server_time.write_and_measure(&ctx.store.leases, write, &ctx.raw_clock).await {
            warn!("runner presence not written: {e}");
        }
    }
}

pub(super) async fn remove(ctx: &RunnerCtx) {
    let key = lease_keys::runner(&ctx.host);
    if let Err(e) = ctx.store.leases.purge(&key, crate::store::kv::RELEASE_MARKER_TTL).await {
        warn!("runner presence not removed: {e}");
    }
}
