//! Whether a rule reports an event: pure, from the event, whether a later attempt of the
//! run exists, and the job's failures in a row as its kept records show them; and whether
//! a fire is late, from its instant, the clock and its run's status.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::event::EventKind;
use crate::record::{RunRecord, Status};
use crate::spec::notify::{Notice, Notify};

/// What the notifier knows of one event's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub kind: EventKind,
    /// A later attempt of the run exists: this failure is not its end.
    pub retried: bool,
    /// Failures in a row ending with this run (a failure), or just before it (a success).
    pub streak: u32,
}

/// The notice `rule` gives for `seen`, if any. A failure is reported from the rule's
/// `after`-th in a row on, every time; `recovered` ends a streak that was reported.
pub fn notice(rule: &Notify, seen: Seen) -> Option<Notice> {
    let wants = |n: Notice| rule.notices().any(|x| x == n);
    match seen.kind {
        kind if Notice::is_failure(kind) => {
            (!seen.retried && seen.streak >= rule.after && wants(Notice::Event(kind))).then_some(Notice::Event(kind))
        }
        EventKind::Succeeded if seen.streak >= rule.after && seen.streak > 0 && wants(Notice::Recovered) => {
            Some(Notice::Recovered)
        }
        kind => wants(Notice::Event(kind)).then_some(Notice::Event(kind)),
    }
}

/// Whether `rule` could report an event of `kind` at all: if none could, the job's runs
/// need not be read.
pub fn may_notice(rule: &Notify, kind: EventKind) -> bool {
    rule.notices().any(|n| n == Notice::Event(kind) || (n == Notice::Recovered && kind == EventKind::Succeeded))
}

/// Where a fire's `late` check stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateCheck {
    /// Look again after this long.
    Wait(Duration),
    /// Not succeeded `late` after the fire: tell.
    Late,
    /// Succeeded in time, or its record is pruned already (it finished: nothing to tell).
    Settled,
}

/// The check of a fire at `fire` against `late`, at `now`, its run's status being `status`
/// (None: its record is gone).
pub fn late(late: Duration, fire: DateTime<Utc>, now: DateTime<Utc>, status: Option<Status>) -> LateCheck {
    let due = fire + chrono::Duration::from_std(late).unwrap_or(chrono::Duration::MAX);
    match (due - now).to_std() {
        Ok(wait) if !wait.is_zero() => LateCheck::Wait(wait),
        _ if matches!(status, Some(Status::Succeeded) | None) => LateCheck::Settled,
        _ => LateCheck::Late,
    }
}

