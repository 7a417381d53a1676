//! Hostile clients holding the identities `cronrun auth init` writes, against a real
//! nats-server: the routes around an allow-list (a reply subject relayed through a request
//! the client sends itself, a push consumer delivering into a subject it may not publish
//! to, another role's durable consumer deleted or its name taken) all fail.

use std::time::Duration;

use crate::support::*;
use cronrun::record::Status;
use futures::{StreamExt, TryStreamExt};

/// Waits (bounded) for the server to refuse a publish to `subject`.
async fn refused_publish(errors: &mut tokio::sync::mpsc::UnboundedReceiver<String>, subject: &str) -> bool {
    refused(errors, ("Publish", subject), Duration::from_secs(5)).await
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
            assert!(
                refused_publish(&mut errors, target).await,
                "{id}: the server did not refuse the answer to {target}"
            );
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

/// A running run's kill subject is pointed at by a viewer's push consumer (the server
/// checks no deliver subject against publish rights), here delivering the run's own output
/// lines `KILL` and `TERM` (apart: two messages); and a bare `KILL` a runner publishes with
/// no answer subject. The runner ignores what reaches it of either, saying so, and the run
/// goes on; `cronrun kill` still stops it. (Runners follow all kill subjects with one
/// wildcard subscription, to which nats-server 2.14 delivers nothing of such a consumer:
/// its deliveries, should they come, carry the stream's `$JS.ACK.` reply and are refused
/// as the bare `KILL` is.)
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_is_taken_only_from_a_kill_request_not_from_a_consumer_delivering_there() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    nats.ok(&["add", "victim", "--schedule", "@yearly", "--", "echo KILL; sleep 0.1; echo TERM; sleep 60"]);
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
        (agent.log().matches("no kill request").count() >= 1).then_some(())
    })
    .await;
    let run = store.get_run("victim", &run_id).await.unwrap().record;
    assert_eq!(run.status, Status::Running, "{run:?}");
    assert!(!agent.log().contains("kill requested"), "{}", agent.log());
    let out = nats.ok(&["kill", &key]);
    assert!(out.contains("sent SIGTERM"), "{out}");
    let run = eventually(Duration::from_secs(20), "the killed run's record", || async {
        let run = store.get_run("victim", &run_id).await.ok()?.record;
        run.status.is_final().then_some(run)
    })
    .await;
    assert_eq!(run.status, Status::Cancelled, "{run:?}");
}

/// A runner identity forges an overlap lease naming a run in progress and lets it expire:
/// the reaper sweeps that job, and the run, which its own lease still names, is not made
/// `lost` (nor retried): an overlap lease's expiry settles only runs no lease names.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_overlap_lease_expiry_makes_no_leased_run_lost() {
    use cronrun::names::{Names, lease_keys};
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let runs = nats.dir.path().join("victim.runs");
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"victim\"\nschedule = \"@yearly\"\noverlap = \"allow\"\nretries = {{ max = 1 }}\n\
             shell = \"echo $CRONRUN_ATTEMPT >> {}; sleep 30\"\n",
            runs.display()
        ),
    );
    let key = nats.trigger("victim");
    let (job, run_id) = cronrun::record::parse_run_key(&key).unwrap();
    let store = nats.store().await;
    eventually(Duration::from_secs(10), "the run to start", || async {
        let run = store.get_run(job, run_id).await.ok()?.record;
        (run.status == Status::Running).then_some(())
    })
    .await;
    let (runner, _) = nats.client_as("runner").await;
    let forger = cronrun::store::Store::open_existing(runner, Names::new("cronrun").unwrap()).await.unwrap();
    let active = lease_keys::active(job);
    cronrun::store::lease::Lease::try_acquire(&forger.leases, &active, &key, Duration::from_secs(1))
        .await
        .unwrap()
        .expect("a runner may write overlap leases");
    let swept = eventually(Duration::from_secs(10), "the reaper to sweep the job on the expiry", || async {
        agent.log().lines().find(|l| l.contains("overlap lease of victim expired")).map(str::to_string)
    })
    .await;
    assert!(swept.contains(": 0 of its runs settled"), "{swept}");
    let run = store.get_run(job, run_id).await.unwrap().record;
    assert_eq!((run.status, run.attempt), (Status::Running, 1), "{run:?}");
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "1\n", "the job ran once");
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

