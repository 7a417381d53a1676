//! Unit tests of the time engine. Expected instants were cross-checked with
//! cronsim 2.9 (cronsim 2.8 where they did not change); the exhaustive
//! comparison is `tests/vs_cronsim.rs`.

use chrono::{DateTime, Utc};

use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn tz(name: &str) -> Tz {
    parse_timezone(name).unwrap()
}

/// The next `n` fires as RFC 3339 UTC strings.
fn fires(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
    let s = Schedule::parse(expr).unwrap();
    s.fires_after(t(from), tz(zone))
        .take(n)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true).replace(".000Z", "Z"))
        .collect()
}

fn err(expr: &str) -> ScheduleError {
    Schedule::parse(expr).unwrap_err()
}

#[test]
fn steps_ranges_lists() {
    let from = "2026-01-01T10:07:00Z";
    assert_eq!(
        fires("*/15 * * * *", "UTC", from, 3),
        ["2026-01-01T10:15:00Z", "2026-01-01T10:30:00Z", "2026-01-01T10:45:00Z"]
    );
    assert_eq!(
        fires("5/20 10-11 * * *", "UTC", from, 4),
        ["2026-01-01T10:25:00Z", "2026-01-01T10:45:00Z", "2026-01-01T11:05:00Z", "2026-01-01T11:25:00Z"]
    );
    assert_eq!(
        fires("0 1-9/4,22 * * *", "UTC", from, 3),
        ["2026-01-01T22:00:00Z", "2026-01-02T01:00:00Z", "2026-01-02T05:00:00Z"]
    );
    assert_eq!(
        fires("*/20 * * * * *", "UTC", from, 3),
        ["2026-01-01T10:07:20Z", "2026-01-01T10:07:40Z", "2026-01-01T10:08:00Z"]
    );
}

#[test]
fn names_any_case_and_sunday_as_0_or_7() {
    let from = "2026-01-01T00:00:00Z";
    let named = fires("0 9 * jan,Jul Mon-fri", "UTC", from, 40);
    assert_eq!(named, fires("0 9 * 1,7 1-5", "UTC", from, 40));
    assert_eq!(named[0], "2026-01-01T09:00:00Z"); // a Thursday
    assert_eq!(fires("0 0 * * 0", "UTC", from, 5), fires("0 0 * * 7", "UTC", from, 5));
    assert_eq!(fires("0 0 * * sun", "UTC", from, 1), ["2026-01-04T00:00:00Z"]);
}

#[test]
fn last_day_last_weekday_last_friday_nth() {
    assert_eq!(fires("0 0 L * *", "UTC", "2024-02-01T00:00:00Z", 2), ["2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z"]);
    // May 31 2026 is a Sunday: the last weekday is Friday the 29th.
    assert_eq!(fires("0 0 LW * *", "UTC", "2026-05-01T00:00:00Z", 2), ["2026-05-29T00:00:00Z", "2026-06-30T00:00:00Z"]);
    let last_friday = ["2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z"];
    assert_eq!(fires("0 0 * * 5L", "UTC", "2026-01-01T00:00:00Z", 2), last_friday);
    assert_eq!(fires("0 0 * * FRIL", "UTC", "2026-01-01T00:00:00Z", 2), last_friday);
    assert_eq!(
        fires("0 0 * * fri#3", "UTC", "2026-01-01T00:00:00Z", 2),
        ["2026-01-16T00:00:00Z", "2026-02-20T00:00:00Z"]
    );
}

