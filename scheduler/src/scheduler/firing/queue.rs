//! The fire queue: every scheduled job's next fire in a binary heap, O(log n) per fire,
//! built for a million schedules. Edits and removals bump a job's generation; heap
//! entries of an older generation are dropped when they surface (lazy invalidation).
//! Beside it, how many jobs' next fire falls on each instant: the planner gives a large
//! instant more lead (`plan.rs`). Jobs of one schedule and zone share their next fire,
//! so this has an entry per distinct schedule in use, not per job; and that next fire is
//! computed once for them when they are queued from one instant (a shard's load, many
//! jobs firing at once): see `NextFires`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

use crate::catalog::{CatalogJob, JobSummary};
use crate::schedule::Schedule;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use foldhash::HashMap;

struct Slot {
    generation: u32,
    job: Arc<CatalogJob>,
    /// The job's pending fire, in Unix milliseconds.
    next: Option<i64>,
}

/// How many next fires `NextFires` keeps before it starts again.
const NEXT_FIRES_KEPT: usize = 1024;

/// Next fires computed lately, by schedule (its address: the entry holds the schedule, so
/// no other takes that address meanwhile), zone and instant, in Unix milliseconds. A
/// shard's load queues hundreds of thousands of jobs from one instant, most of them on a
/// handful of schedules (which jobs share: `cronrun_model::shared`): walking the calendar
/// for each was about a twentieth of the agents' CPU loading 10,000,000 jobs.
#[derive(Default)]
struct NextFires(HashMap<FromInstant, (Arc<Schedule>, Option<i64>)>);

/// A schedule's address, a zone and an instant in Unix milliseconds.
type FromInstant = (usize, Tz, i64);

impl NextFires {
    /// The first fire of `job` strictly after `t`, in Unix milliseconds.
    fn after(&mut self, job: &CatalogJob, t: DateTime<Utc>) -> Option<i64> {
        let s = job.summary.as_ref().ok()?;
        let key = (Arc::as_ptr(&s.schedule) as usize, s.tz, t.timestamp_millis());
        if let Some((_, next)) = self.0.get(&key) {
            return *next;
        }
        let next = s.schedule.next_after(t, s.tz).map(|next| next.timestamp_millis());
        if self.0.len() >= NEXT_FIRES_KEPT {
            self.0.clear();
        }
        self.0.insert(key, (s.schedule.clone(), next));
        next
    }
}

/// Jobs ahead at which `prefetching` fetches a job, and its name: the name's address
/// is read from the job, fetched by then.
const PREFETCH_JOB: usize = 16;
const PREFETCH_NAME: usize = 8;

/// `jobs` in order, to be queued one after the other, with what `upsert` reads of the ones
/// coming next fetched into the CPU's caches meanwhile. A shard's load queues hundreds of
/// thousands of jobs decoded long before, each out of cache: `upsert` was four tenths of
/// the agents' CPU at the end of a first start of 10,000,000 jobs, most of it waiting for
/// each job's memory, then its name's; a quarter of that with them fetched ahead (a load
/// probe).
pub fn prefetching(jobs: Vec<Arc<CatalogJob>>) -> impl Iterator<Item = Arc<CatalogJob>> {
    let mut jobs = jobs.into_iter();
    std::iter::from_fn(move || {
        let job = jobs.next()?;
        prefetch_ahead(jobs.as_slice());
        Some(job)
    })
}

fn prefetch_ahead(ahead: &[Arc<CatalogJob>]) {
    if let Some(job) = ahead.get(PREFETCH_JOB) {
        crate::memory::prefetch(Arc::as_ptr(job), std::mem::size_of::<CatalogJob>());
    }
    if let Some(job) = ahead.get(PREFETCH_NAME) {
        crate::memory::prefetch(Arc::as_ptr(&job.name), job.name.len());
    }
}

