//! The compiled cron expression ([`CronSpec`]) and its day matcher.
//!
//! The forward search that uses it lives in `iter.rs`; the field syntax in
//! `fields.rs`.

use chrono::{Datelike, NaiveDate};

use super::ScheduleError;
use super::dst::Dst;
use super::fields::{self, DOM, DOW, HOUR, MINUTE, MONTH, SECOND, YEAR};

const LAST: u8 = 1;
const LAST_WEEKDAY: u8 = 2;
const DAY_AND: u8 = 4;
const DEBIAN: u8 = 8;

/// A parsed cron expression: one bitset per field plus the `L`/`W`/`#` items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CronSpec {
    pub(crate) seconds: u64,
    pub(crate) minutes: u64,
    pub(crate) hours: u32,
    /// Bit d for day-of-month d.
    days: u32,
    /// Bit N for each `NW` item.
    weekday_near: u32,
    /// Bit `(n - 1) * 7 + d` for each `d#n` item (d: 0 = Sunday).
    dow_nth: u64,
    /// Bit m for month m.
    months: u16,
    /// Bit d for weekday d (0 = Sunday; 7 is folded onto 0).
    dows: u8,
    /// Bit d for each `dL` item.
    dow_last: u8,
    flags: u8,
    /// What a fixed time in a skipped or repeated hour does; only `debian()` specs use it.
    pub(crate) dst: Dst,
    /// Bit `y - 1970`; `None` when there is no year field or it is `*`.
    years: Option<Box<[u64; 4]>>,
}

const MONTH_NAMES: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
/// cronsim's DAYS_IN_MONTH: February counts 29.
const MAX_DAYS: [u32; 13] = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

impl CronSpec {
    /// Builds a spec from 5, 6 or 7 whitespace-separated fields.
    pub(crate) fn parse(parts: &[&str]) -> Result<CronSpec, ScheduleError> {
        let (second, rest) = match parts.len() {
            5 => ("0", parts),
            6 | 7 => (parts[0], &parts[1..]),
            n => {
                return Err(ScheduleError {
                    field: "expression",
                    reason: format!(
                        "has {n} fields; expected 5 (minute hour day-of-month month day-of-week), \
                         6 (second first) or 7 (second first, year last), or a macro like @daily"
                    ),
                });
            }
        };
        let sec = fields::parse(&SECOND, second)?;
        let min = fields::parse(&MINUTE, rest[0])?;
        let hour = fields::parse(&HOUR, rest[1])?;
        let dom = fields::parse(&DOM, rest[2])?;
        let month = fields::parse(&MONTH, rest[3])?;
        let dow = fields::parse(&DOW, rest[4])?;
        let years = match rest.get(5) {
            Some(text) => {
                let y = fields::parse(&YEAR, text)?;
                let all = (0..=(YEAR.max - YEAR.min)).all(|i| y.bits[(i / 64) as usize] >> (i % 64) & 1 == 1);
                if all { None } else { Some(Box::new(y.bits)) }
            }
            None => None,
        };
        let starts_any = |s: &str| s.starts_with('*') || s.starts_with('?');
        let mut flags = 0;
        if dom.last {
            flags |= LAST;
        }
        if dom.last_weekday {
            flags |= LAST_WEEKDAY;
        }
        if starts_any(rest[2]) || starts_any(rest[4]) {
            flags |= DAY_AND;
        }
        if parts.len() == 5 && !rest[0].starts_with('*') && !rest[1].starts_with('*') {
            flags |= DEBIAN;
        }
        let spec = CronSpec {
            seconds: sec.word(),
            minutes: min.word(),
            hours: hour.word() as u32,
            days: (dom.word() << 1) as u32,
            weekday_near: dom.weekday_near,
            dow_nth: dow.dow_nth,
            months: (month.word() << 1) as u16,
            dows: dow.word() as u8,
            dow_last: dow.dow_last,
            flags,
            dst: Dst::Debian,
            years,
        };
        spec.check_days(rest[2])?;
        Ok(spec)
    }

    /// cronsim's check: when both day fields must match and the smallest
    /// day-of-month is larger than every selected month, it never fires.
    /// `NW` items count with their N; `L` and `LW` always fit.
    fn check_days(&self, dom_text: &str) -> Result<(), ScheduleError> {
        if self.flags & DAY_AND == 0 || self.flags & (LAST | LAST_WEEKDAY) != 0 {
            return Ok(());
        }
        let all = self.days | self.weekday_near;
        let min_day = all.trailing_zeros();
        let max_len = (1..=12).filter(|m| self.months >> m & 1 == 1).map(|m| MAX_DAYS[m]).max();
        let max_len = max_len.unwrap_or(31);
        if min_day > max_len {
            let months: Vec<&str> =
                (1..=12).filter(|m| self.months >> m & 1 == 1).map(|m| MONTH_NAMES[m - 1]).collect();
            return Err(ScheduleError {
                field: DOM.name,
                reason: format!(
                    "{dom_text:?}: day {min_day} never occurs in {} (at most {max_len} days)",
                    months.join(",")
                ),
            });
        }
        Ok(())
    }

