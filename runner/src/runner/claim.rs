//! A dispatched run on this runner, from its message to its ack: the record is read (or,
//! for a run dispatched with none, made from the message: its first write creates it),
//! the run's lease taken (whoever holds it runs the attempt), the record claimed; then the
//! lifecycle (`lifecycle.rs`) runs it, and the message is acked, handed back, or looked at
//! again later. Every record write is a compare-and-set on the revision this runner last
//! wrote; a refused write means the run was taken from us (fencing).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use chrono::{DateTime, Utc};
use tracing::{Instrument, debug, info, info_span, warn};

use super::claimed_run::ClaimedRun;
use super::lifecycle;
use super::{RunnerCtx, Stops};
use crate::dispatch::DispatchMsg;
use crate::error::Error;
use crate::names::lease_keys;
use crate::record::{Status, Trigger};
use crate::spec::Overlap;
use crate::store::StoredRun;
use crate::store::kv::Fenced;
use crate::store::lease::Lease;
use crate::telemetry::{RunTrace, TRACEPARENT_HEADER};

/// What becomes of the dispatch message.
enum Disposition {
    Done,
    /// Not started; another runner should take it now.
    HandBack,
    /// Not ours to start now; look again after this long.
    Later(Duration),
}

/// Runs one dispatch message to its end and acks it (or hands it back).
pub(super) async fn execute(ctx: Arc<RunnerCtx>, msg: Message, stops: Stops) {
    let received = std::time::SystemTime::now();
    let dispatch: DispatchMsg = match serde_json::from_slice(&msg.payload) {
        Ok(d) => d,
        Err(e) => {
            warn!("dropping unreadable dispatch message: {e}");
            let _ = msg.ack_with(AckKind::Term).await;
            return;
        }
    };
    let span = info_span!("run", job = %dispatch.job, run = %dispatch.run_id, attempt = dispatch.attempt);
    let traceparent = msg.headers.as_ref().and_then(|h| h.get(TRACEPARENT_HEADER)).map(|v| v.as_str());
    let trace = RunTrace::new(ctx.store.names.namespace(), dispatch.traced(), traceparent, received);
    async {
        let ack = match claim(&ctx, &msg, &dispatch, &stops, trace).await {
            Ok(Disposition::Done) => msg.ack().await,
            Ok(Disposition::HandBack) => msg.ack_with(AckKind::Nak(None)).await,
            Ok(Disposition::Later(delay)) => msg.ack_with(AckKind::Nak(Some(delay))).await,
            Err(e) if e.is_conflict() => {
                info!("run taken over elsewhere; this runner stops it: {e}");
                msg.ack().await
            }
            // NATS trouble (a leader election, say) part way: the record may say anything
            // from queued to claimed; redelivery lets a runner pick it up from there.
            Err(e) => {
                warn!("run interrupted, handing it back for redelivery: {e}");
                msg.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await
            }
        };
        if let Err(e) = ack {
            debug!("ack: {e}");
        }
    }
    .instrument(span)
    .await
}

