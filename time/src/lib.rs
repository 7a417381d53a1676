//! The time engine: schedule expressions and their next fire instants.
//!
//! What lives where, and why:
//!
//! * `lib.rs` (this file): the public API ([`Schedule`], [`ScheduleError`],
//!   [`parse_timezone`]), the macros (`@daily` ...), `@every` and `@at`.
//! * `fields.rs`: one cron field's text into a bitset plus its `L`, `W`, `#`
//!   items, with cronsim's syntax quirks.
//! * `cron.rs`: the compiled expression (`CronSpec`), cronsim's whole
//!   expression checks, and the day-of-month / day-of-week matcher.
//! * `hashed.rs`: Jenkins' `H` items, rewritten into plain values by a pinned hash
//!   of the job's name before the expression is parsed.
//! * `iter.rs`: the forward search, a port of cronsim 2.9's iterator, with
//!   jumps where they provably equal cronsim's tick loops.
//! * `wall.rs`: a plain wall-clock search, used only where cronsim would
//!   loop forever (and as a cross-check in the unit tests).
//! * `dst.rs`: a job's DST choice ([`Dst`]) and the one point of the search it
//!   decides: how a fixed time in a skipped or repeated hour becomes instants.
//! * `zone.rs`: wall-clock/UTC conversion with Python `zoneinfo` semantics
//!   (`fold`, imaginary times) on top of chrono-tz.
//!
//! We implement rather than use the `cron` or `croner` crates because the
//! contract (docs/architecture.md) is "fire times equal cronsim's for every expression
//! both accept", including Debian cron's DST behaviour; that needs cronsim's
//! exact algorithm, quirks included.
//!
//! # Grammar
//!
//! 5 fields `minute hour day-of-month month day-of-week`, 6 (`second` first)
//! or 7 (`second` first, `year` 1970-2199 last). Each field: `*`, values,
//! ranges `a-b`, steps `*/n`, `a/n` (from `a` to the field maximum),
//! `a-b/n` (`a-a/n` is the single value `a`, cronsim 2.9), lists; `JAN`-`DEC` and `SUN`-`SAT` (any case); day-of-week 0-7
//! (0 and 7 are Sunday); day-of-month `L`, `LW`, `NW` (Quartz: the weekday
//! nearest day N, never leaving the month; no fire in months without day N);
//! day-of-week `5L`/`FRIL` (last Friday) and `FRI#3` (third Friday, 1-5);
//! `?` as a whole day field means `*`. If either day field starts with `*` or
//! `?`, both must match, otherwise either may (Debian cron).
//! `H` (Jenkins) in any field but the year: `H`, `H/n`, `H(a-b)`, `H(a-b)/n`, a
//! value (or a step's offset) fixed per job by a hash of its name and the field, so
//! jobs written alike spread and each keeps its slot: [`Schedule::parse_for`] resolves
//! them (`H H * * *` for `backup` is `25 1 * * *`), [`Schedule::parse`] refuses them.
//! Bare `H` ranges: second and minute 0-59, hour 0-23, day-of-month 1-28, month 1-12,
//! day-of-week 0-6. The slot, pinned for good, is `mix(fnv1a64(name, 0x00, field))
//! mod choices`, field being `second` ... `day-of-week` and `mix` splitmix64's
//! finalizer (`hashed.rs`); the resolved expression is what fires and what
//! [`Schedule::expr`] returns.
//! Macros: `@yearly`/`@annually` `0 0 1 1 *`, `@monthly` `0 0 1 * *`,
//! `@weekly` `0 0 * * 0`, `@daily`/`@midnight` `0 0 * * *`, `@hourly`
//! `0 * * * *` (so they get the 5-field DST handling); `@every <duration>`
//! (humantime, >= 1 s, whole milliseconds) fires at `UNIX_EPOCH + k * d`
//! whatever the zone and whatever the last run; `@at <RFC 3339>` fires once.
//!
//! # Semantics and deliberate choices
//!
//! * Cron fires are exactly cronsim 2.9's (`CronSim(expr, start)` with `start`
//!   an aware datetime in `ZoneInfo(tz)`), compared as UTC instants; the
//!   differential test `tests/vs_cronsim.rs` checks this. That includes
//!   Debian cron's DST rules: for 5-field expressions with fixed minute and
//!   hour, a time in a skipped hour fires once at the end of the gap and a
//!   time in a repeated hour fires once (first pass); wildcard hours and all
//!   6/7-field expressions follow the wall clock (a 6-field `0 30 2 * * *`
//!   does not fire on a day without 02:30; `*/30 * * * *` fires in both
//!   passes of a repeated hour).
//! * Python's `fold` semantics are reproduced in `zone.rs`: a skipped wall
//!   time with fold=0 converts with the offset in force before the
//!   transition, taken from chrono-tz's `GapInfo` (exact, from the zone's
//!   table), falling back to the offset at the UTC instant `local - 15h` at
//!   the ends of the table.
//! * A job may choose otherwise for fixed times ([`Schedule::with_dst`]): [`Dst::Skip`]
//!   drops a time in a skipped hour, [`Dst::Twice`] fires a time in a repeated hour in
//!   both passes. "Fixed" is exactly the test above (5 fields, minute and hour not
//!   starting with `*`); the choice changes nothing else (`dst.rs`).
//! * `next_after` is strictly after `after`. cronsim itself can yield a fire
//!   at or before its start when the start is in the second pass of a
//!   repeated hour (it reads wall times with fold=0); we skip such fires by
//!   continuing cronsim's iteration, which is what Debian cron does too (it
//!   does not rerun jobs when the clock goes back).
//! * Around some DST changes cronsim never returns (its search state
//!   repeats, e.g. `27-46 59 3 * * *` in Pacific/Chatham from
//!   2027-04-03T13:55Z, see `wall.rs`). We detect the repeat and answer with
//!   the first instant whose wall time matches every field, instead of
//!   hanging or dropping the job.
//! * cronsim gives up when nothing matches within 50 years of a search's
//!   start; `next_after` goes on with the same iteration, up to the year
//!   field's last year (2199) or 401 years ahead without a year field (a
//!   Gregorian day pattern repeats every 400 years), so `0 0 0 1 JAN ? 2090`
//!   fires in 2090 from 2026, and `None` means "no fire ever again".
//!   [`Schedule::first_fire_after`] says why there is none (`NoFire`).
//!   Every loop of the search is bounded, whatever the expression and zone.
//! * chrono-tz's table ends in 2099; after that each zone keeps its last
//!   offset, while Python's zoneinfo keeps applying the DST rule (so a time
//!   in a DST gap, such as `*/10 2 * MAR SUN#5` in Europe/Berlin, first fires
//!   in 2104 here, found past cronsim's 50 years).
//! * Accepted by cronsim but refused here: `L/n` and `LW/n` (cronsim ignores
//!   the step), non-ASCII letters that Python upper-cases to ASCII ones.
//!   Accepted here but not by cronsim: `?`, `NW`, `FRIL`, 7 fields, macros.
//! * cronsim's refusal of a day-of-month that no selected month has when
//!   both day fields must match (`0 0 30 2 *`) is ported, counting `NW` too.

