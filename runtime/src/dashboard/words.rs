//! A schedule in words for the jobs table: the common shapes ("every 5 minutes", "at
//! 02:30 on Mon-Fri"); anything else is shown as written, which is never wrong.

use crate::spec::on::{OnMessage, describe_triggers};

// Day 7 (Sunday again) is left out: `0-7` would read "Sun-Sun".
const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// What starts a job in words: its schedule, its `after` and its `on`.
pub fn describe_job(expr: &str, after: &[crate::spec::after::After], on: Option<&OnMessage>) -> String {
    let triggers = describe_triggers(after, on);
    match (expr.trim().is_empty(), triggers.is_empty()) {
        (true, _) => triggers,
        (false, true) => describe(expr),
        (false, false) => format!("{}; and {triggers}", describe(expr)),
    }
}

pub fn describe(expr: &str) -> String {
    let text = expr.trim();
    if let Some(rest) = text.strip_prefix('@') {
        let (word, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        return match word.to_ascii_lowercase().as_str() {
            "every" => format!("every {}", arg.trim()),
            "at" => format!("once, at {}", arg.trim()),
            "hourly" => "every hour".into(),
            "daily" | "midnight" => "every day at 00:00".into(),
            "weekly" => "every Sun at 00:00".into(),
            "monthly" => "on day 1 of every month at 00:00".into(),
            "yearly" | "annually" => "every year on Jan 1 at 00:00".into(),
            _ => text.into(),
        };
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (sec, rest) = match fields.len() {
        5 => ("0", &fields[..]),
        6 => (fields[0], &fields[1..]),
        _ => return text.into(),
    };
    cron(sec, rest[0], rest[1], rest[2], rest[3], rest[4]).unwrap_or_else(|| text.into())
}

fn cron(sec: &str, min: &str, hour: &str, dom: &str, month: &str, dow: &str) -> Option<String> {
    let any = |f: &str| f == "*" || f == "?";
    let days = days(dom, month, dow)?;
    // The time, and whether it is a time of day (then "every day" goes before it).
    let (time, of_day) = match (number(sec), number(min), number(hour)) {
        (_, _, _) if any(sec) && any(min) && any(hour) => ("every second".to_string(), false),
        (None, _, _) if any(min) && any(hour) => (format!("every {} seconds", step(sec, 60)?), false),
        (Some(0), None, _) if any(min) && any(hour) => ("every minute".to_string(), false),
        (Some(0), None, _) if any(hour) => (format!("every {} minutes", step(min, 60)?), false),
        (Some(0), Some(m), None) if any(hour) => (format!("every hour at minute {m}"), false),
        (Some(0), Some(m), None) => (format!("at minute {m} of every {} hours", step(hour, 24)?), false),
        (Some(s), Some(m), Some(h)) if h < 24 && m < 60 && s < 60 => match s {
            0 => (format!("at {h:02}:{m:02}"), true),
            _ => (format!("at {h:02}:{m:02}:{s:02}"), true),
        },
        _ => return None,
    };
    Some(match (days.as_str(), of_day) {
        ("", true) => format!("every day {time}"),
        ("", false) => time,
        (days, _) => format!("{time} {days}"),
    })
}

/// The day part: "" (every day), "on Mon-Fri", "on day 15 of every month", "in Jan".
fn days(dom: &str, month: &str, dow: &str) -> Option<String> {
    let any = |f: &str| f == "*" || f == "?";
    let mut parts = Vec::new();
    match (any(dom), any(dow)) {
        (true, true) => {}
        (false, true) => parts.push(format!("on day {} of the month", number(dom)?)),
        (true, false) => parts.push(format!("on {}", list(dow, &DAYS)?)),
        (false, false) => return None,
    }
    if !any(month) {
        // Months count from 1.
        parts.push(format!("in {}", list_with(month, |n| MONTHS.get(n.checked_sub(1)?).copied())?));
    }
    Some(parts.join(" "))
}

fn number(field: &str) -> Option<u32> {
    field.parse().ok()
}

/// `*/n` as n, when n divides the field's `range` evenly: `*/45` minutes fires at :00
/// and :45, which "every 45 minutes" would misstate.
fn step(field: &str, range: u32) -> Option<u32> {
    field.strip_prefix("*/").and_then(number).filter(|n| *n > 0 && *n < range && range % n == 0)
}

/// A list of values and ranges of numbers, named from `names` (index = number).
fn list(field: &str, names: &'static [&'static str]) -> Option<String> {
    list_with(field, |n| names.get(n).copied())
}

fn list_with(field: &str, name: impl Fn(usize) -> Option<&'static str>) -> Option<String> {
    let item = |part: &str| -> Option<String> {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                (a < b).then_some(())?;
                Some(format!("{}-{}", name(a)?, name(b)?))
            }
            None => Some(name(part.parse().ok()?)?.to_string()),
        }
    };
    field.split(',').map(item).collect::<Option<Vec<_>>>().map(|v| v.join(","))
}