#[test]
fn nearest_weekday_w() {
    // Feb 15 2026 is a Sunday -> Monday 16th; Mar 15 is a Sunday too.
    assert_eq!(
        fires("0 0 15W * *", "UTC", "2026-02-01T00:00:00Z", 2),
        ["2026-02-16T00:00:00Z", "2026-03-16T00:00:00Z"]
    );
    // Aug 1 2026 is a Saturday: 1W never leaves the month -> Monday 3rd.
    assert_eq!(fires("0 0 1W * *", "UTC", "2026-07-15T00:00:00Z", 1), ["2026-08-03T00:00:00Z"]);
    // May 31 2026 is a Sunday -> Friday 29th; months without a 31st are skipped.
    assert_eq!(
        fires("0 0 31W * *", "UTC", "2026-04-01T00:00:00Z", 2),
        ["2026-05-29T00:00:00Z", "2026-07-31T00:00:00Z"]
    );
    // Refused like cronsim's `0 0 30 2 *` when no selected month has day N.
    assert_eq!(err("0 0 30W 2 *").field, "day-of-month");
}

#[test]
fn question_mark_and_day_field_or_and() {
    let from = "2026-02-01T00:00:00Z";
    assert_eq!(fires("0 12 ? * MON", "UTC", from, 5), fires("0 12 * * MON", "UTC", from, 5));
    assert_eq!(fires("0 12 1 * ?", "UTC", from, 3), fires("0 12 1 * *", "UTC", from, 3));
    // Neither field starts with `*`: either may match (the 13th or Fridays).
    assert_eq!(
        fires("0 0 13 * 5", "UTC", from, 3),
        ["2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"]
    );
    // Day-of-month starts with `*`: both must match (odd days that are Fridays).
    assert_eq!(fires("0 0 */2 * 5", "UTC", from, 2), ["2026-02-13T00:00:00Z", "2026-02-27T00:00:00Z"]);
}

#[test]
fn seven_fields_year() {
    let s = Schedule::parse("0 30 9 1 1 * 2027-2031/2").unwrap();
    let got: Vec<_> = s.fires_after(t("2025-06-01T00:00:00Z"), Tz::UTC).collect();
    assert_eq!(got, [t("2027-01-01T09:30:00Z"), t("2029-01-01T09:30:00Z"), t("2031-01-01T09:30:00Z")]);
    assert_eq!(Schedule::parse("0 0 0 * * * 2024").unwrap().next_after(t("2025-01-01T00:00:00Z"), Tz::UTC), None);
    assert_eq!(err("0 0 0 * * * 1969").field, "year");
}

#[test]
fn macros_are_their_five_field_forms() {
    let from = "2024-03-30T12:00:00Z";
    for (m, five) in [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ] {
        for zone in ["Europe/Berlin", "Australia/Lord_Howe", "UTC"] {
            assert_eq!(fires(m, zone, from, 5), fires(five, zone, from, 5), "{m} in {zone}");
        }
    }
    assert_eq!(fires("@DAILY", "Europe/Berlin", from, 2), ["2024-03-30T23:00:00Z", "2024-03-31T22:00:00Z"]);
    assert_eq!(Schedule::parse("@daily").unwrap().expr(), "@daily");
    assert_eq!(err("@daily 5").field, "expression");
}

#[test]
fn every_is_anchored_to_the_epoch() {
    let s = Schedule::parse("@every 7s").unwrap();
    let a: Vec<_> = s.fires_after(t("2026-01-01T00:00:00.123Z"), Tz::UTC).take(50).collect();
    let b: Vec<_> = s.fires_after(t("2026-01-01T00:01:03.999Z"), tz("Asia/Kolkata")).take(10).collect();
    assert!(a.iter().chain(&b).all(|f| f.timestamp_millis() % 7000 == 0));
    // Different starting points land on the same timeline.
    let pos = a.iter().position(|f| *f == b[0]).unwrap();
    assert_eq!(a[pos..pos + 10], b[..]);
    // Strictly after, also exactly on a fire.
    assert_eq!(s.next_after(b[0], Tz::UTC), Some(b[1]));
    let ms = Schedule::parse("@every 1500ms").unwrap();
    assert_eq!(ms.next_after(t("1970-01-01T00:00:02Z"), Tz::UTC), Some(t("1970-01-01T00:00:03Z")));
    assert_eq!(ms.next_after(t("1970-01-01T00:00:03Z"), Tz::UTC), Some(t("1970-01-01T00:00:04.500Z")));
    let long = Schedule::parse("@every 1h30m").unwrap();
    assert_eq!(long.next_after(t("2026-01-01T00:00:00Z"), Tz::UTC), Some(t("2026-01-01T01:30:00Z")));
}

