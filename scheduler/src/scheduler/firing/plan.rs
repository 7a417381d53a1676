//! What a shard's leader does with the fires due by now plus its lead: each is dispatched
//! (on schedule, or as a catch-up) or recorded missed, as `catchup::judge` says, in fire
//! order and at most as many as there is room for in flight. Missed fires are recorded
//! one by one up to `MISSED_RECORDS_MAX` per job and leadership, then summed up in one
//! event, so that a long outage cannot make a new leader write for ever.
//!
//! An instant on which many jobs fire together gets more lead than `scheduler.lead`
//! (`group_lead`): each of its runs costs a chain of NATS writes before it can be
//! released (the record's create, the dispatch, the runner's lease, claim and `running`
//! writes), and with thousands at once, on a server they all share, that chain outlasts
//! the lead. 10,000 Wasm jobs of one instant on two agents (2026-11-27): with the lead
//! alone, runs reached their runners until 218 ms before the instant and a quarter
//! started alone after it (p99 336-852 ms); dispatched 3 s ahead, every run was ready
//! 1.6 s before the instant and released with its group (p99 159 ms).
//!
//! No NATS here: the leader carries the actions out (`leader.rs`), and the decisions are
//! tested on a manual clock below.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::catchup::{self, MISSED_RECORDS_MAX, Verdict};
use super::queue::{Due, FireQueue};
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

/// Fires of one instant, over all shards, that `scheduler.lead` alone has room for.
const GROUP_FITS: usize = 2_000;

/// Lead added for each fire of an instant beyond `GROUP_FITS`.
const GROUP_PACE_US: i64 = 200;

/// The most lead added to an instant (reached at 27,000 fires).
const GROUP_LEAD_MAX: TimeDelta = TimeDelta::seconds(5);

/// Fires of an instant in one shard below which that shard's share says too little of
/// the whole group (with 4,096 shards, a few jobs meeting in one by chance).
const GROUP_SHARD_MIN: usize = 8;

/// The lead added to an instant on which `shard_fires` jobs of one of `shards` shards
/// fire. Jobs fall into shards by a hash of their name, so a large group is spread evenly
/// and one shard's share, times the shard count, is the whole group: every leader gives
/// the instant about the same lead without asking the others.
fn group_lead(shard_fires: usize, shards: u32) -> TimeDelta {
    if shard_fires < GROUP_SHARD_MIN {
        return TimeDelta::zero();
    }
    let fires = shard_fires.saturating_mul(shards as usize);
    let beyond = i64::try_from(fires.saturating_sub(GROUP_FITS)).unwrap_or(i64::MAX);
    TimeDelta::microseconds(beyond.saturating_mul(GROUP_PACE_US)).min(GROUP_LEAD_MAX)
}

/// The leader's decisions over one leadership.
pub(super) struct Planner {
    lead: TimeDelta,
    shards: u32,
    default_deadline: Duration,
    missed_per_job: HashMap<String, u32>,
    /// Fires taken per instant that still has fires queued: with those, the instant's
    /// whole group, however many were taken so far (room is limited).
    taken: BTreeMap<DateTime<Utc>, usize>,
}

impl Planner {
    pub(super) fn new(lead: Duration, shards: u32, default_deadline: Duration) -> Self {
        let lead = TimeDelta::from_std(lead).unwrap_or_default();
        Self { lead, shards, default_deadline, missed_per_job: HashMap::new(), taken: BTreeMap::new() }
    }

    /// When the fires of instant `at` are due, `queued` of them still in the queue:
    /// `scheduler.lead` before it, more for a large instant.
    fn due_at(&self, at: DateTime<Utc>, queued: usize) -> DateTime<Utc> {
        let fires = queued + self.taken.get(&at).copied().unwrap_or(0);
        at - self.lead - group_lead(fires, self.shards)
    }

