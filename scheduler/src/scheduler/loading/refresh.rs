//! A led shard's snapshot kept current by its leader.
//!
//! Why: a snapshot is written by a pass over the index, and a scheduler taking the shard
//! later reads it and then the index's entries since. A deployment that grows or changes
//! while its schedulers run (jobs added with the CLI, the way users deploy) would make
//! every take-over read more of the index after an ever older snapshot, and once that is
//! half the index, pass over all of it again: four agents over 10,000,000 jobs written
//! while they ran took 94.6 s to start again, against 28-31 s from fresh snapshots. So a
//! leader notes the changes it follows (their bytes, as the index holds them) and, once
//! they are many, writes the snapshot and those changes as a
//! new snapshot beside its leading (`Snapshots::rewrite`): no pass over the index, and
//! nothing kept in NATS beyond the two snapshots a shard has anyway.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, info, warn};

use super::snapshot::{Changes, Head, Snapshots};
use crate::error::Error;

/// Changes that make a write due: an eighth of the snapshot's entries, and at least this.
const CHANGES_MIN: u64 = 64;
/// How often a shard's snapshot is written at most, unless its changes take many bytes.
const WRITE_EVERY_MIN: Duration = Duration::from_secs(30);
/// Changes taking this many bytes are written whenever no write is in flight.
const WRITE_AT_BYTES: usize = 4 << 20;
/// Any change is written once the snapshot is this old.
const WRITE_ANY_AFTER: Duration = Duration::from_secs(600);
/// Past this many bytes of changes (writes failing meanwhile), the leader stops keeping
/// the snapshot: memory stays bounded, and the next take-over reads the index's changes.
pub(super) const KEEP_BYTES_MAX: usize = 16 << 20;

/// The snapshot a leader's shard was read from or written with, and the changes since
/// that the load read: where its keeping starts.
pub(in crate::scheduler) struct Kept {
    pub head: Head,
    pub changes: Changes,
}

/// What a write gives back: the new head (None: another scheduler wrote the shard's
/// snapshot since), the changes it wrote, and the sequence it covers.
pub(in crate::scheduler) type Written = (Result<Option<Head>, Error>, Changes, u64);

/// One led shard's snapshot keeping.
pub(in crate::scheduler) struct Keeper {
    snapshots: Option<Snapshots>,
    n: u32,
    /// None: not kept (no snapshot to start from, or given up).
    kept: Option<Kept>,
    pace: Pace,
    writing: Option<AbortOnDropHandle<Written>>,
}

impl Keeper {
    /// Keeps shard `n`'s snapshot from `kept`.
    pub fn new(snapshots: Option<Snapshots>, n: u32, kept: Option<Kept>) -> Self {
        let kept = snapshots.as_ref().and(kept);
        Self { snapshots, n, kept, pace: Pace::new(Instant::now()), writing: None }
    }

    /// Notes a change followed: job `name`'s `value` at `revision` (None: removed).
    pub fn note(&mut self, name: Arc<str>, revision: u64, value: Option<&[u8]>) {
        let Some(kept) = self.kept.as_mut() else { return };
        kept.changes.note(name, revision, value);
        if kept.changes.bytes() > KEEP_BYTES_MAX {
            warn!(
                shard = self.n,
                "{} bytes of changes since the shard's snapshot, which could not be written: no longer kept \
                 here; the next scheduler taking the shard reads the index's changes since",
                kept.changes.bytes()
            );
            self.kept = None;
        }
    }

