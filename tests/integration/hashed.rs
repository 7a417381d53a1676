//! Jenkins' `H` in schedules: `cronrun next --job`, `ls` and the scheduler fire a job at
//! the slots its name resolves to, the engine's own answer; bad `H` is refused in one line.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use cronrun::record::Trigger;
use cronrun::schedule::Schedule;
use serde_json::Value;

use crate::support::*;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn instant(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap().with_timezone(&Utc)
}

#[tokio::test(flavor = "multi_thread")]
async fn next_ls_and_the_scheduler_agree_on_a_jobs_h_slots() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    // Every 5 seconds from the job's own offset in 0..5, and a daily job from a file.
    nats.ok(&["add", "spread", "--schedule", "H/5 * * * * *", "--", "true"]);
    apply(&nats, "[[job]]\nname = \"nightly\"\nschedule = \"H H * * *\"\nshell = \"true\"\n");
    for (job, expr) in [("spread", "H/5 * * * * *"), ("nightly", "H H * * *")] {
        let engine = Schedule::parse_for(expr, job).unwrap();
        let next_now = || json(&nats.ok(&["next", expr, "--job", job, "-n", "1", "--output", "json"]));
        let text = nats.ok(&["next", expr, "--job", job, "-n", "1"]);
        assert!(text.starts_with(&format!("resolved: {}\n", engine.expr())), "{text}");
        // `ls` shows the next fire the scheduler would dispatch: read between two `next`
        // that agree, so that no fire (every 5 s) passed between the commands.
        let mut compared = false;
        for _ in 0..5 {
            let next = next_now();
            assert_eq!(next["resolved"], engine.expr(), "{job}");
            let ls = json(&nats.ok(&["ls", "--output", "json"]));
            if next_now()["fires"][0] != next["fires"][0] {
                continue;
            }
            let row = ls.as_array().unwrap().iter().find(|r| r["name"] == job).unwrap().clone();
            assert_eq!(row["schedule"], expr);
            assert_eq!(instant(&row["next"]), instant(&next["fires"][0]), "{job}: ls {row} vs next {next}");
            compared = true;
            break;
        }
        assert!(compared, "{job}: a fire passed between `next` and `ls` five times");
    }
    // The scheduler's fires are the ones `next --job` lists from just before the first.
    let store = nats.store().await;
    let fired = eventually(Duration::from_secs(30), "three scheduled runs of spread", || async {
        let mut at: Vec<_> = runs(&store, "spread")
            .await
            .into_iter()
            .filter(|r| r.trigger == Trigger::Schedule)
            .filter_map(|r| r.scheduled_at)
            .collect();
        at.sort();
        (at.len() >= 3).then_some(at)
    })
    .await;
    let from = (fired[0] - TimeDelta::milliseconds(1)).to_rfc3339();
    let next =
        json(&nats.ok(&["next", "H/5 * * * * *", "--job", "spread", "--from", &from, "-n", "3", "--output", "json"]));
    let listed: Vec<_> = next["fires"].as_array().unwrap().iter().map(instant).collect();
    assert_eq!(listed, fired[..3], "the scheduler fired {fired:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_h_is_refused_in_one_line_and_nothing_is_written() {
    let nats = Nats::start().await;
    let cases: &[(&[&str], &str)] = &[
        (
            &["next", "H * * * *"],
            "minute field \"H\": H needs the job's name to pick its slot: give it with --job NAME",
        ),
        (&["validate", "--schedule", "0 H * * *"], "hour field \"H\": H needs the job's name"),
        (&["next", "H(5-1) * * * *", "--job", "j"], "range 5-1 is reversed"),
        (&["next", "H * * * *", "--job", "bad.name"], "--job: job name \"bad.name\""),
        (&["validate", "--schedule", "H/0 * * * *", "--job", "j"], "step must be at least 1"),
        (&["add", "j", "--schedule", "H(5-1) * * * *", "--", "true"], "range 5-1 is reversed"),
        (&["add", "j", "--schedule", "0 0 0 1 1 * H", "--", "true"], "not allowed in the year field"),
    ];
    for (args, expect) in cases {
        let err = nats.fails(args);
        assert!(err.starts_with("error: ") && err.contains(expect), "{args:?}: {err:?} should say {expect:?}");
    }
    let err = refused_at_apply(&nats, "[[job]]\nname = \"j\"\nschedule = \"H(0-99) * * * *\"\nshell = \"true\"\n");
    assert!(err.contains("99 is out of range 0-59"), "{err}");
    assert!(nats.store().await.list_jobs().await.unwrap().is_empty(), "a refused H wrote something");
    // With the name, the same check passes and says what it resolved to.
    let resolved = Schedule::parse_for("H * * * *", "j").unwrap();
    let ok = nats.ok(&["validate", "--schedule", "H * * * *", "--job", "j"]);
    assert_eq!(ok.trim(), format!("\"H * * * *\" is valid (resolved: {})", resolved.expr()));
}