    /// Plain 5-field expression with fixed minute and hour: cronsim (like
    /// Debian cron) then iterates in wall-clock time and fixes up the result.
    pub(crate) fn debian(&self) -> bool {
        self.flags & DEBIAN != 0
    }

    pub(crate) fn has_month(&self, m: u32) -> bool {
        self.months >> m & 1 == 1
    }

    pub(crate) fn has_year(&self, y: i32) -> bool {
        match &self.years {
            None => true,
            Some(bits) => {
                let i = i64::from(y) - i64::from(YEAR.min);
                (0..=i64::from(YEAR.max - YEAR.min)).contains(&i) && bits[(i / 64) as usize] >> (i % 64) & 1 == 1
            }
        }
    }

    pub(crate) fn restricts_years(&self) -> bool {
        self.years.is_some()
    }

    /// The years the year field allows, ascending; `None` without a year field (or `*`).
    pub(crate) fn year_list(&self) -> Option<Vec<i32>> {
        self.years.as_ref()?;
        Some((YEAR.min as i32..=YEAR.max as i32).filter(|&y| self.has_year(y)).collect())
    }

    /// Whether the only day it can match is 29 February: both day fields must match,
    /// the month field is FEB and the day-of-month field is 29 alone.
    pub(crate) fn only_feb_29(&self) -> bool {
        self.flags & DAY_AND != 0
            && self.flags & (LAST | LAST_WEEKDAY) == 0
            && self.weekday_near == 0
            && self.months == 1 << 2
            && self.days == 1 << 29
    }

    /// Smallest allowed year after `y` (only meaningful with a year field).
    pub(crate) fn next_year(&self, y: i32) -> Option<i32> {
        let lo = (y + 1).max(YEAR.min as i32);
        (lo..=YEAR.max as i32).find(|&c| self.has_year(c))
    }

    /// cronsim's `match_day`: Debian cron's AND/OR of the two day fields.
    pub(crate) fn match_day(&self, d: NaiveDate) -> bool {
        if self.flags & DAY_AND != 0 {
            self.match_dom(d) && self.match_dow(d)
        } else {
            self.match_dom(d) || self.match_dow(d)
        }
    }

    fn match_dom(&self, d: NaiveDate) -> bool {
        let day = d.day();
        if self.days >> day & 1 == 1 {
            return true;
        }
        if self.flags & LAST_WEEKDAY != 0 && day >= 26 && day == last_weekday(d.year(), d.month()) {
            return true;
        }
        if self.flags & LAST != 0 && day >= 28 && day == days_in_month(d.year(), d.month()) {
            return true;
        }
        if self.weekday_near != 0 {
            let lo = day.saturating_sub(2).max(1);
            for n in lo..=(day + 2).min(31) {
                if self.weekday_near >> n & 1 == 1 && nearest_weekday(d.year(), d.month(), n) == Some(day) {
                    return true;
                }
            }
        }
        false
    }

    fn match_dow(&self, d: NaiveDate) -> bool {
        let wd = d.weekday().num_days_from_sunday();
        if self.dows >> wd & 1 == 1 {
            return true;
        }
        if self.dow_last >> wd & 1 == 1 && d.day() + 7 > days_in_month(d.year(), d.month()) {
            return true;
        }
        let idx = d.day().div_ceil(7);
        self.dow_nth >> ((idx - 1) * 7 + wd) & 1 == 1
    }
}

pub(crate) fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn weekday(y: i32, m: u32, d: u32) -> Option<u32> {
    NaiveDate::from_ymd_opt(y, m, d).map(|x| x.weekday().num_days_from_sunday())
}

/// cronsim's `last_weekday`: the last Monday-Friday of the month.
fn last_weekday(y: i32, m: u32) -> u32 {
    let last = days_in_month(y, m);
    match weekday(y, m, last) {
        Some(0) => last - 2,
        Some(6) => last - 1,
        _ => last,
    }
}

/// Quartz `NW`: the Monday-Friday nearest to day `n`, never leaving the
/// month (`1W` on a Saturday is Monday the 3rd; `31W` on a Sunday is Friday
/// the 29th). `None` when the month has no day `n`.
fn nearest_weekday(y: i32, m: u32, n: u32) -> Option<u32> {
    let len = days_in_month(y, m);
    if n > len {
        return None;
    }
    Some(match weekday(y, m, n)? {
        6 if n == 1 => 3,
        6 => n - 1,
        0 if n == len => n - 2,
        0 => n + 1,
        _ => n,
    })
}