/// Whether two revisions of a job fire at the same instants.
fn same_schedule(a: &CatalogJob, b: &CatalogJob) -> bool {
    match (&a.summary, &b.summary) {
        (Ok(a), Ok(b)) => {
            a.schedule.expr() == b.schedule.expr() && a.schedule.dst() == b.schedule.dst() && a.tz == b.tz
        }
        _ => false,
    }
}

/// A fire that is due.
#[derive(Debug, Clone)]
pub struct Due {
    pub job: Arc<CatalogJob>,
    pub fire: DateTime<Utc>,
}

impl Due {
    pub fn summary(&self) -> Option<&JobSummary> {
        self.job.summary.as_ref().ok()
    }
}

#[derive(Default)]
pub struct FireQueue {
    heap: BinaryHeap<Reverse<(i64, u32, u32)>>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_name: HashMap<Arc<str>, u32>,
    generation: u32,
    /// Jobs whose next fire is at this instant (Unix milliseconds), for every instant
    /// that has one.
    at_instant: BTreeMap<i64, u32>,
    next_fires: NextFires,
}

impl FireQueue {
    /// A queue with room for `jobs` jobs: a shard's load knows how many it queues, and
    /// growing by doubling would move them all about once more.
    pub fn with_capacity(jobs: usize) -> Self {
        Self {
            heap: BinaryHeap::with_capacity(jobs),
            slots: Vec::with_capacity(jobs),
            by_name: HashMap::with_capacity_and_hasher(jobs, Default::default()),
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Adds or replaces a job; its first fire is the first after `from`. An edit that keeps
    /// the schedule and time zone keeps a pending fire that was due by `from` but not taken
    /// yet (the leader had no room, or its lease was in doubt): it must not be dropped
    /// unseen. Invalid and paused jobs are removed. The revision already queued is left as it
    /// is: a change seen twice (in a snapshot and as an event) must not move its next fire.
    pub fn upsert(&mut self, job: Arc<CatalogJob>, from: DateTime<Utc>) {
        if !job.summary.as_ref().is_ok_and(|s| !s.paused) {
            self.remove(&job.name);
            return;
        }
        let queued = self.by_name.get(&*job.name).and_then(|&i| self.slots[i as usize].as_ref());
        if queued.is_some_and(|slot| slot.job.revision == job.revision) {
            return;
        }
        let overdue = queued
            .filter(|slot| same_schedule(&slot.job, &job))
            .and_then(|slot| slot.next)
            .filter(|&at| at <= from.timestamp_millis());
        self.generation = self.generation.wrapping_add(1);
        let index = match self.by_name.get(&*job.name) {
            Some(&i) => i,
            None => {
                let i = self.free.pop().unwrap_or_else(|| {
                    self.slots.push(None);
                    (self.slots.len() - 1) as u32
                });
                self.by_name.insert(job.name.clone(), i);
                i
            }
        };
        let next = overdue.or_else(|| self.next_fires.after(&job, from));
        let slot = Slot { generation: self.generation, job, next };
        if let Some(next) = slot.next {
            self.heap.push(Reverse((next, index, slot.generation)));
        }
        let replaced = self.slots[index as usize].replace(slot);
        self.count(replaced.and_then(|old| old.next), next);
    }

    pub fn remove(&mut self, name: &str) {
        if let Some(i) = self.by_name.remove(name) {
            let removed = self.slots[i as usize].take();
            self.count(removed.and_then(|old| old.next), None);
            self.free.push(i);
        }
    }

    /// The instants from `from` to `to` on which some job's next fire falls, each with how
    /// many jobs fire on it, in time order.
    pub fn instants(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl DoubleEndedIterator<Item = (DateTime<Utc>, usize)> {
        let (from, to) = (from.timestamp_millis(), to.timestamp_millis());
        // A range's end before its start would panic: it lists nothing instead.
        self.at_instant
            .range(from..=to.max(from))
            .filter(move |(at, _)| **at <= to)
            .filter_map(|(at, n)| Some((DateTime::from_timestamp_millis(*at)?, *n as usize)))
    }

    /// A job's next fire moved from `old` to `new`.
    fn count(&mut self, old: Option<i64>, new: Option<i64>) {
        if old == new {
            return;
        }
        if let Some(old) = old
            && let Some(n) = self.at_instant.get_mut(&old)
        {
            *n -= 1;
            if *n == 0 {
                self.at_instant.remove(&old);
            }
        }
        if let Some(new) = new {
            *self.at_instant.entry(new).or_default() += 1;
        }
    }

    /// The earliest pending fire (stale entries are dropped on the way).
    pub fn peek(&mut self) -> Option<DateTime<Utc>> {
        while let Some(&Reverse((at, index, generation))) = self.heap.peek() {
            if self.is_current(index, generation) {
                return DateTime::from_timestamp_millis(at);
            }
            self.heap.pop();
        }
        None
    }

    /// The next fire at or before `until`; the job's following fire is queued.
    pub fn pop_due(&mut self, until: DateTime<Utc>) -> Option<Due> {
        let at = self.peek()?;
        if at > until {
            return None;
        }
        let Reverse((_, index, generation)) = self.heap.pop()?;
        let slot = self.slots[index as usize].as_mut()?;
        let old = slot.next;
        slot.next = self.next_fires.after(&slot.job, at);
        if let Some(next) = slot.next {
            self.heap.push(Reverse((next, index, generation)));
        }
        let (job, new) = (slot.job.clone(), slot.next);
        self.count(old, new);
        Some(Due { job, fire: at })
    }

    /// The next fires of the `max` queued jobs that fire soonest, in Unix milliseconds.
    pub fn next_fires(&self, max: usize) -> Vec<(Arc<str>, i64)> {
        let mut current: Vec<(i64, u32)> = self
            .heap
            .iter()
            .filter(|Reverse((_, index, generation))| self.is_current(*index, *generation))
            .map(|Reverse((at, index, _))| (*at, *index))
            .collect();
        if current.len() > max {
            current.select_nth_unstable(max);
            current.truncate(max);
        }
        current
            .into_iter()
            .filter_map(|(at, index)| Some((self.slots[index as usize].as_ref()?.job.name.clone(), at)))
            .collect()
    }

    fn is_current(&self, index: u32, generation: u32) -> bool {
        matches!(&self.slots[index as usize], Some(s) if s.generation == generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{JobSpec, ShellSpec};
    use chrono::TimeZone;

    fn job(name: &str, schedule: &str, paused: bool) -> Arc<CatalogJob> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static REVISION: AtomicU64 = AtomicU64::new(1);
        let mut spec = JobSpec::shell(name, schedule, ShellSpec { command: Some("true".into()), ..Default::default() });
        spec.paused = paused;
        Arc::new(CatalogJob::from_spec(&spec, REVISION.fetch_add(1, Ordering::SeqCst)))
    }

    fn t(s: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::seconds(s)
    }

    /// The queue's fires are the job's as its `dst` places them (`JobSpec::parsed_schedule`):
    /// New York's fall-back day (1 Nov 2026) twice, its spring-forward day (8 Mar) not.
    #[test]
    fn fires_follow_the_jobs_dst_choice() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let cases = [
            ("30 1 * * *", "twice", "2026-10-31T12:00:00Z", ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"]),
            ("30 1 * * *", "debian", "2026-10-31T12:00:00Z", ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
            ("30 2 * * *", "skip", "2026-03-07T12:00:00Z", ["2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"]),
            ("30 2 * * *", "debian", "2026-03-07T12:00:00Z", ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]),
        ];
        for (schedule, dst, from, expected) in cases {
            let mut spec =
                JobSpec::shell("a", schedule, ShellSpec { command: Some("true".into()), ..Default::default() });
            (spec.timezone, spec.dst) = ("America/New_York".into(), dst.parse().unwrap());
            let mut q = FireQueue::default();
            q.upsert(Arc::new(CatalogJob::from_spec(&spec, 1)), at(from));
            let fires: Vec<_> =
                std::iter::from_fn(|| q.pop_due(at("2026-12-31T00:00:00Z"))).take(2).map(|d| d.fire).collect();
            assert_eq!(fires, expected.map(at), "{schedule} dst {dst}");
        }
    }

    #[test]
    fn fires_come_in_time_order() {
        let mut q = FireQueue::default();
        q.upsert(job("a", "*/2 * * * * *", false), t(0));
        q.upsert(job("b", "*/3 * * * * *", false), t(0));
        let mut got = Vec::new();
        while let Some(due) = q.pop_due(t(6)) {
            got.push((due.job.name.clone(), due.fire));
        }
        let names: Vec<_> = got.iter().map(|(n, f)| format!("{n}@{}", f.timestamp() % 60)).collect();
        assert_eq!(names, ["a@2", "b@3", "a@4", "a@6", "b@6"]);
        assert_eq!(q.peek(), Some(t(8)));
    }

    #[test]
    fn edits_and_removals_replace_pending_fires() {
        let mut q = FireQueue::default();
        q.upsert(job("a", "*/10 * * * * *", false), t(0));
        q.upsert(job("a", "*/4 * * * * *", false), t(0));
        assert_eq!(q.pop_due(t(30)).map(|d| d.fire), Some(t(4)));
        q.upsert(job("a", "* * * * * *", true), t(4));
        assert_eq!(q.peek(), None);
        assert!(q.is_empty());
        q.upsert(job("b", "* * * * * *", false), t(4));
        q.remove("b");
        assert_eq!(q.pop_due(t(60)).map(|d| d.fire), None);
    }

    #[test]
    fn an_edit_keeping_its_schedule_keeps_a_fire_due_but_not_taken_and_any_other_fires_from_now() {
        let mut q = FireQueue::default();
        q.upsert(job("a", "*/10 * * * * *", false), t(0));
        // The fire at 10 was due by 12, not taken (no room): the edit keeps it.
        q.upsert(job("a", "*/10 * * * * *", false), t(12));
        assert_eq!(q.pop_due(t(12)).map(|d| d.fire), Some(t(10)));
        // Due by 22, not taken, but the schedule changed: the new one fires from 22 on.
        q.upsert(job("a", "*/4 * * * * *", false), t(22));
        assert_eq!(q.pop_due(t(30)).map(|d| d.fire), Some(t(24)));
        // Still ahead at 25: the edit's next after 25 replaces it.
        q.upsert(job("a", "*/4 * * * * *", false), t(25));
        assert_eq!(q.pop_due(t(30)).map(|d| d.fire), Some(t(28)));
    }

    /// The count of next fires per instant follows every change of a job's next fire: it
    /// equals a count made afresh from the jobs' slots after each step.
    #[test]
    fn instants_count_the_jobs_whose_next_fire_is_on_each() {
        let mut q = FireQueue::default();
        let check = |q: &FireQueue, expected: &[(i64, usize)]| {
            let mut afresh = BTreeMap::new();
            for next in q.slots.iter().flatten().filter_map(|slot| slot.next) {
                *afresh.entry(next).or_insert(0u32) += 1;
            }
            assert_eq!(q.at_instant, afresh);
            let listed: Vec<(i64, usize)> =
                q.instants(t(0), t(60)).map(|(at, n)| ((at - t(0)).num_seconds(), n)).collect();
            assert_eq!(listed, expected);
        };
        for name in ["a", "b", "c"] {
            q.upsert(job(name, "*/10 * * * * *", false), t(0));
        }
        let d = job("d", "*/4 * * * * *", false);
        q.upsert(d.clone(), t(0));
        check(&q, &[(4, 1), (10, 3)]);
        // The same revision again, and an edit keeping a fire due but not taken: no move.
        q.upsert(d, t(30));
        let c = job("c", "*/10 * * * * *", false);
        q.upsert(c, t(12));
        check(&q, &[(4, 1), (10, 3)]);
        // An edit moves c; a pause and a removal take b and d out.
        q.upsert(job("c", "*/8 * * * * *", false), t(0));
        q.upsert(job("b", "*/10 * * * * *", true), t(0));
        q.remove("d");
        check(&q, &[(8, 1), (10, 1)]);
        // A name added again reuses a freed slot.
        q.upsert(job("d", "*/4 * * * * *", false), t(0));
        check(&q, &[(4, 1), (8, 1), (10, 1)]);
        // Fired: counted at the job's following fire; no instant is kept with no job on it.
        while q.pop_due(t(10)).is_some() {}
        check(&q, &[(12, 1), (16, 1), (20, 1)]);
        assert_eq!(q.instants(t(20), t(12)).count(), 0, "an empty range lists nothing");
    }

    /// Jobs sharing schedules (as loaded ones do), across zones and instants: each is
    /// queued at its own schedule's next fire in its own zone, and what is kept stays
    /// bounded.
    #[test]
    fn next_fires_shared_by_jobs_of_one_schedule_and_zone_are_each_ones_own() {
        let mut q = FireQueue::with_capacity(4);
        let zones = ["UTC", "Asia/Kolkata", "America/New_York"];
        let schedules = ["0 3 * * *", "*/7 * * * *", "@every 90s", "0 0 29 2 *"];
        for step in 0..(NEXT_FIRES_KEPT as i64 + 50) {
            let from = t(step * 3_607);
            let pairs = zones.iter().flat_map(|z| schedules.map(move |e| (z, e)));
            for (i, (zone, expr)) in pairs.flat_map(|pair| [pair, pair]).enumerate() {
                let mut spec = JobSpec::shell(
                    &format!("s{step}-j{i}"),
                    expr,
                    ShellSpec { command: Some("true".into()), ..Default::default() },
                );
                spec.timezone = zone.to_string();
                let job = Arc::new(CatalogJob::from_spec(&spec, step as u64 + 1));
                let s = job.summary.as_ref().unwrap();
                let expected = s.schedule.next_after(from, s.tz).map(|at| at.timestamp_millis());
                q.upsert(job.clone(), from);
                let queued = q.by_name[&*job.name];
                assert_eq!(q.slots[queued as usize].as_ref().unwrap().next, expected, "{expr} in {zone} after {from}");
            }
            // Two jobs on each schedule and zone: one computed, the other looked up.
            if step == 0 {
                assert_eq!(q.next_fires.0.len(), zones.len() * schedules.len());
            }
            assert!(q.next_fires.0.len() <= NEXT_FIRES_KEPT);
        }
    }

    #[test]
    fn the_same_revision_again_keeps_its_next_fire() {
        let mut q = FireQueue::default();
        let a = job("a", "* * * * * *", false);
        q.upsert(a.clone(), t(0));
        q.upsert(a, t(30));
        assert_eq!(q.pop_due(t(60)).map(|d| d.fire), Some(t(1)));
    }

    #[test]
    fn next_fires_are_the_soonest_current_ones() {
        let mut q = FireQueue::default();
        for (name, every) in [("a", 7), ("b", 3), ("c", 5), ("d", 2)] {
            q.upsert(job(name, &format!("*/{every} * * * * *"), false), t(0));
        }
        // An edit leaves its old entry in the heap: only the current one counts.
        q.upsert(job("d", "*/11 * * * * *", false), t(0));
        let mut soonest = q.next_fires(2);
        soonest.sort_by_key(|(_, at)| *at);
        let at = |s| t(s).timestamp_millis();
        assert_eq!(soonest, [("b".into(), at(3)), ("c".into(), at(5))]);
        let mut all = q.next_fires(10);
        all.sort_by_key(|(_, at)| *at);
        assert_eq!(all.iter().map(|(n, _)| &**n).collect::<Vec<_>>(), ["b", "c", "a", "d"]);
    }
}
