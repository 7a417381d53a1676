//! A job's DST choice (`dst.rs`): over 2026, which crosses both changes in every zone
//! here, `skip` is the default minus exactly the fires it moved out of a skipped hour,
//! `twice` the default plus exactly the second pass of a repeated hour, and nothing else
//! differs. The default is `parse`'s result, which `tests/vs_cronsim.rs` checks.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

/// 2026 in UTC (fires are strictly after the first instant, so a fire at midnight counts):
/// from before the first change to after the last in every zone here.
const YEAR: (&str, &str) = ("2025-12-31T23:59:59Z", "2027-01-01T00:00:00Z");

/// The fires of `schedule` in `YEAR`, in `zone`.
fn year(schedule: &Schedule, zone: Tz) -> Vec<DateTime<Utc>> {
    let end = t(YEAR.1);
    schedule.fires_after(t(YEAR.0), zone).take_while(|f| *f < end).collect()
}

fn instants(list: &[&str]) -> BTreeSet<DateTime<Utc>> {
    list.iter().map(|s| t(s)).collect()
}

struct Case {
    zone: &'static str,
    expr: &'static str,
    /// Fires of the default in the year.
    count: usize,
    /// The default's fires that `skip` drops: the gap day's, moved to the gap's end.
    skipped: &'static [&'static str],
    /// The fires `twice` adds: the second pass of the fall-back day.
    doubled: &'static [&'static str],
}

/// Changes in 2026: Berlin 29 Mar (02:00 -> 03:00) and 25 Oct (03:00 -> 02:00); New York
/// 8 Mar (02:00 -> 03:00) and 1 Nov (02:00 -> 01:00); Lord Howe 5 Apr (02:00 -> 01:30) and
/// 4 Oct (02:00 -> 02:30); Sydney 5 Apr (03:00 -> 02:00) and 4 Oct (02:00 -> 03:00).
const CASES: &[Case] = &[
    Case {
        zone: "Europe/Berlin",
        expr: "30 2 * * *",
        count: 365,
        skipped: &["2026-03-29T01:00:00Z"],
        doubled: &["2026-10-25T01:30:00Z"],
    },
    Case { zone: "Europe/Berlin", expr: "0 1 * * *", count: 365, skipped: &[], doubled: &[] },
    // Not a fixed time (the minute starts with `*`): the wall clock under every choice,
    // none on the gap day, eight on the fall-back day.
    Case { zone: "Europe/Berlin", expr: "*/15 2 * * *", count: 365 * 4, skipped: &[], doubled: &[] },
    Case { zone: "Europe/Berlin", expr: "0 * * * *", count: 8760, skipped: &[], doubled: &[] },
    Case { zone: "America/New_York", expr: "30 2 * * *", count: 365, skipped: &["2026-03-08T07:00:00Z"], doubled: &[] },
    Case { zone: "America/New_York", expr: "30 1 * * *", count: 365, skipped: &[], doubled: &["2026-11-01T06:30:00Z"] },
    Case { zone: "America/New_York", expr: "0 1 * * *", count: 365, skipped: &[], doubled: &["2026-11-01T06:00:00Z"] },
    Case { zone: "America/New_York", expr: "*/15 2 * * *", count: 365 * 4 - 4, skipped: &[], doubled: &[] },
    Case { zone: "America/New_York", expr: "0 * * * *", count: 8760, skipped: &[], doubled: &[] },
    // Two fixed times in the gap fire once at its end by default; `skip` drops that one.
    Case {
        zone: "America/New_York",
        expr: "0,30 2 * * *",
        count: 2 * 365 - 1,
        skipped: &["2026-03-08T07:00:00Z"],
        doubled: &[],
    },
    Case {
        zone: "America/New_York",
        expr: "15,45 1 * * *",
        count: 2 * 365,
        skipped: &[],
        doubled: &["2026-11-01T06:15:00Z", "2026-11-01T06:45:00Z"],
    },
    Case {
        zone: "Australia/Lord_Howe",
        expr: "0 2 * * *",
        count: 365,
        skipped: &["2026-10-03T15:30:00Z"],
        doubled: &[],
    },
    Case {
        zone: "Australia/Lord_Howe",
        expr: "45 1 * * *",
        count: 365,
        skipped: &[],
        doubled: &["2026-04-04T15:15:00Z"],
    },
    Case { zone: "Australia/Lord_Howe", expr: "30 2 * * *", count: 365, skipped: &[], doubled: &[] },
    Case { zone: "Australia/Lord_Howe", expr: "0 1 * * *", count: 365, skipped: &[], doubled: &[] },
    // 02:00 of the gap day never shows: one hour mark fewer.
    Case { zone: "Australia/Lord_Howe", expr: "0 * * * *", count: 8759, skipped: &[], doubled: &[] },
    Case {
        zone: "Australia/Sydney",
        expr: "30 2 * * *",
        count: 365,
        skipped: &["2026-10-03T16:00:00Z"],
        doubled: &["2026-04-04T16:30:00Z"],
    },
    Case { zone: "Australia/Sydney", expr: "0 1 * * *", count: 365, skipped: &[], doubled: &[] },
    Case { zone: "Australia/Sydney", expr: "*/15 2 * * *", count: 365 * 4, skipped: &[], doubled: &[] },
    Case { zone: "Australia/Sydney", expr: "0 * * * *", count: 8760, skipped: &[], doubled: &[] },
];

