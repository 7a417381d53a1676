//! RFC 3339 times without a date crate (keeps jobs small): the host sends
//! `scheduled_at` as RFC 3339 UTC, and run records use millisecond precision.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, from the host's wall clock.
pub fn now_millis() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The current time as RFC 3339 UTC with milliseconds: `2026-11-21T19:30:00.123Z`.
pub fn now_rfc3339() -> String {
    format_rfc3339(now_millis())
}

/// Formats milliseconds since the epoch as RFC 3339 UTC with milliseconds.
pub fn format_rfc3339(unix_millis: i64) -> String {
    let secs = unix_millis.div_euclid(1000);
    let ms = unix_millis.rem_euclid(1000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", sod / 3600, sod / 60 % 60, sod % 60)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` into milliseconds since the epoch
/// (digits past milliseconds are dropped). None if the text is not of that form.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = text.get(from..to)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &frac[..digits.min(3)]);
        millis = padded.parse::<i64>().ok()?;
        rest = &frac[digits..];
    }
    let offset_secs = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            sign * (num_in(rest, 1, 3)? * 3600 + num_in(rest, 4, 6)? * 60)
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs * 1000 + millis)
}

fn num_in(s: &str, from: usize, to: usize) -> Option<i64> {
    let part = s.get(from..to)?;
    part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_round_trip() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-11-21T19:30:00Z"), Some(1_795_289_400_000));
        assert_eq!(parse_rfc3339("2026-11-21T19:30:00.25Z"), Some(1_795_289_400_250));
        assert_eq!(parse_rfc3339("2026-11-21T20:30:00+01:00"), Some(1_795_289_400_000));
        assert_eq!(format_rfc3339(1_795_289_400_250), "2026-11-21T19:30:00.250Z");
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59.999Z");
        for ms in [0, 951_782_400_000, 4_102_444_800_123, -86_400_000] {
            assert_eq!(parse_rfc3339(&format_rfc3339(ms)), Some(ms));
        }
    }

    #[test]
    fn refuses_other_text() {
        for bad in ["", "2026-11-21", "2026-13-01T00:00:00Z", "2026-11-21T19:30:00", "x026-11-21T19:30:00Z"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