/// A scheduler identity (which may publish dispatches) publishes dispatches with no record,
/// as fires on time go out: one as a retry's third attempt, one as a manual run, and a
/// copy of a fire that already ran. The runner creates a record only for a scheduled
/// fire's first attempt that has none: the first two are dropped, saying so, the copy is
/// refused by the record its run created, and the job ran once, for its own fire.
#[tokio::test(flavor = "multi_thread")]
async fn a_dispatch_with_no_record_starts_only_a_scheduled_fires_first_attempt_once() {
    use cronrun::dispatch::DispatchMsg;
    use cronrun::record::Trigger;
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let dir = nats.dir.path().display().to_string();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"forged\"\nschedule = \"@yearly\"\nshell = 'echo $CRONRUN_RUN_ID >> {dir}/forged.runs'\n"
        ),
    );
    let store = nats.store().await;
    let revision = store.get_job("forged").await.unwrap().revision;
    let (scheduler, _) = nats.client_as("scheduler").await;
    let js = async_nats::jetstream::new(scheduler);
    let now = chrono::Utc::now();
    let publish = |msg: DispatchMsg, id: &str| {
        let (js, subject, id) = (js.clone(), store.names.dispatch_subject("default"), id.to_string());
        async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", id.as_str());
            let body = serde_json::to_vec(&msg).unwrap();
            js.publish_with_headers(subject, headers, body.into()).await.unwrap().await.unwrap();
        }
    };
    let fire = cronrun::record::fire_run_id(now);
    let retry = DispatchMsg {
        attempt: 3,
        ..DispatchMsg::first("forged", "20270101T000000Z".into(), Trigger::Retry, now, revision)
    };
    let manual = DispatchMsg::first("forged", format!("{fire}-mdead"), Trigger::Manual, now, revision);
    let first = DispatchMsg::first("forged", fire.clone(), Trigger::Schedule, now, revision);
    for (msg, id) in [(retry, "forged.retry"), (manual, "forged.manual"), (first.clone(), "forged.first")] {
        publish(msg, id).await;
    }
    let done = final_record(&store, &format!("forged.{fire}")).await;
    assert_eq!((done.status, done.attempt), (Status::Succeeded, 1), "{done:?}");
    // A copy of the fire's dispatch, past the server's deduplication (another id).
    publish(first, "forged.copy").await;
    eventually(Duration::from_secs(15), "the runner to drop both forged dispatches and refuse the copy", || async {
        let log = agent.log();
        let dropped = log.matches("a dispatch with no record that is not a fire's first attempt: dropped").count();
        (dropped == 2 && log.contains("run taken over elsewhere")).then_some(())
    })
    .await;
    for run_id in ["20270101T000000Z".to_string(), format!("{fire}-mdead")] {
        assert!(store.get_run("forged", &run_id).await.is_err(), "a record for forged run {run_id}");
    }
    let runs = std::fs::read_to_string(nats.dir.path().join("forged.runs")).unwrap();
    assert_eq!(runs, format!("{fire}\n"), "the job ran once, for its fire");
    assert_eq!(store.get_run("forged", &fire).await.unwrap().record, done, "the copy wrote to the record");
}

/// The JetStream cluster API and the system account: what moves leaders, removes peers,
/// rewrites or deletes a replicated stream. No identity holds any of it.
const CLUSTER_API: [&str; 9] = [
    "$JS.API.META.LEADER.STEPDOWN",
    "$JS.API.STREAM.LEADER.STEPDOWN.KV_cronrun_jobs",
    "$JS.API.STREAM.PEER.REMOVE.KV_cronrun_runs",
    "$JS.API.CONSUMER.LEADER.STEPDOWN.CRONRUN_EVENTS.notify",
    "$JS.API.SERVER.REMOVE",
    "$JS.API.STREAM.UPDATE.KV_cronrun_leases",
    "$JS.API.STREAM.DELETE.KV_cronrun_jobs",
    "$JS.API.STREAM.PURGE.KV_cronrun_runs",
    "$SYS.REQ.SERVER.PING.JSZ",
];

