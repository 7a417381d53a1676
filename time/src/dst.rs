//! A job's choice for fixed times that daylight saving time skips or repeats ([`Dst`]),
//! and the one place the search applies it ([`Dst::passes`], [`Dst::place`]).
//!
//! "Fixed time" is the engine's own (and cronsim's) test for Debian cron's DST rules: a
//! 5-field expression whose minute and hour fields do not start with `*` (`30 2 * * *`,
//! `0,30 1-3 * * *`, `@daily`). Those are searched on the naive wall clock and then placed
//! on instants (`iter.rs`, the `Fixup` clock); only that placement depends on the choice.
//! Every other expression follows the wall clock under every choice: `*/15 2 * * *`
//! (minute starts with `*`) has no fire on a day without 02:00-03:00 and fires in both
//! passes of a repeated 02:00-03:00; `0 * * * *` fires each hour the clock shows; a
//! 6-field `0 30 2 * * *` is not Debian cron at all.

use std::fmt;
use std::str::FromStr;

use chrono_tz::Tz;

use super::ScheduleError;
use super::zone::{self, Wall, naive};

/// What a fixed time that falls in a skipped (spring-forward) or repeated (fall-back)
/// hour does. Times the clock shows once fire once under every choice.
///
/// New York, 2026: clocks go 02:00 EST -> 03:00 EDT on 8 March and 02:00 EDT -> 01:00 EST
/// on 1 November.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dst {
    /// Debian cron's rule, exactly as cronsim implements it: a time in a skipped hour
    /// fires once at the end of the gap (`30 2 * * *` at 03:00 EDT on 8 March), a time in
    /// a repeated hour fires once, in its first pass (`30 1 * * *` at 01:30 EDT on
    /// 1 November).
    #[default]
    Debian,
    /// A time in a skipped hour does not fire that day (`30 2 * * *` has no fire on
    /// 8 March); a repeated hour as [`Dst::Debian`].
    Skip,
    /// A time in a repeated hour fires at both instants (`30 1 * * *` at 01:30 EDT and
    /// 01:30 EST on 1 November); a skipped hour as [`Dst::Debian`].
    Twice,
}

/// Which of the two instants of a repeated wall time one search places a fixed time at.
/// A search's instants rise with its wall times only within one pass (the second pass of
/// 01:15 comes after the first of 01:45), so [`Dst::Twice`] is two searches, the earlier
/// answer winning, rather than two instants from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// The earlier instant (fold 0), cronsim's.
    First,
    /// The later instant (fold 1).
    Second,
}

/// How one wall-clock time of a fixed-time expression becomes a fire instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// At the wall time read with this UTC offset (seconds east).
    At(i32),
    /// At the first minute after the gap (cronsim's `while is_imaginary: += 1 minute`).
    GapEnd,
    /// Not at all: the search goes on to the next wall time.
    Nowhere,
}

impl Dst {
    /// Every choice, the default first.
    pub const ALL: [Dst; 3] = [Dst::Debian, Dst::Skip, Dst::Twice];

    /// The name a job spec and `cronrun next --dst` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Dst::Debian => "debian",
            Dst::Skip => "skip",
            Dst::Twice => "twice",
        }
    }

    /// The searches a fixed-time expression's next fire is the earliest answer of.
    pub(crate) fn passes(self) -> &'static [Pass] {
        match self {
            Dst::Debian | Dst::Skip => &[Pass::First],
            Dst::Twice => &[Pass::First, Pass::Second],
        }
    }

    /// The decision: where a search in `pass` places a fixed wall time classified as
    /// `wall`. Debian's answers are cronsim's (a wall time read with fold 0, i.e. the
    /// offset before the transition; a skipped one moved past the gap). A skipped time in
    /// the second pass lands where the first pass puts it, so `twice` keeps Debian's gap.
    pub(crate) fn place(self, pass: Pass, wall: Wall) -> Placement {
        match (wall, self, pass) {
            (Wall::Single(offset), _, _) => Placement::At(offset),
            (Wall::Skipped { .. }, Dst::Skip, _) => Placement::Nowhere,
            (Wall::Skipped { .. }, Dst::Debian | Dst::Twice, _) => Placement::GapEnd,
            (Wall::Repeated { before, .. }, _, Pass::First) => Placement::At(before),
            (Wall::Repeated { after, .. }, _, Pass::Second) => Placement::At(after),
        }
    }
}

impl Pass {
    /// The wall time a fixed-time search strictly after the instant `start` begins from.
    /// cronsim reads `start` on the wall clock. The second pass reads it with the offset
    /// after the change when `start` is in the first pass of a repeated hour: the wall
    /// times already passed there have their second instants still to come (candidates
    /// whose instants are not after `start` are dropped by the search, as any such).
    pub(crate) fn search_from(self, tz: Tz, start: i64) -> Option<chrono::NaiveDateTime> {
        let local = naive(start + i64::from(zone::offset_at(tz, start)?))?;
        match (self, zone::classify(tz, local)) {
            (Pass::Second, Wall::Repeated { after, .. }) => naive(start + i64::from(after)),
            _ => Some(local),
        }
    }
}

impl fmt::Display for Dst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dst {
    type Err = ScheduleError;

    /// `debian`, `skip` or `twice`, as written; anything else is refused naming the three.
    fn from_str(s: &str) -> Result<Dst, ScheduleError> {
        Dst::ALL.into_iter().find(|d| d.as_str() == s).ok_or_else(|| ScheduleError {
            field: "dst",
            reason: format!("{s:?} is not a choice; use \"debian\" (the default), \"skip\" or \"twice\""),
        })
    }
}
