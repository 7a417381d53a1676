//! Backfill: the fires of a past range of a job's schedule, run now (`cronrun backfill`).
//!
//! Each backfilled fire is a run of trigger `backfill` whose id is its fire's and `-b`
//! (`record::backfill_run_id`), dispatched through the same create-if-absent record and
//! deduplicated publish as every run: a backfill repeated, or run again after it was
//! interrupted, finds the fires it backfilled before and runs none of them twice. The
//! fire's own run is left alone: a fire that ran on schedule is left out unless asked
//! for (`rerun`), one recorded missed is backfilled.

use chrono::{DateTime, Utc};

use crate::dispatch::{DispatchMsg, Outcome, dispatch};
use crate::error::Error;
use crate::record::{Status, Trigger, backfill_run_id, fire_run_id, run_key};
use crate::spec::{JobSpec, Overlap};
use crate::store::{Excluded, Store};

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

/// What a backfill of some fires will do: the fires to run, and those left out.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub to_run: Vec<DateTime<Utc>>,
    /// Fires whose own run started on schedule (any status but `skipped`), left out.
    pub ran_on_schedule: Vec<DateTime<Utc>>,
    /// Fires backfilled before (a record under their backfill id).
    pub backfilled: Vec<DateTime<Utc>>,
}

/// Sorts `fires` by what the job's run records say of them (one listing of its runs).
pub async fn plan(store: &Store, job: &str, fires: Vec<DateTime<Utc>>, rerun: bool) -> Result<Plan, Error> {
    let records = store.list_runs(job).await?;
    let status = |run_id: &str| records.iter().find(|r| r.record.run_id == run_id).map(|r| r.record.status);
    let mut plan = Plan::default();
    for fire in fires {
        if status(&backfill_run_id(fire)).is_some() {
            plan.backfilled.push(fire);
        } else if !rerun && status(&fire_run_id(fire)).is_some_and(|s| s != Status::Skipped) {
            plan.ran_on_schedule.push(fire);
        } else {
            plan.to_run.push(fire);
        }
    }
    Ok(plan)
}

/// Dispatches the backfill of `fire` of `spec` (at `revision`), following `overlap`
/// instead of the job's own when given. Returns the run's key and whether it was sent.
pub async fn dispatch_fire(
    store: &Store,
    (spec, revision): (&JobSpec, u64),
    fire: DateTime<Utc>,
    overlap: Option<Overlap>,
) -> Result<(String, Outcome), Error> {
    let msg = DispatchMsg {
        job: spec.name.clone(),
        run_id: backfill_run_id(fire),
        attempt: 1,
        trigger: Trigger::Backfill,
        scheduled_at: fire,
        spec_revision: revision,
        queued: None,
        overlap,
    };
    let outcome = dispatch(store, &spec.pool, &msg, Utc::now()).await?;
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
