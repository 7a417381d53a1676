//! What a runner holds of one run while it is its own: the record as last written (with
//! its fence), the run's lease, the overlap and lock leases, and the keepalive file its
//! supervisor watches.
//!
//! A run's lease is the claim and its liveness (its expiry tells the scheduler that the
//! runner died, see the scheduler's `recovery`). Most runs hold one of their own,
//! `run.<job>.<run-id>`. A run of a job with an overlap policy and no lock, claimed ahead
//! of its instant (the runs the defaults give), holds none until it needs one: its
//! overlap lease `active.<job>`, taken at its instant and naming it, is its lease, two
//! writes a run fewer ([`ClaimedRun::shares_active`]). Until then its dispatch message in
//! hand is its claim (a runner that dies leaves it to be delivered again), and it takes a
//! lease of its own before it waits for anything (the fires standing in line see it then).

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};
use tracing::{debug, warn};

use super::RunnerCtx;
use super::guards::{self, RunLease};
use crate::error::Error;
use crate::names::lease_keys;
use crate::record::{RunRecord, Status};
use crate::store::kv::Fenced;
use crate::store::lease::Lease;

/// How long telling JetStream that a run's message is still in hand may wait: with NATS
/// away the ack waits for the connection, and nothing waits on it.
const PROGRESS_MAX: Duration = Duration::from_millis(100);

/// Tells JetStream the run's message is still in hand (its ack wait starts again), unless
/// that cannot go out at once.
pub(super) async fn in_progress(msg: &Message) {
    let _ = tokio::time::timeout(PROGRESS_MAX, msg.ack_with(AckKind::Progress)).await;
}

/// How long after a run's code ended its overlap and lock leases stay unmarked while its
/// end is on its way (the last output drained, the final record written): a run that
/// ends within it has them released with no mark, one write less per run; the fires
/// waiting behind it look no oftener (`run_ahead::POLL`).
const MARK_AFTER: Duration = Duration::from_millis(200);

async fn mark_ended(guards: &mut [Lease], at: chrono::DateTime<chrono::Utc>) {
    for guard in guards {
        if let Err(e) = guard.renew_ended(at).await {
            debug!("{}: end not marked: {e}", guard.key());
        }
    }
}

/// Does `work`; should it take over [`MARK_AFTER`], the `guards` (overlap and lock leases)
/// are marked ended `at` meanwhile. Its result, and whether they were marked.
pub(super) async fn marking_if_slow<T>(
    guards: &mut [Lease],
    at: chrono::DateTime<chrono::Utc>,
    work: impl std::future::Future<Output = T>,
) -> (T, bool) {
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => (done, false),
        _ = tokio::time::sleep(MARK_AFTER) => {
            mark_ended(guards, at).await;
            (work.await, true)
        }
    }
}

/// The record as this runner last wrote it, the run's lease, and the overlap and lock
/// leases it holds (see `guards`).
pub(super) struct ClaimedRun {
    pub(super) record: RunRecord,
    pub(super) fence: Fenced,
    /// The run's own lease, `run.<job>.<run-id>`, if it holds one.
    pub(super) lease: Option<Lease>,
    /// Its overlap lease is its lease while it holds none of its own (see the module's doc).
    pub(super) shares_active: bool,
    /// The TTL of the run's leases.
    pub(super) ttl: Duration,
    pub(super) guards: Vec<Lease>,
    /// The keepalive file of a shell run, touched with every lease renewal.
    pub(super) alive: Option<PathBuf>,
    /// When the run's lease was last taken or renewed, as sent.
    pub(super) renewed: tokio::time::Instant,
    /// The run's spans (see `telemetry`); inert when telemetry is off.
    pub(super) trace: crate::telemetry::RunTrace,
}

impl ClaimedRun {
    pub(super) async fn write(&mut self, ctx: &RunnerCtx) -> Result<(), Error> {
        ctx.store.update_run_fenced(&self.record, &mut self.fence).await?;
        Ok(())
    }

