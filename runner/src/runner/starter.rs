//! Starting runs exactly at their instant, however many share it.
//!
//! Runs of one instant are prepared ahead of it (see `shell::prepare`) with the read end
//! of one shared pipe as stdin. Each run confirms shortly before the instant whether it
//! still goes (pause, revision, overlap, locks). At the instant a single write releases
//! every run that confirmed: each run's supervisor reads exactly one line. Runs that did
//! not confirm in time are killed first, and a run that leaves its group (discarded, or
//! its release late) kills its own; a killed supervisor may still take a line as it dies,
//! so one spare line is written for each. Spare lines are harmless: the pipe is dropped
//! with its group.
//!
//! Releases happen on a thread of their own, so a busy async runtime (a thousand runs
//! claiming, finishing and instantiating at once) does not delay them.
//!
//! After the release, starting comes before finishing: a run that has handed its code to
//! be run (a shell run's process was released by the pipe, a guest's task spawned) waits
//! at its group's start [`Gate`] until every run released with it has done so (or
//! `START_GATE_BOUND` passed, or half a heartbeat: nothing renews the run's lease and
//! keepalive meanwhile) before it records, publishes and writes anything. Without
//! it, the writes of the first guests to end (each a chain of NATS round trips whose
//! answers wake their tasks first) took the two cores from the guests still to start: at
//! a thousand Wasm runs an instant, the last started over 100 ms late.
//!
//! And the jobs' effects come before the runs' bookkeeping: a run whose code ended and
//! whose log's end went out (its output, the job's effect as `logs -f` sees it) waits at
//! its group's end gate until every run released with it has got that far (or
//! `END_GATE_BOUND` passed) before its final record, its end's event and its leases'
//! release. Without it, each run's three bookkeeping writes went out between the output
//! of the runs ending after it, on the agent's one connection and in the server's one
//! queue, and the last run's output of an instant was stored behind them all.

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::sync::watch;
use tracing::warn;

use crate::clock::SharedClock;

/// How long before its instant a group stops taking runs. Runs confirm at half of it (or,
/// in a large group, earlier: `CONFIRM_PACE`), after their pause, revision, overlap and
/// lock checks; a run confirming later starts on its own.
const JOIN_MARGIN: TimeDelta = TimeDelta::milliseconds(200);

/// A run that no lock can hold back (see [`Confirms`]) confirms earlier by this
/// much for each run that joined its group before it, so a large group's confirmations
/// (each writes the run's record) are spread out ahead of the margin instead of all
/// falling in it: 5,000 runs of one instant on one runner writing in the last 100 ms fell
/// past the release and started alone, up to half a second late (10,000 Wasm jobs at one
/// instant on two agents with slots for all: p99 496 -> 314-391 ms; a pace of 0.2 ms: 520).
const CONFIRM_PACE: TimeDelta = TimeDelta::microseconds(100);

/// Runs ahead of a run in its group beyond which it confirms no earlier (a second).
const CONFIRM_SPREAD_RUNS: usize = 10_000;

/// How long a started run waits at most for the others of its group to start (a run whose
/// task was dropped after confirming never does).
const START_GATE_BOUND: Duration = Duration::from_millis(500);

/// How long a run whose code ended waits at most for the others of its group to end
/// before its bookkeeping: the ends of an instant's runs of short jobs come within it (a
/// thousand `clock` guests on two agents within some 20 ms), and a run ending beside a
/// long one is held no longer.
pub const END_GATE_BOUND: Duration = Duration::from_millis(50);

/// A run's place in its group: its supervisor, and whether it goes.
#[derive(Default)]
struct Member {
    pid: Option<Pid>,
    go: bool,
    /// Left the group, its supervisor killed: it may still take a line from the pipe
    /// as it dies, so the release writes one for it.
    spare: bool,
}

/// The release of a group: when, and its start and end gates.
type Released = Option<(DateTime<Utc>, Arc<Gate>, Arc<Gate>)>;

struct Group {
    write: std::fs::File,
    read: OwnedFd,
    members: Vec<Member>,
    released: watch::Sender<Released>,
}

/// Open once every run released in a group has got past one point: its code started
/// (the start gate), its output out (the end gate).
pub struct Gate {
    /// Runs released and not past the point yet.
    pending: AtomicUsize,
    open: watch::Sender<bool>,
}

impl Gate {
    fn new(pending: usize) -> Arc<Self> {
        let (open, _) = watch::channel(pending == 0);
        Arc::new(Self { pending: AtomicUsize::new(pending), open })
    }

