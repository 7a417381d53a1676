//! Differential test: cronrun's schedule engine against the Python package
//! cronsim 2.9 or newer (the reference named by docs/architecture.md), over generated
//! expressions; the test fails at once, saying so, when the installed cronsim is older.
//! Generated fields include stepped ranges whose ends are equal (`a-a/s`, the single
//! value `a` since cronsim 2.9) in every field.
//!
//! Every generated expression is evaluated in six zones (DST gaps of 1 h, 30
//! min, at 02:45, a half-hour zone without DST, UTC), from start instants a
//! few hours or days around DST changes in 2024-2027 (found from the zone
//! data, both directions, including starts inside a repeated hour) and at
//! random instants. Each case takes the next `FIRES` fires by chaining
//! `next_after`; the oracle (`time/tests/oracle/cronsim_oracle.py`, one process
//! for all cases) prints cronsim's. Fires must be identical in UTC. Where cronsim
//! stops early (nothing within 50 years of a search's start) our engine goes on; then
//! the fires cronsim gave are compared and our next one must lie past its window.
//!
//! `CRONRUN_DIFF_SEED` and `CRONRUN_DIFF_EXPRS` override the defaults;
//! `CRONRUN_DIFF_KEEP=<path>` keeps a copy of the case file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::io::Write;
use std::process::Command;

use chrono::{DateTime, Offset, SecondsFormat, TimeZone, Utc};
use cronrun_time::{Schedule, Tz, parse_timezone};
use serde_json::{Value, json};

const ZONES: [&str; 6] =
    ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "Asia/Kolkata", "UTC"];
const FIRES: usize = 8;
const STARTS_PER_ZONE: usize = 2;

/// splitmix64: deterministic, no dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below(u64::from(hi - lo + 1)) as u32
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const MONTH_NAMES: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];

/// Upper, lower or mixed case, as users write names.
fn cased(rng: &mut Rng, s: &str) -> String {
    match rng.below(3) {
        0 => s.to_string(),
        1 => s.to_lowercase(),
        _ => s.chars().enumerate().map(|(i, c)| if i == 0 { c } else { c.to_ascii_lowercase() }).collect(),
    }
}

/// A generic field term: value, range, step, list, all within lo..=hi.
fn numeric(rng: &mut Rng, lo: u32, hi: u32) -> String {
    let v = rng.range(lo, hi);
    match rng.below(9) {
        0 | 1 => v.to_string(),
        8 => format!("{v}-{v}/{}", rng.range(1, (hi - lo).max(2))),
        2 => format!("*/{}", rng.range(1, (hi - lo).max(2))),
        3 => format!("{v}/{}", rng.range(1, (hi - lo).max(2))),
        4 => format!("{v}-{}", rng.range(v, hi)),
        5 => format!("{v}-{}/{}", rng.range(v, hi), rng.range(1, 9)),
        6 => format!("{v},{}", rng.range(lo, hi)),
        _ => format!("{v},{}-{}", rng.range(lo, hi), hi),
    }
}

fn gen_second(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => numeric(rng, 0, 59),
        _ => rng.pick(&["0", "30", "*/15", "*/20", "10,40", "0-10/5", "5/20", "45", "*/30", "*", "30-30/15"]).into(),
    }
}

fn gen_minute(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=2 => numeric(rng, 0, 59),
        _ => rng
            .pick(&[
                "0", "30", "15", "45", "0/30", "*/15", "*/10", "*/7", "*", "5,35", "0-30/10", "0,30", "15,45", "59",
                "*/30", "30-30/15", "0-0/5",
            ])
            .into(),
    }
}

fn gen_hour(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 | 1 => numeric(rng, 0, 23),
        _ => rng
            .pick(&[
                "2", "1", "3", "0", "2", "1", "3", "23", "*/2", "*/3", "*/5", "*", "1-3", "1,2,3", "2-4/2", "0/6",
                "12", "1-2", "2,3", "4", "*/4", "2-2/2", "22-22/4",
            ])
            .into(),
    }
}

fn gen_dom(rng: &mut Rng) -> String {
    match rng.below(40) {
        0..=19 => "*".into(),
        20..=23 => numeric(rng, 1, 31),
        24 => "?".into(),                       // cronrun only
        25 => format!("{}W", rng.range(1, 31)), // cronrun only
        _ => rng
            .pick(&[
                "1", "15", "L", "LW", "1-15", "*/2", "1,15", "31", "30", "29", "5/7", "10-20/3", "L,15", "28-31", "lw",
                "5-5/3", "31-31/2",
            ])
            .into(),
    }
}

