//! What a shard's leader does with the fires due by now plus its lead: each is dispatched
//! (on schedule, or as a catch-up) or recorded missed, as `catchup::judge` says, in fire
//! order and at most as many as there is room for in flight. Missed fires are recorded
//! one by one up to `MISSED_RECORDS_MAX` per job and leadership, then summed up in one
//! event, so that a long outage cannot make a new leader write for ever.
//!
//! No NATS here: the leader carries the actions out (`leader.rs`), and the decisions are
//! tested on a manual clock below.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::catchup::{self, MISSED_RECORDS_MAX, Verdict};
use super::{Due, FireQueue};
use crate::record::Trigger;

/// One fire's fate.
pub(super) enum Action {
    /// Dispatched as a run with this trigger.
    Run(Due, Trigger),
    /// Missed, for this reason; how it is recorded.
    Missed(Due, String, Record),
}

/// How a missed fire is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    /// A `skipped` run record and a `missed` event of its own.
    One,
    /// The one event that stands for this and every later missed fire of the job.
    Summary,
    /// Counted in the summary already: logged only.
    Counted,
}

impl Action {
    pub(super) fn fire(&self) -> DateTime<Utc> {
        match self {
            Action::Run(due, _) | Action::Missed(due, _, _) => due.fire,
        }
    }
}

/// The leader's decisions over one leadership.
pub(super) struct Planner {
    lead: TimeDelta,
    default_deadline: Duration,
    missed_per_job: HashMap<String, u32>,
}

impl Planner {
    pub(super) fn new(lead: Duration, default_deadline: Duration) -> Self {
        Self { lead: TimeDelta::from_std(lead).unwrap_or_default(), default_deadline, missed_per_job: HashMap::new() }
    }

    /// Up to `room` fires due by `now` plus the lead, taken from `queue` in fire order.
    /// Fires of jobs whose spec no longer reads are dropped.
    pub(super) fn due(&mut self, queue: &mut FireQueue, now: DateTime<Utc>, room: usize) -> Vec<Action> {
        let mut actions = Vec::new();
        while actions.len() < room {
            let Some(due) = queue.pop_due(now + self.lead) else { break };
            let Some(summary) = due.summary() else { continue };
            match catchup::judge(summary, due.fire, now, self.default_deadline) {
                Verdict::Run(trigger) => actions.push(Action::Run(due, trigger)),
                Verdict::Missed(why) => {
                    let count = self.missed_per_job.entry(due.job.name.to_string()).or_default();
                    *count += 1;
                    let record = match *count {
                        n if n <= MISSED_RECORDS_MAX => Record::One,
                        n if n == MISSED_RECORDS_MAX + 1 => Record::Summary,
                        _ => Record::Counted,
                    };
                    actions.push(Action::Missed(due, why, record));
                }
            }
        }
        actions
    }

