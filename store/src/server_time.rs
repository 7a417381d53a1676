//! The agent's wall clock against the NATS server's.
//!
//! Leases expire on the server's clock, but fires are due on the agents': a scheduler
//! whose clock stepped back 60 s (an NTP step, a resumed VM) holds its shards and fires
//! nothing for 60 s, and nothing said so. So each presence write of an agent (a
//! scheduler's `scheduler.<holder>`, a runner's `runner.<host>`) is also a measurement:
//! the server stamps the message it stores, and that stamp lies between our clock's
//! reading before the write and after its acknowledgement. The offset is the stamp less
//! the middle of the two, give or take half the round trip ([`Reading`]).
//!
//! An agent off by more than `[scheduler] max_clock_offset` (default 2 s, beyond the round
//! trip) is `off`: its scheduler leaves the member list that assigns shards (its presence
//! says `clock_off`, see `scheduler::membership::members`), so the others lead its shards; its
//! runner starts runs on the server's time ([`Corrected`]); `/readyz` says so, and
//! `cronrun_clock_offset_seconds` shows the offset. If every scheduler is off, they lead
//! as before: a wrong clock is better than no scheduler. docs/failure-model.md.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::clock::{Clock, SharedClock};
use crate::error::Error;
use crate::store::Bucket;

/// A change of the offset between two readings larger than this is logged as a step.
const STEP: f64 = 1.0;
/// A round trip longer than this measures nothing worth keeping.
const ROUND_TRIP_MAX: Duration = Duration::from_secs(1);

/// One measurement: the server's clock less ours, in seconds, give or take `within`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub offset: f64,
    pub within: f64,
}

impl Reading {
    /// From our clock before a write (`sent`) and at its acknowledgement (`acked`), and
    /// the server's stamp of the stored message.
    pub fn of(sent: DateTime<Utc>, acked: DateTime<Utc>, stamped: DateTime<Utc>) -> Reading {
        let half = (acked - sent) / 2;
        let mid = sent + half;
        let seconds = |d: chrono::Duration| d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
        Reading { offset: seconds(stamped - mid), within: seconds(half).abs() }
    }

    /// Whether the clock is surely off by more than `max`, whatever the round trip hid.
    pub fn is_off(&self, max: Duration) -> bool {
        self.offset.abs() - self.within > max.as_secs_f64()
    }
}

/// What the agent knows of its clock: the last offset measured, and whether it is off.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClockState {
    pub offset: Option<f64>,
    pub off: bool,
}

/// The last measurement at the middle of its round trip: the monotonic clock's instant,
/// our wall clock's reading and the server's stamp.
type Anchor = (std::time::Instant, DateTime<Utc>, DateTime<Utc>);

/// The agent's clock state, shared by its scheduler, runner and `/readyz`.
#[derive(Debug, Clone)]
pub struct ServerTime {
    state: Arc<watch::Sender<ClockState>>,
    anchor: Arc<Mutex<Option<Anchor>>>,
    max: Duration,
}