fn gen_month(rng: &mut Rng) -> String {
    match rng.below(20) {
        0..=9 => "*".into(),
        10 | 11 => numeric(rng, 1, 12),
        12 => {
            let a = rng.below(12) as usize;
            let b = a + rng.below((12 - a) as u64) as usize;
            format!("{}-{}", cased(rng, MONTH_NAMES[a]), cased(rng, MONTH_NAMES[b]))
        }
        13 => {
            let m = MONTH_NAMES[rng.below(12) as usize];
            cased(rng, m)
        }
        _ => {
            let s = rng.pick(&[
                "3",
                "10",
                "MAR",
                "OCT",
                "3,10,11,4",
                "*/2",
                "JAN-JUN",
                "11",
                "MAR-OCT",
                "9,4",
                "APR,SEP,OCT",
                "*/3",
                "MAR-MAR/2",
                "10-10/4",
            ]);
            cased(rng, s)
        }
    }
}

fn gen_dow(rng: &mut Rng) -> String {
    let day = |rng: &mut Rng| -> String {
        let d = rng.below(8) as usize;
        if rng.chance(50) { d.to_string() } else { cased(rng, DAY_NAMES[d % 7]) }
    };
    match rng.below(40) {
        0..=19 => "*".into(),
        20 | 21 => format!("{}L", rng.below(8)),
        22 | 23 => format!("{}#{}", day(rng), rng.range(1, 5)),
        24 | 25 => numeric(rng, 0, 7),
        26 | 27 => day(rng),
        28 => "?".into(), // cronrun only
        29 => {
            // cronrun only
            let d = DAY_NAMES[rng.below(7) as usize];
            format!("{}L", cased(rng, d))
        }
        _ => {
            let s = rng.pick(&[
                "MON-FRI",
                "5L",
                "SUN#1",
                "0",
                "7",
                "1-5",
                "SAT,SUN",
                "*/2",
                "FRI#2",
                "0L",
                "MON",
                "6#5",
                "2#1,4#3",
                "1L",
                "mon-fri",
                "MON-MON/2",
                "7-7/3",
                "0-0/2",
                "5-5/1",
            ]);
            cased(rng, s)
        }
    }
}

/// Terms both should refuse, dropped into a random field now and then.
const BAD: [&str; 14] = ["*/0", "61", "5-1", "", "1,,2", "x", "-1", "1-", "24", "32", "13", "8", "MON#6", "1/2/3"];

fn gen_expr(rng: &mut Rng) -> String {
    let mut fields = [gen_minute(rng), gen_hour(rng), gen_dom(rng), gen_month(rng), gen_dow(rng)];
    if rng.chance(2) {
        let i = rng.below(5) as usize;
        fields[i] = rng.pick(&BAD).to_string();
        if fields[i].is_empty() {
            fields[i] = "0 0".into(); // wrong field count
        }
    } else if rng.chance(1) {
        // day-of-month that no selected month has, both day fields ANDed
        fields = ["0".into(), "0".into(), "30,31".into(), "2".into(), "*".into()];
    }
    let five = fields.join(" ");
    if rng.chance(70) { five } else { format!("{} {five}", gen_second(rng)) }
}

/// UTC instants in 2024-2027 where the zone's UTC offset changes.
fn transitions(tz: Tz) -> Vec<i64> {
    let off = |t: i64| -> i32 {
        let at = DateTime::from_timestamp(t, 0).map(|d| d.naive_utc()).unwrap_or_default();
        tz.offset_from_utc_datetime(&at).fix().local_minus_utc()
    };
    let (from, to) = (1_704_067_200_i64, 1_830_297_600_i64); // 2024-01-01 .. 2028-01-01
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        if off(t) != off(t + 3600) {
            let (mut lo, mut hi) = (t, t + 3600);
            while hi - lo > 1 {
                let mid = (lo + hi) / 2;
                if off(mid) == off(lo) { lo = mid } else { hi = mid }
            }
            out.push(hi);
        }
        t += 3600;
    }
    out
}

/// A start instant: mostly shortly before (sometimes just after) a DST
/// change, otherwise random in 2024-2027. Some carry milliseconds.
fn gen_start(rng: &mut Rng, trans: &[i64]) -> DateTime<Utc> {
    let secs = if !trans.is_empty() && rng.chance(80) {
        let t = trans[rng.below(trans.len() as u64) as usize];
        let before = match rng.below(10) {
            0..=4 => rng.below(6 * 3600),
            5..=6 => rng.below(48 * 3600),
            7 => rng.below(7 * 86400),
            _ => 0u64.wrapping_sub(rng.below(2 * 3600)), // up to 2 h after
        } as i64;
        t - before
    } else {
        1_704_067_200 + rng.below(4 * 365 * 86400) as i64
    };
    let secs = if rng.chance(70) { secs - secs.rem_euclid(60) } else { secs };
    let ms = if rng.chance(10) { rng.below(1000) as u32 } else { 0 };
    DateTime::from_timestamp(secs, ms * 1_000_000).unwrap_or_default()
}

