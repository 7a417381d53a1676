//! Backfill: the fires of a past range of a job's schedule, run now (`cronrun backfill`).
//!
//! Each backfilled fire is a run of trigger `backfill` whose id is its fire's and `-b`
//! (`record::backfill_run_id`), dispatched through the same create-if-absent record and
//! deduplicated publish as every run: a backfill repeated, or run again after it was
//! interrupted, finds the fires it backfilled before and runs none of them twice. Their
//! records alone would not do: a job's `history` prunes them, the oldest fires first. So
//! each fire dispatched is also added to the job's backfilled ranges (`Backfilled`, key
//! `backfilled.<job>` of the leases bucket): one small value per job, however many runs.
//! The fire's own run is left alone: a fire whose scheduled run is still recorded is left
//! out unless asked for (`rerun`), one recorded missed is backfilled.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::clock::SharedClock;
use crate::dispatch::{DispatchMsg, Outcome};
use crate::error::{Error, ErrorKind};
use crate::names::lease_keys;
use crate::record::{Status, backfill_run_id, fire_run_id, run_key};
use crate::spec::{JobSpec, Overlap};
use crate::store::{Excluded, Store};
use crate::trigger::{Backfill, Trigger as _};

/// The most fires one backfill may be asked to run (`--max`'s ceiling).
pub const MAX_FIRES: usize = 100_000;

/// The fires of `spec`'s schedule in `[from, to)` outside the days of the calendars it
/// excludes (`excluded`, as read), as the scheduler fires them; `None` when there are
/// more than `max`.
pub fn fires(
    spec: &JobSpec,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    excluded: &Excluded,
    max: usize,
) -> Result<Option<Vec<DateTime<Utc>>>, Error> {
    let (schedule, tz) = spec.parsed_schedule()?;
    // The first fire at or after `from`: the one after the instant just before it.
    let start = from - chrono::Duration::milliseconds(1);
    let mut fires = Vec::new();
    for fire in excluded.fires_after(&schedule, start, tz).take_while(|fire| *fire < to) {
        if fires.len() == max {
            return Ok(None);
        }
        fires.push(fire);
    }
    Ok(Some(fires))
}

/// The fires before and after one, among the schedule's fires of a backfill's range.
pub type Neighbours = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// The neighbours of `fire` among `fires` (sorted).
pub fn neighbours(fires: &[DateTime<Utc>], fire: DateTime<Utc>) -> Neighbours {
    let at = fires.partition_point(|f| *f < fire);
    (at.checked_sub(1).map(|i| fires[i]), fires.get(at + 1).copied().filter(|_| fires.get(at) == Some(&fire)))
}

/// The most ranges `Backfilled` keeps: past them the oldest are forgotten (their fires
/// then count as backfilled by their records only).
pub const MAX_RANGES: usize = 1000;

/// The fires of a job backfilled so far, as inclusive ranges of fire instants, sorted and
/// disjoint. A range grows by the next fire of the schedule only, so a fire left out
/// between two backfilled ones stays out of the ranges.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Backfilled {
    pub ranges: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Backfilled {
    pub fn contains(&self, fire: DateTime<Utc>) -> bool {
        self.ranges.iter().any(|(from, to)| *from <= fire && fire <= *to)
    }

    /// Adds `fire`, whose neighbours among the schedule's fires are `(previous, next)`: a
    /// range ending at the one or starting at the other takes it in.
    pub fn add(&mut self, (previous, next): Neighbours, fire: DateTime<Utc>) {
        if self.contains(fire) {
            return;
        }
        let touches = |t: Option<DateTime<Utc>>, (from, to): (DateTime<Utc>, DateTime<Utc>)| {
            t.is_some_and(|t| from <= t && t <= to)
        };
        self.ranges.push((fire, fire));
        self.ranges.sort();
        let mut merged: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::with_capacity(self.ranges.len());
        for (from, to) in self.ranges.drain(..) {
            match merged.last_mut() {
                // Overlapping, or `fire` beside a range through its neighbour.
                Some(last)
                    if from <= last.1
                        || (last.1 == fire && touches(next, (from, to)))
                        || (from == fire && touches(previous, *last)) =>
                {
                    last.1 = last.1.max(to)
                }
                _ => merged.push((from, to)),
            }
        }
        let over = merged.len().saturating_sub(MAX_RANGES);
        self.ranges = merged.split_off(over);
    }
}

