//! Forward search for the next fire: a port of cronsim 2.9's `__next__`
//! (`tick`, `advance`, `advance_month/day/hour/minute/second`, the
//! `fixup_tz` mode and its `is_imaginary` loop, the 50-year give-up).
//!
//! Past cronsim's 50-year give-up the same iteration simply goes on (cronsim
//! answers nothing there, so there is nothing to differ from), up to
//! [`FAR_YEARS`] past the start or the year field's last year: a 7-field
//! `0 0 0 1 JAN ? 2090` fires in 2090 from 2026. Within [`FAR_YEARS`] every
//! day pattern of the Gregorian calendar has come round (it repeats every 400
//! years), so "nothing within it" means "never".
//!
//! Every loop is bounded by [`GUARD`] iterations, so a search ends whatever
//! the expression, the zone and the start.
//!
//! The state mirrors cronsim's `self.dt`: a wall-clock time plus its `fold`,
//! in one of three clocks:
//!
//! * `Utc`: naive arithmetic (cronsim's `tzinfo in (None, UTC)`; for UTC the
//!   other modes give identical results, this one is just faster);
//! * `Fixup`: 5-field expressions whose minute and hour do not start with `*`,
//!   in any other zone: naive wall-clock arithmetic, then the result is moved
//!   forward minute by minute while it is imaginary and read with `fold=0`;
//! * `Zoned`: aware arithmetic: `tick` goes through UTC, `replace` keeps the
//!   fold, `combine` sets fold 0 (see `zone.rs` for what fold means).
//!
//! Speed: cronsim's tick loops (second by second, minute by minute, hour by
//! hour until a member or the wrap to 0) are replaced by one jump to where the
//! loop would stop, computed from the bitsets. In the naive clocks that is
//! exact. In `Zoned` the jump is taken only when the UTC offset at its target
//! equals the offset at its start; otherwise one literal tick is made and the
//! jump retried, so transitions are stepped through exactly as cronsim does.
//! Equal offsets at both ends imply no transition in between because no zone
//! in chrono-tz's table (2025b) has two offset changes that cancel out within
//! 48 hours (checked over the whole table when this was written; jumps span
//! at most 24 hours). Offset lookups are cached with the state, and `fold` is
//! only computed when a `replace` lands on a repeated or skipped wall time.
//!
//! cronsim can loop forever in `Zoned` mode around a DST change; Brent's
//! cycle detection over the search state notices that and `wall.rs` answers.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, Timelike, Utc};
use chrono_tz::Tz;

use super::cron::CronSpec;
use super::dst::{Pass, Placement};
use super::wall::{self, FAR_YEARS};
use super::zone::{self, naive, secs};

#[derive(Clone, Copy)]
enum Clock {
    Utc,
    Fixup(Tz),
    Zoned(Tz),
}

/// Where the current `fold` comes from: set explicitly, or "whatever Python
/// would set converting this UTC instant" (computed lazily; `replace` keeps it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fold {
    Fixed(bool),
    OfInstant(i64),
}

#[derive(Clone, Copy)]
enum Unit {
    Second,
    Minute,
    Hour,
}

struct Cursor<'a> {
    spec: &'a CronSpec,
    clock: Clock,
    /// Which instant of a repeated wall time `Fixup` places a fixed time at.
    pass: Pass,
    dt: NaiveDateTime,
    fold: Fold,
    /// UTC instant and its offset when `dt` came from converting an instant.
    known: Option<(i64, i32)>,
    /// Brent's cycle detection over the states at the top of `advance`'s loop.
    saved: Option<State>,
    power: u32,
    lap: u32,
    /// Set when the state repeated: cronsim would never return.
    looped: bool,
    /// Set when `advance` stopped at its year window (not at the year field's end).
    gave_up: bool,
}

type State = (NaiveDateTime, Option<(i64, i32)>, Fold);

/// Safety bound for loops that cronsim bounds only implicitly.
const GUARD: u32 = 100_000;

/// cronsim's give-up: nothing within this many years of the start of a search.
const CRONSIM_YEARS: i32 = 50;

/// First cron fire strictly after `after`, as cronsim would yield it (for a fixed time,
/// as the spec's DST choice places it: the earliest of its passes' answers).
pub(crate) fn next_after(spec: &CronSpec, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
    let start = after.timestamp();
    let fire = if matches!(tz, Tz::UTC | Tz::Etc__UTC) {
        search(spec, Clock::Utc, start, Pass::First)
    } else if spec.debian() {
        spec.dst.passes().iter().filter_map(|pass| search(spec, Clock::Fixup(tz), start, *pass)).min()
    } else {
        search(spec, Clock::Zoned(tz), start, Pass::First)
    };
    DateTime::from_timestamp(fire?, 0)
}

