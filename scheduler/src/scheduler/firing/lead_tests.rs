//! The loop of leading (`leading.rs`) driven on tokio's paused clock, with ports of its
//! own (a fire's fate noted, not dispatched; the jobs' changes sent by the case), the
//! lease table of `fake_leases.rs`, and a wall clock that moves with tokio's. Every
//! instant asserted is exact, in milliseconds since the case began; the case begins on a
//! whole second, t(0). The lead is 100 ms; the TTL 3 s (a renewal every 1000 ms, each
//! followed by the watermark's move).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fake_leases::Answer::{self, After, Conflict};
use super::fake_leases::{Op, Table};
use super::keeping::{Keeping, Mark};
use super::leading::{Followed, Lead, Ports, lead_loop};
use super::lease_tests::{cancel_at, since};
use super::plan::{Action, Planner};
use super::queue::FireQueue;
use super::shard::{Wanted, take_turns};
use super::shard_lease::ShardLeases;
use crate::catalog::CatalogJob;
use crate::clock::Clock;
use crate::error::Error;
use crate::scheduler::loading::index::ShardChange;
use crate::spec::{JobSpec, ShellSpec};

const TTL: Duration = Duration::from_secs(3);
const LEAD: Duration = Duration::from_millis(100);

fn t0_wall() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).single().unwrap_or_default()
}

/// Milliseconds of `at` after t(0).
fn wall_ms(at: DateTime<Utc>) -> i64 {
    (at - t0_wall()).num_milliseconds()
}

/// Wall time that moves with tokio's (paused) clock: t(0) at `t0`.
#[derive(Debug)]
struct TokioClock(Instant);

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        t0_wall() + TimeDelta::from_std(Instant::now().duration_since(self.0)).unwrap_or_default()
    }
}

fn job(name: &str) -> Arc<CatalogJob> {
    let shell = ShellSpec { command: Some("true".into()), ..Default::default() };
    Arc::new(CatalogJob::from_spec(&JobSpec::shell(name, "@every 1s", shell), 1))
}

/// A fire's fate as the ports saw it: (job, fire ms, ms it was acted on, missed).
type Acted = (String, i64, u64, bool);

/// The case's ports: each fire's fate noted (and the dispatch taking `takes`), the jobs'
/// changes as the case sends them.
struct CasePorts {
    t0: Instant,
    takes: Duration,
    acted: Arc<Mutex<Vec<Acted>>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
    changes: mpsc::UnboundedReceiver<ShardChange>,
    finished_at: Arc<Mutex<Option<u64>>>,
}

impl Ports for CasePorts {
    type Upkeep = ();

    fn act(&self, action: Action, _now: DateTime<Utc>) -> impl Future<Output = ()> + Send + 'static {
        let (acted, in_flight, most) = (self.acted.clone(), self.in_flight.clone(), self.most_in_flight.clone());
        let (name, fire, missed) = match &action {
            Action::Run(due, _) => (due.job.name.to_string(), due.fire, false),
            Action::Missed(due, _, _) => (due.job.name.to_string(), due.fire, true),
        };
        acted.lock().unwrap().push((name, wall_ms(fire), since(self.t0), missed));
        let takes = self.takes;
        async move {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(takes).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
    async fn next(&mut self) -> Followed<()> {
        match self.changes.recv().await {
            Some(change) => Followed::Change(Ok(change)),
            None => std::future::pending().await,
        }
    }
    async fn upkeep(&mut self, _: ()) {}
    fn turn(&mut self, _: &FireQueue) {}
    async fn renewal_due(&mut self, _: &FireQueue) {}
    async fn finish(self, _until: Instant) {
        *self.finished_at.lock().unwrap() = Some(since(self.t0));
    }
}

/// The watermark's moves: (ms written, the mark in ms after t(0)).
#[derive(Clone)]
struct Lows {
    t0: Instant,
    written: Arc<Mutex<Vec<(u64, i64)>>>,
}

impl Mark for Lows {
    async fn write(&mut self, low: DateTime<Utc>) -> Result<(), Error> {
        self.written.lock().unwrap().push((since(self.t0), wall_ms(low)));
        Ok(())
    }
}

/// A case: its jobs, how long a dispatch takes, the in-flight limit, the lease's
/// renewals' answers, the changes sent (ms, change) and when it is stopped.
struct Case {
    jobs: &'static [&'static str],
    takes: u64,
    max_in_flight: usize,
    renewals: Vec<Answer>,
    changes: Vec<(u64, ShardChange)>,
    stop_at: u64,
}

impl Default for Case {
    fn default() -> Self {
        Case { jobs: &["a"], takes: 0, max_in_flight: 100, renewals: vec![], changes: vec![], stop_at: 3050 }
    }
}

/// What leading did.
struct Leadership {
    outcome: Result<(), Error>,
    ended_at: u64,
    acted: Vec<Acted>,
    most_in_flight: usize,
    lows: Vec<(u64, i64)>,
    finished_at: Option<u64>,
    table: Table,
}