    /// How long the leader may sleep before the next fire is due, given the queue's
    /// earliest; an hour when there is none or no room (a dispatch ending wakes it).
    pub(super) fn sleep(&self, next: Option<DateTime<Utc>>, now: DateTime<Utc>, room: usize) -> Duration {
        match next {
            Some(next) if room > 0 => (next - self.lead - now).to_std().unwrap_or_default(),
            _ => Duration::from_secs(3600),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::TimeZone;

    use super::*;
    use crate::catalog::CatalogJob;
    use crate::clock::{Clock, ManualClock};
    use crate::spec::{Catchup, JobSpec, ShellSpec};

    fn job(name: &str, schedule: &str, catchup: Catchup) -> Arc<CatalogJob> {
        let mut spec = JobSpec::shell(name, schedule, ShellSpec { command: Some("true".into()), ..Default::default() });
        spec.catchup = catchup;
        spec.catchup_window = Duration::from_secs(24 * 3600);
        Arc::new(CatalogJob::from_spec(&spec, 1))
    }

    fn t(s: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).single().unwrap_or_default() + TimeDelta::seconds(s)
    }

    /// (job, fire in seconds from t(0), what became of it)
    fn outcome(a: &Action) -> (String, i64, String) {
        let what = match a {
            Action::Run(_, trigger) => format!("{trigger:?}"),
            Action::Missed(_, _, record) => format!("missed {record:?}"),
        };
        let due = match a {
            Action::Run(due, _) | Action::Missed(due, _, _) => due,
        };
        (due.job.name.to_string(), (a.fire() - t(0)).num_seconds(), what)
    }

    /// A leader that takes a shard over after a five-minute outage (its queue resumes from
    /// the watermark at t(0)), then leads on as the manual clock moves a second at a time.
    #[test]
    fn a_new_leader_runs_each_fire_once_in_order_and_sums_up_a_long_outage() {
        let clock = ManualClock::new(t(300));
        let mut queue = FireQueue::default();
        queue.upsert(job("none", "*/10 * * * * *", Catchup::None), t(0));
        queue.upsert(job("latest", "*/10 * * * * *", Catchup::Latest), t(0));
        let mut planner = Planner::new(Duration::from_secs(1), Duration::from_secs(60));

        let mut seen = Vec::new();
        while clock.now() <= t(330) {
            seen.extend(planner.due(&mut queue, clock.now(), usize::MAX).iter().map(outcome));
            clock.set(clock.now() + TimeDelta::seconds(1));
        }

        // (job, fires run as catch-ups, fires missed before them)
        for (name, catchups, missed) in [("none", vec![], 23), ("latest", vec![230], 22)] {
            let fires: Vec<&(String, i64, String)> = seen.iter().filter(|(n, _, _)| n == name).collect();
            let instants: Vec<i64> = fires.iter().map(|(_, at, _)| *at).collect();
            // Every fire from the watermark on, once, in order.
            assert_eq!(instants, (1..=33).map(|i| i * 10).collect::<Vec<_>>(), "{name}");
            let with = |what: &str| -> Vec<i64> { fires.iter().filter(|f| f.2 == what).map(|f| f.1).collect() };
            // Within the 60 s deadline at the takeover (t(240) on), and after: on schedule.
            assert_eq!(with("Schedule"), (24..=33).map(|i| i * 10).collect::<Vec<_>>(), "{name}");
            // `latest` runs the last fire past its deadline as a catch-up, `none` none.
            assert_eq!(with("Catchup"), catchups, "{name}");
            // The rest are missed: the first 20 recorded one by one, then one summary.
            let records: Vec<&str> = fires.iter().map(|f| f.2.as_str()).filter(|w| w.starts_with("missed")).collect();
            let mut expected = vec!["missed One"; 20];
            expected.push("missed Summary");
            expected.resize(missed, "missed Counted");
            assert_eq!(records, expected, "{name}");
        }
    }

    #[test]
    fn no_more_fires_than_there_is_room_for_and_the_rest_wait_in_order() {
        let mut queue = FireQueue::default();
        for name in ["a", "b", "c"] {
            queue.upsert(job(name, "* * * * * *", Catchup::None), t(0));
        }
        let mut planner = Planner::new(Duration::from_secs(1), Duration::from_secs(60));
        let first: Vec<_> = planner.due(&mut queue, t(0), 2).iter().map(outcome).collect();
        let rest: Vec<_> = planner.due(&mut queue, t(0), 10).iter().map(outcome).collect();
        assert_eq!(first.len(), 2);
        assert_eq!(rest.len(), 1);
        let all: Vec<(String, i64)> = first.into_iter().chain(rest).map(|(n, at, _)| (n, at)).collect();
        assert!(all.iter().all(|(_, at)| *at == 1), "{all:?}");
        let mut names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
        // Nothing due: sleep until the next fire less the lead; no room: an hour.
        assert_eq!(planner.sleep(queue.peek(), t(0), 1), Duration::from_secs(1));
        assert_eq!(planner.sleep(queue.peek(), t(0), 0), Duration::from_secs(3600));
    }
}