impl ServerTime {
    pub fn new(max: Duration) -> Self {
        Self { state: Arc::new(watch::Sender::new(ClockState::default())), anchor: Arc::default(), max }
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    pub fn state(&self) -> ClockState {
        *self.state.borrow()
    }

    /// Changes of the state, for a scheduler to give up or take back its shards.
    pub fn subscribe(&self) -> watch::Receiver<ClockState> {
        self.state.subscribe()
    }

    /// Takes in a reading: the metric, a line for a step or for a change of state.
    pub fn record(&self, reading: Reading) {
        metrics::gauge!("cronrun_clock_offset_seconds").set(reading.offset);
        let before = self.state();
        if let Some(previous) = before.offset
            && (reading.offset - previous).abs() > STEP
        {
            warn!(
                step_seconds = previous - reading.offset,
                "this agent's clock stepped by {:+.3} s against the NATS server's",
                previous - reading.offset
            );
        }
        let off = reading.is_off(self.max);
        if off && !before.off {
            warn!(
                offset_seconds = reading.offset,
                "this agent's clock is {:.3} s {} the NATS server's, more than max_clock_offset {}: \
                 it leads no shards and starts runs on the server's time until it is within",
                reading.offset.abs(),
                if reading.offset > 0.0 { "behind" } else { "ahead of" },
                humantime::format_duration(self.max)
            );
        } else if before.off && !off {
            info!(offset_seconds = reading.offset, "this agent's clock is within max_clock_offset again");
        }
        self.state.send_replace(ClockState { offset: Some(reading.offset), off });
    }

    /// Writes `value` to `key` of `bucket` (a presence key: ours alone) and measures the
    /// clock by it, reading `raw` (the uncorrected clock).
    pub async fn write_and_measure(
        &self,
        bucket: &Bucket,
        (key, value, ttl): (&str, Bytes, Option<Duration>),
        raw: &SharedClock,
    ) -> Result<(), Error> {
        let (sent, sent_at) = (raw.now(), std::time::Instant::now());
        let revision = bucket.put(key, value, ttl).await?;
        let (acked, acked_at) = (raw.now(), std::time::Instant::now());
        if (acked - sent).to_std().is_ok_and(|trip| trip <= ROUND_TRIP_MAX)
            && let Some((stored, stamped)) = bucket.stamp(key).await?
            && stored == revision
        {
            self.record(Reading::of(sent, acked, stamped));
            self.set_anchor((sent_at + (acked_at - sent_at) / 2, sent + (acked - sent) / 2, stamped));
        }
        Ok(())
    }

    fn set_anchor(&self, anchor: Anchor) {
        if let Ok(mut slot) = self.anchor.lock() {
            *slot = Some(anchor);
        }
    }

    /// Our wall clock's and the server's time now, as the monotonic clock carries them on
    /// from the last measurement: no step of the wall clock moves them.
    fn carried_on(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let (at, wall, server) = (*self.anchor.lock().ok()?)?;
        let elapsed = chrono::Duration::from_std(at.elapsed()).ok()?;
        Some((wall + elapsed, server + elapsed))
    }

    /// `raw` corrected to the server's time while it is off (see [`Corrected`]).
    pub fn corrected(&self, raw: SharedClock) -> SharedClock {
        Arc::new(Corrected { raw, server: self.clone() })
    }
}

/// The wall clock, moved by the measured offset while it is off: a runner whose clock is
/// a minute behind still starts each run at its instant by the server's clock. Within
/// `max_clock_offset` it is the clock itself (a correction by a noisy reading would only
/// add jitter). Between a step and the next measurement (a heartbeat at most), it is the
/// server's time carried on by the monotonic clock from the last measurement: a step is
/// the wall clock moving more than [`STEP`] away from where the monotonic clock carried it.
#[derive(Debug)]
pub struct Corrected {
    raw: SharedClock,
    server: ServerTime,
}

impl Clock for Corrected {
    fn now(&self) -> DateTime<Utc> {
        let raw = self.raw.now();
        if let Some((wall, server)) = self.server.carried_on()
            && (raw - wall).abs() > chrono::Duration::milliseconds((STEP * 1000.0) as i64)
        {
            return server;
        }
        match self.server.state() {
            ClockState { offset: Some(offset), off: true } => {
                raw + chrono::Duration::microseconds((offset * 1e6) as i64)
            }
            _ => raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn a_reading_is_the_stamp_less_the_middle_of_the_round_trip_and_off_only_beyond_it() {
        let max = Duration::from_secs(2);
        // (sent, acked, stamped, offset, within, off)
        let cases = [
            ("2026-12-06T01:00:00.000Z", "2026-12-06T01:00:00.010Z", "2026-12-06T01:00:00.005Z", 0.0, 0.005, false),
            // Our clock a minute behind (stepped back): the server's stamps are ahead.
            ("2026-12-06T01:00:00.000Z", "2026-12-06T01:00:00.010Z", "2026-12-06T01:01:00.005Z", 60.0, 0.005, true),
            ("2026-12-06T01:00:00.000Z", "2026-12-06T01:00:00.010Z", "2026-12-06T00:59:57.005Z", -3.0, 0.005, true),
            // 2.3 s, but the round trip could hide 0.5 s of it: not surely off.
            ("2026-12-06T01:00:00.000Z", "2026-12-06T01:00:01.000Z", "2026-12-06T01:00:02.800Z", 2.3, 0.5, false),
        ];
        for (sent, acked, stamped, offset, within, off) in cases {
            let r = Reading::of(at(sent), at(acked), at(stamped));
            assert!((r.offset - offset).abs() < 1e-6 && (r.within - within).abs() < 1e-6, "{r:?}");
            assert_eq!(r.is_off(max), off, "{r:?}");
        }
    }

    #[test]
    fn the_corrected_clock_moves_by_the_offset_only_while_off() {
        let raw = Arc::new(ManualClock::new(at("2026-12-06T01:00:00Z")));
        let server = ServerTime::new(Duration::from_secs(2));
        let clock = server.corrected(raw.clone());
        let mut states = server.subscribe();
        assert_eq!(clock.now(), at("2026-12-06T01:00:00Z"), "no reading yet");
        server.record(Reading { offset: 1.5, within: 0.001 });
        assert_eq!(clock.now(), at("2026-12-06T01:00:00Z"), "within max: uncorrected");
        assert!(!states.has_changed().unwrap() || !states.borrow_and_update().off);
        server.record(Reading { offset: 60.0, within: 0.001 });
        assert_eq!(clock.now(), at("2026-12-06T01:01:00Z"));
        assert!(states.borrow_and_update().off, "the change reaches subscribers");
        server.record(Reading { offset: 0.01, within: 0.001 });
        assert_eq!(clock.now(), at("2026-12-06T01:00:00Z"));
        assert!(!server.state().off);
    }

    #[test]
    fn between_a_step_and_the_next_reading_the_server_time_is_carried_on_by_the_monotonic_clock() {
        let raw = Arc::new(ManualClock::new(at("2026-12-06T01:00:00Z")));
        let server = ServerTime::new(Duration::from_secs(2));
        let clock = server.corrected(raw.clone());
        // Measured 1.5 s behind the server: within max_clock_offset 2 s.
        server.record(Reading { offset: 1.5, within: 0.001 });
        server.set_anchor((std::time::Instant::now(), at("2026-12-06T01:00:00Z"), at("2026-12-06T01:00:01.5Z")));
        // The wall clock where the monotonic clock carries it: the wall clock itself.
        raw.set(at("2026-12-06T01:00:00.300Z"));
        assert_eq!(clock.now(), at("2026-12-06T01:00:00.300Z"));
        // Stepped back a minute, not measured yet: the server's time carried on (a few
        // microseconds past the anchor, as the monotonic clock moved meanwhile).
        raw.set(at("2026-12-06T00:59:00Z"));
        let carried = clock.now();
        assert!(carried >= at("2026-12-06T01:00:01.5Z") && carried < at("2026-12-06T01:00:02.5Z"), "{carried}");
    }
}
