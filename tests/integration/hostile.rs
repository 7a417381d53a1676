//! Hostile clients holding the identities `cronrun auth init` writes, against a real
//! nats-server: the routes around an allow-list (a reply subject relayed through a request
//! the client sends itself, a push consumer delivering into a subject it may not publish
//! to, another role's durable consumer deleted or its name taken) all fail.

use std::time::Duration;

use crate::support::*;
use cronrun::record::Status;
use futures::{StreamExt, TryStreamExt};

/// Waits (bounded) for the server to refuse a publish to `subject`.
async fn refused(errors: &mut tokio::sync::mpsc::UnboundedReceiver<String>, subject: &str) -> bool {
    let refusal = format!("Permissions Violation for Publish to \"{subject}\"");
    tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(error) = errors.recv().await {
            if error.contains(&refusal) {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false)
}

/// A runner host taken over: its identity sends itself a request on a control subject it
/// may use, with a job spec write (or a stream delete) as the reply subject, and answers
/// it. Identities have no `allow_responses`, so the answer is refused like any publish.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_cannot_write_a_job_or_delete_a_stream_through_a_reply_subject() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    let spec = r#"{"name":"pwned","schedule":"* * * * * *","shell":{"command":"id > /tmp/pwned"}}"#;
    let relays = [("$KV.cronrun_jobs.pwned", spec), ("$JS.API.STREAM.DELETE.KV_cronrun_jobs", "")];
    for id in ["runner", "agent"] {
        for (target, body) in relays {
            let (client, mut errors) = nats.client_as(id).await;
            let mut requests = client.subscribe("cronrun.ctl.relay").await.unwrap();
            client.publish_with_reply("cronrun.ctl.relay", target, "".into()).await.unwrap();
            let request = tokio::time::timeout(Duration::from_secs(5), requests.next()).await.unwrap().unwrap();
            assert_eq!(request.reply.as_deref(), Some(target), "{id}: its own request came back");
            client.publish(request.reply.unwrap(), body.to_string().into()).await.unwrap();
            client.flush().await.unwrap();
            assert!(refused(&mut errors, target).await, "{id}: the server did not refuse the answer to {target}");
        }
    }
    assert!(store.jobs.get("pwned").await.unwrap().is_none(), "a job spec was written through a reply subject");
    store.js.get_stream("KV_cronrun_jobs").await.expect("the jobs bucket survives");
}

/// A viewer reads with consumers of its own; the schedulers' durables (`notify` on the
/// events stream, `chains` on the runs bucket's) are not its to delete, replace or squat.
#[tokio::test(flavor = "multi_thread")]
async fn a_viewer_cannot_delete_or_take_the_schedulers_durable_consumers() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let store = nats.store().await;
    let events = store.js.get_stream("CRONRUN_EVENTS").await.unwrap();
    eventually(Duration::from_secs(20), "the schedulers' notify consumer", || async {
        events.clone().consumer_info("notify").await.ok().map(|_| ())
    })
    .await;
    let (viewer, _) = nats.client_as("viewer").await;
    let js = async_nats::jetstream::new(viewer);
    let viewed = js.get_stream("CRONRUN_EVENTS").await.expect("a viewer reads the events stream");
    assert!(viewed.delete_consumer("notify").await.is_err(), "a viewer deleted the notify consumer");
    let squat =
        async_nats::jetstream::consumer::pull::Config { durable_name: Some("chains".into()), ..Default::default() };
    let runs = js.get_stream("KV_cronrun_runs").await.unwrap();
    assert!(runs.create_consumer(squat).await.is_err(), "a viewer made a consumer named chains");
    // What a viewer reads with still works: an ordered consumer of its own.
    viewed
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await
        .expect("a viewer makes an ordered consumer");
    events.clone().consumer_info("notify").await.expect("the notify consumer is still there");
    let names: Vec<String> =
        store.js.get_stream("KV_cronrun_runs").await.unwrap().consumer_names().try_collect().await.unwrap();
    assert!(!names.contains(&"chains".to_string()), "{names:?}");
}