mod cron;
mod dst;
mod fields;
mod hashed;
mod iter;
#[cfg(test)]
mod tests;
mod wall;
mod zone;

use std::borrow::Cow;

use chrono::{DateTime, Datelike, Utc};
pub use chrono_tz::Tz;
pub use dst::Dst;

use cron::CronSpec;

/// A parsed schedule expression.
#[derive(Clone, Debug)]
pub struct Schedule {
    expr: Box<str>,
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    Cron(Box<CronSpec>),
    /// Period in milliseconds (>= 1000).
    Every(u64),
    At(DateTime<Utc>),
    /// No fires: a job started only by other jobs (`after`).
    Never,
}

/// Why a schedule has no fire after an instant ([`Schedule::first_fire_after`]).
/// Displays as one line without the expression: `never fires (...)` or
/// `has no fire after <instant> (...)`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoFire {
    /// No instant ever matches, e.g. `0 0 0 29 FEB ? 2100` (2100 is not a leap year).
    #[error("never fires ({why})")]
    Never { why: String },
    /// Fires were possible before `after`, none after it, e.g. an `@at` in the past or
    /// a year field whose years are over.
    #[error("has no fire after {} ({why})", .after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))]
    NoneAfter { after: DateTime<Utc>, why: String },
}

/// Why an expression or time zone was refused. `field` names the part
/// (`minute`, `day-of-month`, ..., `expression`, `timezone`, `@every`, `@at`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}{} {reason}", if is_cron_field(.field) { " field" } else { "" })]
pub struct ScheduleError {
    pub field: &'static str,
    pub reason: String,
}

fn is_cron_field(f: &str) -> bool {
    matches!(f, "second" | "minute" | "hour" | "day-of-month" | "month" | "day-of-week" | "year")
}

fn expr_err(reason: String) -> ScheduleError {
    ScheduleError { field: "expression", reason }
}

const MACROS: &str = "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, \
                      @every <duration> or @at <RFC 3339 time>";

impl Schedule {
    /// Parses a cron expression, a macro, `@every <duration>` or `@at <time>`. An `H`
    /// item is refused: its slot comes from a job's name ([`Schedule::parse_for`]).
    pub fn parse(expr: &str) -> Result<Schedule, ScheduleError> {
        Self::parse_resolved(hashed::resolve(expr, None)?)
    }

