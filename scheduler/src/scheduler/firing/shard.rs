//! One shard assigned to this scheduler: wait for its lease, lead while holding it, and
//! release it when the shard moves elsewhere or the agent stops.

use std::time::Duration;

use std::panic::AssertUnwindSafe;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use futures::FutureExt;
use tracing::{Instrument, debug, error, info_span, warn};

use super::leader::{LedShard, lead};
use crate::names::lease_keys;
use crate::scheduler::SchedulerCtx;
use crate::store::lease::Lease;

pub(in crate::scheduler) struct Shard {
    pub n: u32,
    pub ctx: SchedulerCtx,
    /// Tells the scheduler when we start (true) and stop (false) leading.
    pub state: mpsc::UnboundedSender<(u32, bool)>,
}

impl Shard {
    /// Stands by and leads in turn until `cancel`; releases the lease on the way out.
    pub async fn run(mut self, cancel: CancellationToken) {
        let span = info_span!("shard", shard = self.n);
        async move {
            let key = lease_keys::shard(self.n);
            loop {
                let Some(lease) = self.acquire(&key, &cancel).await else { return };
                if cancel.is_cancelled() {
                    // Taken as the shard moved away: give it up at once, so that its new
                    // owner need not wait out the TTL (fires would be late meanwhile).
                    if let Err(e) = lease.release().await {
                        warn!("releasing a shard lease taken while stopping: {e}");
                    }
                    return;
                }
                debug!(holder = %self.ctx.holder, "shard lease acquired");
                let _ = self.state.send((self.n, true));
                crate::metrics::shards_led(1.0);
                // A panic while leading must not end the shard for good: its other jobs
                // would never fire again. It steps down (the lease expires) and stands by.
                let shard = LedShard { n: self.n, ctx: &self.ctx };
                let led = AssertUnwindSafe(lead(&shard, lease, &cancel)).catch_unwind().await;
                crate::metrics::shards_led(-1.0);
                self.ctx.next_fires.clear(self.n);
                let _ = self.state.send((self.n, false));
                match led {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) if cancel.is_cancelled() => {
                        return warn!("stepped down from the shard while stopping: {e}");
                    }
                    Ok(Err(e)) => warn!("stepped down from the shard: {e}"),
                    Err(panic) => {
                        let why = crate::watchdog::panic_message(panic.as_ref());
                        error!("leading the shard panicked ({why}); standing by for it again");
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Waits for the lease: tries whenever the key changes (release, expiry) and at
    /// least every second. None once `cancel` is set. A write in flight is never
    /// abandoned (it may land unseen, leaving a lease nobody holds): cancellation is
    /// looked at only between attempts.
    async fn acquire(&mut self, key: &str, cancel: &CancellationToken) -> Option<Lease> {
        let mut lease_watch = None;
        loop {
            match Lease::try_acquire(&self.ctx.store.leases, key, &self.ctx.holder, self.ctx.config.lease_ttl).await {
                Ok(Some(lease)) => return Some(lease),
                Ok(None) => {}
                Err(e) => warn!("shard lease: {e}"),
            }
            // Watched only once taken by someone else: most leases are free at start.
            if lease_watch.is_none() {
                lease_watch = self.ctx.store.leases.watch(key).await.ok();
            }
            let retry = tokio::time::sleep(Duration::from_secs(1));
            tokio::pin!(retry);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = &mut retry => break,
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
