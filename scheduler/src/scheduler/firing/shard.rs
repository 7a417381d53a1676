//! One shard assigned to this scheduler: wait for its lease, lead while holding it, and
//! release it when the shard moves elsewhere or the agent stops.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info_span, warn};

use super::leader::{LedShard, lead};
use super::shard_lease::{KeyWatch, ShardLease, ShardLeases};
use crate::error::Error;
use crate::names::lease_keys;
use crate::scheduler::SchedulerCtx;

pub(in crate::scheduler) struct Shard {
    pub n: u32,
    pub ctx: SchedulerCtx,
    /// Tells the scheduler when we start (true) and stop (false) leading.
    pub state: mpsc::UnboundedSender<(u32, bool)>,
}

impl Shard {
    /// Stands by and leads in turn until `cancel`; releases the lease on the way out.
    pub async fn run(self, cancel: CancellationToken) {
        let span = info_span!("shard", shard = self.n);
        async move {
            let key = lease_keys::shard(self.n);
            let (n, ctx, state, cancel) = (self.n, &self.ctx, &self.state, &cancel);
            let wanted = Wanted { key: &key, holder: &ctx.holder, ttl: ctx.config.lease_ttl };
            take_turns(&ctx.store.leases, &wanted, cancel, |lease| async move {
                debug!(holder = %ctx.holder, "shard lease acquired");
                let _ = state.send((n, true));
                crate::metrics::shards_led(1.0);
                let led = AssertUnwindSafe(lead(&LedShard { n, ctx }, lease, cancel)).catch_unwind().await;
                crate::metrics::shards_led(-1.0);
                ctx.next_fires.clear(n);
                let _ = state.send((n, false));
                led
            })
            .await
        }
        .instrument(span)
        .await
    }
}

/// The lease a shard's stand-by waits for: its key, who we are, its TTL.
pub(super) struct Wanted<'a> {
    pub key: &'a str,
    pub holder: &'a str,
    pub ttl: Duration,
}

/// What a turn of leading ended with: Ok(Ok) cancelled, Ok(Err) the lease lost, Err a panic.
pub(super) type Turn = std::thread::Result<Result<(), Error>>;

/// Stands by for the lease and `lead`s with it in turn, until `cancel`. A lease taken as
/// the shard moved away (cancelled meanwhile) is released at once, so that its new owner
/// need not wait out the TTL (fires would be late meanwhile). A panic while leading must
/// not end the shard for good (its other jobs would never fire again): it steps down (the
/// lease expires) and stands by again a second later.
pub(super) async fn take_turns<A, F, Led>(leases: &A, wanted: &Wanted<'_>, cancel: &CancellationToken, mut lead: F)
where
    A: ShardLeases,
    F: FnMut(A::Lease) -> Led,
    Led: Future<Output = Turn>,
{
    loop {
        let Some(lease) = acquire(leases, wanted, cancel).await else { return };
        if cancel.is_cancelled() {
            if let Err(e) = lease.release().await {
                warn!("releasing a shard lease taken while stopping: {e}");
            }
            return;
        }
        match lead(lease).await {
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

/// Waits for the lease: tries whenever the key changes (release, expiry) and at least
/// every second. None once `cancel` is set. A write in flight is never abandoned (it may
/// land unseen, leaving a lease nobody holds): cancellation is looked at only between
/// attempts.
async fn acquire<A: ShardLeases>(leases: &A, wanted: &Wanted<'_>, cancel: &CancellationToken) -> Option<A::Lease> {
    let mut lease_watch = None;
    loop {
        match leases.try_acquire(wanted.key, wanted.holder, wanted.ttl).await {
            Ok(Some(lease)) => return Some(lease),
            Ok(None) => {}
            Err(e) => warn!("shard lease: {e}"),
        }
        // Watched only once taken by someone else: most leases are free at start.
        if lease_watch.is_none() {
            lease_watch = leases.watch(wanted.key).await.ok();
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