/// The oldest cronsim the engine follows: 2.9 reads `a-a/s` as `a` (2.8 as `a/s`).
const CRONSIM_MIN: (u32, u32) = (2, 9);

/// `"2.9"` -> `(2, 9)`; `"2.10.1"` -> `(2, 10)`; anything else -> `None`.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts.next()?.chars().take_while(char::is_ascii_digit).collect();
    Some((major, minor.parse().ok()?))
}

fn require_cronsim() {
    let out = Command::new("python3")
        .args(["-c", "import cronsim, importlib.metadata as m; print(m.version('cronsim'))"])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
            let ok = major_minor(&v).is_some_and(|found| found >= CRONSIM_MIN);
            assert!(
                ok,
                "cronsim {v} found, but the engine follows cronsim 2.9 (`a-a/s` is `a`): pip install cronsim==2.9"
            );
        }
        Ok(o) => panic!(
            "python3 cannot import cronsim ({}): pip install cronsim==2.9",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => {
            panic!("cannot run python3 ({e}); install Python 3 and then: pip install cronsim==2.9")
        }
    }
}

#[test]
fn cronsim_versions_compare_by_major_and_minor() {
    assert_eq!(major_minor("2.9"), Some((2, 9)));
    assert_eq!(major_minor("2.10.1"), Some((2, 10)));
    assert_eq!(major_minor("3.0rc1"), Some((3, 0)));
    assert_eq!(major_minor("garbage"), None);
    assert!(major_minor("2.8").unwrap() < CRONSIM_MIN && major_minor("2.10").unwrap() > CRONSIM_MIN);
}

/// The fields (0 = first) holding a stepped range whose ends are equal, like `5-5/2`.
fn equal_end_ranges(expr: &str) -> Vec<usize> {
    let equal = |term: &str| {
        let Some((range, _step)) = term.split_once('/') else { return false };
        range.split_once('-').is_some_and(|(a, b)| a.eq_ignore_ascii_case(b))
    };
    let fields: Vec<&str> = expr.split_whitespace().collect();
    fields.iter().enumerate().filter(|(_, f)| f.split(',').any(equal)).map(|(i, _)| i).collect()
}

