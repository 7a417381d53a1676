//! A job's `dst` choice: `cronrun next --dst` lists New York's 2026 fires as each choice
//! places them, a job's `dst` survives `apply`, `get`, `export` and `diff`, and a bad
//! value is refused in one line writing nothing. (The scheduler's and catch-up's use of
//! the job's choice is unit-tested where they compute fires:
//! `scheduler/firing/queue.rs`, `scheduler/firing/catchup.rs`; a real agent would need a
//! faked clock to cross a DST change.)

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

use crate::support::*;

/// How many of `expr`'s first 800 fires from 2026 in New York fall on each of `days` (local
/// dates of 2026, which 800 fires pass at up to two a day), with `--dst` `dst` (none: the
/// default).
fn fires_on(nats: &Nats, expr: &str, dst: Option<&str>, days: &[&str]) -> Vec<usize> {
    let mut args = vec!["next", expr, "--tz", "America/New_York", "--from", "2026-01-01T05:00:00Z", "-n", "800"];
    args.extend(dst.map(|d| ["--dst", d]).into_iter().flatten());
    args.extend(["--output", "json"]);
    let fires: Value = serde_json::from_str(&nats.ok(&args)).unwrap();
    let local: Vec<NaiveDate> = fires
        .as_array()
        .unwrap()
        .iter()
        .map(|f| DateTime::parse_from_rfc3339(f.as_str().unwrap()).unwrap().with_timezone(&Utc))
        .map(|f| f.with_timezone(&cronrun::schedule::Tz::America__New_York).date_naive())
        .collect();
    days.iter().map(|d| local.iter().filter(|l| l.to_string() == *d).count()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn next_shows_each_dst_choice_over_a_year_of_new_york() {
    let nats = Nats::start().await;
    // 8 March: 02:00 EST -> 03:00 EDT; 1 November: 02:00 EDT -> 01:00 EST; 2 March a plain day.
    let days = ["2026-03-08", "2026-11-01", "2026-03-02"];
    let cases: &[(&str, Option<&str>, [usize; 3])] = &[
        ("30 1 * * *", Some("twice"), [1, 2, 1]),
        ("30 1 * * *", None, [1, 1, 1]),
        ("30 1 * * *", Some("debian"), [1, 1, 1]),
        ("30 2 * * *", Some("skip"), [0, 1, 1]),
        ("30 2 * * *", None, [1, 1, 1]),
        // Not fixed times: the wall clock whatever the choice, both passes of 01:00-02:00
        // on 1 November, none of 02:00-03:00 on 8 March.
        ("*/30 1 * * *", Some("debian"), [2, 4, 2]),
        ("*/30 1 * * *", Some("skip"), [2, 4, 2]),
        ("*/30 2 * * *", Some("twice"), [0, 2, 2]),
    ];
    for (expr, dst, expected) in cases {
        assert_eq!(fires_on(&nats, expr, *dst, &days), expected, "{expr} --dst {dst:?}");
    }
    let err = nats.fails(&["next", "30 2 * * *", "--dst", "sometimes"]);
    assert!(err.contains("--dst: dst \"sometimes\" is not a choice; use \"debian\""), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_dst_is_kept_shown_and_exported_and_a_bad_one_writes_nothing() {
    let nats = Nats::start().await;
    let job = |dst: &str| {
        format!(
            "[[job]]\nname = \"ny\"\nschedule = \"30 1 * * *\"\ntimezone = \"America/New_York\"\n{dst}shell = \"true\"\n"
        )
    };
    let err = refused_at_apply(&nats, &job("dst = \"sometimes\"\n"));
    assert!(
        err.contains("dst \"sometimes\" is not a choice; use \"debian\" (the default), \"skip\" or \"twice\""),
        "{err}"
    );
    assert!(nats.store().await.list_jobs().await.unwrap().is_empty(), "a refused dst wrote something");

    apply(&nats, &job("dst = \"twice\"\n"));
    let shown: Value = serde_json::from_str(&nats.ok(&["get", "ny", "--output", "json"])).unwrap();
    assert_eq!(shown["spec"]["dst"], "twice", "{shown}");
    let exported = nats.ok(&["export"]);
    assert!(exported.contains("dst = \"twice\""), "{exported}");
    let path = nats.dir.path().join("exported.toml");
    std::fs::write(&path, &exported).unwrap();
    nats.ok(&["diff", "-f", path.to_str().unwrap()]);
    // Back to the default: left out of the export, and `diff` sees the change from twice.
    std::fs::write(&path, job("")).unwrap();
    assert!(!nats.cli(&["diff", "-f", path.to_str().unwrap()]).status.success(), "diff missed dst");
    apply(&nats, &job(""));
    assert!(!nats.ok(&["export"]).contains("dst"), "a default dst is exported");
}