#[test]
fn skip_drops_exactly_the_gap_fires_and_twice_adds_exactly_the_second_pass() {
    for case in CASES {
        let (zone, what) = (tz(case.zone), format!("{} in {}", case.expr, case.zone));
        let parsed = Schedule::parse(case.expr).unwrap();
        let debian = year(&parsed, zone);
        assert_eq!(debian.len(), case.count, "{what}: default");
        assert_eq!(year(&parsed.clone().with_dst(Dst::Debian), zone), debian, "{what}: debian is the default");
        let debian: BTreeSet<_> = debian.into_iter().collect();

        let skip = year(&parsed.clone().with_dst(Dst::Skip), zone);
        let expected: BTreeSet<_> = debian.difference(&instants(case.skipped)).copied().collect();
        assert!(instants(case.skipped).is_subset(&debian), "{what}: the gap fires are the default's");
        assert_eq!(skip.into_iter().collect::<BTreeSet<_>>(), expected, "{what}: skip");

        let twice = year(&parsed.clone().with_dst(Dst::Twice), zone);
        assert!(twice.windows(2).all(|w| w[0] < w[1]), "{what}: twice in order, each once");
        let expected: BTreeSet<_> = debian.union(&instants(case.doubled)).copied().collect();
        assert_eq!(expected.len(), case.count + case.doubled.len(), "{what}: the second passes are new");
        assert_eq!(twice.into_iter().collect::<BTreeSet<_>>(), expected, "{what}: twice");
    }
}

#[test]
fn twice_from_inside_a_repeated_hour_still_finds_every_second_pass() {
    // New York, 1 Nov 2026: 01:00-02:00 shows twice, EDT (05:00Z-06:00Z) then EST.
    let cases = [
        // From before the hour: both passes of both minutes, in order.
        ("2026-11-01T04:00:00Z", ["2026-11-01T05:15:00Z", "2026-11-01T05:45:00Z", "2026-11-01T06:15:00Z"]),
        // From 01:30 EDT: 01:15 is passed in its first pass, not in its second.
        ("2026-11-01T05:30:00Z", ["2026-11-01T05:45:00Z", "2026-11-01T06:15:00Z", "2026-11-01T06:45:00Z"]),
        // From 01:15 EDT exactly: strictly after it.
        ("2026-11-01T05:15:00Z", ["2026-11-01T05:45:00Z", "2026-11-01T06:15:00Z", "2026-11-01T06:45:00Z"]),
        // From 01:30 EST (the second pass): the rest of it, then the next day.
        ("2026-11-01T06:30:00Z", ["2026-11-01T06:45:00Z", "2026-11-02T06:15:00Z", "2026-11-02T06:45:00Z"]),
    ];
    let schedule = Schedule::parse("15,45 1 * * *").unwrap().with_dst(Dst::Twice);
    for (from, expected) in cases {
        let got: Vec<_> = schedule.fires_after(t(from), tz("America/New_York")).take(3).collect();
        assert_eq!(got, expected.map(t), "from {from}");
    }
}

