//! `cronrun backfill`: the fires of a past range, each run once however often the command
//! is repeated or interrupted, one at a time or all at once, judged by what the jobs
//! recorded; bad ranges refused in one line with nothing written.

use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};

use crate::support::*;

/// A job of `schedule` that appends `<run id> <start, ms since the epoch>` to
/// `<dir>/<name>.ran`, then sleeps `sleep` seconds.
fn job(name: &str, schedule: &str, dir: &std::path::Path, sleep: u32) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n\
         shell = 'echo $CRONRUN_RUN_ID $(date +%s%3N) >> {}/{name}.ran; sleep {sleep}'\n",
        dir.display()
    )
}

/// What `job` recorded: (run id, start in ms) per execution.
fn ran(nats: &Nats, name: &str) -> Vec<(String, i64)> {
    let text = std::fs::read_to_string(nats.dir.path().join(format!("{name}.ran"))).unwrap_or_default();
    let parse = |l: &str| l.split_once(' ').map(|(id, ms)| (id.to_string(), ms.trim().parse().unwrap()));
    text.lines().filter_map(parse).collect()
}

fn hour(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0).unwrap().with_second(0).unwrap().with_minute(0).unwrap()
}

/// The run ids of `fires`' backfills, sorted.
fn backfill_ids(fires: &[DateTime<Utc>]) -> Vec<String> {
    let mut ids: Vec<String> = fires.iter().map(|f| cronrun::record::backfill_run_id(*f)).collect();
    ids.sort();
    ids
}

fn sorted_ids(runs: &[(String, i64)]) -> Vec<String> {
    let mut ids: Vec<String> = runs.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backfill_runs_each_past_fire_once_however_often_it_is_repeated_or_interrupted() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    // History of two runs: the records of most backfilled fires are pruned as it goes.
    let to = hour(Utc::now());
    let from = to - chrono::Duration::hours(6);
    let fires: Vec<DateTime<Utc>> = (0..6).map(|h| from + chrono::Duration::hours(h)).collect();
    // Hourly in the six hours before this one only: the schedule's own next fire is some
    // 18 hours away, so no scheduled run of its own joins the backfilled ones.
    let hours: Vec<String> = fires.iter().map(|f| f.hour().to_string()).collect();
    let schedule = format!("0 {} * * *", hours.join(","));
    let report =
        job("report", &schedule, nats.dir.path(), 1).replace("shell =", "history = { succeeded = 2 }\nshell =");
    apply(&nats, &report);
    let (from_arg, to_arg) = (from.to_rfc3339(), to.to_rfc3339());
    let range = ["backfill", "report", "--from", from_arg.as_str(), "--to", to_arg.as_str()];

    let plan: serde_json::Value =
        serde_json::from_str(&nats.ok(&[&range[..], &["--dry-run", "--output", "json"]].concat())).unwrap();
    assert_eq!(plan["to_run"].as_array().unwrap().len(), 6, "{plan}");
    assert!(ran(&nats, "report").is_empty(), "a dry run runs nothing");

    // Interrupted (Ctrl-C) once two fires ran: the run going on finishes, no more start.
    let mut first = nats.command().args(range).stderr(std::process::Stdio::piped()).spawn().unwrap();
    eventually(Duration::from_secs(30), "two backfilled fires to start", || async {
        (ran(&nats, "report").len() >= 2).then_some(())
    })
    .await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    assert!(!wait_exit(&mut first, Duration::from_secs(10)).await.success(), "an interrupted backfill exits non-zero");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().unwrap(), &mut said).unwrap();
    assert!(said.trim_end().lines().count() == 1 && said.contains("give the same command again"), "{said}");
    let after_stop = ran(&nats, "report").len();
    assert!(after_stop < 6, "the backfill went on after Ctrl-C: {after_stop} ran");

    // Given again, it goes on: every fire ran once, in fire order, one after another.
    let summary: serde_json::Value =
        serde_json::from_str(&nats.ok(&[&range[..], &["--output", "json"]].concat())).unwrap();
    assert_eq!(summary["backfilled_before"].as_u64().unwrap() as usize, after_stop, "{summary}");
    let runs = ran(&nats, "report");
    assert_eq!(sorted_ids(&runs), backfill_ids(&fires), "each fire ran once: {runs:?}");
    assert!(runs.windows(2).all(|w| w[0].0 < w[1].0 && w[1].1 - w[0].1 >= 1000), "queued runs overlapped: {runs:?}");

    // Given a third time, it runs nothing.
    let summary: serde_json::Value =
        serde_json::from_str(&nats.ok(&[&range[..], &["--output", "json"]].concat())).unwrap();
    assert_eq!((summary["dispatched"].as_u64(), summary["backfilled_before"].as_u64()), (Some(0), Some(6)));
    assert_eq!(ran(&nats, "report").len(), 6);
    let records: Vec<serde_json::Value> =
        serde_json::from_str(&nats.ok(&["runs", "report", "--output", "json"])).unwrap();
    assert!(records.iter().all(|r| r["trigger"] == "backfill" && r["status"] == "succeeded"), "{records:?}");
    // Pruned to its history (2) and what the runner finished since its last prune (up to
    // 5, `runner::prune`): the repeat above found fires with no record left.
    assert!(records.len() < fires.len(), "no backfilled record was pruned: {records:?}");

    // The job removed and made again under its name backfills its fires afresh.
    nats.ok(&["rm", "report"]);
    apply(&nats, &report);
    let plan: serde_json::Value =
        serde_json::from_str(&nats.ok(&[&range[..], &["--dry-run", "--output", "json"]].concat())).unwrap();
    assert_eq!(plan["to_run"].as_array().unwrap().len(), 6, "{plan}");
}

