//! Late fires: what a scheduler does with a fire it finds past its deadline, typically
//! after no scheduler ran for a while.
//!
//! A fire later than its deadline (`starting_deadline`, else the scheduler's default) is
//! missed unless the job's `catchup` says otherwise: `all` runs every missed fire within
//! `catchup_window`, `latest` only the last of them (trigger `catchup`). A missed fire gets
//! a `skipped` run record saying why and a `missed` event, so it shows in `cronrun runs`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::catalog::JobSummary;
use crate::dispatch::record_skipped;
use crate::events::{Event, EventKind, publish_event};
use crate::record::{Trigger, fire_run_id};
use crate::spec::{Catchup, History};
use crate::store::Store;

/// Missed fires recorded one by one per job and leadership; the rest are summed up.
pub(super) const MISSED_RECORDS_MAX: u32 = 20;

pub(super) enum Verdict {
    Run(Trigger),
    Missed(String),
}

/// The verdict on `fire`, found at `now`.
pub(super) fn judge(job: &JobSummary, fire: DateTime<Utc>, now: DateTime<Utc>, default_deadline: Duration) -> Verdict {
    let late = |t: DateTime<Utc>| (now - t).to_std().unwrap_or_default();
    let deadline = job.starting_deadline.unwrap_or(default_deadline);
    if late(fire) <= deadline {
        return Verdict::Run(Trigger::Schedule);
    }
    let how_late = format!("found {}s late, past its {}s deadline", late(fire).as_secs(), deadline.as_secs());
    if late(fire) > job.catchup_window {
        return Verdict::Missed(format!("{how_late} and its {}s catch-up window", job.catchup_window.as_secs()));
    }
    match job.catchup {
        Catchup::None => Verdict::Missed(format!("{how_late} (catchup none)")),
        Catchup::All => Verdict::Run(Trigger::Catchup),
        Catchup::Latest => {
            // The latest missed fire is the one whose successor is not missed as well.
            let next = job.schedule.next_after(fire, job.tz);
            if next.is_some_and(|n| late(n) > deadline) {
                Verdict::Missed(format!("{how_late}; a later missed fire runs instead (catchup latest)"))
            } else {
                Verdict::Run(Trigger::Catchup)
            }
        }
    }
}

/// Where a new leader starts a job's fires when it resumes from `watermark`: fires older
/// than every window are missed whatever the policy, and are summed up in one event
/// instead of being walked one by one.
pub(super) async fn resume_from(
    store: &Store,
    name: &str,
    job: &JobSummary,
    watermark: DateTime<Utc>,
    now: DateTime<Utc>,
    default_deadline: Duration,
) -> DateTime<Utc> {
    let reach = job.catchup_window.max(job.starting_deadline.unwrap_or(default_deadline));
    let horizon = now - chrono::TimeDelta::from_std(reach).unwrap_or_default();
    if watermark >= horizon {
        return watermark;
    }
    if let Some(first) = job.schedule.next_after(watermark, job.tz).filter(|f| *f <= horizon) {
        let detail = format!(
            "fires from {first} to {horizon} were missed: no scheduler ran, and they are beyond the catch-up window"
        );
        publish_event(store, &Event::new(name, &fire_run_id(first), EventKind::Missed, 1, now).with_detail(detail))
            .await;
    }
    horizon
}

/// Records a missed fire (record `skipped` + `missed` event).
pub(super) async fn record_missed(
    store: &Store,
    name: &str,
    (revision, history): (u64, &History),
    fire: DateTime<Utc>,
    why: &str,
    now: DateTime<Utc>,
) {
    let run_id = fire_run_id(fire);
    // An event follows only the record it reports.
    if !record_skipped(store, name, &run_id, fire, revision, &format!("missed: {why}"), now).await {
        return;
    }
    publish_event(store, &Event::new(name, &run_id, EventKind::Missed, 1, now).with_detail(why)).await;
    crate::metrics::fires_missed(name, 1);
    // At most `MISSED_RECORDS_MAX` of these per job and takeover: pruning each time is cheap.
    if let Err(e) = store.prune_runs(name, history).await {
        tracing::warn!(job = name, "pruning run history: {e}");
    }
}

