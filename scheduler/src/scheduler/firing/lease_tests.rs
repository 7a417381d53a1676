//! The leader's lease keeping (`keeping.rs`) and the stand-by's takeover (`shard.rs`),
//! driven on tokio's paused clock with an in-memory lease table (`fake_leases.rs`): every
//! instant asserted is exact, in milliseconds since the case began. The TTL is 3 s: a
//! renewal every 1000 ms, a lease surely ours for 2700 ms after it was asked for.
//!
//! `hold` stands in for the loop of leading as far as the lease goes (the loop itself,
//! dispatching, is driven in `lead_tests.rs`): it uses the keeping as `leading::lead_loop`
//! does, and releases the lease at the end unless a write was abandoned, as its end does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fake_leases::Answer::{self, After, Conflict, Never, Now};
use super::fake_leases::Op::{self, Acquired, Expired, Refused, Released, Renewed};
use super::fake_leases::Table;
use super::keeping::{Ended, Event, Keeping, Mark};
use super::shard::{Wanted, take_turns};
use super::shard_lease::{ShardLease, ShardLeases};
use crate::error::Error;

const TTL: Duration = Duration::from_secs(3);
const KEY: &str = "shard.0";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) fn since(t0: Instant) -> u64 {
    Instant::now().duration_since(t0).as_millis() as u64
}

/// A token cancelled `at` ms after `t0`.
pub(super) fn cancel_at(t0: Instant, at: u64) -> CancellationToken {
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep_until(t0 + ms(at)).await;
        stop.cancel();
    });
    cancel
}

/// The watermark: writes answered as scripted (at once once run out), each noted in ms.
#[derive(Clone)]
struct Marks {
    t0: Instant,
    answers: Arc<Mutex<VecDeque<Answer>>>,
    written: Arc<Mutex<Vec<u64>>>,
}

impl Marks {
    fn new(t0: Instant, answers: &[Answer]) -> Self {
        Marks { t0, answers: Arc::new(Mutex::new(answers.iter().copied().collect())), written: Arc::default() }
    }
    fn written(&self) -> Vec<u64> {
        self.written.lock().unwrap().clone()
    }
}

impl Mark for Marks {
    async fn write(&mut self, _low: DateTime<Utc>) -> Result<(), Error> {
        let answer = self.answers.lock().unwrap().pop_front();
        match answer.unwrap_or(Answer::Now) {
            Answer::Now => {}
            Answer::After(wait) => tokio::time::sleep(wait).await,
            Answer::Never => std::future::pending().await,
            Answer::Conflict => return Err(Error::conflict("the watermark moved")),
        }
        self.written.lock().unwrap().push(since(self.t0));
        Ok(())
    }
}

/// One turn of leading, as far as the lease goes.
#[derive(Debug)]
struct Turn {
    /// Whether it could dispatch (`leased`), each time that changed.
    leased: Vec<(u64, bool)>,
    ended_at: u64,
    outcome: Result<(), Error>,
    abandoned: bool,
}

/// Leads with `lease` until `cancel` or a step-down, as `lead` does as far as the lease
/// goes: wakes at least every 100 ms (as its planner would) to look at `leased`.
async fn hold<L: ShardLease>(lease: L, marks: Marks, cancel: &CancellationToken) -> Turn {
    let t0 = marks.t0;
    let mut keeping = Keeping::new(lease, marks);
    let mut leased: Vec<(u64, bool)> = Vec::new();
    let ended = loop {
        let now = keeping.leased();
        if leased.last().map(|l| l.1) != Some(now) {
            leased.push((since(t0), now));
        }
        let wake = t0 + ms((since(t0) / 100 + 1) * 100);
        tokio::select! {
            _ = cancel.cancelled() => break Ok(()),
            _ = tokio::time::sleep_until(wake) => {}
            kept = keeping.next() => match kept {
                Ok(Event::Due) => keeping.start(Utc::now()),
                Ok(Event::Renewed) => {}
                Err(e) => break Err(e),
            },
        }
    };
    let Ended { outcome, held, .. } = keeping.finish(ended).await;
    let abandoned = held.is_none();
    if let Some(held) = held {
        let _ = held.lease.release().await;
    }
    Turn { leased, ended_at: since(t0), outcome, abandoned }
}