/// Claims the run and runs it, unless another runner has it or had it.
async fn claim(
    ctx: &RunnerCtx,
    msg: &Message,
    d: &DispatchMsg,
    stops: &Stops,
    trace: RunTrace,
) -> Result<Disposition, Error> {
    let info = msg.info().ok();
    let redelivered = info.as_ref().is_some_and(|i| i.delivered > 1);
    // A run dispatched with no record starts from none: its first write creates it
    // (revision 0), and is refused if another runner's copy of the dispatch did first.
    let unrecorded = || {
        let stored_at = info.as_ref().map(|i| i.published);
        let dispatched_at = stored_at.and_then(|t| DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond()));
        StoredRun { record: crate::dispatch::queued_record(d, dispatched_at), revision: 0 }
    };
    if d.queued.is_none() && (d.trigger != Trigger::Schedule || d.attempt != 1) {
        warn!(job = %d.job, run = %d.run_id, "a dispatch with no record that is not a fire's first attempt: dropped");
        return Ok(Disposition::Done);
    }
    // The record as dispatched saves a read; after a redelivery it may be out of date.
    let stored = match (&d.queued, redelivered) {
        (Some(q), false) => StoredRun { record: q.record.clone(), revision: q.revision },
        (None, false) => unrecorded(),
        _ => match ctx.store.get_run(&d.job, &d.run_id).await {
            Ok(s) => s,
            Err(e) if e.is_not_found() && d.queued.is_none() => unrecorded(),
            Err(e) if e.is_not_found() => {
                let dispatched_at = d.queued.as_ref().and_then(|q| q.record.dispatched_at);
                return Ok(record_not_found(dispatched_at, ctx.clock.now()));
            }
            Err(e) => return Err(e),
        },
    };
    // The names become file names (keepalive, input) and subject tokens (logs): a message
    // or record naming another run, or with odd names, is not run.
    if stored.record.job != d.job || stored.record.run_id != d.run_id || !names_ok(&d.job, &d.run_id) {
        warn!(job = %d.job, run = %d.run_id, "a dispatch message whose run record names another run, or odd names: dropped");
        return Ok(Disposition::Done);
    }
    // A redelivered run still queued was claimed by a runner that died before starting it;
    // taking it over is safe, as that runner's start would be a refused compare-and-set.
    let claimable = stored.record.host.is_none() || redelivered;
    if stored.record.status != Status::Queued || stored.record.attempt != d.attempt || !claimable {
        debug!(status = stored.record.status.as_str(), "already handled elsewhere");
        return Ok(Disposition::Done);
    }
    // The run's lease is the claim: whoever holds it runs the attempt. The record is
    // written first by the `running` write that starts it (with this runner as its host),
    // a compare-and-set on the revision read here: a run let go unstarted has its record
    // moved on by the scheduler when its lease expires (`scheduler::recovery::expiry`), so
    // a runner that stalled past its lease cannot start it on waking. A run whose overlap
    // lease will be its lease takes none now (see `claimed_run`).
    let shares_active = shares_active(ctx, d).await;
    let lease = match shares_active {
        true => None,
        false => {
            let key = lease_keys::run(&d.job, &d.run_id);
            match Lease::try_acquire(&ctx.store.leases, &key, &ctx.host, ctx.config.run_lease_ttl()).await? {
                Some(lease) => Some(lease),
                // Held: by the runner running it (whose record write is on its way), or
                // left by one that gave up or died. Look again once such a lease has
                // expired: dropping the message could leave a queued record with nobody
                // to start it.
                None => {
                    debug!("another runner holds the run; looking again after its lease");
                    return Ok(Disposition::Later(ctx.config.run_lease_ttl()));
                }
            }
        }
    };
    let fence = Fenced::at(stored.revision);
    let (record, renewed, ttl) = (stored.record, tokio::time::Instant::now(), ctx.config.run_lease_ttl());
    let guards = Vec::new();
    let mut held = ClaimedRun { record, fence, lease, shares_active, ttl, guards, alive: None, renewed, trace };
    held.record.host = Some(ctx.host.clone());
    let result = match lifecycle::claim_to_end(ctx, msg, d, &mut held, stops).await {
        // Not started (the runner stops): its record is as the scheduler wrote it, and its
        // lease is released below.
        Ok(false) => {
            info!("shutting down: handing the run back before it started");
            Ok(Disposition::HandBack)
        }
        Ok(true) => Ok(Disposition::Done),
        Err(e) => Err(e),
    };
    // A claim that ended before its run started (handed back, taken over, NATS trouble):
    // its span ends here, saying why.
    let why = match &result {
        Ok(Disposition::HandBack) => Some("handed back: the runner is stopping".to_string()),
        Err(e) => Some(e.to_string()),
        Ok(_) => None,
    };
    held.trace.claim_ended(std::time::SystemTime::now(), None, why);
    match lease_end(&result, held.record.status) {
        LeaseEnd::Release => {}
        LeaseEnd::Expire => held.leave_lease_to_expire(),
        LeaseEnd::ExpireSoon => held.hand_over_lease(Duration::from_secs(1)).await,
    }
    held.release().await;
    result
}

/// Whether the run's overlap lease is to be its lease (see `claimed_run`): a run of a job
/// with an overlap policy and no lock, claimed ahead of its instant. A run claimed late
/// (a backlog's, a retry, a manual run) holds a lease of its own from its claim: the
/// fires of a backlog see it on its way to its guards (`waiting`).
async fn shares_active(ctx: &RunnerCtx, d: &DispatchMsg) -> bool {
    if ctx.clock.now() >= d.scheduled_at {
        return false;
    }
    match ctx.current(&d.job, d.spec_revision).await {
        Ok(Some((_, spec))) => d.overlap.unwrap_or(spec.overlap) != Overlap::Allow && spec.lock_name().is_none(),
        Ok(None) | Err(_) => false,
    }
}