/// The one event that stands for the missed fires beyond `MISSED_RECORDS_MAX`.
pub(super) async fn too_many_missed(store: &Store, name: &str, fire: DateTime<Utc>, now: DateTime<Utc>) {
    let detail = format!("more than {MISSED_RECORDS_MAX} fires missed; later ones are not recorded one by one");
    publish_event(store, &Event::new(name, &fire_run_id(fire), EventKind::Missed, 1, now).with_detail(detail)).await;
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;
    use crate::spec::JobSpec;

    fn job(catchup: &str, deadline: Option<&str>) -> JobSummary {
        let deadline = deadline.map(|d| format!(r#","starting_deadline":"{d}""#)).unwrap_or_default();
        let json = format!(
            r#"{{"name":"j","schedule":"0 * * * * *","shell":"true","catchup":"{catchup}","catchup_window":"10m"{deadline}}}"#
        );
        JobSummary::of(&JobSpec::from_json(json.as_bytes()).unwrap()).unwrap()
    }

    /// `latest` asks the job's schedule for a missed fire's successor, so the job's `dst`
    /// counts: with `twice`, 01:30 EDT on New York's fall-back day (1 Nov 2026) is followed
    /// an hour later by 01:30 EST, missed as well; by default by the next day's.
    #[test]
    fn catch_up_latest_finds_the_successor_the_jobs_dst_choice_gives() {
        let fire = DateTime::from_timestamp(1_793_511_000, 0).unwrap(); // 2026-11-01T05:30:00Z, 01:30 EDT
        let now = fire + TimeDelta::minutes(65); // both passes of 01:30 are past, by over a minute
        for (dst, runs) in [("twice", false), ("debian", true), ("skip", true)] {
            let json = format!(
                r#"{{"name":"j","schedule":"30 1 * * *","timezone":"America/New_York","dst":"{dst}","shell":"true","catchup":"latest","catchup_window":"2h"}}"#
            );
            let job = JobSummary::of(&JobSpec::from_json(json.as_bytes()).unwrap()).unwrap();
            let verdict = judge(&job, fire, now, Duration::from_secs(60));
            assert_eq!(matches!(verdict, Verdict::Run(Trigger::Catchup)), runs, "dst {dst}");
        }
    }

    /// Decisions on a fixed instant, no clock involved: (policy, deadline, fire minutes
    /// before now, verdict).
    #[test]
    fn late_fires_run_catch_up_or_are_missed_as_the_policy_says() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap() + TimeDelta::seconds(30);
        let default_deadline = Duration::from_secs(60);
        // (policy, deadline, fire minutes before now, trigger if it runs, why if missed)
        type Case = (&'static str, Option<&'static str>, i64, Option<Trigger>, &'static str);
        let cases: &[Case] = &[
            // Within the deadline: on schedule, whatever the policy.
            ("none", None, 0, Some(Trigger::Schedule), ""),
            ("none", Some("5m"), 4, Some(Trigger::Schedule), ""),
            // Past it: `none` records it missed, `all` runs it.
            ("none", None, 2, None, "(catchup none)"),
            ("all", None, 2, Some(Trigger::Catchup), ""),
            // `latest` runs only the last missed fire: the one whose successor is on time.
            ("latest", None, 2, None, "a later missed fire runs instead"),
            ("latest", None, 1, Some(Trigger::Catchup), ""),
            // Beyond the catch-up window every policy misses it.
            ("all", None, 11, None, "catch-up window"),
        ];
        for &(policy, deadline, minutes_ago, expected, why) in cases {
            // Fires are whole minutes (`0 * * * * *`): the minute `minutes_ago` before now's.
            let fire = DateTime::from_timestamp(1_800_000_000 - 60 * minutes_ago, 0).unwrap();
            let verdict = judge(&job(policy, deadline), fire, now, default_deadline);
            let case = format!("catchup {policy}, deadline {deadline:?}, fire {minutes_ago} min before");
            match (verdict, expected) {
                (Verdict::Run(trigger), Some(want)) => assert_eq!(trigger, want, "{case}"),
                (Verdict::Missed(text), None) => assert!(text.contains(why), "{case}: {text}"),
                (Verdict::Run(t), None) => panic!("{case}: ran as {t:?}, expected missed"),
                (Verdict::Missed(text), Some(_)) => panic!("{case}: missed ({text}), expected to run"),
            }
        }
    }
}