    /// Starts writing the snapshot, with the changes followed up to the index's sequence
    /// `after`, if it is due and no write is in flight.
    pub fn write_if_due(&mut self, after: u64) {
        let (Some(snapshots), Some(kept)) = (self.snapshots.as_ref(), self.kept.as_mut()) else { return };
        if self.writing.is_some()
            || !self.pace.due(Instant::now(), kept.changes.len(), kept.changes.bytes(), kept.head.entries)
        {
            return;
        }
        let (snapshots, n, base) = (snapshots.clone(), self.n, kept.head.clone());
        let changes = std::mem::take(&mut kept.changes);
        debug!(shard = n, changes = changes.len(), after, "writing the shard's snapshot");
        self.writing = Some(AbortOnDropHandle::new(tokio::spawn(async move {
            let written = snapshots.rewrite(n, &base, &changes, after).await;
            (written, changes, after)
        })));
    }

    /// On a stop: the write in flight waited for, then the changes followed up to `after`
    /// and not written yet written, both by `deadline`, so that the next start reads
    /// nothing of the index after the snapshot (an agent's restart, an upgrade).
    pub async fn finish(mut self, after: u64, deadline: Instant) {
        let finishing = async {
            if self.is_writing() {
                let ended = self.written().await;
                self.settle(ended);
            }
            let (Some(snapshots), Some(kept)) = (self.snapshots.as_ref(), self.kept.as_ref()) else { return };
            if kept.changes.is_empty() {
                return;
            }
            match snapshots.rewrite(self.n, &kept.head, &kept.changes, after).await {
                Ok(Some(_)) => {
                    debug!(shard = self.n, after, "the shard's snapshot is written at the end of leading");
                    metrics::counter!("cronrun_snapshots_written_total", "by" => "leader").increment(1);
                }
                Ok(None) => {}
                Err(e) => warn!(shard = self.n, "writing the shard's snapshot at the end of leading: {e}"),
            }
        };
        if tokio::time::timeout_at(deadline, finishing).await.is_err() {
            info!(
                shard = self.n,
                "the shard's snapshot was not brought up to date in time at the end of leading: the next scheduler \
                 taking the shard reads the index's changes since"
            );
        }
    }

    pub fn is_writing(&self) -> bool {
        self.writing.is_some()
    }

    /// The write in flight's end (pending while there is none).
    pub async fn written(&mut self) -> Result<Written, tokio::task::JoinError> {
        match self.writing.as_mut() {
            Some(handle) => handle.await,
            None => std::future::pending().await,
        }
    }

    /// Takes in a write's end: the new snapshot to keep from, or its changes back.
    pub fn settle(&mut self, ended: Result<Written, tokio::task::JoinError>) {
        self.writing = None;
        let now = Instant::now();
        self.pace.wrote(now);
        let Some(kept) = self.kept.as_mut() else { return };
        match ended {
            Ok((Ok(Some(head)), _, after)) => {
                debug!(shard = self.n, after, entries = head.entries, "the shard's snapshot is written");
                metrics::counter!("cronrun_snapshots_written_total", "by" => "leader").increment(1);
                kept.head = head;
            }
            Ok((Ok(None), _, _)) => {
                info!(shard = self.n, "another scheduler wrote the shard's snapshot: no longer kept here");
                self.kept = None;
            }
            Ok((Err(e), changes, _)) => {
                warn!(shard = self.n, "writing the shard's snapshot: {e}; tried again in {WRITE_EVERY_MIN:?} or later");
                kept.changes.keep_older(changes);
                self.pace.failed(now);
            }
            Err(e) => {
                warn!(shard = self.n, "writing the shard's snapshot ended abnormally ({e}): no longer kept here");
                self.kept = None;
            }
        }
    }
}

/// When a shard's snapshot may be written, decided on the instants it is given (the
/// keeper's timing, apart so that it is tested without waiting).
#[derive(Debug, Clone, Copy)]
struct Pace {
    written_at: Instant,
    /// After a failed write, none before this (NATS away: no write per loop turn).
    not_before: Instant,
}

impl Pace {
    /// From `now`: the first write may follow at once.
    fn new(now: Instant) -> Self {
        Self { written_at: now.checked_sub(WRITE_EVERY_MIN).unwrap_or(now), not_before: now }
    }