/// How long after its dispatch a message whose run record is not found is looked at again.
const NOT_FOUND_PATIENCE: Duration = Duration::from_secs(30);

/// A dispatch whose record is not found: its job was removed (a plain `rm` purges the
/// runs), or the read came from a replica not yet up to date with the record's create (a
/// NATS node failing; reads may be served by any replica). Dropped at once in the second
/// case, the record would stay `queued` with nobody to start it until a sweep, so it is
/// looked at again every second while its dispatch is recent. By time, not by delivery:
/// the deliveries of a node's failure go to errors and leases held as well.
fn record_not_found(dispatched_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Disposition {
    // Dispatched "after" now: the dispatcher's clock is ahead of ours, and it is recent.
    let recent = dispatched_at.is_some_and(|at| (now - at).to_std().unwrap_or_default() < NOT_FOUND_PATIENCE);
    match recent {
        true => Disposition::Later(Duration::from_secs(1)),
        false => Disposition::Done,
    }
}

/// What becomes of a run's lease as its claim ends.
#[derive(Debug, PartialEq, Eq)]
enum LeaseEnd {
    Release,
    /// Left to expire on its TTL: the scheduler then records the run `lost` (and retries
    /// it). After NATS trouble, when the run may be recorded `running`: released, it would
    /// stay `running` with nobody to notice.
    Expire,
    /// Made to expire in a second, to the same end. After a refused write: a takeover
    /// (then the lease is no longer ours, and this does nothing), a guard lease lost, or,
    /// while a NATS node fails, a write of ours that landed unseen met by a record read
    /// from a follower not yet up to date. Released, such a record would stay claimed or
    /// `running` until the next sweep.
    ExpireSoon,
}

fn lease_end(result: &Result<Disposition, Error>, status: Status) -> LeaseEnd {
    match result {
        Ok(_) => LeaseEnd::Release,
        Err(e) if e.is_conflict() => LeaseEnd::ExpireSoon,
        Err(_) if status == Status::Running => LeaseEnd::Expire,
        Err(_) => LeaseEnd::Release,
    }
}

/// A job name as jobs are named, and a run id of `A-Z a-z 0-9 _ -` (fire and manual ids).
fn names_ok(job: &str, run_id: &str) -> bool {
    let token =
        |s: &str| (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    crate::names::validate_job_name(job).is_ok() && token(run_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redelivered_run_whose_record_is_not_found_is_looked_at_again_while_its_dispatch_is_recent() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let ago = |s: i64| Some(now - chrono::TimeDelta::seconds(s));
        let later = |d: Disposition| matches!(d, Disposition::Later(_));
        // (dispatched at, looked at again)
        let cases =
            [(ago(-2), true), (ago(1), true), (ago(29), true), (ago(30), false), (ago(3600), false), (None, false)];
        for (dispatched_at, looked_at_again) in cases {
            assert_eq!(later(record_not_found(dispatched_at, now)), looked_at_again, "dispatched at {dispatched_at:?}");
        }
    }

    #[test]
    fn a_claim_ending_in_a_refused_write_or_in_trouble_while_running_leaves_its_lease_to_expire() {
        let refused = || Err(Error::new(crate::ErrorKind::Conflict, "wrong last sequence"));
        let trouble = || Err(Error::new(crate::ErrorKind::Nats, "timed out"));
        let cases = [
            (Ok(Disposition::Done), Status::Succeeded, LeaseEnd::Release),
            (Ok(Disposition::HandBack), Status::Queued, LeaseEnd::Release),
            (trouble(), Status::Queued, LeaseEnd::Release),
            (trouble(), Status::Running, LeaseEnd::Expire),
            (refused(), Status::Queued, LeaseEnd::ExpireSoon),
            (refused(), Status::Running, LeaseEnd::ExpireSoon),
        ];
        for (result, status, end) in cases {
            assert_eq!(lease_end(&result, status), end, "{:?} while {status:?}", result.as_ref().err());
        }
    }
}