    /// Waits until the gate opens, at most `bound`.
    pub async fn passed(&self, bound: Duration) {
        let mut open = self.open.subscribe();
        let _ = tokio::time::timeout(bound, open.wait_for(|open| *open)).await;
    }
}

/// How long a started run waits at most at its start gate, with a run lease renewed every
/// `heartbeat`.
pub fn start_gate_bound(heartbeat: Duration) -> Duration {
    START_GATE_BOUND.min(heartbeat / 2)
}

/// A released run's place at one of its group's gates: counted as past it when dropped,
/// which every way out of the run does.
pub struct Passage(Arc<Gate>);

impl Passage {
    /// The gate, to wait at once past it.
    pub fn gate(&self) -> Arc<Gate> {
        self.0.clone()
    }
}

impl Drop for Passage {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.open.send_replace(true);
        }
    }
}

type Groups = Arc<Mutex<HashMap<i64, Group>>>;

#[derive(Clone)]
pub struct Starter {
    groups: Groups,
    clock: SharedClock,
    /// Instants for the release thread, which ends when every `Starter` is dropped.
    releases: mpsc::Sender<DateTime<Utc>>,
}

/// How a confirmed run's wait for its group's release ended.
pub enum Release {
    /// Released at this time, with its places at the start and end gates.
    Released(DateTime<Utc>, Passage, Passage),
    /// Left out of the release: it starts on its own.
    Alone,
    /// The release thread is gone.
    Lost,
}

impl Release {
    fn of(value: Option<&Released>) -> Self {
        match value {
            Some(Some((at, start, end))) => Release::Released(*at, Passage(start.clone()), Passage(end.clone())),
            _ => Release::Lost,
        }
    }
}

/// What a run does to confirm, which sets how early in a large group it does it (see
/// `CONFIRM_PACE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirms {
    /// At the margin, however large its group: a lock held then would skip it, though
    /// its holder might end before the instant.
    AtTheMargin,
    /// It writes its record: one pace (overlap allowed, no lock).
    Unguarded,
    /// It takes its job's overlap lease and reads the job's line, then writes its record:
    /// three paces. Its policy judges a run still going only at the instant (see `guards`).
    /// 1,000 every-second `clock` guests with the default `skip` on two agents: fire to
    /// the code p99 136 ms at one pace, 51 ms at three (2026-12-06).
    Guarded,
}

impl Confirms {
    fn paces(self) -> usize {
        match self {
            Confirms::AtTheMargin => 0,
            Confirms::Unguarded => 1,
            Confirms::Guarded => 3,
        }
    }
}

/// A place in the group of one instant.
pub struct Ticket {
    /// The stdin to prepare the run's process with.
    pub stdin: OwnedFd,
    key: i64,
    index: usize,
    starter: Starter,
    released: watch::Receiver<Released>,
}

impl Ticket {
    /// The run's supervisor, killed at the release unless the run confirmed.
    pub fn set_pid(&self, pid: Option<u32>) {
        self.with_member(|m| m.pid = pid.map(|p| Pid::from_raw(p as i32)));
    }

    /// When the run checks whether it still goes and confirms: the margin before
    /// `instant`, earlier by the `CONFIRM_PACE`s its work before confirming takes, for each
    /// run that joined the group before it.
    pub fn check_at(&self, instant: DateTime<Utc>, confirms: Confirms) -> DateTime<Utc> {
        confirm_time(instant, self.index.saturating_mul(confirms.paces()))
    }

    /// The run goes. False when it came too late for the release: its process was killed,
    /// and the run must start on its own.
    pub fn confirm(&self) -> bool {
        self.with_member(|m| m.go = true).is_some()
    }

    /// Waits for the release of a run that confirmed. Not released `late` past its
    /// instant (a stalled release thread, the wall clock set back), the run leaves its
    /// group if the release has not begun, and starts alone; once begun, the release ends
    /// with its send (or, the thread gone, the sender's drop).
    pub async fn released(mut self, late: Duration) -> Release {
        let until = (self.instant() - self.starter.clock.now()).to_std().unwrap_or_default() + late;
        if let Ok(value) = tokio::time::timeout(until, self.released.wait_for(Option::is_some)).await {
            return Release::of(value.ok().as_deref());
        }
        if self.withdraw() {
            warn!("the release of {} is late: the run starts alone", self.instant());
            return Release::Alone;
        }
        Release::of(self.released.wait_for(Option::is_some).await.ok().as_deref())
    }

