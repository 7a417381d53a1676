//! Overlap policies and locks, decided when a run is about to start.
//!
//! A run of a job whose `overlap` is not `allow` holds `active.<job>` while it lives; a
//! run of a job with `lock` holds `lock.<name>`. Both are leases (server TTL, renewed with
//! the run's heartbeat, released at its end), so a dead runner's hold runs out by itself.
//! When `active.<job>` is taken:
//! - `skip`: the new run is `skipped`, naming the run in progress;
//! - `queue`: one run may wait (holding `queued.<job>`) until the active one ends; a
//!   further one is skipped;
//! - `replace`: the run in progress is asked to stop (TERM), and the new one starts when
//!   it has.
//!
//! A held lock skips the run. Lock names are shared by jobs, so queueing on them would
//! let one job starve the others; skipping is what `flock -n` users expect.
//!
//! A lease held by an earlier attempt of the same run (its runner died, and the lease has
//! not run out yet) is no other run: the attempt waits for it to expire, whatever the
//! policy, rather than being skipped by itself.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::RunnerCtx;
use crate::error::Error;
use crate::names::lease_keys;
use crate::spec::{JobSpec, Overlap};
use crate::store::lease::{Lease, holder};

/// What the guards say about starting now.
pub(super) enum Decision {
    /// Start now, holding these leases.
    Go(Vec<Lease>),
    /// Start as soon as possible: the run waited for its predecessor.
    Waited(Vec<Lease>),
    Skip(String),
    /// The runner stops while the run waits for its predecessor: hand it back unstarted.
    ShutDown,
}

/// What a run does when `active.<job>` is held by `current` (a run key).
#[derive(Debug, PartialEq, Eq)]
enum OnActive {
    /// Wait for it to end (our own earlier attempt, or `replace` asked it to stop).
    Wait,
    /// Wait as the one queued run, if `queued.<job>` is free.
    Queue,
    /// Ask it to stop, then wait (overlap `replace`).
    Replace,
    Skip(String),
}

fn on_active(overlap: Overlap, current: &str, run_key: &str) -> OnActive {
    match overlap {
        _ if current == run_key => OnActive::Wait,
        Overlap::Skip | Overlap::Allow => OnActive::Skip(format!("run {current} is still running (overlap skip)")),
        Overlap::Queue => OnActive::Queue,
        Overlap::Replace => OnActive::Replace,
    }
}

/// How often a waiting run looks whether its predecessor is gone.
const POLL: Duration = Duration::from_millis(200);

/// Whether a run of `spec` takes no lease here (overlap allowed, no lock): nothing can
/// hold it back.
pub(super) fn unguarded(spec: &JobSpec) -> bool {
    spec.overlap == Overlap::Allow && spec.lock_name().is_none()
}

/// Takes the leases `spec` asks for, keeping the run's own lease alive while it waits.
pub(super) async fn acquire(
    ctx: &RunnerCtx,
    (spec, ttl): (&JobSpec, Duration),
    run_key: &str,
    mut run_lease: Option<&mut Lease>,
    shutdown: &CancellationToken,
) -> Result<Decision, Error> {
    let leases = &ctx.store.leases;
    let mut held = Vec::new();
    let mut waited = false;
    if spec.overlap != Overlap::Allow {
        let key = lease_keys::active(&spec.name);
        match Lease::try_acquire(leases, &key, run_key, ttl).await? {
            Some(lease) => held.push(lease),
            None => {
                let current = holder(leases, &key).await?.map(|h| h.holder).unwrap_or_else(|| "?".into());
                let waiter = match on_active(spec.overlap, &current, run_key) {
                    OnActive::Wait => None,
                    OnActive::Skip(why) => return Ok(Decision::Skip(why)),
                    OnActive::Queue => {
                        match Lease::try_acquire(leases, &lease_keys::queued(&spec.name), run_key, ttl).await? {
                            Some(waiter) => Some(waiter),
                            None => {
                                return Ok(Decision::Skip(format!(
                                    "run {current} is running and another waits (overlap queue)"
                                )));
                            }
                        }
                    }
                    OnActive::Replace => {
                        replace(ctx, &current).await;
                        None
                    }
                };
                info!(%current, "waiting for the run in progress to end");
                let mut waiter = waiter;
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => {
                            if let Some(w) = waiter {
                                let _ = w.release().await;
                            }
                            return Ok(Decision::ShutDown);
                        }
                        _ = tokio::time::sleep(POLL) => {}
                    }
                    if let Some(lease) = Lease::try_acquire(leases, &key, run_key, ttl).await? {
                        held.push(lease);
                        break;
                    }
                    if let Some(lease) = run_lease.as_deref_mut() {
                        lease.renew().await?;
                    }
                    if let Some(w) = waiter.as_mut() {
                        w.renew().await?;
                    }
                }
                if let Some(w) = waiter {
                    let _ = w.release().await;
                }
                waited = true;
            }
        }
    }
    if let Some(name) = spec.lock_name() {
        let key = lease_keys::lock(name);
        loop {
            if let Some(lease) = Lease::try_acquire(leases, &key, run_key, ttl).await? {
                held.push(lease);
                break;
            }
            let current = holder(leases, &key).await?.map(|h| h.holder).unwrap_or_else(|| "?".into());
            if current != run_key {
                release_all(held).await;
                return Ok(Decision::Skip(format!("lock {name} is held by run {current}")));
            }
            // Our own earlier attempt's: it runs out within its TTL.
            tokio::select! {
                _ = shutdown.cancelled() => {
                    release_all(held).await;
                    return Ok(Decision::ShutDown);
                }
                _ = tokio::time::sleep(POLL) => {}
            }
            if let Some(lease) = run_lease.as_deref_mut() {
                lease.renew().await?;
            }
        }
    }
    Ok(if waited { Decision::Waited(held) } else { Decision::Go(held) })
}

/// Asks the runner of `run_key` to stop it (overlap `replace`).
async fn replace(ctx: &RunnerCtx, run_key: &str) {
    let Ok((job, run_id)) = crate::record::parse_run_key(run_key) else { return };
    let subject = ctx.store.names.kill_subject(job, run_id);
    info!(replaced = run_key, "stopping the run in progress (overlap replace)");
    let _ = tokio::time::timeout(Duration::from_secs(5), ctx.store.client.request(subject, "TERM".into())).await;
}

pub(super) async fn renew_all(leases: &mut [Lease]) -> Result<(), Error> {
    for lease in leases {
        lease.renew().await?;
    }
    Ok(())
}

pub(super) async fn release_all(leases: Vec<Lease>) {
    for lease in leases {
        let _ = lease.release().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_active_lease_is_waited_for_queued_behind_replaced_or_skips_as_the_policy_says() {
        let (me, other) = ("nightly/r-2", "nightly/r-1");
        let skip = OnActive::Skip(format!("run {other} is still running (overlap skip)"));
        let cases = [
            (Overlap::Skip, other, skip),
            (Overlap::Queue, other, OnActive::Queue),
            (Overlap::Replace, other, OnActive::Replace),
            // Our own earlier attempt (its runner died): waited for whatever the policy.
            (Overlap::Skip, me, OnActive::Wait),
            (Overlap::Queue, me, OnActive::Wait),
            (Overlap::Replace, me, OnActive::Wait),
        ];
        for (overlap, current, expected) in cases {
            assert_eq!(on_active(overlap, current, me), expected, "{overlap:?}, held by {current}");
        }
    }
}
