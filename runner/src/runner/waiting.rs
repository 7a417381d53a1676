//! The line of a job's runs waiting for its overlap lease (`active.<job>`): they take it
//! in fire order.
//!
//! The fires of a backlog (released together after a takeover or a NATS node's failover,
//! see `guards`) wait for one another's overlap lease, spread over several runners. Each
//! used to poll the lease, and whichever polled first after a release took it: a later
//! fire could start before an earlier one. So a run that waits for the lease stands in
//! line: it writes `wait.<job>.<run-id>` in the leases bucket, holding its fire instant,
//! with the run's TTL, renews it while it waits and removes it when it stops waiting (it
//! took the lease, was skipped, or its runner stops). A run that finds the lease free takes
//! it only if no run of the job with an earlier fire stands in line: one listing of the
//! line each time it finds the lease free, not at every look. A waiter whose runner died
//! is not removed, and holds the others up until its place expires: at most its TTL.
//!
//! The fires of a backlog reach their guards together, within milliseconds, on several
//! runners. A run that reaches them after its fire instant stands in line before it tries;
//! and it also defers, for at most [`ARRIVING`], to the earlier runs of its job that a
//! runner has claimed (their run's lease is held) but that do not stand in line yet: on
//! their way to their guards, a few milliseconds behind. A run on time does neither (it
//! costs a write), but it too looks at the line, so as not to go ahead of a backlog still
//! being worked off.
//!
//! A run looks at the line after it took the lease, and gives the lease back if an earlier
//! fire stands there: every place written before the lease was taken is then in the
//! listing, provided the replica that answered had got that far. Any replica of the
//! leases bucket answers a read, and one that fell behind answers from its past: a node
//! thawed after a freeze answered at once without the places written meanwhile, and a later
//! fire went ahead of three earlier ones. So a listing is trusted only if it reaches the
//! revisions this run wrote or read (`Line::seen`); else it is asked again, and in the end
//! taken as no turn.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::RunnerCtx;
use crate::error::Error;
use crate::names::lease_keys;
use crate::store::kv::{Bucket, Fenced, Listing};
use crate::store::lease::{Lease, holder};

/// How long a run that finds its job's overlap lease free defers to an earlier run of the
/// job that a runner holds but that does not stand in line: long enough for a run claimed
/// with it to reach its guards (its code made ready first), short enough that a run that
/// will not take the lease (skipped, ending, its runner dead) delays the others little.
pub(super) const ARRIVING: Duration = Duration::from_secs(1);

/// A run's place in line: what its key `wait.<job>.<run-id>` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Place {
    /// The run key, `<job>.<run-id>`.
    pub run: String,
    /// Its fire instant (its record's `scheduled_at`), which orders the line; the run key
    /// breaks ties. A retry keeps its fire's place; a manual run stands at the instant it
    /// was triggered.
    pub fire: DateTime<Utc>,
    /// It reached its guards late (see `guards::LATE_START`): a backlog's fire, released
    /// late. A fire that came on time and waits behind a run is not one: the fires behind
    /// it do not take the line for a backlog (see [`backlog_ahead`]).
    #[serde(default)]
    pub late: bool,
}

impl Place {
    fn order(&self) -> (DateTime<Utc>, &str) {
        (self.fire, &self.run)
    }
}

/// The first of `line` ahead of `me`, if any: None when it is `me`'s turn. A place under
/// `me`'s own run key is its own, or an earlier attempt's of the same run (left by a dead
/// runner): never ahead of it.
pub(super) fn ahead<'a>(me: &Place, line: &'a [Place]) -> Option<&'a Place> {
    line.iter().filter(|p| p.run != me.run && p.order() < me.order()).min_by(|a, b| a.order().cmp(&b.order()))
}