/// `--overlap allow` starts every backfilled run at once, though the job's own policy
/// (`skip`) would have them skip one another; fires the schedule ran are left out unless
/// `--rerun` asks for them.
#[tokio::test(flavor = "multi_thread")]
async fn allow_runs_the_backfill_at_once_and_fires_run_on_schedule_are_left_out_unless_rerun() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(&nats, &job("slow", "0 0 1 1 *", nats.dir.path(), 3));
    let out = nats.ok(&["backfill", "slow", "--from", "2021-01-01", "--to", "2026-01-01", "--overlap", "allow"]);
    assert!(out.contains("5 dispatched"), "{out}");
    let runs = eventually(Duration::from_secs(30), "five backfilled runs to start", || async {
        let runs = ran(&nats, "slow");
        (runs.len() == 5).then_some(runs)
    })
    .await;
    let starts: Vec<i64> = runs.iter().map(|r| r.1).collect();
    let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(spread < 3000, "all five started within one run's 3 s: {runs:?}");

    // Fires the schedule ran: an every-second job, three of its fires.
    apply(&nats, &job("tick", "* * * * * *", nats.dir.path(), 0));
    // Four: the range, up to the fourth's instant, is past.
    let ticks = eventually(Duration::from_secs(30), "four scheduled fires", || async {
        let runs = ran(&nats, "tick");
        (runs.len() >= 4).then_some(runs)
    })
    .await;
    let fire = |id: &str| DateTime::parse_from_str(&format!("{id}+0000"), "%Y%m%dT%H%M%SZ%z").unwrap().to_utc();
    let (first, third) = (fire(&ticks[0].0), fire(&ticks[2].0));
    let (from, to) = (first.to_rfc3339(), (third + chrono::Duration::seconds(1)).to_rfc3339());
    let range = ["backfill", "tick", "--from", from.as_str(), "--to", to.as_str(), "--output", "json"];
    let plan: serde_json::Value = serde_json::from_str(&nats.ok(&[&range[..], &["--dry-run"]].concat())).unwrap();
    assert_eq!(plan["to_run"].as_array().unwrap().len(), 0, "{plan}");
    assert_eq!(plan["ran_on_schedule"].as_array().unwrap().len(), 3, "{plan}");
    let summary: serde_json::Value = serde_json::from_str(&nats.ok(&[&range[..], &["--rerun"]].concat())).unwrap();
    assert_eq!(summary["dispatched"], 3, "{summary}");
    let backfilled: Vec<String> = ran(&nats, "tick").into_iter().map(|r| r.0).filter(|id| id.ends_with("-b")).collect();
    assert_eq!(backfilled, backfill_ids(&[first, fire(&ticks[1].0), third]), "--rerun ran each once more");
}

/// Bad ranges and values, each refused in one line with no backfill written.
#[tokio::test(flavor = "multi_thread")]
async fn bad_backfills_are_refused_in_one_line_writing_nothing() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(&nats, &job("tick", "* * * * * *", nats.dir.path(), 0));
    apply(&nats, "[[job]]\nname = \"chained\"\nafter = [{ job = \"tick\" }]\nshell = \"true\"\n");
    let future = (Utc::now() + chrono::Duration::days(1)).date_naive().to_string();
    let cases: [(&[&str], &str); 10] = [
        (&["nope", "--from", "2026-01-01", "--to", "2026-01-02"], "job \"nope\" not found"),
        (&["tick", "--from", "2026-01-02", "--to", "2026-01-01"], "is not before --to"),
        (&["tick", "--from", "2026-01-01", "--to", &future], "is in the future"),
        (&["tick", "--from", "2026-01-01", "--to", "2026-01-02"], "more than 1000 fires"),
        (&["tick", "--from", "2026-01-01", "--to", "2026-01-02", "--max", "0"], "--max 0: give 1 to 100000"),
        (&["tick", "--from", "2026-01-01", "--to", "2026-01-02", "--max", "100001"], "give 1 to 100000"),
        (&["tick", "--from", "2026-01-01", "--to", "2026-01-02", "--overlap", "skip"], "--overlap \"skip\""),
        (&["tick", "--from", "yesterday", "--to", "2026-01-02"], "--from \"yesterday\": give an RFC 3339"),
        (&["chained", "--from", "2026-01-01", "--to", "2026-01-02"], "has no schedule"),
        (&["tick", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:00:10Z", "--max", "9"], "more than 9"),
    ];
    for (args, expected) in cases {
        let err = nats.fails(&[&["backfill"], args].concat());
        assert!(err.contains(expected), "backfill {args:?}: {err}");
    }
    let runs: Vec<serde_json::Value> = serde_json::from_str(&nats.ok(&["runs", "--output", "json"])).unwrap();
    assert!(!runs.iter().any(|r| r["trigger"] == "backfill"), "a refused backfill wrote a run");
}
