//! Chains (`after`): the end of a run starts one run of each job chained after its job,
//! judged by what the jobs themselves wrote; cycles and bad `after` lists refused at apply.

use crate::support::*;
use cronrun::record::{Status, Trigger};
use serde_json::Value;
use std::time::Duration;

/// A shell job that appends `<job> <run id> <its input, one line>` to `log`, then exits
/// with `exit` (shell text: `$in` is the input).
fn logging_job(name: &str, log: &std::path::Path, extra: &str, exit: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nshell = 'in=$(cat); echo \"$CRONRUN_JOB $CRONRUN_RUN_ID $in\" >> {}; exit {exit}'\n{extra}\n",
        log.display()
    )
}

/// The lines of `log` as (job, run id, input).
fn lines(log: &std::path::Path) -> Vec<(String, String, Value)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let (job, run) = (parts.next().unwrap().to_string(), parts.next().unwrap().to_string());
            (job, run, serde_json::from_str(parts.next().unwrap_or("")).unwrap_or(Value::Null))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_three_jobs_runs_in_order_once_per_upstream_run_through_an_agent_death_and_a_deleted_consumer() {
    let nats = Nats::start().await;
    let (mut a, b) = (nats.agent("a", ""), nats.agent("b", ""));
    ready(&a).await;
    ready(&b).await;
    let log = nats.dir.path().join("chain.log");
    let jobs = [
        // Exits with its input, if given one. Triggered twice at once below: both run.
        logging_job("extract", &log, "schedule = \"@yearly\"\noverlap = \"allow\"", "${in:-0}"),
        // Chained runs obey `overlap` as fires do: the two chains started at once run side by side.
        logging_job("transform", &log, "after = [{ job = \"extract\" }]\noverlap = \"allow\"", "0"),
        logging_job("load", &log, "after = [{ job = \"transform\", on = \"succeeded\" }]\noverlap = \"allow\"", "0"),
        logging_job("cleanup", &log, "after = [{ job = \"extract\", on = \"failed\" }]", "0"),
        // Fails twice (a retry): only its last attempt's end starts `report`.
        logging_job("flaky", &log, "schedule = \"@yearly\"\nretries = { max = 1, backoff = \"1s\" }", "3"),
        logging_job("report", &log, "after = [{ job = \"flaky\", on = \"finished\" }]", "0"),
    ];
    apply(&nats, &jobs.concat());
    let listed = nats.ok(&["ls"]);
    assert!(listed.contains("after extract succeeded"), "ls shows a job without a schedule by its upstream: {listed}");

    let count = |job: &str| lines(&log).iter().filter(|(j, _, _)| j == job).count();
    // A chain applies to the runs that end once the agents follow it (within a second).
    let store = nats.store().await;
    following_chains(&store, &["transform", "load", "cleanup", "report"]).await;
    let runs_stream = store.js.get_stream("KV_cronrun_runs").await.unwrap();
    let extracts = [nats.trigger("extract"), nats.trigger("extract")];
    eventually(Duration::from_secs(30), "both chains to reach load", || async { (count("load") == 2).then_some(()) })
        .await;
    // A scheduler dies; the other one follows the chains alone. Someone deletes the
    // shared consumer: it is made again.
    a.kill9();
    runs_stream.delete_consumer("chains").await.unwrap();
    eventually(Duration::from_secs(15), "the chains consumer to be made again", || async {
        runs_stream.consumer_info("chains").await.ok().map(drop)
    })
    .await;
    let third = nats.trigger("extract");
    nats.trigger("flaky");
    let failed = nats.ok(&["trigger", "extract", "--input", "1", "--output", "json"]);
    let failed: Value = serde_json::from_str(&failed).unwrap();
    let failed = failed["run"].as_str().unwrap().split_once('.').unwrap().1.to_string();
    eventually(Duration::from_secs(60), "the third chain, the report and the cleanup", || async {
        (count("load") == 3 && count("report") == 1 && count("cleanup") == 1).then_some(())
    })
    .await;
    // Counted once nothing more can run: anything started twice has run by then.
    nothing_left_to_run(&store, &["extract", "transform", "load", "cleanup", "flaky", "report"]).await;

    let seen = lines(&log);
    let position = |job: &str, run: &str| {
        seen.iter()
            .position(|(j, r, _)| j == job && r == run)
            .unwrap_or_else(|| panic!("{job} {run} did not run: {seen:?}"))
    };
    let extract_runs: Vec<&str> = extracts.iter().chain([&third]).map(|key| key.split_once('.').unwrap().1).collect();
    for (job, upstream_job, upstream_runs) in [
        ("transform", "extract", extract_runs.iter().map(|r| r.to_string()).collect::<Vec<_>>()),
        ("load", "transform", seen.iter().filter(|(j, _, _)| j == "transform").map(|(_, r, _)| r.clone()).collect()),
    ] {
        let runs: Vec<&(String, String, Value)> = seen.iter().filter(|(j, _, _)| j == job).collect();
        assert_eq!(runs.len(), 3, "{job} ran once per upstream run: {seen:?}");
        let mut upstreams: Vec<String> = Vec::new();
        for (_, run, input) in runs {
            let after = &input["after"];
            assert_eq!((after["job"].as_str(), after["status"].as_str()), (Some(upstream_job), Some("succeeded")));
            let upstream = after["run_id"].as_str().unwrap().to_string();
            assert!(
                upstream_runs.contains(&upstream),
                "{job} {run} names an upstream run that did not run: {upstream}"
            );
            assert!(position(upstream_job, &upstream) < position(job, run), "{job} {run} ran before {upstream}");
            upstreams.push(upstream);
        }
        upstreams.sort();
        upstreams.dedup();
        assert_eq!(upstreams.len(), 3, "{job}: one run per upstream run");
    }
    // The failed extract started cleanup, and nothing after extract's successes.
    let (_, cleanup, input) = seen.iter().find(|(j, _, _)| j == "cleanup").unwrap();
    assert_eq!((input["after"]["run_id"].as_str(), input["after"]["exit_code"].as_i64()), (Some(&failed[..]), Some(1)));
    assert!(position("extract", &failed) < position("cleanup", cleanup));
    assert_eq!((count("cleanup"), count("transform"), count("extract")), (1, 3, 4), "{seen:?}");
    assert_eq!((count("flaky"), count("report")), (2, 1), "flaky ran its two attempts, report once after them");
    let (_, _, report) = seen.iter().find(|(j, _, _)| j == "report").unwrap();
    assert_eq!((report["after"]["status"].as_str(), report["after"]["exit_code"].as_i64()), (Some("failed"), Some(3)));
    let last_flaky = seen.iter().rposition(|(j, _, _)| j == "flaky").unwrap();
    assert!(
        last_flaky < seen.iter().position(|(j, _, _)| j == "report").unwrap(),
        "report ran after flaky's last attempt"
    );

    let loads = runs(&store, "load").await;
    assert_eq!(loads.len(), 3);
    for record in loads {
        assert_eq!((record.trigger, record.status), (Trigger::Chain, Status::Succeeded), "{record:?}");
    }
    // Without chains, nothing follows the run records any more.
    for job in ["transform", "load", "cleanup", "report"] {
        nats.ok(&["rm", job]);
    }
    eventually(Duration::from_secs(10), "the chains consumer to go", || async {
        runs_stream.consumer_info("chains").await.is_err().then_some(())
    })
    .await;
    drop(b);
}