#[test]
fn at_fires_once() {
    let s = Schedule::parse("@at 2030-01-31T10:00:00+01:00").unwrap();
    let at = t("2030-01-31T09:00:00Z");
    assert_eq!(s.next_after(t("2026-01-01T00:00:00Z"), tz("Europe/Berlin")), Some(at));
    assert_eq!(s.next_after(at, Tz::UTC), None);
    assert_eq!(s.fires_after(t("2026-01-01T00:00:00Z"), Tz::UTC).count(), 1);
}

#[test]
fn dst_fixed_time_in_spring_gap_fires_once_at_gap_end() {
    // Berlin 2024-03-31: 02:00 CET -> 03:00 CEST. 02:30 fires at 03:00 CEST.
    let got = fires("30 2 * * *", "Europe/Berlin", "2024-03-30T12:00:00Z", 3);
    assert_eq!(got, ["2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z", "2024-04-02T00:30:00Z"]);
    // New York 2024-03-10 (02:00 EST -> 03:00 EDT).
    let got = fires("0 2 * * *", "America/New_York", "2024-03-09T12:00:00Z", 2);
    assert_eq!(got, ["2024-03-10T07:00:00Z", "2024-03-11T06:00:00Z"]);
    // Six fields are not Debian cron: the skipped time does not fire.
    let got = fires("0 30 2 * * *", "Europe/Berlin", "2024-03-30T12:00:00Z", 1);
    assert_eq!(got, ["2024-04-01T00:30:00Z"]);
}

#[test]
fn dst_fixed_time_in_repeated_hour_fires_once() {
    // Berlin 2024-10-27: 03:00 CEST -> 02:00 CET; 02:30 CEST only.
    let got = fires("30 2 * * *", "Europe/Berlin", "2024-10-26T12:00:00Z", 2);
    assert_eq!(got, ["2024-10-27T00:30:00Z", "2024-10-28T01:30:00Z"]);
    // From inside the second pass (02:10 CET) cronsim would answer 02:30 CEST,
    // which is in the past; next_after is strictly after, like Debian cron.
    let got = fires("30 2 * * *", "Europe/Berlin", "2024-10-27T01:10:00Z", 1);
    assert_eq!(got, ["2024-10-28T01:30:00Z"]);
}

#[test]
fn dst_wildcard_hours_follow_the_wall_clock() {
    let got = fires("*/30 * * * *", "Europe/Berlin", "2024-10-26T23:50:00Z", 6);
    let both_passes = [
        "2024-10-27T00:00:00Z",
        "2024-10-27T00:30:00Z",
        "2024-10-27T01:00:00Z",
        "2024-10-27T01:30:00Z",
        "2024-10-27T02:00:00Z",
        "2024-10-27T02:30:00Z",
    ];
    assert_eq!(got, both_passes);
    let got = fires("*/30 * * * *", "Europe/Berlin", "2024-03-31T00:10:00Z", 3);
    assert_eq!(got, ["2024-03-31T00:30:00Z", "2024-03-31T01:00:00Z", "2024-03-31T01:30:00Z"]);
}

#[test]
fn cronsim_endless_loop_falls_back_to_wall_clock() {
    // cronsim never returns here (see wall.rs); 03:59:27 CHAST is 15:14:27Z.
    let got = fires("27-46 59 3 * * *", "Pacific/Chatham", "2027-04-03T13:55:00Z", 2);
    assert_eq!(got, ["2027-04-03T15:14:27Z", "2027-04-03T15:14:28Z"]);
}