    /// Parses job `job`'s expression, its `H` items resolved to the job's slots
    /// ([`Schedule::resolve`]); [`Schedule::expr`] is then the resolved text.
    pub fn parse_for(expr: &str, job: &str) -> Result<Schedule, ScheduleError> {
        Self::parse_resolved(hashed::resolve(expr, Some(job))?)
    }

    /// `expr` with its `H` items resolved for job `job` (borrowed as it is without any),
    /// or why one is refused: the text a cache of parsed schedules is keyed by, since
    /// jobs of different names give `H * * * *` different slots. The slot formula is
    /// pinned (the crate's "Grammar" section).
    pub fn resolve<'a>(expr: &'a str, job: &str) -> Result<Cow<'a, str>, ScheduleError> {
        hashed::resolve(expr, Some(job))
    }

    /// Parses an expression without `H` items.
    fn parse_resolved(expr: Cow<'_, str>) -> Result<Schedule, ScheduleError> {
        let text = expr.trim();
        let kind = if text.is_empty() {
            return Err(expr_err(format!(
                "is empty; expected 5-7 cron fields like \"*/5 * * * *\" or one of {MACROS}"
            )));
        } else if let Some(rest) = text.strip_prefix('@') {
            let (word, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let arg = arg.trim();
            let word = word.to_ascii_lowercase();
            let fixed = match word.as_str() {
                "yearly" | "annually" => Some("0 0 1 1 *"),
                "monthly" => Some("0 0 1 * *"),
                "weekly" => Some("0 0 * * 0"),
                "daily" | "midnight" => Some("0 0 * * *"),
                "hourly" => Some("0 * * * *"),
                _ => None,
            };
            match (fixed, word.as_str()) {
                (Some(_), _) if !arg.is_empty() => {
                    return Err(expr_err(format!("{text:?}: @{word} takes no argument")));
                }
                (Some(cron), _) => Kind::Cron(Box::new(CronSpec::parse(&split(cron))?)),
                (None, "every") => Kind::Every(parse_every(arg)?),
                (None, "at") => Kind::At(parse_at(arg)?),
                _ => {
                    return Err(expr_err(format!("{text:?}: unknown macro; use one of {MACROS}")));
                }
            }
        } else {
            Kind::Cron(Box::new(CronSpec::parse(&split(text))?))
        };
        Ok(Schedule { expr: expr.into_owned().into_boxed_str(), kind })
    }

    /// The schedule with DST choice `dst` for its fixed times ([`Dst`]); `parse` gives
    /// [`Dst::Debian`]. Kept only where it can change a fire (a cron expression); `@every`,
    /// `@at` and never-firing schedules are unaffected by any choice.
    #[must_use]
    pub fn with_dst(mut self, dst: Dst) -> Schedule {
        if let Kind::Cron(spec) = &mut self.kind {
            spec.dst = dst;
        }
        self
    }

    /// The DST choice it fires by ([`Schedule::with_dst`]); [`Dst::Debian`] for schedules
    /// no choice affects.
    pub fn dst(&self) -> Dst {
        match &self.kind {
            Kind::Cron(spec) => spec.dst,
            _ => Dst::Debian,
        }
    }

    /// A schedule that never fires (its expression is empty): for jobs that only other
    /// jobs' runs start. `parse` refuses the empty expression; this is asked for by name.
    pub fn never() -> Schedule {
        Schedule { expr: "".into(), kind: Kind::Never }
    }

    /// Whether the schedule ever fires (false only for `never`).
    pub fn fires(&self) -> bool {
        !matches!(self.kind, Kind::Never)
    }

    /// First fire strictly after `after`, evaluated in `tz` (ignored by
    /// `@every` and `@at`). Cron fires are whole seconds, `@every` fires
    /// whole milliseconds. `None` when it never fires again.
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Cron(spec) => iter::next_after(spec, after, tz),
            Kind::Every(period) => {
                let period = i64::try_from(*period).ok()?;
                let k = after.timestamp_millis().div_euclid(period).checked_add(1)?;
                DateTime::from_timestamp_millis(k.checked_mul(period)?)
            }
            Kind::At(at) => (*at > after).then_some(*at),
            Kind::Never => None,
        }
    }

    /// First fire strictly after `after` in `tz`, or why there is none: whether it
    /// never fires at all or only no more, and what in the expression makes it so.
    /// Cron fires are searched up to the year field's last year (2199), or 401 years
    /// ahead without one, past which a Gregorian day pattern only repeats.
    pub fn first_fire_after(&self, after: DateTime<Utc>, tz: Tz) -> Result<DateTime<Utc>, NoFire> {
        if let Some(fire) = self.next_after(after, tz) {
            return Ok(fire);
        }
        let none_after = |why: String| NoFire::NoneAfter { after, why };
        match &self.kind {
            Kind::Never => Err(NoFire::Never {
                why: "no schedule: it runs only when triggered, after another job or per message".into(),
            }),
            Kind::At(at) => Err(none_after(format!(
                "@at {} is not after it",
                at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            ))),
            Kind::Every(_) => Err(none_after("past the last instant the engine represents".into())),
            Kind::Cron(spec) => Err(explain_no_fire(spec, after, tz)),
        }
    }

    /// The fires after `after`, in order (at most one for `@at`).
    pub fn fires_after(&self, after: DateTime<Utc>, tz: Tz) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after, tz), move |t| self.next_after(*t, tz))
    }

    /// The instant of an `@at` schedule (`None` for every other kind).
    pub fn once(&self) -> Option<DateTime<Utc>> {
        match self.kind {
            Kind::At(at) => Some(at),
            _ => None,
        }
    }

    /// The text it fires by: as written, but with `H` items resolved ([`Schedule::parse_for`]).
    pub fn expr(&self) -> &str {
        &self.expr
    }
}

