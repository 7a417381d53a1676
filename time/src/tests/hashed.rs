//! Jenkins' `H` (`hashed.rs`): pinned slots, ranges per field, refusals, spread.

use std::collections::HashSet;

use proptest::prelude::*;

use super::*;

/// `expr` resolved for `job`, as text.
fn resolved(expr: &str, job: &str) -> String {
    Schedule::parse_for(expr, job).unwrap().expr().to_string()
}

/// The values field `i` of the 6-field `expr` resolved for `job` selects, read back by the parser.
fn values(expr: &str, job: &str, i: usize) -> Vec<u32> {
    let text = resolved(expr, job);
    let field = text.split(' ').nth(i).unwrap();
    let def = [&fields::SECOND, &fields::MINUTE, &fields::HOUR, &fields::DOM, &fields::MONTH, &fields::DOW][i];
    let bits = fields::parse(def, field).unwrap().word();
    (def.min..=def.max).filter(|v| bits >> (v - def.min) & 1 == 1).collect()
}

fn names(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| format!("job-{i}"))
}

#[test]
fn the_slot_formula_is_pinned() {
    // Computed by a separate implementation (Python): a change of FNV-1a, the mix, the
    // byte layout or a field's name moves every job and fails here.
    assert_eq!(crate::hashed::slot("backup", "minute", u32::MAX), 3_631_711_255);
    for (job, [second, minute, hour, dom, month, dow]) in [
        ("backup", [29, 25, 1, 25, 11, 0]),
        ("report-daily", [33, 24, 11, 22, 1, 1]),
        ("a", [9, 40, 9, 17, 1, 2]),
        ("nightly_etl", [20, 44, 3, 9, 6, 6]),
    ] {
        let slot = |field, n| crate::hashed::slot(job, field, n);
        let got = [slot("second", 60), slot("minute", 60), slot("hour", 24)];
        assert_eq!(got, [second, minute, hour], "{job}");
        assert_eq!([slot("day-of-month", 28), slot("month", 12), slot("day-of-week", 7)], [dom, month, dow], "{job}");
    }
    assert_eq!(resolved("H H H H H H", "backup"), "29 25 1 26 12 0");
    assert_eq!(resolved("H H * * *", "backup"), "25 1 * * *");
    assert_eq!(resolved("H/15 * * * *", "backup"), "10-59/15 * * * *");
    // Any case, in a list, other items as written.
    assert_eq!(resolved("h,30 9-17 * * mon-FRI", "backup"), "25,30 9-17 * * mon-FRI");
    assert_eq!(resolved("0 0 * * THU", "backup"), "0 0 * * THU");
}

#[test]
fn each_form_resolves_within_its_range() {
    // (6-field expression, field index, the values it may select, step or 0).
    let cases: [(&str, usize, std::ops::RangeInclusive<u32>, u32); 14] = [
        ("H * * * * *", 0, 0..=59, 0),
        ("0 H * * * *", 1, 0..=59, 0),
        ("0 0 H * * *", 2, 0..=23, 0),
        ("0 0 0 H * *", 3, 1..=28, 0),
        ("0 0 0 1 H *", 4, 1..=12, 0),
        ("0 0 0 * * H", 5, 0..=6, 0),
        ("H/10 * * * * *", 0, 0..=59, 10),
        ("0 H/15 * * * *", 1, 0..=59, 15),
        ("0 0 H/6 * * *", 2, 0..=23, 6),
        ("0 0 0 H/7 * *", 3, 1..=28, 7),
        ("0 0 0 1 H/3 *", 4, 1..=12, 3),
        ("0 H(10-19) * * * *", 1, 10..=19, 0),
        ("0 0 0 * * H(MON-FRI)", 5, 1..=5, 0),
        ("0 H(30-59)/10 * * * *", 1, 30..=59, 10),
    ];
    for (expr, i, range, step) in cases {
        let mut firsts = HashSet::new();
        for job in names(1000) {
            let got = values(expr, &job, i);
            assert!(got.iter().all(|v| range.contains(v)), "{expr} for {job}: {got:?} outside {range:?}");
            match step {
                0 => assert_eq!(got.len(), 1, "{expr} for {job}: {got:?}"),
                n => {
                    // Every n-th value from an offset below n, up to the range's end.
                    let first = got[0];
                    assert!(first - range.start() < n, "{expr} for {job}: {got:?}");
                    assert_eq!(got, (first..=*range.end()).step_by(n as usize).collect::<Vec<_>>(), "{expr} {job}");
                }
            }
            firsts.insert(got[0]);
        }
        // Every choice is taken by some of the 1,000 names.
        let choices = if step == 0 { range.end() - range.start() + 1 } else { step };
        assert_eq!(firsts.len() as u32, choices, "{expr}: {firsts:?}");
    }
}

