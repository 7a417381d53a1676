//! Calendars (`cronrun calendar`) and a job's `exclude`: `next`, `backfill` and the
//! scheduler agree on the fires a calendar leaves; a calendar changed counts from the next
//! fire; bad calendars and unknown names refused in one line, writing nothing.

use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDate, Utc};

use crate::support::*;

fn write(nats: &Nats, name: &str, text: &str) -> String {
    let path = nats.dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

/// The instants `cronrun ... --output json` lists under `key` (or as the whole value).
fn instants(value: &serde_json::Value) -> Vec<DateTime<Utc>> {
    let list = value.as_array().unwrap();
    list.iter().map(|t| DateTime::parse_from_rfc3339(t.as_str().unwrap()).unwrap().to_utc()).collect()
}

/// Berlin's 2026 holidays on weekdays, the Monday after the spring DST change and the
/// Monday after the autumn one among them, as a plain list and as iCalendar.
const HOLIDAYS: &str = "# public holidays\n2026-01-01\n2026-03-30\n2026-04-03\n2026-04-06\n2026-05-01\n\
    2026-10-26\n2026-12-24..2026-12-26\n";
const ICS: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nSUMMARY:Shutdown\r\n\
    DTSTART;VALUE=DATE:20260810\r\nDTEND;VALUE=DATE:20260815\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n";

#[tokio::test(flavor = "multi_thread")]
async fn next_and_backfill_agree_on_a_year_of_fires_across_both_dst_changes() {
    let nats = Nats::start().await;
    nats.ok(&["calendar", "set", "holidays", &write(&nats, "holidays.txt", HOLIDAYS)]);
    nats.ok(&["calendar", "set", "shutdown", &write(&nats, "shutdown.ics", ICS)]);
    apply(
        &nats,
        "[[job]]\nname = \"report\"\nschedule = \"H 6 * * 1-5\"\ntimezone = \"Europe/Berlin\"\n\
         exclude = [\"holidays\", \"shutdown\"]\nshell = \"true\"\n",
    );
    let (from, to) = ("2025-12-01T00:00:00Z", "2026-12-01T00:00:00Z");
    let next = json(&nats.ok(&[
        "next",
        "H 6 * * 1-5",
        "--job",
        "report",
        "--tz",
        "Europe/Berlin",
        "--exclude",
        "holidays",
        "--exclude",
        "shutdown",
        "--from",
        from,
        "-n",
        "400",
        "--output",
        "json",
    ]));
    let to_instant = DateTime::parse_from_rfc3339(to).unwrap().to_utc();
    let next: Vec<_> = instants(&next["fires"]).into_iter().filter(|t| *t < to_instant).collect();
    let plan = json(&nats.ok(&["backfill", "report", "--from", from, "--to", to, "--dry-run", "--output", "json"]));
    let backfill = instants(&plan["to_run"]);
    assert_eq!(next, backfill, "next and backfill list the same fires");

    // And they are the weekdays of the year, less the calendars' days, at the job's slot.
    let tz: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let holiday = |d: NaiveDate| {
        let days = ["2026-01-01", "2026-03-30", "2026-04-03", "2026-04-06", "2026-05-01", "2026-10-26"];
        days.iter().any(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap() == d)
            || (d.month() == 12 && (24..=26).contains(&d.day()) && d.year() == 2026)
            || (d.month() == 8 && (10..=14).contains(&d.day()))
    };
    let mut day = NaiveDate::from_ymd_opt(2025, 12, 1).unwrap();
    let mut expected = 0;
    while day < NaiveDate::from_ymd_opt(2026, 12, 1).unwrap() {
        expected += usize::from(day.weekday().num_days_from_monday() < 5 && !holiday(day));
        day = day.succ_opt().unwrap();
    }
    assert_eq!(backfill.len(), expected, "weekdays less holidays and the shutdown");
    assert!(backfill.iter().all(|t| !holiday(t.with_timezone(&tz).date_naive())), "a fire on an excluded day");
    let local: std::collections::BTreeSet<String> =
        backfill.iter().map(|t| t.with_timezone(&tz).format("%H:%M").to_string()).collect();
    assert_eq!(local.len(), 1, "one local time all year, through both DST changes: {local:?}");
}

/// The scheduler reads a job's calendars as its fires come: excluded today, the job does
/// not run while its twin does; the calendar changed, it runs from the next fire; and
/// back again, it stops.
#[tokio::test(flavor = "multi_thread")]
async fn a_calendar_changed_takes_effect_at_the_next_fire() {
    let nats = Nats::start().await;
    let today = Utc::now().date_naive();
    let around_today = format!("{}..{}\n", today.pred_opt().unwrap(), today.succ_opt().unwrap());
    let other = "2030-01-01\n";
    nats.ok(&["calendar", "set", "today", &write(&nats, "today.txt", &around_today)]);
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let excluded = recording_job("excluded", nats.dir.path()).replace("shell =", "exclude = [\"today\"]\nshell =");
    apply(&nats, &format!("{excluded}{}", recording_job("twin", nats.dir.path())));
    let fires = |name: &str| {
        let text = std::fs::read_to_string(nats.dir.path().join(format!("{name}.fires"))).unwrap_or_default();
        text.lines().map(|l| DateTime::parse_from_rfc3339(l).unwrap().to_utc()).collect::<Vec<_>>()
    };
    eventually(Duration::from_secs(20), "the twin to run three times", || async {
        (fires("twin").len() >= 3).then_some(())
    })
    .await;
    assert!(fires("excluded").is_empty(), "a fire on an excluded day ran");

    let changed = Utc::now();
    nats.ok(&["calendar", "set", "today", &write(&nats, "other.txt", other)]);
    eventually(Duration::from_secs(20), "the job to run twice once today is no longer excluded", || async {
        (fires("excluded").len() >= 2).then_some(())
    })
    .await;
    assert!(fires("excluded").iter().all(|f| *f > changed - chrono::Duration::seconds(1)), "it ran before the change");

    nats.ok(&["calendar", "set", "today", &write(&nats, "today.txt", &around_today)]);
    let back = Utc::now();
    let twin_after = |t: DateTime<Utc>| fires("twin").iter().filter(|f| **f > t).count();
    eventually(Duration::from_secs(20), "the twin to run three times more", || async {
        (twin_after(back + chrono::Duration::seconds(3)) >= 3).then_some(())
    })
    .await;
    let late: Vec<_> = fires("excluded").into_iter().filter(|f| *f > back + chrono::Duration::seconds(3)).collect();
    assert!(late.is_empty(), "fires excluded again ran: {late:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn calendars_are_listed_shown_and_removed_and_bad_ones_are_refused_writing_nothing() {
    let nats = Nats::start().await;
    nats.ok(&["calendar", "set", "holidays", &write(&nats, "holidays.txt", HOLIDAYS)]);
    nats.ok(&["calendar", "set", "shutdown", &write(&nats, "shutdown.ics", ICS)]);
    let listed = json(&nats.ok(&["calendar", "ls", "--output", "json"]));
    let rows: Vec<(String, i64)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap().into(), r["days"].as_i64().unwrap()))
        .collect();
    assert_eq!(rows, [("holidays".to_string(), 9), ("shutdown".to_string(), 5)]);
    assert_eq!(nats.ok(&["calendar", "get", "shutdown"]).trim(), "2026-08-10..2026-08-14");

    let big = "2026-01-01\n".repeat(100_000);
    let cases: [(&[&str], &str); 7] = [
        (
            &[
                "calendar",
                "set",
                "bad",
                &write(&nats, "timed.ics", &ICS.replace(";VALUE=DATE:20260810", ":20260810T090000Z")),
            ],
            "only all-day events",
        ),
        (
            &["calendar", "set", "bad", &write(&nats, "typo.txt", "2026-02-30\n")],
            "typo.txt:1: \"2026-02-30\" is not a date",
        ),
        (&["calendar", "set", "bad", &write(&nats, "big.txt", &big)], "over 1 MiB"),
        (&["calendar", "set", "a.>", &write(&nats, "ok.txt", "2026-01-01\n")], "calendar name \"a.>\""),
        (&["calendar", "set", "bad", "/nonexistent/file"], "cannot read it"),
        (&["calendar", "get", "nope"], "calendar nope does not exist"),
        (&["next", "0 6 * * *", "--exclude", "nope"], "--exclude nope: no such calendar"),
    ];
    for (args, expected) in cases {
        let err = nats.fails(args);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let names: Vec<String> = json(&nats.ok(&["calendar", "ls", "--output", "json"]))
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["holidays", "shutdown"], "a refused calendar was written");

    // A job naming a calendar that does not exist is refused at apply, and not stored.
    let err = refused_at_apply(
        &nats,
        "[[job]]\nname = \"j\"\nschedule = \"0 6 * * *\"\nexclude = [\"holidayz\"]\nshell = \"true\"\n",
    );
    assert!(err.contains("job j excludes calendar holidayz, which does not exist"), "{err}");
    assert!(!nats.cli(&["get", "j"]).status.success(), "the refused job was stored");

    // A calendar a job names is removed only with --force.
    apply(&nats, "[[job]]\nname = \"j\"\nschedule = \"0 6 * * *\"\nexclude = [\"holidays\"]\nshell = \"true\"\n");
    let err = nats.fails(&["calendar", "rm", "holidays"]);
    assert!(err.contains("is named by j"), "{err}");
    nats.ok(&["calendar", "rm", "holidays", "--force"]);
    nats.ok(&["calendar", "rm", "shutdown"]);
    assert_eq!(nats.ok(&["calendar", "ls", "--output", "json"]).trim(), "[]");
}