#[test]
fn jumps_agree_with_the_plain_wall_clock_search() {
    // Without DST changes cronsim's answer is the plain wall-clock one, so the
    // jump-optimised search must agree with the simple one everywhere.
    let exprs = [
        "*/7 * * * *",
        "13 */5 * * *",
        "0 0 L * *",
        "*/13 5-40 3 * * *",
        "0 0 29 2 *",
        "7 7 * * 1#2",
        "59 23 31 12 *",
        "0 30 9 15W * ?",
    ];
    let mut x: u64 = 88172645463325252;
    for e in exprs {
        let Kind::Cron(spec) = &Schedule::parse(e).unwrap().kind else { unreachable!() };
        for zone in ["UTC", "Asia/Kolkata"] {
            for _ in 0..200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let start = 1_700_000_000 + (x % 400_000_000) as i64;
                let got = iter::next_after(spec, DateTime::from_timestamp(start, 0).unwrap(), tz(zone));
                assert_eq!(got.map(|d| d.timestamp()), wall::search(spec, tz(zone), start), "{e} {zone} {start}");
            }
        }
    }
}

#[test]
fn errors_name_the_field() {
    for (expr, field, needle) in [
        ("0 0 32 * *", "day-of-month", "day-of-month field \"32\": 32 is out of range 1-31"),
        ("60 * * * *", "minute", "out of range 0-59"),
        ("* 24 * * *", "hour", "out of range 0-23"),
        ("* * * 13 *", "month", "out of range 1-12"),
        ("* * * * 8", "day-of-week", "out of range 0-7"),
        ("61 * * * * *", "second", "out of range 0-59"),
        ("*/0 * * * *", "minute", "step must be at least 1"),
        ("5-1 * * * *", "minute", "reversed"),
        ("* * * * FRI-SUN", "day-of-week", "FRI-7"),
        ("1,,2 * * * *", "minute", "empty item"),
        ("abc * * * *", "minute", "not a valid value"),
        ("* * * FOO *", "month", "JAN-DEC"),
        ("* * * * MON#6", "day-of-week", "1-5"),
        ("? * * * *", "minute", "only allowed"),
        ("0 0 L/2 * *", "day-of-month", "step"),
        ("0 0 30 2 *", "day-of-month", "never occurs in FEB"),
        ("0 0 31 4,6 *", "day-of-month", "never occurs"),
        ("* * * *", "expression", "has 4 fields"),
        ("", "expression", "empty"),
        ("@fortnightly", "expression", "unknown macro"),
        ("@every 500ms", "@every", "at least 1s"),
        ("@every", "@every", "missing duration"),
        ("@every soon", "@every", "duration like"),
        ("@at tomorrow", "@at", "RFC 3339"),
    ] {
        let e = err(expr);
        let msg = e.to_string();
        assert_eq!(e.field, field, "{expr}: {msg}");
        assert!(msg.contains(needle), "{expr}: {msg}");
        assert!(msg.starts_with(field), "{expr}: {msg}");
        assert!(!msg.contains('\n'), "{expr}: {msg}");
    }
    let e = parse_timezone("Mars/Olympus_Mons").unwrap_err();
    assert_eq!(e.field, "timezone");
    assert!(e.to_string().contains("Mars/Olympus_Mons") && e.to_string().contains("Europe/Berlin"));
}

#[test]
fn schedule_is_small_and_shareable() {
    fn assert_traits<T: Clone + std::fmt::Debug + Send + Sync>() {}
    assert_traits::<Schedule>();
    assert!(std::mem::size_of::<Schedule>() <= 32);
    assert!(std::mem::size_of::<cron::CronSpec>() <= 64);
}

mod dst;
mod hashed;
mod properties;

#[test]
fn never_fires_and_the_empty_expression_is_still_refused() {
    let never = Schedule::never();
    let t = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 11, 22, 12, 0, 0).unwrap();
    assert_eq!(never.next_after(t, chrono_tz::UTC), None);
    assert!(!never.fires() && Schedule::parse("* * * * *").unwrap().fires());
    assert_eq!(never.expr(), "");
    assert!(Schedule::parse("").is_err());
}