#[test]
fn bad_h_items_and_h_without_a_name_are_refused_in_one_line() {
    for (expr, field, needle) in [
        ("H(30-10) * * * *", "minute", "range 30-10 is reversed"),
        ("H(0-99) * * * *", "minute", "99 is out of range 0-59"),
        ("H/0 * * * *", "minute", "step must be at least 1"),
        ("H/61 * * * *", "minute", "step 61 is more than the 60 values of 0-59"),
        ("H(5-1)/2 * * * *", "minute", "reversed"),
        ("0 H(10-12)/4 * * *", "hour", "step 4 is more than the 3 values of 10-12"),
        ("H(5) * * * *", "minute", "write H, H/n, H(a-b) or H(a-b)/n"),
        ("H5 * * * *", "minute", "write H, H/n, H(a-b) or H(a-b)/n"),
        ("0 0 * * H#2", "day-of-week", "write H, H/n"),
        ("0 0 0 1 1 * H", "year", "not allowed in the year field"),
        ("5,H * * * *", "minute", "H: H needs the job's name"),
        ("0 H * * *", "hour", "H needs the job's name to pick its slot: give it with --job NAME"),
    ] {
        let e = Schedule::parse(expr).unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.field, field, "{expr}: {msg}");
        assert!(msg.contains(needle) && !msg.contains('\n'), "{expr}: {msg}");
        // A malformed item is refused whatever the name.
        if !needle.contains("name") {
            assert_eq!(Schedule::parse_for(expr, "backup").unwrap_err(), e, "{expr}");
        }
    }
}

#[test]
fn jobs_spread_and_a_jobs_fields_take_different_slots() {
    let minutes: HashSet<String> = names(1000).map(|job| resolved("H * * * *", &job)).collect();
    assert!(minutes.len() >= 50, "{} distinct minutes", minutes.len());
    // Independent per field: a job's second and minute agree about 1 time in 60.
    let alike = names(1000)
        .filter(|job| {
            let r = resolved("H H * * * *", job);
            let (s, m) = r.split_once(' ').unwrap();
            m.starts_with(&format!("{s} "))
        })
        .count();
    assert!(alike < 50, "{alike} of 1000 jobs have second = minute");
}

#[test]
fn a_resolved_schedule_fires_as_its_resolved_text() {
    let from = DateTime::parse_from_rfc3339("2026-03-29T00:00:00Z").unwrap().with_timezone(&Utc);
    let berlin = tz("Europe/Berlin");
    for expr in ["H H * * *", "H/20 H(1-3) * * *", "0 H H(1-7) * H", "H(0-29)/5 * * * * *"] {
        let job = Schedule::parse_for(expr, "nightly_etl").unwrap();
        let plain = Schedule::parse(job.expr()).unwrap();
        let a: Vec<_> = job.fires_after(from, berlin).take(20).collect();
        assert_eq!(a, plain.fires_after(from, berlin).take(20).collect::<Vec<_>>(), "{expr}");
    }
    // Without `H` the text is kept as written, spacing included.
    assert_eq!(Schedule::parse_for(" 0  5 * * *", "x").unwrap().expr(), " 0  5 * * *");
    assert!(matches!(Schedule::resolve("@hourly", "x"), Ok(std::borrow::Cow::Borrowed("@hourly"))));
}

/// Every form of `H` in every field that takes one; a bare `H`'s range ends at `bare`.
fn h_expression() -> impl Strategy<Value = String> {
    let item = |lo: u32, hi: u32, bare: u32| {
        prop_oneof![
            Just("H".to_string()),
            (1..=bare - lo + 1).prop_map(|s| format!("H/{s}")),
            (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("H({}-{})", a.min(b), a.max(b))),
            (lo..=hi, lo..=hi, 1u32..8).prop_map(|(a, b, s)| {
                let (a, b) = (a.min(b), a.max(b));
                format!("H({a}-{b})/{}", s.min(b - a + 1))
            }),
            Just("*".to_string()),
        ]
    };
    (item(0, 59, 59), item(0, 59, 59), item(0, 23, 23), item(1, 31, 28), item(1, 12, 12), item(0, 7, 6))
        .prop_map(|(s, m, h, dom, mon, dow)| format!("{s} {m} {h} {dom} {mon} {dow}"))
}

proptest! {
    /// Any job name resolves every `H` form to an expression without `H` that parses,
    /// the same one each time.
    #[test]
    fn any_job_name_resolves_every_h_form(job in "[A-Za-z0-9_-]{1,128}", expr in h_expression()) {
        let schedule = match Schedule::parse_for(&expr, &job) {
            Ok(s) => s,
            // Only cronsim's check that the day exists in a selected month may refuse.
            Err(e) => {
                prop_assert!(e.to_string().contains("never occurs"), "{expr} for {job}: {e}");
                return Ok(());
            }
        };
        prop_assert!(!schedule.expr().contains('H'), "{}", schedule.expr());
        prop_assert!(Schedule::parse(schedule.expr()).is_ok());
        prop_assert_eq!(Schedule::resolve(&expr, &job).unwrap(), schedule.expr());
    }
}