/// Why a cron expression has no fire after `after` (`next_after` said none).
fn explain_no_fire(spec: &CronSpec, after: DateTime<Utc>, tz: Tz) -> NoFire {
    let Some(years) = spec.year_list() else {
        // Without a year field the search covered a whole Gregorian cycle.
        return NoFire::Never { why: format!("no date and time matches all its fields in {tz}") };
    };
    let (Some(&first), Some(&last)) = (years.first(), years.last()) else {
        return NoFire::Never { why: "its year field allows no year".into() };
    };
    let shown = show_years(&years);
    let ever = chrono::NaiveDate::from_ymd_opt(first, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .and_then(|d| d.and_utc().checked_sub_signed(chrono::TimeDelta::days(2)))
        .and_then(|from| iter::next_after(spec, from, tz));
    let leap = |y: &i32| cron::days_in_month(*y, 2) == 29;
    let feb_29 = |years: &[i32], shown: &str| match years.len() {
        1 => format!("29 February is only in leap years and {shown} is not one"),
        _ => format!("29 February is only in leap years and none of {shown} is one"),
    };
    if ever.is_none() {
        let why = if spec.only_feb_29() && !years.iter().any(leap) {
            feb_29(&years, &shown)
        } else {
            format!("no date and time in {shown} matches all its fields in {tz}")
        };
        return NoFire::Never { why };
    }
    let this_year = after.with_timezone(&tz).year();
    let later: Vec<i32> = years.iter().copied().filter(|y| *y > this_year).collect();
    let why = if later.is_empty() {
        format!("the last year it allows is {last}")
    } else if spec.only_feb_29() && !later.iter().any(leap) {
        feb_29(&later, &show_years(&later))
    } else {
        format!("no date and time after it in {} matches all its fields in {tz}", show_years(&later))
    };
    NoFire::NoneAfter { after, why }
}

/// `2100`, `2100, 2104`, or `2100-2199 (25 years)`.
fn show_years(years: &[i32]) -> String {
    match years {
        [] => "no year".into(),
        [a] => a.to_string(),
        [a, b] => format!("{a} and {b}"),
        [a, b, c] => format!("{a}, {b} and {c}"),
        [first, .., last] => format!("{first}-{last} ({} years)", years.len()),
    }
}

fn split(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

fn parse_every(arg: &str) -> Result<u64, ScheduleError> {
    let err = |msg: String| ScheduleError { field: "@every", reason: format!("{arg:?}: {msg}") };
    if arg.is_empty() {
        return Err(err("missing duration; write e.g. @every 30s, @every 5m or @every 1h30m".into()));
    }
    let d = humantime::parse_duration(arg)
        .map_err(|e| err(format!("{e}; write a duration like 30s, 5m, 1h30m or 1500ms")))?;
    if d.as_secs() < 1 {
        return Err(err("must be at least 1s".into()));
    }
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(err("must be a whole number of milliseconds".into()));
    }
    u64::try_from(d.as_millis()).ok().filter(|ms| *ms <= i64::MAX as u64).ok_or_else(|| err("is too long".into()))
}

fn parse_at(arg: &str) -> Result<DateTime<Utc>, ScheduleError> {
    DateTime::parse_from_rfc3339(arg).map(|t| t.with_timezone(&Utc)).map_err(|e| ScheduleError {
        field: "@at",
        reason: format!("{arg:?}: {e}; write an RFC 3339 time like 2030-01-31T09:00:00Z"),
    })
}

/// Parses an IANA time zone name such as `Europe/Berlin`.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>().map_err(|_| ScheduleError {
        field: "timezone",
        reason: format!("{name:?}: unknown time zone; use an IANA name like Europe/Berlin or UTC"),
    })
}