#[tokio::test(flavor = "multi_thread")]
async fn cycles_and_bad_after_lists_are_refused_at_apply_in_one_line_and_nothing_is_written() {
    let nats = Nats::start().await;
    let file = nats.dir.path().join("jobs.toml");
    let job = |name: &str, rest: &str| format!("[[job]]\nname = \"{name}\"\nshell = \"true\"\n{rest}\n");
    // An upstream that does not exist yet is allowed, with a warning.
    std::fs::write(&file, job("b", "after = [{ job = \"a\" }]")).unwrap();
    let out = nats.cli(&["apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job \"a\" exists yet"));

    let cases = [
        (job("a", "after = [{ job = \"b\" }]"), "a runs after b, b runs after a"),
        (
            [job("x", "after = [{ job = \"y\" }]"), job("y", "after = [{ job = \"x\", on = \"failed\" }]")].concat(),
            "x runs after y, y runs after x",
        ),
        (job("s", "after = [{ job = \"s\" }]"), "cannot run after itself"),
        (job("w", "after = [{ job = \"orders.*\" }]"), "orders.*"),
        (job("o", "after = [{ job = \"b\", on = \"sometimes\" }]"), "unknown variant `sometimes`"),
        (job("t", "after = [{ job = \"b\", when = \"now\" }]"), "unknown field `when`"),
        (
            [job("h", "schedule = \"@daily\"\nhistory = { succeeded = 0 }"), job("k", "after = [{ job = \"h\" }]")]
                .concat(),
            "k runs after h, which keeps no succeeded runs (history.succeeded = 0)",
        ),
        (job("n", ""), "schedule is missing"),
    ];
    for (toml, needle) in cases {
        let err = refused_at_apply(&nats, &toml);
        assert!(err.contains(needle), "{toml}: {err}");
    }
    let names: Vec<Value> = serde_json::from_str(&nats.ok(&["ls", "--output", "json"])).unwrap();
    let names: Vec<&str> = names.iter().filter_map(|j| j["name"].as_str()).collect();
    assert_eq!(names, ["b"], "only the first file was written");
}