/// One forward search in `clock` (`pass`: which instant a fixed time in a repeated hour
/// takes, `Fixup` only): the first fire strictly after `start`, in epoch seconds.
fn search(spec: &CronSpec, clock: Clock, start: i64, pass: Pass) -> Option<i64> {
    let mut c = Cursor {
        spec,
        clock,
        pass,
        dt: naive(start)?,
        fold: Fold::Fixed(false),
        known: None,
        saved: None,
        power: 1,
        lap: 0,
        looped: false,
        gave_up: false,
    };
    match clock {
        Clock::Utc => {}
        Clock::Fixup(tz) => c.dt = pass.search_from(tz, start)?,
        Clock::Zoned(tz) => c.set_instant(start, zone::offset_at(tz, start)?)?,
    }
    // cronsim can yield a fire at or before the start when the start is in
    // the second pass of a repeated hour (Fixup mode reads wall times with
    // fold=0); those are skipped by continuing the same iteration, as are wall
    // times the DST choice places nowhere.
    let mut window = CRONSIM_YEARS;
    for _ in 0..GUARD {
        c.tick(1)?;
        while c.advance(window).is_none() {
            if let (true, Clock::Zoned(tz)) = (c.looped, clock) {
                return wall::search(spec, tz, start);
            }
            if !(c.gave_up && window == CRONSIM_YEARS) {
                return None;
            }
            // cronsim stops here; go on from the same state, as it would without the give-up.
            c.gave_up = false;
            window = FAR_YEARS;
        }
        if let Some(fire) = c.finish()?.filter(|fire| *fire > start) {
            return Some(fire);
        }
    }
    None
}

