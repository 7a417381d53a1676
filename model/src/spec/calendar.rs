//! Named calendars of dates a job's fires skip (`exclude = ["NAME", ...]`), as Quartz's
//! calendars and Temporal's excluded calendars: "every weekday at 06:00 except public
//! holidays". A calendar is a set of whole days, kept as sorted inclusive ranges; a fire is
//! excluded when its local date, in the job's zone, is one of them.
//!
//! Written from a plain list (a date or `FROM..TO` per line, `#` comments) or an
//! iCalendar file of all-day events (RFC 5545: `DTSTART;VALUE=DATE`, `DTEND` exclusive).
//! Anything else in an iCalendar file (an event at a time of day, a repeat rule) is
//! refused, naming its line: a calendar holds the dates it shows, nothing computed.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The most date ranges a calendar holds (a few hundred holidays a century fit well).
pub const MAX_RANGES: usize = 10_000;
/// The most calendars one job excludes.
pub const MAX_EXCLUDE: usize = 16;

/// A calendar as stored (JSON in `<ns>_calendars`, key = its name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calendar {
    pub name: String,
    /// Sorted, disjoint, inclusive `[from, to]` ranges.
    pub dates: Vec<(NaiveDate, NaiveDate)>,
}

impl Calendar {
    /// Parses `text` (a plain list, or iCalendar when it begins `BEGIN:VCALENDAR`),
    /// refusing with one line naming `origin`'s line at fault.
    pub fn parse(name: &str, text: &str, origin: &str) -> Result<Calendar, Error> {
        validate_calendar_name(name)?;
        let ranges = match text.trim_start().starts_with("BEGIN:VCALENDAR") {
            true => ical_ranges(text, origin)?,
            false => plain_ranges(text, origin)?,
        };
        if ranges.is_empty() {
            return Err(invalid(format!("{origin}: no dates in it: give a date (2026-12-25) or a range per line")));
        }
        let dates = merged(ranges);
        if dates.len() > MAX_RANGES {
            return Err(invalid(format!("{origin}: {} ranges of dates, over {MAX_RANGES}: split it", dates.len())));
        }
        Ok(Calendar { name: name.to_string(), dates })
    }

    /// Whether `date` is one of the calendar's days.
    pub fn contains(&self, date: NaiveDate) -> bool {
        let at = self.dates.partition_point(|(_, to)| *to < date);
        self.dates.get(at).is_some_and(|(from, _)| *from <= date)
    }

    /// How many days it holds.
    pub fn days(&self) -> i64 {
        self.dates.iter().map(|(from, to)| (*to - *from).num_days() + 1).sum()
    }

    /// Parses a stored calendar, checking what `parse` guarantees.
    pub fn from_json(bytes: &[u8]) -> Result<Calendar, Error> {
        let calendar: Calendar =
            serde_json::from_slice(bytes).map_err(|e| invalid(format!("a stored calendar is not one: {e}")))?;
        validate_calendar_name(&calendar.name)?;
        let sorted = calendar.dates.windows(2).all(|w| w[0].1 < w[1].0) && calendar.dates.iter().all(|(f, t)| f <= t);
        if !sorted || calendar.dates.len() > MAX_RANGES {
            return Err(invalid(format!("calendar {}: its stored dates are not sorted ranges", calendar.name)));
        }
        Ok(calendar)
    }
}

/// Checks a calendar name: 1 to 64 of `A-Z a-z 0-9 _ -` (a KV key, one subject token).
pub fn validate_calendar_name(name: &str) -> Result<(), Error> {
    let ok =
        (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        return Ok(());
    }
    Err(Error::invalid(
        "calendar",
        format!("calendar name {name:?}: give 1 to 64 of A-Z a-z 0-9 _ -, e.g. holidays-de"),
    ))
}

/// Checks a spec's `exclude`: valid names, none twice, at most `MAX_EXCLUDE`.
pub fn validate_exclude(exclude: &[String]) -> Result<(), Error> {
    if exclude.len() > MAX_EXCLUDE {
        return Err(Error::invalid(
            "exclude",
            format!("exclude names {} calendars; at most {MAX_EXCLUDE}", exclude.len()),
        ));
    }
    for (i, name) in exclude.iter().enumerate() {
        validate_calendar_name(name).map_err(|e| Error::invalid("exclude", format!("exclude: {e}")))?;
        if exclude[..i].contains(name) {
            return Err(Error::invalid("exclude", format!("exclude names calendar {name:?} twice")));
        }
    }
    Ok(())
}