#[test]
fn dst_names_round_trip_and_others_are_refused_in_one_line() {
    for dst in Dst::ALL {
        assert_eq!(dst.as_str().parse::<Dst>(), Ok(dst));
        assert_eq!(dst.to_string(), dst.as_str());
    }
    assert_eq!(Dst::default(), Dst::Debian);
    for bad in ["sometimes", "", "Skip", "debian "] {
        let e = bad.parse::<Dst>().unwrap_err().to_string();
        assert!(e.starts_with("dst ") && !e.contains('\n'), "{bad:?}: {e}");
        assert!(["\"debian\"", "\"skip\"", "\"twice\""].iter().all(|c| e.contains(c)), "{bad:?}: {e}");
    }
}

#[test]
fn choices_change_nothing_for_schedules_without_a_fixed_time() {
    // Wildcard minute or hour, six fields, `@every`: the wall clock (or the epoch) alone.
    let exprs =
        ["*/15 2 * * *", "0 * * * *", "@hourly", "*/30 * * * *", "0 30 2 * * *", "0 30 2 * * * 2026", "@every 90m"];
    for zone in ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Australia/Sydney"] {
        for expr in exprs {
            let parsed = Schedule::parse(expr).unwrap();
            let debian = year(&parsed, tz(zone));
            assert!(!debian.is_empty(), "{expr} in {zone}");
            for dst in [Dst::Skip, Dst::Twice] {
                assert_eq!(year(&parsed.clone().with_dst(dst), tz(zone)), debian, "{expr} in {zone}, {dst}");
            }
        }
    }
}

/// Whether a DST change lies within a day of `at` in `zone`.
fn near_change(zone: Tz, at: DateTime<Utc>) -> bool {
    use chrono::{Offset, TimeZone};
    let offset = |t: DateTime<Utc>| zone.offset_from_utc_datetime(&t.naive_utc()).fix();
    offset(at - chrono::TimeDelta::days(1)) != offset(at + chrono::TimeDelta::days(1))
}

/// A fixed-time field: a value, a list, a short range or a wide step (at most 6 values, so
/// a year of fires stays quick to list three times over).
fn fixed_field(max: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        (0..=max).prop_map(|v| v.to_string()),
        (0..=max, 0..=max).prop_map(|(a, b)| format!("{a},{b}")),
        (0..=max, 0..4u32).prop_map(move |(a, k)| format!("{a}-{}", (a + k).min(max))),
        (0..=max, (max + 1) / 6..=max).prop_map(|(a, s)| format!("{a}/{s}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Fixed-time expressions: the three choices agree on every fire more than a day from
    /// a DST change, `skip` only drops the default's fires and `twice` only adds to them.
    #[test]
    fn choices_agree_away_from_dst_changes(
        minute in fixed_field(59),
        hour in fixed_field(23),
        days in prop::sample::select(vec!["* * *", "* * SUN", "1-7 * *", "L MAR,OCT,NOV,APR *"]),
        zone in prop::sample::select(vec!["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Australia/Sydney"]),
    ) {
        let expr = format!("{minute} {hour} {days}");
        let parsed = Schedule::parse(&expr).unwrap();
        let zone = tz(zone);
        let [debian, skip, twice] = Dst::ALL.map(|dst| year(&parsed.clone().with_dst(dst), zone));
        let away = |fires: &[DateTime<Utc>]| fires.iter().copied().filter(|f| !near_change(zone, *f)).collect::<Vec<_>>();
        prop_assert_eq!(away(&skip), away(&debian), "{} skip", expr);
        prop_assert_eq!(away(&twice), away(&debian), "{} twice", expr);
        let debian: BTreeSet<_> = debian.into_iter().collect();
        prop_assert!(skip.iter().all(|f| debian.contains(f)), "{} skip added a fire", expr);
        prop_assert!(debian.iter().all(|f| twice.contains(f)), "{} twice dropped a fire", expr);
    }
}