/// The job's backfilled ranges and the revision to write them at (None: not written yet).
pub async fn backfilled(store: &Store, job: &str) -> Result<(Backfilled, Option<u64>), Error> {
    match store.leases.get(&lease_keys::backfilled(job)).await? {
        None => Ok((Backfilled::default(), None)),
        Some(stored) => {
            let ranges = serde_json::from_slice(&stored.value)
                .map_err(|e| Error::new(ErrorKind::Other, format!("reading what was backfilled of {job}: {e}")))?;
            Ok((ranges, Some(stored.revision)))
        }
    }
}

/// Adds `fire` (between `neighbours`) to the job's backfilled ranges: compare-and-set, read
/// again and tried again when another backfill of the job wrote meanwhile.
pub async fn mark(store: &Store, job: &str, neighbours: Neighbours, fire: DateTime<Utc>) -> Result<(), Error> {
    let key = lease_keys::backfilled(job);
    let mut tries = 0;
    loop {
        let (mut done, revision) = backfilled(store, job).await?;
        if done.contains(fire) {
            return Ok(());
        }
        done.add(neighbours, fire);
        let value = serde_json::to_vec(&done)
            .map_err(|e| Error::new(ErrorKind::Other, format!("encoding what was backfilled of {job}: {e}")))?;
        let written = match revision {
            None => store.leases.create(&key, value.into(), None).await,
            Some(revision) => store.leases.update(&key, value.into(), revision, None).await,
        };
        match written {
            Ok(_) => return Ok(()),
            Err(e) if tries < 5 && matches!(e.kind(), ErrorKind::AlreadyExists | ErrorKind::Conflict) => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// What a backfill of some fires will do: the fires to run, and those left out.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub to_run: Vec<DateTime<Utc>>,
    /// Fires whose own run started on schedule (any status but `skipped`), left out.
    pub ran_on_schedule: Vec<DateTime<Utc>>,
    /// Fires backfilled before (in the job's ranges, or a record under their backfill id).
    pub backfilled: Vec<DateTime<Utc>>,
    /// Of those, the ones found by their record alone (a backfill stopped between its
    /// dispatch and its mark): to join the ranges before their records are pruned.
    pub unmarked: Vec<DateTime<Utc>>,
}

/// Sorts `fires` by the job's backfilled ranges and what its run records say of them.
pub async fn plan(store: &Store, job: &str, fires: &[DateTime<Utc>], rerun: bool) -> Result<Plan, Error> {
    let (done, _) = backfilled(store, job).await?;
    let records = store.list_runs(job).await?;
    let status = |run_id: &str| records.iter().find(|r| r.record.run_id == run_id).map(|r| r.record.status);
    let mut plan = Plan::default();
    for &fire in fires {
        if done.contains(fire) {
            plan.backfilled.push(fire);
        } else if status(&backfill_run_id(fire)).is_some() {
            plan.backfilled.push(fire);
            plan.unmarked.push(fire);
        } else if !rerun && status(&fire_run_id(fire)).is_some_and(|s| s != Status::Skipped) {
            plan.ran_on_schedule.push(fire);
        } else {
            plan.to_run.push(fire);
        }
    }
    Ok(plan)
}

/// Dispatches the backfill of `fire` of `spec` (at `revision`), following `overlap`
/// instead of the job's own when given, at `clock`'s now (see `trigger`). Returns the run's
/// key and whether it was sent.
pub async fn dispatch_fire(
    store: &Store,
    clock: &SharedClock,
    (spec, revision): (&JobSpec, u64),
    fire: DateTime<Utc>,
    overlap: Option<Overlap>,
) -> Result<(String, Outcome), Error> {
    let msg = DispatchMsg { overlap, ..Backfill::first(&spec.name, backfill_run_id(fire), fire, revision) };
    let outcome = Backfill::start(store, &spec.pool, &msg, None, clock.now()).await?;
    Ok((run_key(&msg.job, &msg.run_id), outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(schedule: &str, timezone: &str) -> JobSpec {
        let shell = crate::spec::ShellSpec { command: Some("true".into()), ..Default::default() };
        JobSpec { timezone: timezone.into(), ..JobSpec::shell("report", schedule, shell) }
    }

    fn none() -> Excluded {
        Excluded::default()
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn backfilled_ranges_grow_by_the_next_fire_only_and_stay_bounded() {
        let h = |n: i64| at("2026-11-01T00:00:00Z") + chrono::Duration::hours(n);
        let fires: Vec<_> = (0..6).map(h).collect();
        let mut done = Backfilled::default();
        let add = |done: &mut Backfilled, n: i64| done.add(neighbours(&fires, h(n)), h(n));
        for n in [0, 1, 2, 4] {
            add(&mut done, n);
        }
        // h(3) left out (it ran on schedule): h(4) stands in a range of its own.
        assert_eq!(done.ranges, vec![(h(0), h(2)), (h(4), h(4))]);
        assert!(done.contains(h(1)) && !done.contains(h(3)) && done.contains(h(4)));
        // Backfilled later, h(3) joins both.
        add(&mut done, 3);
        assert_eq!(done.ranges, vec![(h(0), h(4))]);
        add(&mut done, 2);
        assert_eq!(done.ranges, vec![(h(0), h(4))], "a fire already in is added once");
        assert_eq!(neighbours(&fires, h(0)), (None, Some(h(1))));
        assert_eq!(neighbours(&fires, h(5)), (Some(h(4)), None));
        let mut many = Backfilled::default();
        for n in 0..(MAX_RANGES as i64 + 5) {
            many.add((None, None), h(2 * n));
        }
        assert_eq!(many.ranges.len(), MAX_RANGES);
        assert!(!many.contains(h(0)) && many.contains(h(2 * (MAX_RANGES as i64 + 4))), "the oldest are forgotten");
    }

    #[test]
    fn the_range_holds_its_start_not_its_end_and_is_bounded() {
        let daily = spec("0 6 * * *", "UTC");
        let (from, to) = (at("2026-11-01T06:00:00Z"), at("2026-11-04T06:00:00Z"));
        let got = fires(&daily, (from, to), &none(), 10).unwrap().unwrap();
        let want: Vec<_> = ["2026-11-01T06:00:00Z", "2026-11-02T06:00:00Z", "2026-11-03T06:00:00Z"].map(at).into();
        assert_eq!(got, want);
        assert_eq!(fires(&daily, (from, to), &none(), 3).unwrap().map(|f| f.len()), Some(3), "exactly max is allowed");
        assert_eq!(fires(&daily, (from, to), &none(), 2).unwrap(), None, "more than max is refused");
        assert_eq!(fires(&daily, (to, from), &none(), 10).unwrap(), Some(vec![]), "an inverted range holds nothing");
    }

    #[test]
    fn fires_follow_the_jobs_zone_dst_and_h_as_the_scheduler_does() {
        // 02:30 in New York on 8 March 2026 falls in the skipped hour: Debian's rule fires
        // it once, at the end of the gap (03:00 EDT = 07:00 UTC).
        let ny = spec("30 2 * * *", "America/New_York");
        let got = fires(&ny, (at("2026-03-07T00:00:00Z"), at("2026-03-10T00:00:00Z")), &none(), 10).unwrap().unwrap();
        let want: Vec<_> = ["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"].map(at).into();
        assert_eq!(got, want);
        // The job's `dst`: `twice` runs 01:30 in both passes of New York's repeated hour.
        let twice = JobSpec { dst: cronrun_time::Dst::Twice, ..spec("30 1 * * *", "America/New_York") };
        let got =
            fires(&twice, (at("2026-11-01T00:00:00Z"), at("2026-11-02T00:00:00Z")), &none(), 10).unwrap().unwrap();
        assert_eq!(got, ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"].map(at).to_vec());
        let hashed = spec("H 6 * * *", "UTC");
        let resolved = crate::schedule::Schedule::resolve("H 6 * * *", "report").unwrap().into_owned();
        let minute: u32 = resolved.split(' ').next().unwrap().parse().unwrap();
        let got =
            fires(&hashed, (at("2026-11-01T00:00:00Z"), at("2026-11-02T00:00:00Z")), &none(), 10).unwrap().unwrap();
        assert_eq!(got, vec![at("2026-11-01T06:00:00Z") + chrono::Duration::minutes(minute.into())]);
    }
}