    /// Leaves the group while its release has not begun; false once it has. The run's
    /// supervisor is killed here, under the groups' lock: not reaped yet, its pid is
    /// still its own, and a release that comes after finds it dying and writes it a
    /// spare line, so that it cannot take one meant for a run that goes.
    pub fn withdraw(&self) -> bool {
        self.with_member(|m| {
            if let Some(pid) = m.pid.take() {
                let _ = kill(pid, Signal::SIGKILL);
                m.spare = true;
            }
            m.go = false;
        })
        .is_some()
    }

    fn instant(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.key).unwrap_or_default()
    }

    /// Applies `f` to this run's member while its group is not released yet.
    fn with_member(&self, f: impl FnOnce(&mut Member)) -> Option<()> {
        // A panic elsewhere under the lock left the groups whole: each change is one field.
        let mut groups = self.starter.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let member = groups.get_mut(&self.key)?.members.get_mut(self.index)?;
        f(member);
        Some(())
    }
}

impl Starter {
    pub fn new(clock: SharedClock) -> Self {
        let groups = Groups::default();
        let (releases, instants) = mpsc::channel();
        let (thread_groups, thread_clock) = (groups.clone(), clock.clone());
        let spawned = std::thread::Builder::new()
            .name("cronrun-release".into())
            .spawn(move || release_thread(&thread_groups, &thread_clock, &instants));
        if let Err(e) = spawned {
            // Without the thread no group is ever released; runs then start on their own.
            warn!("runs will start one by one: cannot start the release thread: {e}");
        }
        Self { groups, clock, releases }
    }

    /// A ticket for `instant`, or None when it is too close or past (start directly).
    pub fn ticket(&self, instant: DateTime<Utc>) -> Option<Ticket> {
        if instant - self.clock.now() < JOIN_MARGIN {
            return None;
        }
        let key = instant.timestamp_millis();
        let mut groups = self.groups.lock().ok()?;
        let group = match groups.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                // Close-on-exec: a supervisor gets the read end as its stdin and nothing
                // else, so the runner's death closes the last write end and it sees EOF.
                let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
                let (released, _) = watch::channel(None);
                self.releases.send(instant).ok()?;
                e.insert(Group { write: write.into(), read, members: Vec::new(), released })
            }
        };
        let stdin = group.read.try_clone().ok()?;
        group.members.push(Member::default());
        Some(Ticket {
            stdin,
            key,
            index: group.members.len() - 1,
            starter: self.clone(),
            released: group.released.subscribe(),
        })
    }

    /// How long before the instant the first run of a group confirms.
    fn margin() -> TimeDelta {
        JOIN_MARGIN / 2
    }
}

/// When the run that joined the group of `instant` after `runs_before` others confirms.
fn confirm_time(instant: DateTime<Utc>, runs_before: usize) -> DateTime<Utc> {
    let before = i32::try_from(runs_before.min(CONFIRM_SPREAD_RUNS)).unwrap_or(0);
    instant - Starter::margin() - CONFIRM_PACE * before
}