/// (expression, zone index, start, our fires or our error)
type Case = (String, usize, DateTime<Utc>, Result<Vec<String>, String>);

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[test]
fn fires_equal_cronsim() {
    require_cronsim();
    let seed = std::env::var("CRONRUN_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20_240_331);
    let n_exprs: usize = std::env::var("CRONRUN_DIFF_EXPRS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let mut rng = Rng(seed);
    let zones: Vec<(&str, Tz, Vec<i64>)> = ZONES
        .iter()
        .map(|z| {
            let tz = parse_timezone(z).unwrap();
            let mut tr = transitions(tz);
            if tr.is_empty() {
                tr = transitions(parse_timezone("Europe/Berlin").unwrap());
            }
            (*z, tz, tr)
        })
        .collect();
    assert!(zones[0].2.len() >= 8, "Berlin should have 8 DST changes in 2024-2027");

    let mut cases: Vec<Case> = Vec::new();
    for _ in 0..n_exprs {
        let expr = gen_expr(&mut rng);
        let parsed = Schedule::parse(&expr);
        for (zi, (_, tz, tr)) in zones.iter().enumerate() {
            for _ in 0..STARTS_PER_ZONE {
                let start = gen_start(&mut rng, tr);
                let ours = match &parsed {
                    Ok(s) => Ok(s.fires_after(start, *tz).take(FIRES).map(rfc).collect()),
                    Err(e) => Err(e.to_string()),
                };
                cases.push((expr.clone(), zi, start, ours));
            }
        }
    }

    let mut file = tempfile::NamedTempFile::new().unwrap();
    for (expr, zi, start, _) in &cases {
        let start = start.to_rfc3339_opts(SecondsFormat::Millis, true);
        writeln!(file, "{}", json!({"expr": expr, "tz": zones[*zi].0, "start": start, "n": FIRES})).unwrap();
    }
    file.flush().unwrap();
    if let Ok(keep) = std::env::var("CRONRUN_DIFF_KEEP") {
        std::fs::copy(file.path(), keep).unwrap();
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle/cronsim_oracle.py");
    let out = Command::new("python3").arg(script).arg(file.path()).output().unwrap();
    assert!(out.status.success(), "oracle failed: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), cases.len(), "oracle answered {} of {} cases", lines.len(), cases.len());

    let (mut compared, mut fires, mut mismatches, mut skipped_cases) = (0usize, 0usize, 0usize, 0usize);
    let (mut both_refuse, mut only_cronsim_refuses, mut only_we_refuse, mut crashes, mut loops) = (0, 0, 0, 0, 0);
    let mut beyond_cronsim = 0usize;
    // Compared cases with `a-a/s` in: second, minute, hour, day-of-month, month, day-of-week.
    let mut equal_ends = [0usize; 6];
    let mut report = Vec::new();
    let mut examples_seen = std::collections::HashSet::new();
    for ((expr, zi, start, ours), line) in cases.iter().zip(&lines) {
        let answer: Value = serde_json::from_str(line).unwrap();
        let what = format!("{expr:?} in {} from {}", zones[*zi].0, rfc(*start));
        if let Some(msg) = answer.get("crash") {
            crashes += 1;
            if crashes <= 5 {
                println!("cronsim crashed on {what}: {msg}");
            }
            continue;
        }
        match (ours, answer.get("fires")) {
            (Err(_), None) => both_refuse += 1,
            (Ok(_), None) => {
                only_cronsim_refuses += 1;
                if only_cronsim_refuses <= 60 && examples_seen.insert(expr.clone()) {
                    println!("refused only by cronsim: {expr:?} ({})", answer["error"]);
                }
            }
            (Err(e), Some(_)) => {
                only_we_refuse += 1;
                if only_we_refuse <= 60 && examples_seen.insert(expr.clone()) {
                    println!("refused only by cronrun: {expr:?} ({e})");
                }
            }
            (Ok(ours), Some(f)) => {
                let theirs: Vec<String> =
                    f.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
                compared += 1;
                fires += theirs.len();
                if answer["skipped"] != 0 {
                    skipped_cases += 1;
                }
                // Where cronsim never returns, only the fires before that are
                // comparable (ours then come from the wall-clock fallback).
                let fields = expr.split_whitespace().count();
                for i in equal_end_ranges(expr) {
                    // A 5-field expression has no second field: shift by one.
                    equal_ends[if fields == 5 { i + 1 } else { i }.min(5)] += 1;
                }
                let ours = if let Some(why) = answer.get("loop") {
                    loops += 1;
                    if loops <= 5 {
                        println!("cronsim never returns for {what} after {} fires: {why}", theirs.len());
                    }
                    &ours[..theirs.len().min(ours.len())]
                } else if theirs.len() < FIRES && ours.len() > theirs.len() {
                    // cronsim gave up (nothing within 50 years); we go on past its window.
                    beyond_cronsim += 1;
                    let after = theirs.last().map_or(*start, |t| DateTime::parse_from_rfc3339(t).unwrap().to_utc());
                    let ours_next = DateTime::parse_from_rfc3339(&ours[theirs.len()]).unwrap().to_utc();
                    if beyond_cronsim <= 3 {
                        println!("cronsim gives up for {what} after {} fires; our next: {ours_next}", theirs.len());
                    }
                    if ours_next < after + chrono::TimeDelta::days(49 * 365) {
                        mismatches += 1;
                        report.push(format!("{what}: cronsim stops after {theirs:?}, we fire at {ours_next}"));
                    }
                    &ours[..theirs.len()]
                } else {
                    &ours[..]
                };
                if ours != theirs {
                    mismatches += 1;
                    if report.len() < 20 {
                        report.push(format!("{what}\n  cronrun: {ours:?}\n  cronsim: {theirs:?}"));
                    }
                }
            }
        }
    }
    println!(
        "time_vs_cronsim: {} expressions x {} zones x {STARTS_PER_ZONE} starts = {} cases",
        n_exprs,
        ZONES.len(),
        cases.len()
    );
    println!("  compared cases: {compared}, fires compared: {fires}, mismatches: {mismatches}");
    println!("  cases where cronsim yielded fires at/before the start (skipped by both): {skipped_cases}");
    println!("  cases where cronsim never returns (prefix compared, rest from our fallback): {loops}");
    println!("  cases where cronsim gives up after 50 years and we fire later (prefix compared): {beyond_cronsim}");
    println!("  compared cases with a-a/s in second, minute, hour, day-of-month, month, day-of-week: {equal_ends:?}");
    println!(
        "  refused by both: {both_refuse}, only by cronsim: {only_cronsim_refuses}, \
         only by cronrun: {only_we_refuse}, cronsim crashed: {crashes}"
    );
    for r in &report {
        println!("MISMATCH {r}");
    }
    assert_eq!(mismatches, 0, "fire instants differ from cronsim");
    assert_eq!(only_we_refuse, 0, "cronrun refuses generated expressions that cronsim accepts");
    assert!(compared >= 10_000, "only {compared} cases compared");
    assert!(equal_ends.iter().all(|n| *n >= 100), "too few a-a/s cases compared per field: {equal_ends:?}");
}