impl Cursor<'_> {
    fn set_instant(&mut self, utc: i64, off: i32) -> Option<()> {
        self.dt = naive(utc + i64::from(off))?;
        self.known = Some((utc, off));
        self.fold = Fold::OfInstant(utc);
        Some(())
    }

    /// `self.dt.astimezone(UTC)` in `Zoned` mode.
    fn instant(&self, tz: Tz) -> i64 {
        if let Some((u, _)) = self.known {
            return u;
        }
        let fold = self.fold;
        zone::to_utc(tz, self.dt, || match fold {
            Fold::Fixed(f) => f,
            Fold::OfInstant(u) => zone::fold_at(tz, u),
        })
    }

    /// cronsim's `tick(seconds)`.
    fn tick(&mut self, n: i64) -> Option<()> {
        match self.clock {
            Clock::Utc | Clock::Fixup(_) => {
                self.dt = self.dt.checked_add_signed(TimeDelta::seconds(n))?;
                self.fold = Fold::Fixed(false);
            }
            Clock::Zoned(tz) => {
                let u = self.instant(tz) + n;
                self.set_instant(u, zone::offset_at(tz, u)?)?;
            }
        }
        Some(())
    }

    /// `self.dt.replace(hour=h, minute=m, second=s)`: keeps the fold.
    fn set_time(&mut self, h: u32, m: u32, s: u32) -> Option<()> {
        self.dt = self.dt.date().and_hms_opt(h, m, s)?;
        self.known = None;
        Some(())
    }

    /// `datetime.combine(d, time(), tzinfo=...)`: fold 0.
    fn combine(&mut self, d: NaiveDate) {
        self.dt = d.and_time(NaiveTime::MIN);
        self.known = None;
        self.fold = Fold::Fixed(false);
    }

    fn unit(&self, u: Unit) -> (u32, u64, u32, i64) {
        let s = self.spec;
        match u {
            Unit::Second => (self.dt.second(), s.seconds, 60, 1),
            Unit::Minute => (self.dt.minute(), s.minutes, 60, 60),
            Unit::Hour => (self.dt.hour(), u64::from(s.hours), 24, 3600),
        }
    }

    /// cronsim's `while v not in set: tick(step); if v == 0: break` for a
    /// `v` known not to be in the set.
    fn tick_until(&mut self, u: Unit) -> Option<()> {
        let (_, _, _, step) = self.unit(u);
        // Ticks from the current value until the loop would stop, assuming
        // the wall clock advances exactly `step` per tick.
        let ahead = |c: &Self| -> i64 {
            let (v, set, len, _) = c.unit(u);
            let above = set & !((2u64 << v) - 1) & ((1u64 << len) - 1);
            let stop = if above != 0 { above.trailing_zeros() } else { len };
            i64::from(stop - v)
        };
        let stops = |c: &Self| {
            let (v, set, _, _) = c.unit(u);
            set >> v & 1 == 1 || v == 0
        };
        let tz = match self.clock {
            Clock::Utc | Clock::Fixup(_) => {
                let n = ahead(self) * step;
                self.dt = self.dt.checked_add_signed(TimeDelta::seconds(n))?;
                self.fold = Fold::Fixed(false);
                return Some(());
            }
            Clock::Zoned(tz) => tz,
        };
        for _ in 0..GUARD {
            if let Some((utc, off)) = self.known {
                let target = utc + ahead(self) * step;
                if zone::offset_at(tz, target) == Some(off) {
                    return self.set_instant(target, off);
                }
            }
            self.tick(step)?;
            if stops(self) {
                return Some(());
            }
        }
        None
    }

    /// cronsim's `advance`; `None` when it gives up (nothing within `window`
    /// years: `gave_up` is set), the year field is exhausted or the state repeats.
    fn advance(&mut self, window: i32) -> Option<()> {
        let start_year = self.dt.year();
        for _ in 0..GUARD {
            if let Clock::Zoned(_) = self.clock {
                self.check_cycle()?;
            }
            self.advance_month()?;
            if self.dt.year() > start_year.saturating_add(window) {
                self.gave_up = true;
                return None;
            }
            if self.advance_day()? || self.advance_hour()? || self.advance_minute()? || self.advance_second()? {
                continue;
            }
            return Some(());
        }
        None
    }

    /// Brent's algorithm: `None` (and `looped`) once a state repeats. Only
    /// `Zoned` can loop (the naive clocks only move forward).
    fn check_cycle(&mut self) -> Option<()> {
        let state = (self.dt, self.known, self.fold);
        if self.saved == Some(state) {
            self.looped = true;
            return None;
        }
        self.lap += 1;
        if self.lap == self.power {
            self.saved = Some(state);
            self.power = self.power.saturating_mul(2);
            self.lap = 0;
        }
        Some(())
    }

    /// `None` also when the year field has no year left (or, unreachable, no month).
    fn advance_month(&mut self) -> Option<()> {
        for _ in 0..GUARD {
            if !self.spec.has_year(self.dt.year()) {
                let y = self.spec.next_year(self.dt.year())?;
                self.combine(NaiveDate::from_ymd_opt(y, 1, 1)?);
            }
            if self.spec.has_month(self.dt.month()) {
                return Some(());
            }
            let mut needle = self.dt.date().with_day(1)?;
            // The month field always holds a month: at most 12 steps.
            let mut found = false;
            for _ in 0..12 {
                needle = needle.checked_add_months(chrono::Months::new(1))?;
                if self.spec.has_month(needle.month()) {
                    found = true;
                    break;
                }
            }
            if !found {
                return None;
            }
            self.combine(needle);
            if !self.spec.restricts_years() {
                return Some(());
            }
        }
        None
    }

    fn advance_day(&mut self) -> Option<bool> {
        let mut needle = self.dt.date();
        if self.spec.match_day(needle) {
            return Some(false);
        }
        // Stops at a matching day or the first of the next month: at most 31 steps.
        for _ in 0..31 {
            needle = needle.succ_opt()?;
            if needle.day() == 1 || self.spec.match_day(needle) {
                break;
            }
        }
        self.combine(needle);
        Some(true)
    }

    fn advance_hour(&mut self) -> Option<bool> {
        let h = self.dt.hour();
        if self.spec.hours >> h & 1 == 1 {
            return Some(false);
        }
        self.set_time(h, 0, 0)?;
        self.tick_until(Unit::Hour)?;
        Some(true)
    }

    fn advance_minute(&mut self) -> Option<bool> {
        let m = self.dt.minute();
        let set = self.spec.minutes;
        if set >> m & 1 == 1 {
            return Some(false);
        }
        self.set_time(self.dt.hour(), m, 0)?;
        if set.count_ones() == 1 {
            let delta = (set.trailing_zeros() + 60 - m) % 60;
            self.tick(i64::from(delta) * 60)?;
        }
        if set >> self.dt.minute() & 1 == 0 {
            self.tick_until(Unit::Minute)?;
        }
        Some(true)
    }

    fn advance_second(&mut self) -> Option<bool> {
        let s = self.dt.second();
        let set = self.spec.seconds;
        if set >> s & 1 == 1 {
            return Some(false);
        }
        if set.count_ones() == 1 {
            let delta = (set.trailing_zeros() + 60 - s) % 60;
            self.tick(i64::from(delta))?;
        }
        if set >> self.dt.second() & 1 == 0 {
            self.tick_until(Unit::Second)?;
        }
        Some(true)
    }

    /// The end of cronsim's `__next__`: the fire instant in UTC seconds, or `Some(None)`
    /// for a fixed time (`Fixup`) that the job's DST choice places nowhere
    /// ([`Dst::place`](super::dst::Dst::place)).
    fn finish(&mut self) -> Option<Option<i64>> {
        let tz = match self.clock {
            Clock::Utc => return Some(Some(secs(self.dt))),
            Clock::Zoned(tz) => return Some(Some(self.instant(tz))),
            Clock::Fixup(tz) => tz,
        };
        for _ in 0..GUARD {
            match self.spec.dst.place(self.pass, zone::classify(tz, self.dt)) {
                Placement::At(offset) => return Some(Some(secs(self.dt) - i64::from(offset))),
                Placement::Nowhere => return Some(None),
                // `while is_imaginary(result): self.dt += 1 minute`,
                // jumping straight to the first minute past the gap.
                Placement::GapEnd => {
                    let minutes = match zone::gap_end(tz, self.dt) {
                        Some(end) if end > self.dt => (secs(end) - secs(self.dt) + 59) / 60,
                        _ => 1,
                    };
                    self.dt = self.dt.checked_add_signed(TimeDelta::minutes(minutes))?;
                }
            }
        }
        None
    }
}