#[cfg(test)]
mod tests {
    use super::{describe, describe_job};

    #[test]
    fn a_job_started_by_others_says_after_whom() {
        use crate::spec::after::{After, AfterOn};
        use crate::spec::on::OnMessage;
        let after = [
            After { job: "extract".into(), on: AfterOn::Succeeded },
            After { job: "audit".into(), on: AfterOn::Finished },
        ];
        let on = OnMessage { subject: "orders.*".into(), concurrency: 1, redeliver: 3 };
        let cases = [
            ("", &after[..], None, "after extract succeeded, audit finished"),
            ("@hourly", &after[..1], None, "every hour; and after extract succeeded"),
            ("@hourly", &[][..], None, "every hour"),
            ("", &[][..], Some(&on), "per message on orders.*"),
            (
                "@daily",
                &after[..1],
                Some(&on),
                "every day at 00:00; and after extract succeeded; per message on orders.*",
            ),
        ];
        for (expr, after, on, words) in cases {
            assert_eq!(describe_job(expr, after, on), words, "{expr:?}");
        }
    }

    #[test]
    fn common_schedules_in_words_and_the_rest_as_written() {
        let cases = [
            ("* * * * * *", "every second"),
            ("*/10 * * * * *", "every 10 seconds"),
            ("* * * * *", "every minute"),
            ("*/5 * * * *", "every 5 minutes"),
            ("7 * * * *", "every hour at minute 7"),
            ("0 */6 * * *", "at minute 0 of every 6 hours"),
            ("30 2 * * *", "every day at 02:30"),
            ("15 30 2 * * *", "every day at 02:30:15"),
            ("0 9 * * 1-5", "at 09:00 on Mon-Fri"),
            ("0 9 * * 0,6", "at 09:00 on Sun,Sat"),
            ("0 0 15 * *", "at 00:00 on day 15 of the month"),
            ("0 0 1 1 *", "at 00:00 on day 1 of the month in Jan"),
            ("0 0 * 6-8 1", "at 00:00 on Mon in Jun-Aug"),
            ("@daily", "every day at 00:00"),
            ("@every 90s", "every 90s"),
            ("@at 2027-01-01T00:00:00Z", "once, at 2027-01-01T00:00:00Z"),
            // As written: shapes the words would get wrong.
            ("0 0 L * *", "0 0 L * *"),
            ("0 9 * * MON-FRI", "0 9 * * MON-FRI"),
            ("0 0 1 * 1", "0 0 1 * 1"),
            ("1-5 * * * *", "1-5 * * * *"),
            ("0 0 0 1 1 * 2030", "0 0 0 1 1 * 2030"),
            ("0 0 * 13 *", "0 0 * 13 *"),
            ("*/45 * * * *", "*/45 * * * *"),
            ("0 */5 * * *", "0 */5 * * *"),
            ("*/90 * * * * *", "*/90 * * * * *"),
            ("*/0 * * * *", "*/0 * * * *"),
            ("0 9 * * 0-7", "0 9 * * 0-7"),
            ("0 9 * * 7", "0 9 * * 7"),
            ("0 9 * * 5-1", "0 9 * * 5-1"),
            ("0 9 1-3 * *", "0 9 1-3 * *"),
        ];
        for (expr, words) in cases {
            assert_eq!(describe(expr), words, "{expr}");
        }
    }
}