/// Sleeps until the earliest pending instant and releases its group, until the channel
/// closes.
fn release_thread(groups: &Groups, clock: &SharedClock, instants: &mpsc::Receiver<DateTime<Utc>>) {
    let mut pending: BTreeSet<DateTime<Utc>> = BTreeSet::new();
    loop {
        let next = match pending.first() {
            Some(&at) => instants.recv_timeout((at - clock.now()).to_std().unwrap_or_default()),
            None => instants.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match next {
            Ok(at) => {
                pending.insert(at);
            }
            // Everything due now; anything not quite due yet is waited for again above.
            Err(mpsc::RecvTimeoutError::Timeout) => {
                while let Some(at) = pending.first().copied().filter(|&at| at <= clock.now()) {
                    pending.pop_first();
                    release(groups, clock, at);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Releases the group of `instant`: one line per run that goes, a spare line for each
/// prepared process killed because it did not confirm or left the group.
fn release(groups: &Groups, clock: &SharedClock, instant: DateTime<Utc>) {
    let group = groups.lock().unwrap_or_else(PoisonError::into_inner).remove(&instant.timestamp_millis());
    let Some(mut group) = group else { return };
    let mut lines = 0;
    let going = group.members.iter().filter(|m| m.go).count();
    for member in &group.members {
        match (member.go, member.pid) {
            (true, _) => lines += 1,
            (false, Some(pid)) => {
                let _ = kill(pid, Signal::SIGKILL);
                lines += 1;
            }
            (false, None) if member.spare => lines += 1,
            (false, None) => {}
        }
    }
    if let Err(e) = group.write.write_all(&vec![b'\n'; lines]) {
        warn!("releasing {lines} runs of {instant}: {e}");
    }
    let _ = group.released.send(Some((clock.now(), Gate::new(going), Gate::new(going))));
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEARTBEAT: Duration = Duration::from_secs(5);

    /// The gate opens when the last run released with it has started, and not before.
    #[tokio::test(start_paused = true)]
    async fn the_gate_opens_once_every_released_run_started() {
        let gate = Gate::new(3);
        let (a, b, c) = (Passage(gate.clone()), Passage(gate.clone()), Passage(gate.clone()));
        drop(a);
        let waiting = tokio::spawn({
            let gate = gate.clone();
            async move { gate.passed(start_gate_bound(HEARTBEAT)).await }
        });
        drop(b);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "one run has not started yet");
        drop(c);
        tokio::time::timeout(Duration::from_millis(1), waiting).await.unwrap().unwrap();
        // Open stays open: a run that started last passes at once.
        tokio::time::timeout(Duration::from_millis(1), gate.passed(start_gate_bound(HEARTBEAT))).await.unwrap();
        assert!(*Gate::new(0).open.borrow(), "a group with no run going is open");
    }

    /// A group's runs confirm at the margin before the instant, the later joiners earlier
    /// at a fixed pace, never more than a second earlier.
    #[test]
    fn runs_of_a_large_group_confirm_spread_out_before_the_margin() {
        let instant = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let margin = instant - Starter::margin();
        for (runs_before, earlier_us) in [(0, 0), (1, 100), (500, 50_000), (5_000, 500_000), (10_000, 1_000_000)] {
            assert_eq!(
                confirm_time(instant, runs_before),
                margin - TimeDelta::microseconds(earlier_us),
                "{runs_before}"
            );
        }
        for runs_before in [10_001, 1 << 40, usize::MAX] {
            assert_eq!(confirm_time(instant, runs_before), margin - TimeDelta::seconds(1), "{runs_before}");
        }
        // Per run ahead: none at the margin, one pace unguarded, three guarded.
        for (confirms, paces) in [(Confirms::AtTheMargin, 0), (Confirms::Unguarded, 1), (Confirms::Guarded, 3)] {
            assert_eq!(confirms.paces(), paces, "{confirms:?}");
        }
    }

    /// A confirmed run whose release does not come (here the clock never reaches its
    /// instant: a stalled release thread) stops waiting half a heartbeat past its instant
    /// and leaves the group to start alone: it holds a runner slot and its leases
    /// meanwhile.
    #[tokio::test(start_paused = true)]
    async fn a_late_release_is_awaited_until_half_a_heartbeat_past_its_instant_then_the_run_starts_alone() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let starter = Starter::new(Arc::new(crate::clock::ManualClock::new(now)));
        let instant = now + TimeDelta::seconds(10);
        let ticket = starter.ticket(instant).unwrap();
        let mut supervisor = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        ticket.set_pid(Some(supervisor.id()));
        assert!(ticket.confirm());
        let before = tokio::time::Instant::now();
        assert!(matches!(ticket.released(HEARTBEAT / 2).await, Release::Alone));
        assert_eq!(before.elapsed(), Duration::from_secs(10) + HEARTBEAT / 2);
        // Out of its group, its supervisor killed as it left: the release does not let it
        // go, and owes it a spare line, not a kill (the pid is reaped now, maybe reused).
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(supervisor.wait().unwrap().signal(), Some(Signal::SIGKILL as i32));
        let groups = starter.groups.lock().unwrap();
        let member = &groups[&instant.timestamp_millis()].members[0];
        assert_eq!((member.go, member.pid, member.spare), (false, None, true));
    }

    /// A run that confirmed but never started (its task dropped) holds the others back
    /// for `START_GATE_BOUND` at most, or half a heartbeat when that is shorter; a run
    /// that goes on long after the others ended holds them at the end gate for
    /// `END_GATE_BOUND`.
    #[tokio::test(start_paused = true)]
    async fn a_run_that_never_starts_or_never_ends_holds_the_gate_for_its_bound_only() {
        let bounds = [
            (start_gate_bound(HEARTBEAT), START_GATE_BOUND),
            (start_gate_bound(Duration::from_millis(300)), Duration::from_millis(150)),
            (END_GATE_BOUND, Duration::from_millis(50)),
        ];
        for (bound, held) in bounds {
            let gate = Gate::new(2);
            drop(Passage(gate.clone()));
            let before = tokio::time::Instant::now();
            tokio::time::timeout(Duration::from_secs(5), gate.passed(bound)).await.unwrap();
            assert_eq!(before.elapsed(), held, "bound {bound:?}");
        }
    }
}