/// Whether a backlog's fire (one that reached its guards late) stands in `line` ahead of
/// `me`. Fires that came on time and wait behind a long run are no backlog: counted, a
/// job whose runs outlast its period would make each fire wait for the one before it.
pub(super) fn backlog_ahead(me: &Place, line: &[Place]) -> bool {
    line.iter().any(|p| p.late && p.run != me.run && p.order() < me.order())
}

/// The first run of `claimed` (run keys held by runners, with how long this run has seen
/// each) on its way to its guards ahead of `me`: an earlier run key (run ids sort by the
/// instant they come from), not in `line`, seen for less than [`ARRIVING`].
pub(super) fn on_its_way<'a>(me: &Place, line: &[Place], claimed: &'a [(String, Duration)]) -> Option<&'a str> {
    let in_line = |run: &str| line.iter().any(|p| p.run == run);
    claimed
        .iter()
        .filter(|(run, seen)| *run < me.run && *seen < ARRIVING && !in_line(run))
        .map(|(run, _)| run.as_str())
        .min()
}

/// What a waiting run's look at the lease found.
pub(super) enum Look {
    Took(Box<Lease>),
    /// Held by the run of this key.
    ClaimedRun(String),
    /// Free, but not this run's turn (or taken by another meanwhile).
    Free,
}

/// How often a waiting run looks at the lease, at least and at most.
const LOOK_EVERY: (Duration, Duration) = (Duration::from_millis(25), Duration::from_millis(200));

/// How long a waiting run waits before its next look at the lease, when what it found
/// has stayed the same for `unchanged`: soon after the lease changed hands, since the runs
/// of a backlog are mostly short, and the next in line should not lose a poll at each
/// (a backlog of ten would take two seconds to start); less often the longer it stays as
/// it was, a long run's waiters costing a read each 200 ms.
pub(super) fn next_look(unchanged: Duration) -> Duration {
    (unchanged / 4).clamp(LOOK_EVERY.0, LOOK_EVERY.1)
}

/// What a waiting run last found of the lease, and since when (see [`next_look`]).
struct Pace {
    found: Option<String>,
    since: Instant,
}

impl Pace {
    fn new() -> Self {
        Pace { found: None, since: Instant::now() }
    }

    /// The wait before the next look, this one having found the lease held by `holder`
    /// (None: free).
    fn after(&mut self, holder: Option<String>) -> Duration {
        if holder != self.found {
            (self.found, self.since) = (holder, Instant::now());
        }
        next_look(self.since.elapsed())
    }
}

/// One run's dealings with its job's line.
pub(super) struct Line<'a> {
    leases: &'a Bucket,
    job: &'a str,
    key: String,
    me: Place,
    ttl: Duration,
    /// Its place while it stands in line.
    standing: Option<Standing>,
    /// The earlier runs held by runners but not in line, and when this run first saw each.
    arriving: HashMap<String, Instant>,
    /// The last revision of the leases bucket this run wrote or read: a listing of the line
    /// answered from before it is not trusted (see the module's doc).
    seen: u64,
    /// A write of its place failed: the next one that lands says so in the log.
    unwritten: bool,
}

/// How often a listing answered from a replica behind [`Line::seen`] is asked again, and
/// how long after each: a replica catches up within milliseconds once it hears from the
/// leader; one that cannot costs the run its turn, not more.
const STALE_RETRIES: (u32, Duration) = (5, Duration::from_millis(50));

/// What one look at the line found.
struct Seen {
    line: Vec<Place>,
    /// The run keys of the run leases of the job: the runs that runners hold.
    claimed: Vec<String>,
}

/// A place written: its revision, and when it was last written.
struct Standing {
    fence: Fenced,
    written: Instant,
}