    /// After a refused write of a run not started yet: whether it is still ours to start.
    /// It is while its lease is ours (renewed now) and its record, read afresh, is still
    /// `queued` at this attempt: the refusal was the scheduler's rewrite of the run as a
    /// runner before let it go (its lease expired, see `scheduler::recovery::expiry`), or
    /// a record read out of date (a redelivery's read may come from a follower). Then the
    /// fence moves to the record as it is.
    pub(super) async fn adopt_current(&mut self, ctx: &RunnerCtx) -> bool {
        if !self.leased() || self.renew().await.is_err() {
            return false;
        }
        match ctx.store.get_run(&self.record.job, &self.record.run_id).await {
            Ok(stored) if stored.record.status == Status::Queued && stored.record.attempt == self.record.attempt => {
                self.fence = Fenced::at(stored.revision);
                true
            }
            _ => false,
        }
    }

    /// The TTL of the run's lease.
    pub(super) fn run_ttl(&self) -> Duration {
        self.lease.as_ref().map_or(self.ttl, Lease::ttl)
    }

    /// Whether the run holds a lease: its own, or its overlap lease standing for it.
    pub(super) fn leased(&self) -> bool {
        self.lease.is_some() || self.shares_active && self.guards.iter().any(is_overlap)
    }

    /// The run's own lease, as the guards take and renew it.
    pub(super) fn run_lease<'a>(&'a mut self, ctx: &'a RunnerCtx) -> RunLease<'a> {
        let key = lease_keys::run(&self.record.job, &self.record.run_id);
        RunLease { lease: &mut self.lease, key, holder: &ctx.host }
    }

    /// Takes the run's own lease unless it holds one. A conflict when another runner
    /// holds it (a copy of the run's dispatch delivered again, see `claim`).
    pub(super) async fn take_own_lease(&mut self, ctx: &RunnerCtx) -> Result<(), Error> {
        let (asked, ttl, held) = (tokio::time::Instant::now(), self.ttl, self.lease.is_some());
        self.run_lease(ctx).take(&ctx.store.leases, ttl).await?;
        if !held {
            self.renewed = asked;
        }
        Ok(())
    }

    /// Took its guards at `asked`: a run whose overlap lease stands for its own starts its
    /// lease's time from then.
    pub(super) fn guards_taken(&mut self, asked: tokio::time::Instant) {
        if self.lease.is_none() && self.leased() {
            self.renewed = asked;
        }
    }

    /// The overlap lease standing for the run's own, out of `guards`: it is not released
    /// with them.
    fn take_standing_lease(&mut self) -> Option<Lease> {
        if self.lease.is_some() || !self.shares_active {
            return None;
        }
        let at = self.guards.iter().position(is_overlap)?;
        Some(self.guards.swap_remove(at))
    }

    /// Keeps the overlap lease standing for the run's own when its guards are released
    /// (it becomes the run's lease).
    pub(super) fn keep_overlap_lease(&mut self) {
        if let Some(lease) = self.take_standing_lease() {
            self.lease = Some(lease);
        }
    }

    /// Leaves the run's lease to expire on its TTL, unrenewed and unreleased: the
    /// scheduler then finds the run's record as it is (see `claim::LeaseEnd::Expire`).
    pub(super) fn leave_lease_to_expire(&mut self) {
        self.lease = None;
        drop(self.take_standing_lease());
    }

    /// Extends the run's lease; a conflict means the run was declared lost.
    pub(super) async fn renew(&mut self) -> Result<(), Error> {
        // Stamped with the time the renewal was sent: the server's TTL runs from no
        // earlier than that, so the supervisor's window never outlasts the lease.
        let (sent, sent_at) = (std::time::SystemTime::now(), tokio::time::Instant::now());
        let own = self.lease.is_some();
        if let Some(lease) = self.lease.as_mut() {
            lease.renew().await?;
            self.renewed = sent_at;
            self.touch_alive(sent);
        }
        guards::renew_all(&mut self.guards).await?;
        // No lease of its own: its overlap lease, renewed, stands for it; or, before its
        // guards, it holds none yet and its code has not started.
        if !own {
            if self.leased() {
                self.renewed = sent_at;
            }
            self.touch_alive(sent);
        }
        Ok(())
    }