/// Failures in a row of the job's `runs` (sorted by fire) ending with run `run_id` if it
/// failed, or just before it if it succeeded. Skipped and cancelled runs neither count nor
/// break a streak; runs not finished yet are not looked at.
pub fn streak(runs: &[RunRecord], run_id: &str) -> u32 {
    let Some(at) = runs.iter().position(|r| r.run_id == run_id) else { return 0 };
    let failed = |r: &RunRecord| matches!(r.status, Status::Failed | Status::TimedOut | Status::Lost);
    let upto = if failed(&runs[at]) { at + 1 } else { at };
    let mut n = 0;
    for r in runs[..upto].iter().rev() {
        match r.status {
            Status::Skipped | Status::Cancelled | Status::Queued | Status::Running => {}
            _ if failed(r) => n += 1,
            _ => break,
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeDelta};

    use super::*;
    use crate::record::Trigger;

    fn rule(on: &[&str], after: u32) -> Notify {
        Notify {
            on: on.iter().map(|s| s.to_string()).collect(),
            webhook: Some("https://h/x".into()),
            headers: Default::default(),
            subject: None,
            format: Default::default(),
            secret: None,
            after,
            late: None,
        }
    }

    #[test]
    fn failures_are_reported_from_the_nth_in_a_row_and_recovery_after_a_reported_streak() {
        use EventKind::*;
        let seen = |kind, retried, streak| Seen { kind, retried, streak };
        let failed = Some(Notice::Event(Failed));
        // (rule's events, after, what was seen, notice)
        let cases = [
            (&["failed"][..], 1, seen(Failed, false, 1), failed),
            (&["failed"], 1, seen(Failed, false, 4), failed),
            (&["failed"], 1, seen(Failed, true, 1), None),
            (&["failed"], 3, seen(Failed, false, 2), None),
            (&["failed"], 3, seen(Failed, false, 3), failed),
            (&["failed"], 1, seen(TimedOut, false, 1), None),
            (&["timed_out", "lost"], 1, seen(Lost, false, 1), Some(Notice::Event(Lost))),
            (&["lost"], 1, seen(Lost, true, 1), None),
            (&["recovered"], 1, seen(Succeeded, false, 1), Some(Notice::Recovered)),
            (&["recovered"], 3, seen(Succeeded, false, 2), None),
            (&["recovered"], 1, seen(Succeeded, false, 0), None),
            (&["recovered", "succeeded"], 1, seen(Succeeded, false, 0), Some(Notice::Event(Succeeded))),
            (&["succeeded"], 1, seen(Succeeded, false, 2), Some(Notice::Event(Succeeded))),
            (&["missed"], 5, seen(Missed, false, 0), Some(Notice::Event(Missed))),
            (&["retrying"], 1, seen(Retrying, false, 0), Some(Notice::Event(Retrying))),
            (&["failed"], 1, seen(Skipped, false, 0), None),
        ];
        for (on, after, seen, expected) in cases {
            assert_eq!(notice(&rule(on, after), seen), expected, "{on:?} after {after}, {seen:?}");
            if expected.is_some() {
                assert!(may_notice(&rule(on, after), seen.kind), "{on:?} may notice {seen:?}");
            }
        }
        assert!(!may_notice(&rule(&["late", "failed"], 1), Succeeded));
        assert!(may_notice(&rule(&["recovered"], 1), Succeeded));
    }

    #[test]
    fn a_fire_is_late_when_not_succeeded_at_its_deadline() {
        let fire = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let at = |secs: i64| fire + TimeDelta::seconds(secs);
        let minute = Duration::from_secs(60);
        // (now, status, check)
        let cases = [
            (at(0), Some(Status::Queued), LateCheck::Wait(minute)),
            (at(45), Some(Status::Running), LateCheck::Wait(Duration::from_secs(15))),
            (at(45), Some(Status::Succeeded), LateCheck::Wait(Duration::from_secs(15))),
            (at(60), Some(Status::Running), LateCheck::Late),
            (at(61), Some(Status::Queued), LateCheck::Late),
            (at(61), Some(Status::Failed), LateCheck::Late),
            (at(3600), Some(Status::Lost), LateCheck::Late),
            (at(60), Some(Status::Succeeded), LateCheck::Settled),
            (at(90), None, LateCheck::Settled),
            (at(-5), Some(Status::Queued), LateCheck::Wait(Duration::from_secs(65))),
        ];
        for (now, status, expected) in cases {
            assert_eq!(late(minute, fire, now, status), expected, "{now} {status:?}");
        }
    }

    #[test]
    fn a_streak_counts_failures_in_a_row_through_skips_and_stops_at_a_success() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let statuses = [
            Status::Failed,
            Status::Succeeded,
            Status::Failed,
            Status::Skipped,
            Status::TimedOut,
            Status::Lost,
            Status::Succeeded,
            Status::Running,
        ];
        let runs: Vec<RunRecord> = statuses
            .iter()
            .enumerate()
            .map(|(i, status)| {
                let mut r =
                    RunRecord::queued("j", &format!("r{i}"), Trigger::Schedule, at + TimeDelta::seconds(i as i64), 1);
                r.status = *status;
                r
            })
            .collect();
        for (run, expected) in
            [("r0", 1), ("r1", 1), ("r2", 1), ("r3", 1), ("r4", 2), ("r5", 3), ("r6", 3), ("r7", 0), ("nope", 0)]
        {
            assert_eq!(streak(&runs, run), expected, "{run}");
        }
    }
}