/// The case's table and a lease taken from it by "a" at its start.
async fn leased_table() -> (Table, Instant, super::fake_leases::FakeLease) {
    let (table, t0) = (Table::new(), Instant::now());
    let lease = table.try_acquire(KEY, "a", TTL).await.unwrap().unwrap();
    (table, t0, lease)
}

fn entries(log: &[(u64, String, Op)]) -> Vec<(u64, Op)> {
    log.iter().map(|(at, _, op)| (*at, *op)).collect()
}

#[tokio::test(start_paused = true)]
async fn renewals_come_every_third_of_the_ttl_each_followed_by_the_watermark() {
    // (TTL, renewals and watermark writes within 10.5 s)
    let cases: [(u64, &[u64]); 3] = [
        (3, &[1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10_000]),
        (6, &[2000, 4000, 6000, 8000, 10_000]),
        (9, &[3000, 6000, 9000]),
    ];
    for (ttl, renewals) in cases {
        let (table, t0) = (Table::new(), Instant::now());
        let lease = table.try_acquire(KEY, "a", Duration::from_secs(ttl)).await.unwrap().unwrap();
        let marks = Marks::new(t0, &[]);
        let turn = hold(lease, marks.clone(), &cancel_at(t0, 10_500)).await;
        let renewed: Vec<u64> = table.of(Op::Renewed).into_iter().map(|(at, _)| at).collect();
        assert_eq!(renewed, renewals, "TTL {ttl} s");
        assert_eq!(marks.written(), renewals, "TTL {ttl} s");
        assert_eq!(turn.leased, [(0, true)], "TTL {ttl} s");
        assert!(turn.outcome.is_ok());
        assert_eq!(table.of(Op::Released), [(10_500, "a".to_string())], "TTL {ttl} s");
    }
}