    /// Whether `changed` jobs taking `bytes`, followed since a snapshot of `entries`
    /// entries, are to be written `now`.
    fn due(&self, now: Instant, changed: usize, bytes: usize, entries: u64) -> bool {
        now >= self.not_before && due(changed, bytes, entries, now.saturating_duration_since(self.written_at))
    }

    /// A write ended `now`, written or not.
    fn wrote(&mut self, now: Instant) {
        self.written_at = now;
    }

    /// A write that ended `now` failed: the next waits `WRITE_EVERY_MIN`, whatever is due.
    fn failed(&mut self, now: Instant) {
        self.not_before = now + WRITE_EVERY_MIN;
    }
}

/// Whether `changed` jobs, their values taking `bytes`, are to be written with a snapshot
/// of `entries` entries written `since` ago.
fn due(changed: usize, bytes: usize, entries: u64, since: Duration) -> bool {
    changed > 0
        && (bytes >= WRITE_AT_BYTES
            || since >= WRITE_ANY_AFTER
            || (since >= WRITE_EVERY_MIN && changed as u64 >= (entries / 8).max(CHANGES_MIN)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_due_for_many_changes_or_many_bytes_or_an_old_snapshot() {
        let (s, min) = (Duration::from_secs(1), WRITE_EVERY_MIN);
        let cases: [(&str, usize, usize, u64, Duration, bool); 9] = [
            ("nothing changed, however old", 0, 0, 0, WRITE_ANY_AFTER * 2, false),
            ("a few changes of a new snapshot", 10, 1_000, 0, min, false),
            ("the minimum of changes", 64, 6_400, 0, min, true),
            ("the minimum, but just written", 64, 6_400, 0, min - s, false),
            ("an eighth of a large snapshot", 20_000, 2 << 20, 160_000, min, true),
            ("under an eighth of it", 19_999, 2 << 20, 160_000, min * 10, false),
            ("many bytes, just written", 10, WRITE_AT_BYTES, 160_000, Duration::ZERO, true),
            ("one change to an old snapshot", 1, 100, 160_000, WRITE_ANY_AFTER, true),
            ("one change, not that old", 1, 100, 160_000, WRITE_ANY_AFTER - s, false),
        ];
        for (what, changed, bytes, entries, since, expected) in cases {
            assert_eq!(due(changed, bytes, entries, since), expected, "{what}");
        }
    }

    #[test]
    fn writes_wait_for_the_last_and_a_failed_write_holds_back_even_many_bytes() {
        enum Step {
            Wrote,
            Failed,
        }
        let (s, min) = (Duration::from_secs(1), WRITE_EVERY_MIN);
        let (few, many) = ((64, 6_400), (10, WRITE_AT_BYTES));
        // Each case: what ended at the start (if anything), then the changes and how long after.
        let cases = [
            ("the first write, at once", None, few, Duration::ZERO, true),
            ("the minimum, just after a write", Some(Step::Wrote), few, min - s, false),
            ("the minimum, once a write is old enough", Some(Step::Wrote), few, min, true),
            ("many bytes, just after a write", Some(Step::Wrote), many, Duration::ZERO, true),
            ("many bytes, just after a failed write", Some(Step::Failed), many, min - s, false),
            ("many bytes, once a failed write is old enough", Some(Step::Failed), many, min, true),
            ("the minimum, just after a failed write", Some(Step::Failed), few, min - s, false),
            ("one change, ten minutes after a failed write", Some(Step::Failed), (1, 100), WRITE_ANY_AFTER, true),
        ];
        let start = Instant::now();
        for (what, ended, (changed, bytes), after, expected) in cases {
            let mut pace = Pace::new(start);
            match ended {
                Some(Step::Wrote) => pace.wrote(start),
                Some(Step::Failed) => {
                    pace.wrote(start);
                    pace.failed(start);
                }
                None => {}
            }
            assert_eq!(pace.due(start + after, changed, bytes, 160), expected, "{what}");
        }
    }
}