/// On a 3-node cluster (R3 layout, routes authenticated as `auth init --routes` writes
/// them): every identity, each on another node, is refused the cluster API (stepdowns, peer
/// and server removal, stream updates, deletes and purges) and the system account, directly
/// and relayed through a reply subject answered on another node than the request came in;
/// a route without the route password is refused. The layout is whole after it.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_three_node_cluster_no_identity_moves_leaders_removes_peers_or_joins_as_a_route() {
    let cluster = Cluster::start(3).await;
    let store = cluster.store().await;
    let identities = ["admin", "viewer", "scheduler", "runner", "agent"];
    for (i, id) in identities.into_iter().enumerate() {
        let (client, mut errors) = cluster.client_as(i % 3, id).await;
        for subject in CLUSTER_API {
            client.publish(subject, "{}".into()).await.unwrap();
            client.flush().await.unwrap();
            assert!(refused_publish(&mut errors, subject).await, "{id} on n{}: {subject} was not refused", i % 3);
        }
    }
    // The relay across nodes: the request comes in on n1, is answered from n0.
    for id in ["runner", "agent"] {
        let (answerer, mut errors) = cluster.client_as(0, id).await;
        let (asker, _) = cluster.client_as(1, id).await;
        let mut requests = answerer.subscribe("cronrun.ctl.relay").await.unwrap();
        answerer.flush().await.unwrap();
        for target in ["$KV.cronrun_jobs.pwned", "$JS.API.STREAM.PEER.REMOVE.KV_cronrun_jobs"] {
            // Interest crosses the route shortly after the subscription: asked until it has.
            let mut request = None;
            for _ in 0..20 {
                asker.publish_with_reply("cronrun.ctl.relay", target, "".into()).await.unwrap();
                asker.flush().await.unwrap();
                request = tokio::time::timeout(Duration::from_millis(500), requests.next()).await.ok().flatten();
                if request.is_some() {
                    break;
                }
            }
            let request = request.expect("the request came across the route");
            answerer.publish(request.reply.unwrap(), r#"{"peer":"n2"}"#.into()).await.unwrap();
            answerer.flush().await.unwrap();
            assert!(
                refused_publish(&mut errors, target).await,
                "{id}: the answer to {target} across nodes was not refused"
            );
        }
    }
    for port in [cluster.route_port(0), cluster.route_port(2)] {
        for credentials in ["", r#","user":"cronrun-route","pass":"guessed""#] {
            let answer = route_connect(port, credentials).await;
            assert!(answer.contains("Authorization Violation"), "a route{credentials} was answered {answer:?}");
        }
    }
    assert!(store.jobs.get("pwned").await.unwrap().is_none(), "a job spec was written through a reply subject");
    for stream in ["KV_cronrun_jobs", "KV_cronrun_runs", "KV_cronrun_leases", "CRONRUN_EVENTS"] {
        let info = store.js.get_stream(stream).await.unwrap().info().await.unwrap().clone();
        assert_eq!(info.config.num_replicas, 3, "{stream} kept its replicas");
        assert_eq!(info.cluster.map(|c| c.replicas.len()), Some(2), "{stream} kept its peers");
    }
}

/// Connects to a route port as a route would, with `credentials` (JSON fields, or none),
/// and returns what the node answers.
async fn route_connect(port: u16, credentials: &str) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let info = lines.next_line().await.unwrap().unwrap_or_default();
    assert!(info.starts_with("INFO"), "a route port opens with INFO: {info}");
    let connect = format!(r#"CONNECT {{"verbose":false,"pedantic":false,"name":"intruder"{credentials}}}"#);
    write.write_all(format!("{connect}\r\nPING\r\n").as_bytes()).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await;
    match answer {
        Ok(Ok(Some(line))) => line,
        other => format!("{other:?}"),
    }
}