impl<'a> Line<'a> {
    /// The line of `job` as seen by its run `run_key`, fired at `fire` and come to its
    /// guards `late` or not, whose place lives `ttl` unless renewed (the run's TTL).
    pub fn new(
        leases: &'a Bucket,
        job: &'a str,
        (run_key, fire, late): (&str, DateTime<Utc>, bool),
        ttl: Duration,
    ) -> Self {
        let run_id = crate::record::parse_run_key(run_key).map_or(run_key, |(_, id)| id);
        let me = Place { run: run_key.to_string(), fire, late };
        let key = lease_keys::waiting(job, run_id);
        Line { leases, job, key, me, ttl, standing: None, arriving: HashMap::new(), seen: 0, unwritten: false }
    }

    /// Stands in line, if it does not yet. Written whatever the key holds: a place left
    /// there under this run's key is an earlier attempt's. A place not written (NATS away)
    /// costs the run its turn, not its run: tried again by `keep`.
    pub async fn join(&mut self) {
        if self.standing.is_some() {
            return;
        }
        let value = match self.value() {
            Ok(value) => value,
            Err(e) => return warn!("standing in line for the job's overlap lease: {e}"),
        };
        let written = Instant::now();
        match self.leases.put(&self.key, value, Some(self.ttl)).await {
            Ok(revision) => {
                self.saw(revision);
                self.standing = Some(Standing { fence: Fenced::at(revision), written });
                if std::mem::take(&mut self.unwritten) {
                    info!("standing in line for the job's overlap lease at last");
                }
            }
            Err(e) => {
                self.unwritten = true;
                debug!("standing in line for the job's overlap lease: {e}");
            }
        }
    }

    /// Whether its place in line is written.
    pub fn standing(&self) -> bool {
        self.standing.is_some()
    }

    /// Keeps its place: renewed once a third of its TTL has passed since it was written,
    /// written again if it was lost (expired while NATS was away) or never written.
    pub async fn keep(&mut self) {
        let (value, ttl) = match self.value() {
            Ok(value) => (value, self.ttl),
            Err(e) => return warn!("renewing the run's place in line: {e}"),
        };
        let Some(standing) = self.standing.as_mut() else { return self.join().await };
        if standing.written.elapsed() < ttl / 3 {
            return;
        }
        let written = Instant::now();
        match self.leases.update_fenced(&self.key, value, &mut standing.fence, Some(ttl)).await {
            Ok(revision) => {
                standing.written = written;
                self.seen = self.seen.max(revision);
            }
            Err(e) if e.is_conflict() => {
                self.standing = None;
                self.join().await;
            }
            Err(e) => debug!("renewing the run's place in line: {e}"),
        }
    }

    /// Leaves the line (at once, rather than in a TTL: the next in line need not wait).
    pub async fn leave(&mut self) {
        if let Some(standing) = self.standing.take()
            && let Err(e) = self.leases.release_at(&self.key, standing.fence.revision).await
        {
            debug!("leaving the line for the job's overlap lease (its place expires in its TTL): {e}");
        }
    }

