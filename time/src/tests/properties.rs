//! Property tests (proptest): any text is refused in one line or yields increasing fires within its fields, in bounded time.

use std::time::{Duration, Instant};

use chrono::{Datelike, Offset, TimeZone, Timelike};
use proptest::prelude::*;

use super::*;

/// Cron-shaped text: fields from the grammar's alphabet, any count, any spacing.
fn cron_like() -> impl Strategy<Value = String> {
    let field = "[0-9*/,\\-LW#?A-Za-z]{1,8}";
    proptest::collection::vec(field, 1..9).prop_map(|fields| fields.join(" "))
}

/// Near-grammar token soup: the grammar's own tokens (values, names, operators,
/// `L`, `W`, `#`, `?`, macros) in random order and number, fields of 1-4 tokens.
fn token_soup() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "0",
        "1",
        "2",
        "5",
        "7",
        "12",
        "15",
        "22",
        "23",
        "29",
        "30",
        "31",
        "59",
        "60",
        "1970",
        "2026",
        "2090",
        "2100",
        "2199",
        "2200",
        "*",
        "?",
        "/",
        "-",
        ",",
        "#",
        "L",
        "W",
        "LW",
        "5L",
        "15W",
        "JAN",
        "feb",
        "Dec",
        "MON",
        "fri",
        "SUN",
        "@",
        "@daily",
        "@every",
        "@at",
        "1h",
        "30s",
        "2026-12-24T18:00:00Z",
    ]);
    let field = proptest::collection::vec(token, 1..5).prop_map(|t| t.concat());
    proptest::collection::vec(field, 1..9).prop_map(|fields| fields.join(" "))
}

/// A few plausible expressions, a-a/s ranges and far years among them, so that
/// the fire checks below see many that parse.
fn plausible() -> impl Strategy<Value = String> {
    let term = |lo: u32, hi: u32| {
        prop_oneof![
            Just("*".to_string()),
            (lo..=hi).prop_map(|a| a.to_string()),
            (lo..=hi, 1u32..9).prop_map(|(a, s)| format!("{a}-{a}/{s}")),
            (lo..=hi, 1u32..9).prop_map(|(a, s)| format!("{a}/{s}")),
            (lo..=hi, lo..=hi, 1u32..5).prop_map(|(a, b, s)| format!("{}-{}/{s}", a.min(b), a.max(b))),
            (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{a},{b}")),
        ]
    };
    let dom = prop_oneof![term(1, 31), Just("L".to_string()), Just("LW".to_string()), Just("?".to_string())];
    let dow = prop_oneof![term(0, 7), Just("5L".to_string()), Just("FRI#5".to_string()), Just("?".to_string())];
    let year = prop_oneof![Just(None), term(1970, 2199).prop_map(Some)];
    (term(0, 59), term(0, 59), term(0, 23), dom, term(1, 12), dow, year, 0u32..3).prop_map(
        |(s, m, h, dom, mon, dow, year, form)| match (form, year) {
            (0, _) => format!("{m} {h} {dom} {mon} {dow}"),
            (1, _) | (_, None) => format!("{s} {m} {h} {dom} {mon} {dow}"),
            (_, Some(y)) => format!("{s} {m} {h} {dom} {mon} {dow} {y}"),
        },
    )
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        "\\PC{0,80}",
        cron_like(),
        token_soup(),
        plausible(),
        "@every [0-9]{1,12}(ms|s|m|h|d|y)",
        "@at [0-9T:\\-Z]{10,24}",
    ]
}

/// Generous: a search is at most a few hundred years of months; this catches a
/// search that does not end, not a slow one.
const PER_NEXT: Duration = Duration::from_secs(20);

/// Whether the zone's offset changes within a day of `at` (where Debian cron's DST
/// rules may move a fire off its fields: a time in a skipped hour fires at its end).
fn near_transition(zone: Tz, at: DateTime<Utc>) -> bool {
    let off = |t: DateTime<Utc>| zone.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc();
    let day = chrono::TimeDelta::days(1);
    off(at - day) != off(at + day)
}

/// Whether `fire`, read in `zone`, lies within every field of `spec`.
fn within_fields(spec: &cron::CronSpec, zone: Tz, fire: DateTime<Utc>) -> bool {
    let local = fire.with_timezone(&zone);
    spec.has_year(local.year())
        && spec.has_month(local.month())
        && spec.match_day(local.date_naive())
        && spec.hours >> local.hour() & 1 == 1
        && spec.minutes >> local.minute() & 1 == 1
        && spec.seconds >> local.second() & 1 == 1
}

proptest! {
    /// Any text: parsing never panics, and a refusal is one line naming its field.
    #[test]
    fn arbitrary_text_never_panics_and_refusals_are_one_line(text in "\\PC{0,80}") {
        if let Err(e) = Schedule::parse(&text) {
            let message = e.to_string();
            prop_assert!(!message.contains('\n'), "{message}");
            prop_assert!(!e.field.is_empty());
        }
    }

    /// Any text (random bytes, random characters, near-grammar token soup, plausible
    /// expressions): it is refused in one line, or its fires from any start in any
    /// zone are strictly increasing, each found within `PER_NEXT`, each within the
    /// expression's fields in its zone (cron: second, minute, hour, day, month, year;
    /// `@every`: a multiple of its period; `@at`: its instant), except where Debian
    /// cron's DST rules move a fire next to a change of offset; and when there is no
    /// fire, `first_fire_after` says why in one line.
    #[test]
    fn any_text_is_refused_in_one_line_or_fires_increase_within_its_fields(
        text in any_text(),
        start in -2_000_000_000i64..8_000_000_000,
        zone in prop::sample::select(vec![
            "UTC", "Asia/Kolkata", "Europe/Berlin", "Pacific/Chatham", "America/St_Johns", "Australia/Lord_Howe",
        ]),
    ) {
        let schedule = match Schedule::parse(&text) {
            Ok(s) => s,
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!message.contains('\n') && !message.is_empty(), "{message}");
                return Ok(());
            }
        };
        let zone = tz(zone);
        let from = DateTime::from_timestamp(start, 0).unwrap();
        let mut last = from;
        for _ in 0..4 {
            let began = Instant::now();
            let next = schedule.next_after(last, zone);
            prop_assert!(began.elapsed() < PER_NEXT, "{text:?} from {last}: {:?}", began.elapsed());
            let Some(fire) = next else {
                let why = schedule.first_fire_after(last, zone).unwrap_err().to_string();
                prop_assert!(!why.contains('\n') && !why.is_empty(), "{why}");
                break;
            };
            prop_assert!(fire > last, "{text:?}: {fire} after {last}");
            match &schedule.kind {
                Kind::Cron(spec) => {
                    let exact = matches!(zone, Tz::UTC | Tz::Asia__Kolkata) || !near_transition(zone, fire);
                    prop_assert!(
                        within_fields(spec, zone, fire) || !exact,
                        "{text:?} in {zone}: {fire} is outside its fields"
                    );
                }
                Kind::Every(ms) => prop_assert_eq!(fire.timestamp_millis().rem_euclid(*ms as i64), 0),
                Kind::At(at) => prop_assert_eq!(fire, *at),
                Kind::Never => prop_assert!(false, "never fired"),
            }
            prop_assert_eq!(schedule.first_fire_after(last, zone), Ok(fire));
            last = fire;
        }
    }
}
