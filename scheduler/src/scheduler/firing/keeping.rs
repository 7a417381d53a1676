//! The leader's keeping of its lease, beside its dispatching: a renewal every third of the
//! TTL, then the watermark moved while the lease is surely held. Apart from `leader.rs` so
//! that the unit tests drive it on tokio's paused clock, with a lease table of their own.
//!
//! The renewal's writes run beside the leader's other work, not in it: during an election
//! of the leases bucket each waits out its request timeout, and dispatching (and the stop)
//! must not wait with it. One at a time. Nothing is dispatched from the moment the lease
//! may have run out (`lease_end`) until a renewal is answered; one refused, failed,
//! unanswered within the TTL or answered too late to lead on makes the leader step down.

use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::shard_lease::ShardLease;
use crate::error::Error;

/// How long the end of leading waits for a renewal in flight.
pub(super) const LAST_KEEP_MAX: Duration = Duration::from_secs(2);

/// What is moved after each renewal, while the lease is surely ours: the shard's watermark
/// (a successor may read it once the lease is not).
pub(super) trait Mark: Send {
    fn write(&mut self, low: DateTime<Utc>) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The lease and the mark: a renewal holds both until it is done.
pub(super) struct Held<L, M> {
    pub lease: L,
    pub mark: M,
}

impl<L: ShardLease, M: Mark> Held<L, M> {
    /// Renews the lease, then moves the mark to `low` while the lease is surely ours. A
    /// renewal unanswered within the lease's TTL counts as failed.
    async fn keep(&mut self, low: DateTime<Utc>) -> Result<(), Error> {
        let ttl = self.lease.ttl();
        match tokio::time::timeout(ttl, self.lease.renew()).await {
            Ok(renewed) => renewed?,
            Err(_) => return Err(Error::nats_msg("renewing the shard's lease", format!("no answer within {ttl:?}"))),
        }
        let held_until = self.lease.held_until();
        if Instant::now() >= held_until {
            return Err(too_late());
        }
        match tokio::time::timeout_at(held_until, self.mark.write(low)).await {
            Ok(moved) => moved,
            Err(_) => Err(Error::nats_msg("moving the watermark", "no answer while the lease was surely ours")),
        }
    }
}

fn too_late() -> Error {
    Error::nats_msg("renewing the shard's lease", "answered too late to lead on")
}

/// A renewal in flight, holding the lease and the mark until it is done.
type Renewal<'a, L, M> = Pin<Box<dyn Future<Output = (Held<L, M>, Result<(), Error>)> + Send + 'a>>;

/// What `Keeping::next` says.
#[derive(Debug, PartialEq)]
pub(super) enum Event {
    /// A renewal is due: `start` it.
    Due,
    /// A renewal was answered in time to lead on.
    Renewed,
}

/// The lease keeping of one turn of leading.
pub(super) struct Keeping<'a, L, M> {
    renew: Interval,
    /// Until when the lease is surely ours, as of the last renewal answered.
    lease_end: Instant,
    /// Between renewals.
    idle: Option<Held<L, M>>,
    renewal: Option<Renewal<'a, L, M>>,
}

/// How leading ended, as far as the lease goes.
pub(super) struct Ended<L, M> {
    /// Ok: stopped. Err: the lease was lost, or may have been.
    pub outcome: Result<(), Error>,
    /// Stopped (not stepped down): what is in flight is finished while the lease is ours.
    pub stopping: bool,
    /// Until when the lease is surely ours (now, if a last renewal failed or was abandoned).
    pub lease_end: Instant,
    /// None: a renewal was abandoned unanswered. It could still land, after a successor read
    /// what it wrote: the lease is then left to expire, not released.
    pub held: Option<Held<L, M>>,
}

impl<'a, L: ShardLease + 'a, M: Mark + 'a> Keeping<'a, L, M> {
    /// Keeps `lease` from now: its first renewal a third of its TTL on.
    pub fn new(lease: L, mark: M) -> Self {
        let period = lease.ttl() / 3;
        let mut renew = tokio::time::interval_at(Instant::now() + period, period);
        // A renewal that outlasted its period is followed by one, not by a burst.
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let lease_end = lease.held_until();
        Keeping { renew, lease_end, idle: Some(Held { lease, mark }), renewal: None }
    }

    /// Whether the lease is surely ours now: only then is anything dispatched. Once it may
    /// not be, with no renewal in flight (a long catch-up before the first pass), the next
    /// renewal is due at once, not a period later.
    pub fn leased(&mut self) -> bool {
        let leased = Instant::now() < self.lease_end;
        if !leased && self.idle.is_some() {
            self.renew.reset_immediately();
        }
        leased
    }

    /// Waits for a renewal to be due (none in flight) or for the one in flight to be
    /// answered. Err: step down at once (the lease lost, not renewed, or renewed too late
    /// to lead on). Cancel-safe.
    pub async fn next(&mut self) -> Result<Event, Error> {
        let Some(renewal) = self.renewal.as_mut() else {
            if self.idle.is_none() {
                return std::future::pending().await;
            }
            self.renew.tick().await;
            return Ok(Event::Due);
        };
        let (held, kept) = renewal.await;
        self.lease_end = held.lease.held_until();
        (self.renewal, self.idle) = (None, Some(held));
        kept?;
        if Instant::now() >= self.lease_end {
            return Err(too_late());
        }
        Ok(Event::Renewed)
    }

    /// Starts the renewal said due, the mark to be moved to `low` after it.
    pub fn start(&mut self, low: DateTime<Utc>) {
        if let Some(mut held) = self.idle.take() {
            self.renewal = Some(Box::pin(async move {
                let kept = held.keep(low).await;
                (held, kept)
            }));
        }
    }

    /// The end of leading, `ended` as the leader says: a renewal in flight is waited for
    /// at most `LAST_KEEP_MAX`. Failed or unanswered, the lease may not be ours, and
    /// nothing more is written under it.
    pub async fn finish(mut self, ended: Result<(), Error>) -> Ended<L, M> {
        let stopping = ended.is_ok();
        let (mut outcome, mut lease_end, mut held) = (ended, self.lease_end, self.idle.take());
        if let Some(renewal) = self.renewal.take() {
            let kept = match tokio::time::timeout(LAST_KEEP_MAX, renewal).await {
                Ok((renewed, kept)) => {
                    lease_end = if kept.is_ok() { renewed.lease.held_until() } else { Instant::now() };
                    held = Some(renewed);
                    kept
                }
                Err(_) => {
                    lease_end = Instant::now();
                    Err(Error::nats_msg("stepping down", "the lease's renewal was still unanswered"))
                }
            };
            outcome = outcome.and(kept);
        }
        Ended { outcome, stopping, lease_end, held }
    }
}