    /// From now on the run's supervisor watches `path` (see `supervisor`): created now,
    /// touched with every lease renewal.
    pub(super) fn watch_alive(&mut self, path: Option<PathBuf>) {
        self.alive = path;
        self.touch_alive(std::time::SystemTime::now());
    }

    fn touch_alive(&self, at: std::time::SystemTime) {
        let Some(path) = &self.alive else { return };
        let touch = || std::fs::File::options().create(true).truncate(false).write(true).open(path)?.set_modified(at);
        // A cleaner of the temp dir (or of /dev/shm) may have removed the directory: make
        // it again, once.
        let touched = touch().or_else(|_| {
            path.parent().map(std::fs::create_dir_all).transpose()?;
            touch()
        });
        if let Err(e) = touched {
            warn!("keepalive {}: {e}; the run's supervisor will stop it", path.display());
        }
    }

    /// Refreshes the run's lease, then its record (`heartbeat_at`, output so far), and tells
    /// JetStream the message is still in hand. A conflict means the run was taken away:
    /// the caller stops it. Nothing is written once the lease renewal is refused.
    pub(super) async fn heartbeat(&mut self, ctx: &RunnerCtx, msg: &Message, output: Vec<String>) -> Result<(), Error> {
        in_progress(msg).await;
        self.record.heartbeat_at = Some(ctx.clock.now());
        self.record.output = output;
        let written = match self.renew().await {
            Ok(()) => self.write(ctx).await,
            Err(e) => Err(e),
        };
        match written {
            Err(e) if !e.is_conflict() => {
                warn!("heartbeat not recorded: {e}");
                Ok(())
            }
            other => other,
        }
    }

    pub(super) async fn release(&mut self) {
        self.release_guards().await;
        if let Some(lease) = self.lease.take()
            && let Err(e) = lease.release().await
        {
            debug!("run lease not released: {e}");
        }
    }

    /// Says on the overlap and lock leases that the run's code ended `at`; they stay held
    /// until its end is recorded. A write that fails leaves them as they were.
    pub(super) async fn mark_guards_ended(&mut self, at: chrono::DateTime<chrono::Utc>) {
        mark_ended(&mut self.guards, at).await;
    }

    /// Writes the record, marking the overlap and lock leases ended `at` should that take
    /// long (if `at` is given: the run's code ended, not marked yet; see
    /// [`marking_if_slow`]). Whether they were marked.
    pub(super) async fn write_marking(
        &mut self,
        ctx: &RunnerCtx,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> (Result<(), Error>, bool) {
        let Some(at) = at.filter(|_| !self.guards.is_empty()) else { return (self.write(ctx).await, false) };
        // Apart for the write's time: it borrows the record, the marks the leases.
        let mut guards = std::mem::take(&mut self.guards);
        let written = marking_if_slow(&mut guards, at, self.write(ctx)).await;
        self.guards = guards;
        written
    }

    /// Releases the overlap and lock leases and the keepalive file; the run's lease stays.
    pub(super) async fn release_guards(&mut self) {
        if let Some(path) = self.alive.take() {
            let _ = std::fs::remove_file(path);
        }
        guards::release_all(std::mem::take(&mut self.guards)).await;
    }

    /// Leaves the run's lease to expire `after` from now (at least a second, the TTL's
    /// unit), without renewing it again: its expiry is the scheduler's cue to dispatch the
    /// queued next attempt. If this write fails, the lease expires on its old TTL.
    pub(super) async fn hand_over_lease(&mut self, after: Duration) {
        if let Some(mut lease) = self.lease.take().or_else(|| self.take_standing_lease()) {
            // Whole seconds, rounded up: the retry never starts before its backoff.
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            lease.set_ttl(Duration::from_secs(secs.max(1)));
            if let Err(e) = lease.renew().await {
                debug!("run lease not shortened, it expires on its old TTL: {e}");
            }
        }
    }
}

/// Whether `lease` is a job's overlap lease.
fn is_overlap(lease: &Lease) -> bool {
    lease.key().starts_with(&lease_keys::active(""))
}