    /// The latest queued instant due by `now`; the fires of earlier instants go with it
    /// (a little early, when a large instant follows a small one closely).
    fn due_until(&mut self, queue: &mut FireQueue, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let first = queue.peek()?;
        // Instants before the earliest queued one have no fire left to take.
        self.taken = self.taken.split_off(&first);
        // Every instant within the lead is due; one past it, when its group adds enough.
        // Only those few seconds are looked at (a catch-up may queue a great many before).
        let within = now + self.lead;
        let mut later = queue.instants(within, within + GROUP_LEAD_MAX).rev();
        let extended = later.find(|&(at, queued)| self.due_at(at, queued) <= now).map(|(at, _)| at);
        extended.or((first <= within).then_some(within))
    }

    /// Up to `room` fires due by `now`, taken from `queue` in fire order. Fires of jobs
    /// whose spec no longer reads are dropped.
    pub(super) fn due(&mut self, queue: &mut FireQueue, now: DateTime<Utc>, room: usize) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(until) = self.due_until(queue, now) else { return actions };
        while actions.len() < room {
            let Some(due) = queue.pop_due(until) else { break };
            *self.taken.entry(due.fire).or_default() += 1;
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

    /// How long the leader may sleep before a queued fire is due; an hour when there is
    /// none or no room (a dispatch ending wakes it).
    pub(super) fn sleep(&mut self, queue: &mut FireQueue, now: DateTime<Utc>, room: usize) -> Duration {
        let Some(first) = queue.peek().filter(|_| room > 0) else { return Duration::from_secs(3600) };
        // A later instant is due before the first only by its added lead, at most the maximum.
        let instants = queue.instants(first, first + GROUP_LEAD_MAX);
        let next = instants.map(|(at, queued)| self.due_at(at, queued)).min().unwrap_or(first - self.lead);
        (next - now).to_std().unwrap_or_default()
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
        let mut planner = Planner::new(Duration::from_secs(1), 64, Duration::from_secs(60));

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
    fn an_instant_many_jobs_share_gets_lead_in_proportion_to_them_up_to_a_maximum() {
        // (fires of the instant in one shard, shards, lead added in microseconds)
        let cases = [
            (0, 64, 0),
            (1, 64, 0),
            (31, 64, 0),
            (32, 64, 9_600),
            (157, 64, 1_609_600),
            (422, 64, 5_000_000),
            (usize::MAX, 64, 5_000_000),
            // The same group in fewer, fuller shards gets the same lead.
            (628, 16, 1_609_600),
            // A few jobs meeting in one of many shards by chance say nothing of the rest.
            (7, 4096, 0),
            (8, 4096, 5_000_000),
        ];
        for (shard_fires, shards, added_us) in cases {
            assert_eq!(group_lead(shard_fires, shards), TimeDelta::microseconds(added_us), "{shard_fires} of {shards}");
        }
    }

    /// 157 jobs of one shard (of 64) fire at t(10): about 10,000 in all, dispatched
    /// 1.61 s earlier than the lead alone says, even when there is room for only some at a
    /// time; a job alone on its instant keeps the lead.
    #[test]
    fn a_large_instant_is_dispatched_earlier_and_all_of_it_whatever_the_room() {
        let mut queue = FireQueue::default();
        for i in 0..157 {
            queue.upsert(job(&format!("many-{i}"), "10 * * * * *", Catchup::None), t(0));
        }
        queue.upsert(job("alone", "20 * * * * *", Catchup::None), t(0));
        let mut planner = Planner::new(Duration::from_secs(1), 64, Duration::from_secs(60));
        let before = |ms: i64| t(10) - TimeDelta::milliseconds(ms);
        assert_eq!(planner.sleep(&mut queue, t(0), 1), Duration::from_micros(10_000_000 - 2_609_600));
        assert!(planner.due(&mut queue, before(2_611), 100).is_empty());
        let first = planner.due(&mut queue, before(2_609), 100);
        let rest = planner.due(&mut queue, before(2_609), 100);
        assert_eq!((first.len(), rest.len()), (100, 57));
        assert!(first.iter().chain(&rest).all(|a| matches!(a, Action::Run(..)) && a.fire() == t(10)));
        assert_eq!(planner.sleep(&mut queue, t(10), 1), Duration::from_secs(9));
        assert!(planner.due(&mut queue, t(19) - TimeDelta::milliseconds(1), 100).is_empty());
        assert_eq!(
            planner.due(&mut queue, t(19), 100).iter().map(outcome).collect::<Vec<_>>(),
            [("alone".to_string(), 20, "Schedule".to_string())]
        );
    }

    /// A job firing every second keeps the shard's earliest instant a second ahead of the
    /// large one: the large one is still dispatched its whole lead ahead, the fires before
    /// it with it, and every fire once and in order.
    #[test]
    fn a_large_instant_behind_a_small_one_gets_its_whole_lead() {
        let mut queue = FireQueue::default();
        queue.upsert(job("tick", "* * * * * *", Catchup::None), t(0));
        for i in 0..157 {
            queue.upsert(job(&format!("many-{i}"), "10 * * * * *", Catchup::None), t(0));
        }
        let mut planner = Planner::new(Duration::from_secs(1), 64, Duration::from_secs(60));
        let (mut now, mut taken) = (t(0), Vec::new());
        while now <= t(10) {
            let room = usize::MAX;
            taken.extend(planner.due(&mut queue, now, room).iter().map(|a| (now, outcome(a))));
            now += TimeDelta::milliseconds(10).max(TimeDelta::from_std(planner.sleep(&mut queue, now, room)).unwrap());
        }
        let many: Vec<_> = taken.iter().filter(|(_, (name, _, _))| name.starts_with("many")).collect();
        assert_eq!(many.len(), 157);
        let due = t(10) - TimeDelta::microseconds(2_609_600);
        assert!(
            many.iter().all(|(at, (_, fire, _))| *fire == 10 && *at >= due && *at < due + TimeDelta::milliseconds(10))
        );
        // The tick's fires at 9 (before them) and 10 went with them; the others a second
        // ahead.
        let ticks: Vec<(DateTime<Utc>, i64)> =
            taken.iter().filter(|(_, (name, _, _))| name == "tick").map(|(at, (_, fire, _))| (*at, *fire)).collect();
        assert_eq!(ticks.iter().map(|(_, fire)| *fire).collect::<Vec<_>>(), (1..=11).collect::<Vec<_>>());
        for (at, fire) in ticks {
            let expected = if fire == 9 || fire == 10 { due } else { t(fire - 1) };
            assert!(at >= expected && at < expected + TimeDelta::milliseconds(10), "tick {fire} taken at {at}");
        }
    }

    /// Part of a large instant taken (no more room), then a job added that fires before
    /// it: the rest of the instant keeps the lead of the whole.
    #[test]
    fn the_rest_of_a_large_instant_keeps_its_lead_when_an_earlier_fire_comes_first() {
        let mut queue = FireQueue::default();
        for i in 0..157 {
            queue.upsert(job(&format!("many-{i}"), "10 * * * * *", Catchup::None), t(0));
        }
        let mut planner = Planner::new(Duration::from_secs(1), 64, Duration::from_secs(60));
        let now = t(10) - TimeDelta::milliseconds(2_609);
        assert_eq!(planner.due(&mut queue, now, 100).len(), 100);
        queue.upsert(job("new", "9 * * * * *", Catchup::None), now);
        let rest: Vec<_> = planner.due(&mut queue, now, 100).iter().map(outcome).collect();
        assert_eq!(rest.len(), 58);
        assert_eq!(rest[0], ("new".to_string(), 9, "Schedule".to_string()));
        assert!(rest[1..].iter().all(|(name, fire, _)| name.starts_with("many") && *fire == 10));
    }

    #[test]
    fn no_more_fires_than_there_is_room_for_and_the_rest_wait_in_order() {
        let mut queue = FireQueue::default();
        for name in ["a", "b", "c"] {
            queue.upsert(job(name, "* * * * * *", Catchup::None), t(0));
        }
        let mut planner = Planner::new(Duration::from_secs(1), 64, Duration::from_secs(60));
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
        assert_eq!(planner.sleep(&mut queue, t(0), 1), Duration::from_secs(1));
        assert_eq!(planner.sleep(&mut queue, t(0), 0), Duration::from_secs(3600));
    }
}