    /// Waits in line until `key` is free and it is this run's turn, then takes it; None when
    /// the runner stops, or `give_up` (if any) has passed. Meanwhile it keeps alive its place
    /// in line, the run's lease and `queued` (`queued.<job>`, the one run queued by overlap
    /// `queue`).
    pub async fn wait_turn(
        &mut self,
        ctx: &RunnerCtx,
        key: &str,
        give_up: Option<DateTime<Utc>>,
        (mut run_lease, mut queued): (Option<&mut Lease>, Option<&mut Lease>),
        shutdown: &CancellationToken,
    ) -> Result<Option<Lease>, Error> {
        // Its place was written, or tried, before (`guards`); `keep` tries again.
        let mut pace = Pace::new();
        let mut wait = pace.after(None);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(wait) => {}
            }
            wait = match self.look(key, ctx.clock.now()).await? {
                Look::Took(lease) => return Ok(Some(*lease)),
                Look::ClaimedRun(holder) => pace.after(Some(holder)),
                Look::Free => pace.after(None),
            };
            if give_up.is_some_and(|at| ctx.clock.now() > at) {
                return Ok(None);
            }
            for lease in [run_lease.as_deref_mut(), queued.as_deref_mut()].into_iter().flatten() {
                renew_when_due(lease).await?;
            }
            self.keep().await;
        }
    }

    /// Whether the run `run` (a run key) is a later fire of the job than this one: run ids
    /// sort by the instant they come from.
    pub fn is_later(&self, run: &str) -> bool {
        run > self.me.run.as_str()
    }

    /// Whether this run came to its guards late: a backlog's fire.
    pub fn came_late(&self) -> bool {
        self.me.late
    }

    /// Notes that this run read or wrote the leases bucket at `revision`.
    pub fn saw(&mut self, revision: u64) {
        self.seen = self.seen.max(revision);
    }

    /// Takes the lease `key` in this run's turn, not read first: at a first try, when it
    /// is likely free. It takes the lease, then looks at the line, and gives it back when
    /// it is not its turn. `now` tells whether the run is late: a late run stands in line
    /// first, and does not try without its place (see the module's doc).
    pub async fn take_now(&mut self, key: &str, now: DateTime<Utc>) -> Result<Option<Lease>, Error> {
        let late = now > self.me.fire;
        if late {
            self.join().await;
            if self.standing.is_none() {
                return Ok(None);
            }
        }
        let Some(lease) = Lease::try_acquire(self.leases, key, &self.me.run, self.ttl).await? else {
            return Ok(None);
        };
        self.saw(lease.revision());
        if self.my_turn(key, late).await? {
            return Ok(Some(lease));
        }
        if let Err(e) = lease.release().await {
            debug!("giving the job's overlap lease back to an earlier fire (it expires in its TTL): {e}");
        }
        Ok(None)
    }

    /// Takes the lease `key` if it is free and this run's turn: one read while it is held,
    /// the listings of `my_turn` when it is free.
    pub async fn look(&mut self, key: &str, now: DateTime<Utc>) -> Result<Look, Error> {
        if let Some(held) = holder(self.leases, key).await? {
            return Ok(Look::ClaimedRun(held.holder));
        }
        Ok(self.take_now(key, now).await?.map_or(Look::Free, |lease| Look::Took(Box::new(lease))))
    }

    /// Whether a backlog's earlier fire stands in line ([`backlog_ahead`]), as seen after
    /// the holder of the lease `key` was read. A listing that fails (NATS
    /// away, or only a replica behind answers) cannot tell, and says yes: the run waits in
    /// line, for a bounded time, rather than be skipped behind a run that may be gone.
    pub async fn earlier_in_line(&mut self, key: &str) -> bool {
        match self.look_at_line(key).await {
            Ok(seen) => backlog_ahead(&self.me, &seen.line),
            Err(e) => {
                debug!("listing the runs of the job ahead of this one: {e}");
                true
            }
        }
    }

    /// Whether no earlier fire stands in line, nor (for a `late` run) is on its way to it,
    /// this run holding the lease `key`. A listing that fails is no turn: asked again at
    /// the next try.
    async fn my_turn(&mut self, key: &str, late: bool) -> Result<bool, Error> {
        let Seen { line, claimed } = match self.look_at_line(key).await {
            Ok(seen) => seen,
            Err(e) => {
                debug!("listing the runs of the job ahead of this one: {e}");
                return Ok(false);
            }
        };
        if let Some(first) = ahead(&self.me, &line) {
            debug!(ahead = %first.run, "the job's overlap lease is free; an earlier fire in line takes it first");
            return Ok(false);
        }
        if !late {
            return Ok(true);
        }
        let claimed = self.seen_since(claimed);
        match on_its_way(&self.me, &line, &claimed) {
            Some(run) => {
                debug!(ahead = %run, "the job's overlap lease is free; an earlier fire on its way takes it first");
                Ok(false)
            }
            None => Ok(true),
        }
    }

    /// The run keys `claimed`, each with how long this run has seen it.
    fn seen_since(&mut self, claimed: Vec<String>) -> Vec<(String, Duration)> {
        let now = Instant::now();
        claimed
            .into_iter()
            .map(|run| {
                let since = *self.arriving.entry(run.clone()).or_insert(now);
                (run, now - since)
            })
            .collect()
    }

    /// The job's line and the runs runners hold, in one listing that includes the lease
    /// `key` (just taken or read: a replica up to date cannot answer without it) and
    /// reaches `seen`. A listing from behind is asked again [`STALE_RETRIES`] times.
    async fn look_at_line(&self, key: &str) -> Result<Seen, Error> {
        let (line, runs) = (lease_keys::waiting(self.job, "*"), lease_keys::run(self.job, "*"));
        let mut tries = 0;
        let listing = loop {
            let listing = match self.leases.listing(&[&line, &runs, key]).await? {
                Some(listing) => listing,
                // More than one answer holds: read with watches, which a leader answers.
                None => {
                    let mut values = self.leases.scan(&line).await?;
                    values.extend(self.leases.scan(&runs).await?);
                    break Listing { values, as_of: self.seen };
                }
            };
            if listing.as_of >= self.seen {
                break listing;
            }
            tries += 1;
            if tries > STALE_RETRIES.0 {
                let why = format!("answered as of revision {}, before this run's {}", listing.as_of, self.seen);
                return Err(Error::nats_msg("listing the job's line", why));
            }
            tokio::time::sleep(STALE_RETRIES.1).await;
        };
        Ok(self.split(listing))
    }

    /// A listing of the line, the run leases and the lease, as the line and the runs held.
    fn split(&self, listing: Listing) -> Seen {
        let (in_line, runs) = (lease_keys::waiting(self.job, ""), lease_keys::run(self.job, ""));
        let mut seen = Seen { line: Vec::new(), claimed: Vec::new() };
        for (key, value) in listing.values {
            if key.starts_with(&in_line) {
                // A value that does not read as a place is skipped.
                seen.line.extend(serde_json::from_slice::<Place>(&value.value).ok());
            } else if let Some(id) = key.strip_prefix(&runs) {
                seen.claimed.push(crate::record::run_key(self.job, id));
            }
        }
        seen
    }

    fn value(&self) -> Result<bytes::Bytes, Error> {
        let value = serde_json::to_vec(&self.me).map_err(|e| Error::other("encoding the run's place in line", e))?;
        Ok(value.into())
    }
}

