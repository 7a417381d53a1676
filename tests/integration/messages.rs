//! Message triggers (`on`): a message published once runs once, judged by what the jobs
//! wrote, even when its runner is killed mid-run; at most `on.concurrency` at once; a
//! message whose run fails goes to `cronrun.dead.<job>`; a job with a schedule too runs for
//! both; bad triggers refused at apply.

use std::time::Duration;

use crate::support::*;
use cronrun::record::{Status, Trigger};
use futures::StreamExt;
use serde_json::Value;

/// Waits until the agents follow `job`'s subject (its consumer exists): messages published
/// before are not for it (the stream keeps a message only for the consumers that exist).
async fn following(nats: &Nats, job: &str) {
    let store = nats.store().await;
    eventually(Duration::from_secs(15), "the agents to follow the job's subject", || async {
        let stream = store.js.get_stream("CRONRUN_MESSAGES").await.ok()?;
        stream.consumer_info(format!("on-{job}")).await.ok().map(drop)
    })
    .await;
}

/// The stored spec of `job`, as `cronrun get --output json` prints it.
fn spec_of(nats: &Nats, job: &str) -> Value {
    let got: Value = serde_json::from_str(&nats.ok(&["get", job, "--output", "json"])).unwrap();
    assert!(got["spec"].is_object(), "{got}");
    got["spec"].clone()
}

fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_published_once_runs_once_even_when_its_runner_is_killed_mid_run() {
    let nats = Nats::start().await;
    let scheduler = nats.scheduler_with("s", "");
    let mut runners = [nats.runner_with("r1", ""), nats.runner_with("r2", "")];
    for agent in runners.iter().chain([&scheduler]) {
        ready(agent).await;
    }
    let dir = nats.dir.path().display().to_string();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"orders\"\non = {{ subject = \"orders.created\" }}\n\
             shell = 'cat > {dir}/input.$CRONRUN_RUN_ID.$CRONRUN_ATTEMPT; echo \"start $CRONRUN_RUN_ID\" >> {dir}/orders.log; \
             sleep 3; echo \"done $CRONRUN_RUN_ID\" >> {dir}/orders.log'\n"
        ),
    );
    following(&nats, "orders").await;
    let client = nats.client().await;
    let js = async_nats::jetstream::new(client.clone());
    js.publish("orders.created", "first".into()).await.unwrap().await.unwrap();

    // The first run starts; its runner dies mid-run.
    let store = nats.store().await;
    let log = nats.dir.path().join("orders.log");
    let started = eventually(Duration::from_secs(20), "the first run to start", || async {
        lines(&log).first().map(|l| l.trim_start_matches("start ").to_string())
    })
    .await;
    let record = store.get_run("orders", &started).await.unwrap().record;
    assert_eq!(record.trigger, Trigger::Message);
    let victim = runners.iter().position(|r| record.host.as_deref() == Some(r.name.as_str())).unwrap();
    runners[victim].kill9();
    let record = final_record(&store, &format!("orders.{started}")).await;
    assert_eq!((record.status, record.attempt), (Status::Succeeded, 2), "run again once its run was lost: {record:?}");

    // A second message, with a header and a payload JSON escapes badly, and a third right
    // behind it: with concurrency 1 and overlap "skip", the third waits its turn.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("X-Order", "42");
    js.publish_with_headers("orders.created", headers, "quote \" nul \0 é".into()).await.unwrap().await.unwrap();
    js.publish("orders.created", "third".into()).await.unwrap().await.unwrap();
    eventually(Duration::from_secs(40), "the second and third messages' runs", || async {
        (lines(&log).iter().filter(|l| l.starts_with("done")).count() == 3).then_some(())
    })
    .await;
    // Counted once nothing more can run: anything run twice has run by then.
    nothing_left_to_run(&store, &["orders"]).await;
    let seen = lines(&log);
    let done: Vec<&String> = seen.iter().filter(|l| l.starts_with("done")).collect();
    assert_eq!(done.len(), 3, "each message ran to its end once: {seen:?}");
    let mut ids: Vec<&str> = done.iter().map(|l| l.trim_start_matches("done ")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "three messages, three runs: {seen:?}");
    assert_eq!(seen.iter().filter(|l| l.starts_with("start")).count(), 4, "four starts, one cut by the kill: {seen:?}");
    let second = done[1].trim_start_matches("done ");
    assert_ne!(second, started);
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(nats.dir.path().join(format!("input.{second}.1"))).unwrap())
            .unwrap();
    assert_eq!(input["subject"], "orders.created");
    assert_eq!(input["headers"]["X-Order"], serde_json::json!(["42"]));
    assert_eq!(input["payload"], "quote \" nul \0 é");
    let first_input = std::fs::read_to_string(nats.dir.path().join(format!("input.{started}.2"))).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&first_input).unwrap()["payload"],
        "first",
        "the retry got the message too"
    );

    // Acked messages are not kept: the stream does not grow with the messages run.
    eventually(Duration::from_secs(10), "the stream to be empty", || async {
        let mut stream = store.js.get_stream("CRONRUN_MESSAGES").await.ok()?;
        (stream.info().await.ok()?.state.messages == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn at_most_concurrency_runs_at_once_a_failed_run_dead_letters_and_a_scheduled_job_runs_per_message_too() {
    let nats = Nats::start().await;
    let (a, b) = (nats.agent("a", ""), nats.agent("b", ""));
    ready(&a).await;
    ready(&b).await;
    let dir = nats.dir.path().display().to_string();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"pair\"\non = {{ subject = \"work.*\", concurrency = 2 }}\noverlap = \"allow\"\n\
             shell = 'echo \"+ $CRONRUN_RUN_ID\" >> {dir}/pair.log; sleep 1; echo \"- $CRONRUN_RUN_ID\" >> {dir}/pair.log'\n\
             [[job]]\nname = \"fails\"\non = {{ subject = \"work.bad\" }}\nshell = 'echo no; exit 2'\n\
             [[job]]\nname = \"both\"\nschedule = \"*/2 * * * * *\"\non = {{ subject = \"both.go\" }}\n\
             overlap = \"allow\"\nshell = 'echo $CRONRUN_RUN_ID >> {dir}/both.log'\n"
        ),
    );
    following(&nats, "pair").await;
    following(&nats, "fails").await;
    following(&nats, "both").await;
    let client = nats.client().await;
    let mut dead = client.subscribe("cronrun.dead.fails").await.unwrap();
    let mut headers = async_nats::HeaderMap::new();
    // A header the server acts on is not carried into the dead letter.
    headers.insert("Nats-Msg-Id", "bad-1");
    client.flush().await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    for i in 0..6 {
        js.publish(format!("work.{i}"), "go".into()).await.unwrap().await.unwrap();
    }
    js.publish_with_headers("work.bad", headers, "payload kept".into()).await.unwrap().await.unwrap();
    js.publish("both.go", "once".into()).await.unwrap().await.unwrap();

    let log = nats.dir.path().join("pair.log");
    eventually(Duration::from_secs(60), "the six runs of pair to end", || async {
        (lines(&log).iter().filter(|l| l.starts_with('-')).count() == 6).then_some(())
    })
    .await;
    let (mut now, mut most) = (0i32, 0i32);
    for line in lines(&log) {
        now += if line.starts_with('+') { 1 } else { -1 };
        most = most.max(now);
    }
    assert_eq!(most, 2, "two at once, never more: {:?}", lines(&log));

    // `work.bad` is on both subjects: pair ran it (7 in all), and fails sent it to the dead letters.
    let letter = tokio::time::timeout(Duration::from_secs(30), dead.next()).await.expect("a dead letter").unwrap();
    assert_eq!(&letter.payload[..], b"payload kept");
    let headers = letter.headers.unwrap();
    assert_eq!(headers.get("Cronrun-Subject").map(|v| v.as_str()), Some("work.bad"));
    assert!(headers.get("Nats-Msg-Id").is_none());
    let error = headers.get("Cronrun-Error").unwrap().as_str().to_string();
    assert!(error.starts_with("failed after 1 attempts"), "{error}");
    assert!(headers.get("Cronrun-Run").unwrap().as_str().starts_with("fails."));
    eventually(Duration::from_secs(10), "pair's run of work.bad", || async {
        (lines(&log).iter().filter(|l| l.starts_with('-')).count() == 7).then_some(())
    })
    .await;
    let mut ids: Vec<String> = lines(&log).iter().filter_map(|l| l.strip_prefix("- ").map(str::to_string)).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 7, "seven messages, seven runs of pair: {:?}", lines(&log));
    assert!(tokio::time::timeout(Duration::from_secs(2), dead.next()).await.is_err(), "one dead letter only");

    // A job with a schedule and a subject runs for both: on its fires, and once for the
    // one message (as the job itself wrote down).
    let both = nats.dir.path().join("both.log");
    eventually(Duration::from_secs(20), "both to run on schedule and for its message", || async {
        let ids = lines(&both);
        let fired = ids.iter().filter(|id| !cronrun::record::is_message_run(id)).count();
        (fired >= 2 && ids.iter().any(|id| cronrun::record::is_message_run(id))).then_some(())
    })
    .await;
    let for_message: Vec<String> = lines(&both).into_iter().filter(|id| cronrun::record::is_message_run(id)).collect();
    assert_eq!(for_message.len(), 1, "one message, one run: {:?}", lines(&both));
    let store = nats.store().await;
    let triggers: Vec<Trigger> = runs(&store, "both").await.iter().map(|r| r.trigger).collect();
    assert!(triggers.contains(&Trigger::Schedule) && triggers.contains(&Trigger::Message), "{triggers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_triggers_are_refused_at_apply_in_one_line_and_nothing_is_written() {
    let nats = Nats::start().await;
    // A stream of the user's own keeps `shop.>`: its subjects cannot be triggers.
    let js = async_nats::jetstream::new(nats.client().await);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "SHOP".into(),
        subjects: vec!["shop.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let job = |on: &str, rest: &str| format!("[[job]]\nname = \"listener\"\nshell = \"true\"\non = {on}\n{rest}\n");
    let cases = [
        (job("{ subject = \"cronrun.dispatch.default\" }", ""), "cronrun's or the server's own"),
        (job("{ subject = \"_INBOX.x\" }", ""), "cronrun's or the server's own"),
        (job("{ subject = \"$JS.API.>\" }", ""), "on.subject \"$JS.API.>\" must be"),
        (job("{ subject = \"orders..created\" }", ""), "on.subject"),
        (job("{ subject = \"orders.>.x\" }", ""), "on.subject"),
        (job("{ subject = \"orders\", concurrency = 2 }", ""), "overlap = \"allow\""),
        (job("{ subject = \"orders\", concurrency = 0 }", ""), "on.concurrency must be 1 to 1000"),
        (job("{ subject = \"orders\", redeliver = 1000000 }", ""), "on.redeliver"),
        (job("{ subject = \"orders\", when = 1 }", ""), "unknown field `when`"),
        (job("{ subject = \"orders\" }", "history = { succeeded = 0 }"), "keeps at least 1 run of each kind"),
        (job("{ subject = \"orders\", concurrency = 2 }", "overlap = \"allow\"\nlock = true"), "with a lock"),
        (job("{ subject = \"shop.paid\" }", ""), "a subject another stream keeps cannot be a trigger"),
    ];
    for (toml, needle) in cases {
        let err = refused_at_apply(&nats, &toml);
        assert!(err.contains(needle), "{toml}: {err}");
    }
    let jobs: Vec<Value> = serde_json::from_str(&nats.ok(&["ls", "--output", "json"])).unwrap();
    assert!(jobs.is_empty(), "nothing written: {jobs:?}");
}

/// `on` and `after` set in a Rust component's `#[job]` attribute (`plugins/tests/echo`):
/// `deploy` follows them as `apply` would, a binary payload arrives base64, a message too
/// big for an input is dead-lettered, and a redeploy keeps what the component carries.
#[tokio::test(flavor = "multi_thread")]
async fn triggers_carried_by_a_component_run_it_per_message_and_after_its_upstream() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    apply(&nats, "[[job]]\nname = \"echo-upstream\"\nschedule = \"@yearly\"\nshell = 'exit 3'\n");
    let echo = plugin("test_echo").display().to_string();
    nats.ok(&["deploy", &echo, "--name", "echo"]);
    let spec = spec_of(&nats, "echo");
    assert_eq!(spec["on"], serde_json::json!({ "subject": "echo.in", "concurrency": 1, "redeliver": 1 }), "{spec}");
    assert_eq!(spec["after"], serde_json::json!([{ "job": "echo-upstream", "on": "finished" }]), "{spec}");
    following(&nats, "echo").await;
    // The end of `echo-upstream` starts `echo` only once the agents follow chains.
    let store = nats.store().await;
    following_chains(&store, &["echo"]).await;

    let client = nats.client().await;
    let mut dead = client.subscribe("cronrun.dead.echo").await.unwrap();
    client.flush().await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    js.publish("echo.in", vec![0xff, 0x00, 0x80].into()).await.unwrap().await.unwrap();
    js.publish("echo.in", vec![b'x'; cronrun::record::MAX_INPUT_BYTES + 1].into()).await.unwrap().await.unwrap();
    nats.ok(&["trigger", "echo-upstream"]);

    let ended = eventually(Duration::from_secs(30), "a message run and a chained run of echo", || async {
        let ended: Vec<_> = runs(&store, "echo").await.into_iter().filter(|r| r.status.is_final()).collect();
        (ended.len() == 2).then_some(ended)
    })
    .await;
    let by = |trigger: Trigger| ended.iter().find(|r| r.trigger == trigger).unwrap_or_else(|| panic!("{ended:?}"));
    let message = by(Trigger::Message);
    assert_eq!(message.status, Status::Succeeded, "{message:?}");
    let input = message.input.clone().unwrap();
    assert_eq!((input["subject"].as_str(), input["payload_base64"].as_str()), (Some("echo.in"), Some("/wCA")));
    assert!(message.output.join("\n").contains("/wCA"), "the guest read its input: {message:?}");
    let chained = by(Trigger::Chain);
    assert_eq!(chained.status, Status::Succeeded, "{chained:?}");
    assert_eq!(chained.input.as_ref().unwrap()["after"]["status"], "failed", "{chained:?}");

    let letter = tokio::time::timeout(Duration::from_secs(30), dead.next()).await.expect("a dead letter").unwrap();
    assert_eq!(letter.payload.len(), cronrun::record::MAX_INPUT_BYTES + 1);
    let error = letter.headers.unwrap().get("Cronrun-Error").unwrap().as_str().to_string();
    assert!(error.contains("over the limit of"), "why: {error}");

    // A redeploy of a component without triggers keeps the ones the stored job has.
    nats.ok(&["deploy", &plugin("hello").display().to_string(), "--name", "echo"]);
    let spec = spec_of(&nats, "echo");
    assert_eq!(spec["on"]["subject"], "echo.in", "{spec}");
    assert_eq!(spec["after"][0]["job"], "echo-upstream", "{spec}");
    nats.ok(&["deploy", &plugin("hello").display().to_string(), "--name", "echo", "--drop-triggers"]);
    let spec = spec_of(&nats, "echo");
    assert!(spec["on"].is_null() && spec["after"].as_array().is_none_or(Vec::is_empty), "{spec}");

    // A component built without the SDK gets its triggers from `cronrun manifest`.
    let component = nats.dir.path().join("listener.wasm");
    std::fs::copy(python_plugin("hello"), &component).unwrap();
    let file = component.display().to_string();
    let refused = nats.fails(&["manifest", &file, "--on", "py.in", "--after", "echo:sometimes"]);
    assert!(refused.contains("unknown variant `sometimes`"), "{refused}");
    nats.ok(&["manifest", &file, "--on", "py.in", "--after", "echo-upstream:failed", "--after", "echo"]);
    nats.ok(&["deploy", &file]);
    let spec = spec_of(&nats, "listener");
    assert_eq!(spec["on"]["subject"], "py.in", "{spec}");
    let after = serde_json::json!([{ "job": "echo-upstream", "on": "failed" }, { "job": "echo", "on": "succeeded" }]);
    assert_eq!(spec["after"], after, "{spec}");
}
