//! Local-time helpers with Python `zoneinfo` semantics, on top of chrono-tz.
//!
//! cronsim works on aware `datetime`s whose meaning depends on `fold`:
//!
//! * a wall-clock time that occurs twice (clocks went back) means the earlier
//!   instant with `fold=0` and the later one with `fold=1`;
//! * a wall-clock time that never occurs (clocks went forward, "imaginary")
//!   is converted with the offset in force *before* the transition with
//!   `fold=0` and the one in force after it with `fold=1`.
//!
//! Both rules are the same statement: `fold=0` takes the pre-transition offset,
//! `fold=1` the post-transition offset. chrono-tz answers `LocalResult::None`
//! in a gap, so the two offsets around a gap come from [`chrono_tz::GapInfo`]
//! (which reads them from the zone's own transition table, so it is exact).
//! Only if that is unavailable (at the ends of the table) do we fall back to
//! the offsets at the UTC instants `local - 15h` and `local + 13h`: every
//! transition that skips `local` lies strictly between those two instants
//! because UTC offsets are within -12h..+14h.

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeZone};
use chrono_tz::{GapInfo, Tz};

/// How one wall-clock time maps onto instants in a zone. Offsets are
/// seconds east of UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wall {
    /// Exactly one instant.
    Single(i32),
    /// Occurs twice: `before` (the larger offset) gives the earlier instant.
    Repeated { before: i32, after: i32 },
    /// Never occurs: the offsets in force before and after the skip.
    Skipped { before: i32, after: i32 },
}

impl Wall {
    /// The offset Python uses to convert this wall time with the given fold.
    pub(crate) fn offset(self, fold: bool) -> i32 {
        match self {
            Wall::Single(o) => o,
            Wall::Repeated { before, after } | Wall::Skipped { before, after } => {
                if fold {
                    after
                } else {
                    before
                }
            }
        }
    }
}

/// Seconds since the epoch of a naive date-time read as if it were UTC.
pub(crate) fn secs(dt: NaiveDateTime) -> i64 {
    dt.and_utc().timestamp()
}

/// Inverse of [`secs`]; `None` outside chrono's range.
pub(crate) fn naive(secs: i64) -> Option<NaiveDateTime> {
    DateTime::from_timestamp(secs, 0).map(|d| d.naive_utc())
}

/// UTC offset (seconds) in force at the UTC instant `utc`.
pub(crate) fn offset_at(tz: Tz, utc: i64) -> Option<i32> {
    let at = naive(utc)?;
    Some(tz.offset_from_utc_datetime(&at).fix().local_minus_utc())
}

/// Classifies a wall-clock time in `tz`.
pub(crate) fn classify(tz: Tz, local: NaiveDateTime) -> Wall {
    match tz.offset_from_local_datetime(&local) {
        LocalResult::Single(o) => Wall::Single(o.fix().local_minus_utc()),
        LocalResult::Ambiguous(a, b) => {
            let (a, b) = (a.fix().local_minus_utc(), b.fix().local_minus_utc());
            Wall::Repeated { before: a.max(b), after: a.min(b) }
        }
        LocalResult::None => {
            let gap = GapInfo::new(&local, &tz);
            let l = secs(local);
            let before = gap
                .as_ref()
                .and_then(|g| g.begin.as_ref())
                .map(|(_, o)| o.fix().local_minus_utc())
                .or_else(|| offset_at(tz, l - 15 * 3600))
                .unwrap_or(0);
            let after = gap
                .as_ref()
                .and_then(|g| g.end.as_ref())
                .map(|d| d.offset().fix().local_minus_utc())
                .or_else(|| offset_at(tz, l + 13 * 3600))
                .unwrap_or(0);
            Wall::Skipped { before, after }
        }
    }
}

/// First wall-clock time after the gap that contains `local`, if `local` is
/// in a gap and the zone table says where the gap ends.
pub(crate) fn gap_end(tz: Tz, local: NaiveDateTime) -> Option<NaiveDateTime> {
    GapInfo::new(&local, &tz)?.end.map(|d| d.naive_local())
}

/// `datetime(local, tzinfo=tz, fold=fold).astimezone(UTC)` as epoch seconds.
/// `fold` is only evaluated when the wall time is repeated or skipped.
pub(crate) fn to_utc(tz: Tz, local: NaiveDateTime, fold: impl FnOnce() -> bool) -> i64 {
    let wall = classify(tz, local);
    let f = match wall {
        Wall::Single(_) => false,
        _ => fold(),
    };
    secs(local) - i64::from(wall.offset(f))
}

/// The `fold` Python sets when converting the UTC instant `utc` to `tz`:
/// 1 exactly when the wall time is repeated and `utc` is its later instant.
pub(crate) fn fold_at(tz: Tz, utc: i64) -> bool {
    let Some(off) = offset_at(tz, utc) else {
        return false;
    };
    let Some(local) = naive(utc + i64::from(off)) else {
        return false;
    };
    matches!(classify(tz, local), Wall::Repeated { after, .. } if after == off)
}