#[tokio::test(start_paused = true)]
async fn a_renewal_answered_late_refused_or_never_steps_down_at_that_moment() {
    // The first renewal, asked at 1000 (landing then, however late its answer), is surely
    // ours until 3700; the acquisition's ran out at 2700. A stop at 4500.
    // (its answer, when leading ended, why, whether it could dispatch, the key's log)
    type Case = (Answer, u64, Option<&'static str>, &'static [(u64, bool)], &'static [(u64, Op)]);
    let cases: [Case; 5] = [
        (
            After(ms(500)),
            4500,
            None,
            &[(0, true)],
            &[(0, Acquired), (1000, Renewed), (2000, Renewed), (3000, Renewed), (4000, Renewed), (4500, Released)],
        ),
        // Nothing dispatched from 2700 until the answer; then the missed period's renewal at
        // once (one, not a burst).
        (
            After(ms(2000)),
            4500,
            None,
            &[(0, true), (2700, false), (3000, true)],
            &[(0, Acquired), (1000, Renewed), (3000, Renewed), (4000, Renewed), (4500, Released)],
        ),
        // Answered after 3700: steps down then.
        (
            After(ms(2900)),
            3900,
            Some("answered too late"),
            &[(0, true), (2700, false)],
            &[(0, Acquired), (1000, Renewed), (3900, Released)],
        ),
        // Unanswered within the TTL: steps down at 1000 + 3000, the key expired meanwhile.
        (Never, 4000, Some("no answer within 3s"), &[(0, true), (2700, false)], &[(0, Acquired), (3000, Expired)]),
        // Refused: steps down at once.
        (Conflict, 1000, Some("was lost"), &[(0, true)], &[(0, Acquired), (1000, Refused), (1000, Released)]),
    ];
    for (answer, ended_at, why, leased, log) in cases {
        let (table, t0, lease) = leased_table().await;
        table.script("a", [answer]);
        let turn = hold(lease, Marks::new(t0, &[]), &cancel_at(t0, 4500)).await;
        assert_eq!(turn.ended_at, ended_at, "{answer:?}");
        match why {
            None => assert!(turn.outcome.is_ok(), "{answer:?}: {:?}", turn.outcome),
            Some(why) => {
                assert!(turn.outcome.as_ref().is_err_and(|e| e.message().contains(why)), "{answer:?}: {turn:?}")
            }
        }
        assert_eq!(turn.leased, leased, "{answer:?}");
        assert_eq!(entries(&table.log()), log, "{answer:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_watermark_is_written_only_while_the_lease_is_surely_held() {
    let (table, t0, lease) = leased_table().await;
    // Renewed at 1000 (ours until 3700), the watermark's write then unanswered.
    let marks = Marks::new(t0, &[Never]);
    let turn = hold(lease, marks.clone(), &cancel_at(t0, 10_000)).await;
    assert_eq!(turn.ended_at, 3700);
    assert!(turn.outcome.is_err_and(|e| e.message().contains("moving the watermark")));
    // Not dispatching from the acquisition's end until the renewal and the watermark are done.
    assert_eq!(turn.leased, [(0, true), (2700, false)]);
    assert_eq!(marks.written(), Vec::<u64>::new());
    assert_eq!(entries(&table.log()), [(0, Acquired), (1000, Renewed), (3700, Released)]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_waits_for_a_renewal_in_flight_at_most_last_keep_max_then_leaves_the_lease_to_expire() {
    // A stop at 1500.
    // (the renewal's answer, the watermark's, when the end came, abandoned, the key's log)
    type Case = (Answer, Answer, u64, bool, &'static [(u64, Op)]);
    let cases: [Case; 4] = [
        // No renewal in flight: released at once.
        (Now, Now, 1500, false, &[(0, Acquired), (1000, Renewed), (1500, Released)]),
        // Answered within LAST_KEEP_MAX: released then.
        (After(ms(800)), Now, 1800, false, &[(0, Acquired), (1000, Renewed), (1800, Released)]),
        // Unanswered: abandoned at 1500 + 2000, the lease left to expire at 0 + 3000.
        (Never, Now, 3500, true, &[(0, Acquired), (3000, Expired)]),
        // The watermark's write unanswered: the same, the lease expiring at 1000 + 3000.
        (Now, Never, 3500, true, &[(0, Acquired), (1000, Renewed), (4000, Expired)]),
    ];
    for (renewal, mark, ended_at, abandoned, log) in cases {
        let (table, t0, lease) = leased_table().await;
        table.script("a", [renewal]);
        let turn = hold(lease, Marks::new(t0, &[mark]), &cancel_at(t0, 1500)).await;
        assert_eq!((turn.ended_at, turn.abandoned), (ended_at, abandoned), "{renewal:?}, {mark:?}");
        assert_eq!(turn.outcome.is_ok(), !abandoned, "{renewal:?}, {mark:?}: {:?}", turn.outcome);
        tokio::time::sleep_until(t0 + ms(5000)).await;
        assert_eq!(entries(&table.log()), log, "{renewal:?}, {mark:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_run_out_before_leading_is_renewed_at_once() {
    // Leading begins after a long load, past the lease's 2700: renewed now, not at 3800.
    let (table, t0, lease) = leased_table().await;
    tokio::time::sleep(ms(2800)).await;
    let mut keeping = Keeping::new(lease, Marks::new(t0, &[]));
    assert!(!keeping.leased());
    assert_eq!(keeping.next().await.unwrap(), Event::Due);
    assert_eq!(since(t0), 2800);
    keeping.start(Utc::now());
    assert_eq!(keeping.next().await.unwrap(), Event::Renewed);
    assert!(keeping.leased());
    assert_eq!(entries(&table.log()), [(0, Op::Acquired), (2800, Op::Renewed)]);
}

/// A scheduler's task for the shard: stands by and leads in turn (`take_turns`, leading
/// as `hold`) until `cancel`, sending each turn out as it ends.
fn agent(table: &Table, holder: &'static str, t0: Instant, cancel: CancellationToken) -> mpsc::UnboundedReceiver<Turn> {
    let (table, (turns, ended)) = (table.clone(), mpsc::unbounded_channel());
    tokio::spawn(async move {
        let wanted = Wanted { key: KEY, holder, ttl: TTL };
        let cancel = &cancel;
        take_turns(&table, &wanted, cancel, |lease| {
            let turns = turns.clone();
            async move {
                let turn = hold(lease, Marks::new(t0, &[]), cancel).await;
                let outcome = turn.outcome.clone();
                let _ = turns.send(turn);
                Ok(outcome)
            }
        })
        .await
    });
    ended
}

/// A table whose watches work, or fail to start (a stand-by then tries every second).
fn watched(watches: bool) -> Table {
    if watches { Table::new() } else { Table::new().without_watches() }
}

fn acquired(table: &Table) -> Vec<(u64, String)> {
    table.of(Op::Acquired)
}

fn at(n: u64, holder: &str) -> (u64, String) {
    (n, holder.to_string())
}

#[tokio::test(start_paused = true)]
async fn a_stand_by_takes_the_lease_within_a_second_of_its_release() {
    // "b" stands by from 100, trying at 1100, 2100, ...; "a" stops at 5000 and releases.
    for (watches, taken) in [(true, 5000), (false, 5100)] {
        let (table, t0) = (watched(watches), Instant::now());
        let _a = agent(&table, "a", t0, cancel_at(t0, 5000));
        tokio::time::sleep(ms(100)).await;
        let _b = agent(&table, "b", t0, cancel_at(t0, 8000));
        tokio::time::sleep_until(t0 + ms(9000)).await;
        assert_eq!(acquired(&table), [at(0, "a"), at(taken, "b")]);
        assert_eq!(table.of(Op::Released), [at(5000, "a"), at(8000, "b")]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_stand_by_takes_the_lease_within_the_ttl_and_a_second_of_its_holders_death() {
    // "a" dies at 1500 (its task gone, nothing released): its lease, last renewed at 1000,
    // expires at 4000. "b" stands by from 250, trying at 1250, 2250, ...
    for (watches, taken) in [(true, 4000), (false, 4250)] {
        let (table, t0) = (watched(watches), Instant::now());
        let a = tokio::spawn({
            let table = table.clone();
            async move {
                let wanted = Wanted { key: KEY, holder: "a", ttl: TTL };
                let cancel = &CancellationToken::new();
                take_turns(&table, &wanted, cancel, |lease| async move {
                    hold(lease, Marks::new(t0, &[]), cancel).await;
                    Ok(Ok(()))
                })
                .await
            }
        });
        tokio::time::sleep(ms(250)).await;
        let _b = agent(&table, "b", t0, CancellationToken::new());
        tokio::time::sleep_until(t0 + ms(1500)).await;
        a.abort();
        tokio::time::sleep_until(t0 + ms(6000)).await;
        assert_eq!(acquired(&table), [at(0, "a"), at(taken, "b")]);
        assert!(taken <= 1500 + 3000 + 1000);
        assert_eq!(table.of(Op::Expired), [at(4000, "a")]);
        assert!(table.of(Op::Released).is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn of_two_acquiring_at_the_same_instant_exactly_one_leads() {
    let (table, t0) = (Table::new(), Instant::now());
    let _a = agent(&table, "a", t0, CancellationToken::new());
    let _b = agent(&table, "b", t0, CancellationToken::new());
    tokio::time::sleep_until(t0 + ms(9500)).await;
    let taken = acquired(&table);
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0].0, 0);
    let leader = taken[0].1.clone();
    let renewed = table.of(Op::Renewed);
    assert_eq!(renewed, (1..=9).map(|s| at(s * 1000, &leader)).collect::<Vec<_>>());
    assert_eq!(table.log().len(), 10, "nothing else happened to the key: {:?}", table.log());
}

#[tokio::test(start_paused = true)]
async fn a_stalled_leader_stops_dispatching_before_its_successor_takes_over_and_stands_by_again() {
    // "a"'s renewal at 1000 is never answered: its lease expires at 3000, when "b"
    // (standing by from 100) takes it. "a" stops dispatching at 2700, steps down at 4000
    // (no answer within the TTL) and stands by again; "b" keeps the lease.
    let (table, t0) = (Table::new(), Instant::now());
    table.script("a", [Answer::Never]);
    let mut a = agent(&table, "a", t0, CancellationToken::new());
    tokio::time::sleep(ms(100)).await;
    let _b = agent(&table, "b", t0, CancellationToken::new());
    tokio::time::sleep_until(t0 + ms(6500)).await;
    let turn = a.try_recv().unwrap();
    assert_eq!(turn.leased, [(0, true), (2700, false)]);
    assert_eq!(turn.ended_at, 4000);
    assert!(a.try_recv().is_err(), "one turn only");
    assert_eq!(acquired(&table), [at(0, "a"), at(3000, "b")]);
    assert_eq!(table.of(Op::Renewed), [at(4000, "b"), at(5000, "b"), at(6000, "b")]);
    assert!(table.of(Op::Released).is_empty());
}