impl Leadership {
    /// The fires of `job` acted on, as (fire ms, ms acted on).
    fn of(&self, job: &str) -> Vec<(i64, u64)> {
        self.acted.iter().filter(|a| a.0 == job).map(|a| (a.1, a.2)).collect()
    }
}

/// What a case's ports saw, shared with them.
#[derive(Clone, Default)]
struct Seen {
    acted: Arc<Mutex<Vec<Acted>>>,
    most_in_flight: Arc<AtomicUsize>,
    finished_at: Arc<Mutex<Option<u64>>>,
}

impl Seen {
    fn ports(&self, t0: Instant, takes: u64, changes: mpsc::UnboundedReceiver<ShardChange>) -> CasePorts {
        CasePorts {
            t0,
            takes: Duration::from_millis(takes),
            acted: Arc::clone(&self.acted),
            in_flight: Arc::default(),
            most_in_flight: Arc::clone(&self.most_in_flight),
            changes,
            finished_at: Arc::clone(&self.finished_at),
        }
    }
}

/// The shard's fire queue of `jobs`, their fires after `from`.
fn queue(jobs: &[&str], from: DateTime<Utc>) -> FireQueue {
    let mut queue = FireQueue::with_capacity(jobs.len());
    for name in jobs {
        queue.upsert(job(name), from);
    }
    queue
}

fn how(t0: Instant, max_in_flight: usize) -> Lead {
    let planner = Planner::new(LEAD, 1, Duration::from_secs(10));
    Lead { planner, max_in_flight, clock: Arc::new(TokioClock(t0)) }
}

async fn lead(case: Case) -> Leadership {
    let (table, t0) = (Table::new(), Instant::now());
    let lease = table.try_acquire("shard.0", "a", TTL).await.unwrap().unwrap();
    table.script("a", case.renewals);
    let (tx, changes) = mpsc::unbounded_channel();
    for (at, change) in case.changes {
        let tx = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(t0 + Duration::from_millis(at)).await;
            let _ = tx.send(change);
        });
    }
    let seen = Seen::default();
    let lows = Lows { t0, written: Arc::default() };
    let keeping = Keeping::new(lease, lows.clone());
    let cancel = cancel_at(t0, case.stop_at);
    let ports = seen.ports(t0, case.takes, changes);
    let outcome = lead_loop(ports, queue(case.jobs, t0_wall()), keeping, how(t0, case.max_in_flight), &cancel).await;
    Leadership {
        outcome,
        ended_at: since(t0),
        acted: seen.acted.lock().unwrap().clone(),
        most_in_flight: seen.most_in_flight.load(Ordering::SeqCst),
        lows: lows.written.lock().unwrap().clone(),
        finished_at: *seen.finished_at.lock().unwrap(),
        table,
    }
}

#[tokio::test(start_paused = true)]
async fn each_fire_is_dispatched_once_its_lead_ahead_and_a_stop_moves_the_watermark_then_lets_go() {
    let led = lead(Case { jobs: &["a", "b"], ..Case::default() }).await;
    assert!(led.outcome.is_ok(), "{:?}", led.outcome);
    // Each job's fires of seconds 1, 2 and 3, each dispatched once, 100 ms ahead.
    for job in ["a", "b"] {
        assert_eq!(led.of(job), [(1000, 900), (2000, 1900), (3000, 2900)], "{job}");
    }
    assert!(led.acted.iter().all(|a| !a.3), "nothing recorded missed: {:?}", led.acted);
    // After each renewal, the watermark is moved to just before the loop's last turn
    // (900, when it dispatched the fire of second 1: nothing was pending before it, and a
    // job changed since fires from then); at the stop to just before the stop, the next
    // fire (4000) being later.
    assert_eq!(led.lows, [(1000, 899), (2000, 1899), (3000, 2899), (3050, 3049)]);
    assert_eq!((led.ended_at, led.finished_at), (3050, Some(3050)));
    assert_eq!(led.table.of(Op::Released), [(3050, "a".to_string())]);
}