/// cronsim 2.9 and Debian cron: a stepped range whose ends are equal (`a-a/s`) is the
/// single value `a`, in every field; a single-value base without `-` (`a/s`) still runs
/// to the field's maximum.
#[test]
fn a_range_with_equal_ends_and_a_step_is_its_single_value_in_every_field() {
    let from = "2026-12-06T00:38:30Z";
    let table = [
        // (expression, the same fires written plainly)
        ("2-2/2 * * * *", "2 * * * *"),
        ("0 22-22/4 * * *", "0 22 * * *"),
        ("0 0 5-5/3 * *", "0 0 5 * *"),
        ("0 0 31-31/1 * *", "0 0 31 * *"),
        ("0 0 1 3-3/2 *", "0 0 1 3 *"),
        ("0 0 1 mar-MAR/5 *", "0 0 1 3 *"),
        ("0 0 * * 2-2/2", "0 0 * * 2"),
        ("0 0 * * MON-MON/2", "0 0 * * 1"),
        ("0 0 * * 7-7/3", "0 0 * * 0"),
        ("0 0 * * 0-0/7", "0 0 * * 0"),
        ("10-10/5 * * * * *", "10 * * * * *"),
        ("0 59-59/30 * * * *", "0 59 * * * *"),
        ("0 0 0 1 1 ? 2030-2030/5", "0 0 0 1 1 ? 2030"),
        ("0 0 0 1 1 ? 2199-2199/1", "0 0 0 1 1 ? 2199"),
        ("1-1/2,30 * * * *", "1,30 * * * *"),
        // Unchanged: `a/s` runs to the maximum, `a-b/s` steps within the range.
        ("5/20 * * * *", "5,25,45 * * * *"),
        ("0 22/4 * * *", "0 22 * * *"),
        ("0 20/2 * * *", "0 20,22 * * *"),
        ("1-5/2 * * * *", "1,3,5 * * * *"),
        ("0 0 * * 5/1", "0 0 * * 5,6,0"),
    ];
    for (expr, plain) in table {
        assert_eq!(fires(expr, "UTC", from, 12), fires(plain, "UTC", from, 12), "{expr} should equal {plain}");
        assert_eq!(fires(expr, "Europe/Berlin", from, 6), fires(plain, "Europe/Berlin", from, 6), "{expr}");
    }
    assert_eq!(fires("0 22-22/4 * * *", "UTC", from, 2), ["2026-12-06T22:00:00Z", "2026-12-07T22:00:00Z"]);
    // A reversed range stays refused, step or not.
    assert_eq!(err("0 5-4/2 * * *").field, "hour");
}