fn invalid(message: String) -> Error {
    Error::invalid("calendar", message)
}

/// A date between 1970 and 2199 (the schedule grammar's years), as `YYYY-MM-DD` or, in
/// iCalendar, `YYYYMMDD`.
fn date(text: &str, format: &str) -> Option<NaiveDate> {
    let date = NaiveDate::parse_from_str(text.trim(), format).ok()?;
    (1970..=2199).contains(&chrono::Datelike::year(&date)).then_some(date)
}

fn plain_ranges(text: &str, origin: &str) -> Result<Vec<(NaiveDate, NaiveDate)>, Error> {
    let mut ranges = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |what: &str| invalid(format!("{origin}:{}: {line:?} {what}", i + 1));
        let (from, to) = line.split_once("..").unwrap_or((line, line));
        let (from, to) = match (date(from, "%Y-%m-%d"), date(to, "%Y-%m-%d")) {
            (Some(from), Some(to)) => (from, to),
            _ => return Err(at("is not a date (2026-12-25) or a range (2026-12-24..2026-12-26) of 1970 to 2199")),
        };
        if from > to {
            return Err(at("ends before it starts: give the earlier date first"));
        }
        ranges.push((from, to));
    }
    Ok(ranges)
}

/// The all-day events of an iCalendar text as inclusive ranges.
fn ical_ranges(text: &str, origin: &str) -> Result<Vec<(NaiveDate, NaiveDate)>, Error> {
    let mut ranges = Vec::new();
    let (mut start, mut end, mut in_event) = (None, None, false);
    for (number, line) in unfolded(text) {
        let at = |what: &str| invalid(format!("{origin}:{number}: {what}"));
        let (key, value) = line.split_once(':').unwrap_or((line.as_str(), ""));
        let (property, params) = key.split_once(';').unwrap_or((key, ""));
        match property.to_ascii_uppercase().as_str() {
            "BEGIN" if value.eq_ignore_ascii_case("VEVENT") => (start, end, in_event) = (None, None, true),
            "END" if value.eq_ignore_ascii_case("VEVENT") => {
                let from: NaiveDate = start.take().ok_or_else(|| at("an event without DTSTART"))?;
                // DTEND of an all-day event is the day after its last (RFC 5545 3.6.1).
                let to = match end.take() {
                    Some(end) if end > from => end - chrono::Duration::days(1),
                    Some(_) => return Err(at("an event whose DTEND is not after its DTSTART")),
                    None => from,
                };
                ranges.push((from, to));
                in_event = false;
            }
            "DTSTART" | "DTEND" if in_event => {
                let all_day = params.to_ascii_uppercase().contains("VALUE=DATE") || value.trim().len() == 8;
                let day = date(value, "%Y%m%d").filter(|_| all_day).ok_or_else(|| {
                    at(&format!(
                        "{property}:{value} is not a date: only all-day events (VALUE=DATE) are days to exclude"
                    ))
                })?;
                if property.eq_ignore_ascii_case("DTSTART") { start = Some(day) } else { end = Some(day) }
            }
            "RRULE" | "RDATE" | "EXDATE" if in_event => {
                return Err(at(&format!(
                    "{property}: repeating events are not read; export the calendar with each occurrence"
                )));
            }
            _ => {}
        }
        if ranges.len() > MAX_RANGES {
            return Err(invalid(format!("{origin}: over {MAX_RANGES} events: split it")));
        }
    }
    if in_event {
        return Err(invalid(format!("{origin}: an event is not ended (END:VEVENT)")));
    }
    Ok(ranges)
}

/// Lines with folding undone (a line starting with a space or tab continues the one
/// before, RFC 5545 3.1), each with the number of its first line.
fn unfolded(text: &str) -> Vec<(usize, String)> {
    let mut lines: Vec<(usize, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match (line.strip_prefix([' ', '\t']), lines.last_mut()) {
            (Some(rest), Some((_, last))) => last.push_str(rest),
            _ => lines.push((i + 1, line.trim_end().to_string())),
        }
    }
    lines
}