#[tokio::test(start_paused = true)]
async fn at_most_the_in_flight_limit_is_dispatched_at_once_and_the_watermark_waits_for_the_earliest() {
    // Two jobs, one dispatch at a time, each taking 700 ms: b's fire of second 1 waits
    // for a's, and each later fire for the one before.
    let led = lead(Case { jobs: &["a", "b"], takes: 700, max_in_flight: 1, ..Case::default() }).await;
    assert_eq!(led.most_in_flight, 1);
    let order: Vec<(&str, i64, u64)> = led.acted.iter().map(|a| (a.0.as_str(), a.1, a.2)).collect();
    assert_eq!(order, [("a", 1000, 900), ("b", 1000, 1600), ("a", 2000, 2300), ("b", 2000, 3000)]);
    // At 1000 the loop's last turn was at 900 (as in the case above). At 2000 b's fire of
    // second 1 is still in flight: the watermark stays before it. At 3000, b's fire of
    // second 2 has just gone out: before it.
    assert_eq!(led.lows[..3], [(1000, 899), (2000, 999), (3000, 1999)]);
    // The stop waits for the dispatch in flight (to 3700), then moves the watermark
    // before the earliest fire not dispatched: a's of second 3.
    assert_eq!(led.lows[3..], [(3700, 2999)]);
    assert_eq!(led.table.of(Op::Released), [(3700, "a".to_string())]);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_dispatched_while_the_lease_may_have_run_out_and_what_came_due_goes_once_renewed() {
    // The renewal asked at 1000 is answered at 3500; the lease surely ours until 2700 by
    // the acquisition, until 3700 by that renewal. The fire of second 3, due at 2900,
    // waits for the answer.
    let led = lead(Case { renewals: vec![After(Duration::from_millis(2500))], stop_at: 4050, ..Case::default() }).await;
    assert!(led.outcome.is_ok(), "{:?}", led.outcome);
    assert_eq!(led.of("a"), [(1000, 900), (2000, 1900), (3000, 3500), (4000, 3900)]);
    assert_eq!(led.table.of(Op::Released), [(4050, "a".to_string())]);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lease_ends_leading_at_once_and_nothing_more_is_dispatched_or_written() {
    let led = lead(Case { renewals: vec![Conflict], stop_at: 5000, ..Case::default() }).await;
    assert!(led.outcome.as_ref().is_err_and(|e| e.message().contains("was lost")), "{:?}", led.outcome);
    assert_eq!(led.ended_at, 1000);
    assert_eq!(led.of("a"), [(1000, 900)]);
    assert_eq!((led.lows.as_slice(), led.finished_at), (&[][..], None), "nothing written once the lease is lost");
}

#[tokio::test(start_paused = true)]
async fn a_job_added_while_leading_fires_from_then_and_one_removed_no_more() {
    let changes =
        vec![(1500, ShardChange::Put(job("c"), bytes::Bytes::new())), (2500, ShardChange::Removed("a".into()))];
    let led = lead(Case { jobs: &["a"], changes, stop_at: 4050, ..Case::default() }).await;
    assert_eq!(led.of("a"), [(1000, 900), (2000, 1900)]);
    assert_eq!(led.of("c"), [(2000, 1900), (3000, 2900), (4000, 3900)]);
}

/// A scheduler's task for the shard: stands by and leads in turn (`take_turns` with
/// `lead_loop`), each turn resuming from the shard's watermark (`lows`' last), as `lead`
/// does, until `cancel`. What its ports saw.
fn agent(table: &Table, holder: &'static str, lows: &Lows, cancel: CancellationToken) -> Seen {
    let (table, lows, seen) = (table.clone(), lows.clone(), Seen::default());
    let ours = seen.clone();
    tokio::spawn(async move {
        let wanted = Wanted { key: "shard.0", holder, ttl: TTL };
        let cancel = &cancel;
        take_turns(&table, &wanted, cancel, |lease| {
            let (lows, seen) = (lows.clone(), seen.clone());
            async move {
                let from =
                    lows.written.lock().unwrap().last().map_or(t0_wall(), |w| t0_wall() + TimeDelta::milliseconds(w.1));
                let (_tx, changes) = mpsc::unbounded_channel();
                let keeping = Keeping::new(lease, lows.clone());
                Ok(lead_loop(seen.ports(lows.t0, 0, changes), queue(&["a"], from), keeping, how(lows.t0, 100), cancel)
                    .await)
            }
        })
        .await
    });
    ours
}

#[tokio::test(start_paused = true)]
async fn a_stalled_leaders_successor_resumes_from_its_watermark_and_no_fire_is_left_out() {
    // "a" leads from 0; its renewal at 3000 is never answered: surely its own until 4700
    // (the renewal at 2000's), its key expires at 5000, when "b" (standing by from 100)
    // takes it, resuming from the last watermark "a" wrote, at 2000: just before 1900.
    let (table, t0) = (Table::new(), Instant::now());
    table.script("a", [Answer::Now, Answer::Now, Answer::Never]);
    let lows = Lows { t0, written: Arc::default() };
    let a = agent(&table, "a", &lows, cancel_at(t0, 7500));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = agent(&table, "b", &lows, cancel_at(t0, 7500));
    tokio::time::sleep_until(t0 + Duration::from_millis(8000)).await;
    let fires = |seen: &Seen| -> Vec<(i64, u64)> { seen.acted.lock().unwrap().iter().map(|a| (a.1, a.2)).collect() };
    assert_eq!(table.of(Op::Acquired), [(0, "a".to_string()), (5000, "b".to_string())]);
    // "a" dispatches nothing once its lease may have run out (4700).
    assert_eq!(fires(&a), [(1000, 900), (2000, 1900), (3000, 2900), (4000, 3900)]);
    // "b" dispatches again what "a" dispatched after its last watermark (in NATS, each
    // fire's run record refuses the second: docs/failure-model.md), then every later fire:
    // none is left out.
    assert_eq!(lows.written.lock().unwrap()[..2], [(1000, 899), (2000, 1899)]);
    assert_eq!(fires(&b), [(2000, 5000), (3000, 5000), (4000, 5000), (5000, 5000), (6000, 5900), (7000, 6900)]);
}