/// What `first_fire_after` answers for schedules with rare, far or no fires: the fire
/// (searched as far as the year field reaches, past cronsim's 50 years), or whether it
/// never fires at all or only no more, with the reason.
#[test]
fn far_fires_are_found_and_schedules_without_one_say_why() {
    enum Want {
        Fire(&'static str),
        Never(&'static str),
        NoneAfter(&'static str),
    }
    use Want::*;
    let now = "2026-12-06T00:38:30Z";
    let table: [(&str, &str, &str, Want); 16] = [
        ("0 0 0 29 FEB ? 2100", "UTC", now, Never("29 February is only in leap years and 2100 is not one")),
        (
            "0 0 0 29 2 ? 2100-2103",
            "UTC",
            now,
            Never("29 February is only in leap years and none of 2100-2103 (4 years) is one"),
        ),
        ("0 0 0 29 FEB ? 2100-2100/4", "UTC", now, Never("29 February is only in leap years and 2100 is not one")),
        ("0 0 0 1 JAN ? 2090", "UTC", now, Fire("2090-01-01T00:00:00Z")),
        ("0 0 0 1 JAN ? 2090", "Europe/Berlin", now, Fire("2089-12-31T23:00:00Z")),
        ("0 0 0 29 FEB ? 2096", "UTC", now, Fire("2096-02-29T00:00:00Z")),
        ("0 0 0 29 FEB ? 2100-2104", "UTC", now, Fire("2104-02-29T00:00:00Z")),
        ("0 0 0 1 1 ? 2199", "UTC", now, Fire("2199-01-01T00:00:00Z")),
        // Neither day field starts with * or ?: either may match (Mondays of February 2100).
        ("0 0 0 29 FEB MON 2100", "UTC", now, Fire("2100-02-01T00:00:00Z")),
        ("0 0 L 2 ?", "UTC", now, Fire("2027-02-28T00:00:00Z")),
        ("0 0 29 2 ?", "UTC", now, Fire("2028-02-29T00:00:00Z")),
        ("0 0 0 1 JAN ? 2020", "UTC", now, NoneAfter("the last year it allows is 2020")),
        ("0 0 0 1 JAN ? 2026", "UTC", now, NoneAfter("the last year it allows is 2026")),
        ("0 0 0 29 FEB ? 2024,2100", "UTC", now, NoneAfter("29 February is only in leap years and 2100 is not one")),
        ("@at 2020-01-01T00:00:00Z", "UTC", now, NoneAfter("@at 2020-01-01T00:00:00Z is not after it")),
        ("@every 1h", "UTC", now, Fire("2026-12-06T01:00:00Z")),
    ];
    for (expr, zone, from, want) in table {
        let schedule = Schedule::parse(expr).unwrap();
        let got = schedule.first_fire_after(t(from), tz(zone));
        match (want, got) {
            (Fire(at), Ok(fire)) => {
                assert_eq!(fire, t(at), "{expr} in {zone}");
                assert_eq!(schedule.next_after(t(from), tz(zone)), Some(fire), "{expr}: next_after agrees");
            }
            (Never(why), Err(e @ NoFire::Never { .. })) => {
                assert_eq!(e.to_string(), format!("never fires ({why})"), "{expr}");
                // Never means never: from long before, too.
                assert_eq!(schedule.next_after(t("1970-01-01T00:00:00Z"), tz(zone)), None, "{expr}");
            }
            (NoneAfter(why), Err(e @ NoFire::NoneAfter { .. })) => {
                assert_eq!(e.to_string(), format!("has no fire after {from} ({why})"), "{expr}");
            }
            (_, got) => panic!("{expr} in {zone} from {from}: unexpected {got:?}"),
        }
    }
    // Refused when parsed already: no selected month has day 30 (cronsim's check).
    assert_eq!(err("0 0 0 30 FEB ?").field, "day-of-month");
    assert_eq!(err("0 0 0 30 FEB ? 2096").field, "day-of-month");
    // The year field's last year is 2199.
    assert_eq!(err("0 0 0 1 1 ? 2200").field, "year");
    assert!(matches!(Schedule::never().first_fire_after(t(now), Tz::UTC), Err(NoFire::Never { .. })));
}

/// Beyond cronsim's 50-year window the same search goes on: a far fire is found from
/// any start before it, and the chain of fires continues past it.
#[test]
fn fires_beyond_fifty_years_are_found_and_chained() {
    let s = Schedule::parse("0 0 12 1 JAN ? 2090,2150,2199").unwrap();
    let got: Vec<_> = s.fires_after(t("2026-12-06T00:00:00Z"), tz("America/New_York")).collect();
    assert_eq!(got, [t("2090-01-01T17:00:00Z"), t("2150-01-01T17:00:00Z"), t("2199-01-01T17:00:00Z")]);
    // Fifth Friday of February, i.e. a Friday 29 February: 2092, then 2104 across 2100.
    assert_eq!(
        fires("0 0 ? 2 FRI#5", "UTC", "2064-03-01T00:00:00Z", 3),
        ["2092-02-29T00:00:00Z", "2104-02-29T00:00:00Z", "2132-02-29T00:00:00Z"]
    );
}
