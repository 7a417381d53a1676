//! Fallback search used only where cronsim never returns.
//!
//! Around some DST changes cronsim's search loops forever (for example
//! `27-46 59 3 * * *` in Pacific/Chatham from 2027-04-03T13:55Z: the jump to
//! minute 59 crosses the transition into the repeated hour, the hour is then
//! wrong, and `replace(minute=0)` jumps back before the transition; or it
//! yields the same instant again and again). `iter.rs` detects the repeated
//! state; there is no cronsim answer to match, so we answer with the plain
//! wall-clock rule: the first instant after the start whose local time in
//! the zone matches every field (a repeated wall time matches in both
//! passes, a skipped one never). The scheduler thus never loses a job there.

use chrono::{Datelike, Timelike};
use chrono_tz::Tz;

use super::cron::CronSpec;
use super::zone::{naive, offset_at};

/// How far past cronsim's window the search of `iter.rs` goes on, and how far this one
/// looks: one Gregorian cycle (400 years, after which every day pattern repeats) and one
/// year to spare.
pub(crate) const FAR_YEARS: i32 = 401;

/// First instant (epoch seconds) after `after` whose wall time in `tz`
/// matches `spec`; `None` past [`FAR_YEARS`] (as far as `iter.rs` looks).
/// Each step moves at least to the next day, hour, minute or matching second
/// (or to a transition), so [`STEPS`] bounds the search.
pub(crate) fn search(spec: &CronSpec, tz: Tz, after: i64) -> Option<i64> {
    let mut u = after.checked_add(1)?;
    let off = offset_at(tz, u)?;
    let limit = naive(u + i64::from(off))?.year() + FAR_YEARS;
    for _ in 0..STEPS {
        let off = offset_at(tz, u)?;
        let local = naive(u + i64::from(off))?;
        if local.year() > limit {
            return None;
        }
        let (h, m, s) = (local.hour(), local.minute(), local.second());
        let since_midnight = i64::from(h * 3600 + m * 60 + s);
        let day_ok = spec.has_year(local.year()) && spec.has_month(local.month()) && spec.match_day(local.date());
        // Wall-clock seconds to the next candidate, assuming no transition.
        let jump = if !day_ok {
            86_400 - since_midnight
        } else if spec.hours >> h & 1 == 0 {
            3600 - i64::from(m * 60 + s)
        } else if spec.minutes >> m & 1 == 0 {
            60 - i64::from(s)
        } else if spec.seconds >> s & 1 == 0 {
            let above = spec.seconds & !((2u64 << s) - 1) & ((1u64 << 60) - 1);
            if above != 0 { i64::from(above.trailing_zeros() - s) } else { 60 - i64::from(s) }
        } else {
            return Some(u);
        };
        let target = u + jump;
        if offset_at(tz, target)? == off {
            u = target;
            continue;
        }
        // A transition lies in (u, target]: everything before it is on the
        // same non-matching day/hour/minute, so continue at the transition.
        let (mut lo, mut hi) = (u, target);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if offset_at(tz, mid)? == off { lo = mid } else { hi = mid }
        }
        u = hi;
    }
    None
}

/// Enough steps for [`FAR_YEARS`] of days plus a day of minutes and seconds
/// around each transition.
const STEPS: u32 = 4_000_000;