/// Renews `lease` once it is surely ours for less than two thirds of its TTL: a waiting
/// run looks at the lease it waits for up to every 25 ms, and would otherwise write its
/// own leases as often.
async fn renew_when_due(lease: &mut Lease) -> Result<(), Error> {
    if lease.held_until() > Instant::now() + lease.ttl() * 2 / 3 {
        return Ok(());
    }
    lease.renew().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(&format!("2026-12-06T01:00:{s}Z")).unwrap().to_utc()
    }

    fn place(run: &str, fire: &str) -> Place {
        Place { run: format!("nightly.{run}"), fire: at(fire), late: false }
    }

    #[test]
    fn a_run_takes_the_free_lease_only_when_no_earlier_fire_stands_in_line() {
        let me = place("20261206T010011Z", "11");
        let cases: [(&str, Vec<Place>, Option<&str>); 8] = [
            ("an empty line", vec![], None),
            ("alone in line", vec![me.clone()], None),
            ("behind later fires only", vec![place("20261206T010012Z", "12"), me.clone()], None),
            (
                "behind an earlier fire",
                vec![place("20261206T010012Z", "12"), place("20261206T010010Z", "10"), me.clone()],
                Some("nightly.20261206T010010Z"),
            ),
            (
                "the first of two earlier fires is ahead",
                vec![place("20261206T010010_500Z", "10.5"), place("20261206T010009Z", "09")],
                Some("nightly.20261206T010009Z"),
            ),
            // Its own earlier attempt's place (left by a dead runner) is its own.
            ("its own run's place, whatever it says", vec![place("20261206T010011Z", "09")], None),
            // A manual run stands at the instant it was triggered.
            (
                "a manual run triggered before this fire",
                vec![place("20261206T010010Z-m1a2b", "10.2")],
                Some("nightly.20261206T010010Z-m1a2b"),
            ),
            // Two runs of one instant: the run key decides, the same for everyone.
            ("a run of the same instant with a greater key", vec![place("20261206T010011Z-m0001", "11")], None),
        ];
        for (what, line, expected) in cases {
            assert_eq!(ahead(&me, &line).map(|p| p.run.as_str()), expected, "{what}");
        }
        let same_instant = place("20261206T010011Z-m0001", "11");
        assert_eq!(ahead(&same_instant, std::slice::from_ref(&me)), Some(&me), "the lesser key goes first");
    }

    #[test]
    fn only_earlier_fires_that_came_late_make_a_backlog_ahead() {
        let me = place("20261206T010011Z", "11");
        let late = |p: Place| Place { late: true, ..p };
        let cases = [
            ("an empty line", vec![], false),
            ("an earlier fire come late", vec![late(place("20261206T010009Z", "09"))], true),
            ("an earlier fire come on time, waiting behind a run", vec![place("20261206T010010Z", "10")], false),
            ("a later fire come late", vec![late(place("20261206T010012Z", "12"))], false),
            ("its own place, come late", vec![late(me.clone())], false),
        ];
        for (what, line, expected) in cases {
            assert_eq!(backlog_ahead(&me, &line), expected, "{what}");
        }
    }

    #[test]
    fn a_waiting_run_looks_often_just_after_the_lease_changed_hands_and_seldom_later() {
        let ms = Duration::from_millis;
        let cases = [(0, 25), (100, 25), (200, 50), (400, 100), (800, 200), (60_000, 200)];
        for (unchanged, every) in cases {
            assert_eq!(next_look(ms(unchanged)), ms(every), "unchanged for {unchanged} ms");
        }
    }

    #[test]
    fn a_late_run_defers_briefly_to_earlier_runs_claimed_but_not_yet_in_line() {
        let me = place("20261206T010011Z", "11");
        let ms = Duration::from_millis;
        let claimed = |runs: &[(&str, u64)]| -> Vec<(String, Duration)> {
            runs.iter().map(|(run, seen)| (format!("nightly.{run}"), ms(*seen))).collect()
        };
        // (what, the line, the runs held by runners and how long seen, the one ahead)
        type Case = (&'static str, Vec<Place>, Vec<(String, Duration)>, Option<&'static str>);
        let cases: [Case; 7] = [
            ("nothing claimed", vec![], claimed(&[]), None),
            ("only itself", vec![], claimed(&[("20261206T010011Z", 0)]), None),
            ("a later fire", vec![], claimed(&[("20261206T010012Z", 0)]), None),
            (
                "an earlier fire just claimed",
                vec![],
                claimed(&[("20261206T010012Z", 0), ("20261206T010010Z", 10), ("20261206T010009_500Z", 20)]),
                Some("nightly.20261206T010009_500Z"),
            ),
            // In line, it is the line's to order.
            (
                "an earlier fire in line",
                vec![place("20261206T010010Z", "10")],
                claimed(&[("20261206T010010Z", 0)]),
                None,
            ),
            // Skipped, ending, or its runner dead: waited for ARRIVING at most.
            ("an earlier fire seen too long", vec![], claimed(&[("20261206T010010Z", 1000)]), None),
            (
                "a manual run triggered before this fire",
                vec![],
                claimed(&[("20261206T010010Z-m1a2b", 999)]),
                Some("nightly.20261206T010010Z-m1a2b"),
            ),
        ];
        for (what, line, claimed, expected) in cases {
            assert_eq!(on_its_way(&me, &line, &claimed), expected, "{what}");
        }
    }
}