/// A running run's kill subject receives what a viewer's push consumer delivers there (the
/// server checks no deliver subject against publish rights), here the run's own output
/// lines `KILL` and `TERM`; and a bare `KILL` a runner publishes with no answer subject.
/// The runner ignores both, saying so, and the run goes on; `cronrun kill` still stops it.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_is_taken_only_from_a_kill_request_not_from_a_consumer_delivering_there() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    nats.ok(&["add", "victim", "--schedule", "@yearly", "--", "echo KILL; echo TERM; sleep 60"]);
    let key = nats.trigger("victim");
    let run_id = key.split_once('.').unwrap().1.to_string();
    let store = nats.store().await;
    eventually(Duration::from_secs(20), "the run to print and go on running", || async {
        let run = store.get_run("victim", &run_id).await.ok()?.record;
        (run.status == Status::Running && run.output.iter().any(|l| l.contains("TERM"))).then_some(())
    })
    .await;
    let kill_subject = store.names.kill_subject("victim", &run_id);
    let (viewer, _) = nats.client_as("viewer").await;
    let js = async_nats::jetstream::new(viewer);
    let logs = js.get_stream("CRONRUN_LOGS").await.unwrap();
    let _delivering = logs
        .create_consumer(async_nats::jetstream::consumer::push::Config {
            deliver_subject: kill_subject.clone(),
            filter_subject: store.names.logs_subject("victim", &run_id),
            ..Default::default()
        })
        .await
        .expect("the server lets a viewer point a push consumer anywhere");
    let (runner, _) = nats.client_as("runner").await;
    runner.publish(kill_subject.clone(), "KILL".into()).await.unwrap();
    runner.flush().await.unwrap();
    eventually(Duration::from_secs(10), "the runner to ignore what is no kill request", || async {
        (agent.log().matches("no kill request").count() >= 2).then_some(())
    })
    .await;
    let run = store.get_run("victim", &run_id).await.unwrap().record;
    assert_eq!(run.status, Status::Running, "{run:?}");
    let out = nats.ok(&["kill", &key]);
    assert!(out.contains("sent SIGTERM"), "{out}");
    let run = eventually(Duration::from_secs(20), "the killed run's record", || async {
        let run = store.get_run("victim", &run_id).await.ok()?.record;
        run.status.is_final().then_some(run)
    })
    .await;
    assert_eq!(run.status, Status::Cancelled, "{run:?}");
}

/// A runner identity writes what a scheduler acts on: run records queued as retries (one
/// of a job without retries, one with an input the job's schema refuses) and run leases
/// that expire at once. The scheduler checks each against its job's spec and dispatches
/// neither: both end `failed`, saying why, and neither job ran.
#[tokio::test(flavor = "multi_thread")]
async fn forged_retry_records_start_nothing_their_jobs_do_not_allow() {
    use cronrun::names::{Names, lease_keys};
    use cronrun::record::{RunRecord, Trigger};
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let dir = nats.dir.path().display().to_string();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"no-retries\"\nschedule = \"@yearly\"\nshell = \"touch {dir}/ran-no-retries\"\n\
             [[job]]\nname = \"schema\"\nschedule = \"@yearly\"\nretries = {{ max = 3 }}\n\
             input_schema = {{ type = \"object\", required = [\"n\"] }}\nshell = \"touch {dir}/ran-schema\"\n"
        ),
    );
    let (runner, _) = nats.client_as("runner").await;
    let forger = cronrun::store::Store::open_existing(runner, Names::new("cronrun").unwrap()).await.unwrap();
    let run_id = "20270101T000000Z";
    let forged = [("no-retries", None), ("schema", Some(serde_json::json!({ "cmd": "rm -rf /" })))];
    for (job, input) in &forged {
        let mut record = RunRecord::queued(job, run_id, Trigger::Retry, chrono::Utc::now(), 1);
        record.attempt = 2;
        record.input = input.clone();
        forger.create_run(&record).await.expect("a runner may write run records");
        let lease = lease_keys::run(job, run_id);
        cronrun::store::lease::Lease::try_acquire(&forger.leases, &lease, "forged", Duration::from_secs(1))
            .await
            .unwrap()
            .expect("a runner may write run leases");
    }
    let store = nats.store().await;
    for (job, _) in forged {
        let run = eventually(Duration::from_secs(30), "the forged record to be judged", || async {
            let run = store.get_run(job, run_id).await.ok()?.record;
            run.status.is_final().then_some(run)
        })
        .await;
        assert_eq!(run.status, Status::Failed, "{run:?}");
        assert!(run.error.as_deref().unwrap_or_default().starts_with("not dispatched:"), "{run:?}");
        assert!(!nats.dir.path().join(format!("ran-{job}")).exists(), "{job} ran");
    }
}