/// Sorted, with overlapping and adjacent ranges joined.
fn merged(mut ranges: Vec<(NaiveDate, NaiveDate)>) -> Vec<(NaiveDate, NaiveDate)> {
    ranges.sort();
    let mut out: Vec<(NaiveDate, NaiveDate)> = Vec::with_capacity(ranges.len());
    for (from, to) in ranges {
        match out.last_mut() {
            Some((_, last)) if from <= *last + chrono::Duration::days(1) => *last = (*last).max(to),
            _ => out.push((from, to)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    const ICS: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nSUMMARY:Christmas\r\n\
        DTSTART;VALUE=DATE:20261225\r\nDTEND;VALUE=DATE:20261227\r\nEND:VEVENT\r\nBEGIN:VEVENT\r\n\
        SUMMARY:New Year's \r\n Day, folded\r\nDTSTART;VALUE=DATE:20270101\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";

    #[test]
    fn plain_lists_and_icalendar_all_day_events_give_the_days_they_show() {
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, i64);
        let cases: [Case; 3] = [
            (
                "2026-12-25\n# a comment\n\n2026-12-24..2026-12-26  # Christmas\n2027-01-01\n",
                vec![("2026-12-24", "2026-12-26"), ("2027-01-01", "2027-01-01")],
                4,
            ),
            ("2026-05-01\n2026-05-02\n", vec![("2026-05-01", "2026-05-02")], 2),
            (ICS, vec![("2026-12-25", "2026-12-26"), ("2027-01-01", "2027-01-01")], 3),
        ];
        for (text, ranges, days) in cases {
            let calendar = Calendar::parse("holidays", text, "f").unwrap();
            let want: Vec<_> = ranges.iter().map(|(a, b)| (d(a), d(b))).collect();
            assert_eq!((calendar.dates.clone(), calendar.days()), (want, days), "{text}");
            let json = serde_json::to_vec(&calendar).unwrap();
            assert_eq!(Calendar::from_json(&json).unwrap(), calendar);
        }
        let calendar = Calendar::parse("holidays", ICS, "f").unwrap();
        let inside = ["2026-12-25", "2026-12-26", "2027-01-01"];
        let outside = ["2026-12-24", "2026-12-27", "2026-12-31", "2027-01-02"];
        assert!(inside.iter().all(|s| calendar.contains(d(s))) && !outside.iter().any(|s| calendar.contains(d(s))));
    }

    #[test]
    fn bad_calendars_are_refused_in_one_line_naming_the_line() {
        let ics = |event: &str| format!("BEGIN:VCALENDAR\nBEGIN:VEVENT\n{event}\nEND:VEVENT\nEND:VCALENDAR\n");
        let cases = [
            ("2026-13-01\n".to_string(), "f:1: \"2026-13-01\" is not a date"),
            ("2026-12-25\nChristmas\n".to_string(), "f:2: \"Christmas\" is not a date"),
            ("2026-12-26..2026-12-24\n".to_string(), "ends before it starts"),
            ("1969-12-31\n".to_string(), "of 1970 to 2199"),
            ("# nothing\n".to_string(), "no dates in it"),
            (ics("DTSTART:20261225T100000Z"), "f:3: DTSTART:20261225T100000Z is not a date: only all-day events"),
            (ics("DTSTART;VALUE=DATE:20261225\nRRULE:FREQ=YEARLY"), "f:4: RRULE: repeating events are not read"),
            (ics("DTSTART;VALUE=DATE:20261225\nDTEND;VALUE=DATE:20261225"), "DTEND is not after its DTSTART"),
            (ics("SUMMARY:x"), "an event without DTSTART"),
            ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\n".to_string(), "an event is not ended"),
        ];
        for (text, expected) in cases {
            let err = Calendar::parse("holidays", &text, "f").unwrap_err().to_string();
            assert!(err.contains(expected) && !err.contains('\n'), "{text:?}: {err}");
        }
        let many: String = (0..MAX_RANGES + 1)
            .map(|i| format!("{}\n", d("2000-01-01") + chrono::Duration::days(2 * i as i64)))
            .collect();
        assert!(Calendar::parse("big", &many, "f").unwrap_err().to_string().contains("over 10000"));
        assert!(Calendar::parse("a.b", "2026-01-01", "f").unwrap_err().to_string().contains("calendar name"));
    }

    #[test]
    fn exclude_names_are_checked() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(validate_exclude(&names(&["holidays", "plant-shutdown"])).is_ok());
        assert!(validate_exclude(&names(&["holidays", "holidays"])).unwrap_err().to_string().contains("twice"));
        assert!(validate_exclude(&names(&["a>b"])).unwrap_err().to_string().contains("calendar name"));
        let seventeen: Vec<String> = (0..17).map(|i| format!("c{i}")).collect();
        assert!(validate_exclude(&seventeen).unwrap_err().to_string().contains("at most 16"));
    }
}
