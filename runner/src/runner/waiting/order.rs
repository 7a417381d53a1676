//! Who goes first in a job's line (see the parent module), and how often a waiting run
//! looks at the lease: decisions on what a look found, with no I/O.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

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
pub(super) struct Pace {
    found: Option<String>,
    since: Instant,
}

impl Pace {
    pub(super) fn new() -> Self {
        Pace { found: None, since: Instant::now() }
    }

    /// The wait before the next look, this one having found the lease held by `holder`
    /// (None: free).
    pub(super) fn after(&mut self, holder: Option<String>) -> Duration {
        if holder != self.found {
            (self.found, self.since) = (holder, Instant::now());
        }
        next_look(self.since.elapsed())
    }
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
