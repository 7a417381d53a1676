//! `[telemetry] otlp_endpoint`: each run one trace, exported over OTLP/HTTP to a real
//! receiver (`support::otlp`), its `traceparent` carried to the runner and to the job.

use std::collections::BTreeMap;
use std::time::Duration;

use cronrun::record::{RunRecord, Status};

use crate::support::*;

/// An agent (both roles) exporting to `collector`, its batches sent every 200 ms (the
/// SDK's `OTEL_BSP_SCHEDULE_DELAY`; 5 s by default).
fn traced_agent(nats: &Nats, collector: &Receiver) -> Agent {
    let toml = format!("{}\n[telemetry]\notlp_endpoint = \"{}\"\n", test_config("a1"), collector.url(""));
    nats.agent_with_env("a1", &toml, &[("OTEL_BSP_SCHEDULE_DELAY", "200")])
}

/// The first run of `job` to end as `status`.
async fn a_run_ended(store: &cronrun::store::Store, job: &str, status: Status) -> RunRecord {
    eventually(Duration::from_secs(30), &format!("a run of {job} to end {status:?}"), || async {
        runs(store, job).await.into_iter().find(|r| r.status == status)
    })
    .await
}

/// The spans of run `run_id` once all five are in, by name (one each).
async fn spans_of(collector: &Receiver, run_id: &str) -> BTreeMap<String, OtlpSpan> {
    const NAMES: [&str; 5] = ["fire", "dispatch", "claim", "run", "finish"];
    eventually(Duration::from_secs(20), &format!("the five spans of run {run_id}"), || async {
        let spans: Vec<OtlpSpan> =
            collector.spans().into_iter().filter(|s| s.attr("cronrun.run_id") == Some(run_id)).collect();
        let all = NAMES.iter().all(|name| spans.iter().any(|s| s.name == *name));
        all.then(|| {
            let by_name: BTreeMap<String, OtlpSpan> = spans.iter().map(|s| (s.name.clone(), s.clone())).collect();
            assert_eq!(by_name.len(), spans.len(), "one span of each name: {spans:#?}");
            by_name
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scheduled_run_is_one_trace_from_fire_to_finish_and_its_job_continues_it() {
    let nats = Nats::start().await;
    let collector = Receiver::start(0, 0).await;
    let agent = traced_agent(&nats, &collector);
    ready(&agent).await;
    let out = nats.dir.path().join("tp");
    std::fs::create_dir(&out).unwrap();
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"traced\"\nschedule = \"*/2 * * * * *\"\n\
             shell = \"printf %s \\\"$TRACEPARENT\\\" > {}/$CRONRUN_RUN_ID\"\n",
            out.display()
        ),
    );
    let store = nats.store().await;
    let run = a_run_ended(&store, "traced", Status::Succeeded).await;
    let spans = spans_of(&collector, &run.run_id).await;

    // One trace, a tree rooted at the fire: fire → dispatch → claim, run, finish.
    let trace = &spans["fire"].trace_id;
    assert!(spans.values().all(|s| &s.trace_id == trace), "{spans:#?}");
    assert_eq!(spans["fire"].parent, "", "the fire span is the root");
    assert_eq!(spans["dispatch"].parent, spans["fire"].span_id);
    for child in ["claim", "run", "finish"] {
        assert_eq!(spans[child].parent, spans["dispatch"].span_id, "{child}'s parent is the dispatch");
    }
    // Each within its own bounds; the dispatch within the fire (the runner may get the
    // message before the scheduler its ack: the claim may start before the dispatch ends).
    assert!(spans.values().all(|s| s.start_ns <= s.end_ns), "{spans:#?}");
    assert!(spans["fire"].start_ns <= spans["dispatch"].start_ns && spans["dispatch"].end_ns <= spans["fire"].end_ns);
    assert!(spans["dispatch"].start_ns <= spans["claim"].start_ns && spans["run"].end_ns <= spans["finish"].end_ns);

    // What each says of the run.
    for (name, span) in &spans {
        assert_eq!(span.attr("cronrun.job"), Some("traced"), "{name}");
        assert_eq!(span.attr("cronrun.run_id"), Some(run.run_id.as_str()), "{name}");
        assert_eq!(span.attr("cronrun.attempt"), Some("1"), "{name}");
        assert_eq!(span.attr("cronrun.trigger"), Some("schedule"), "{name}");
        assert_eq!(span.resource.get("service.name").map(String::as_str), Some("cronrun"), "{name}");
        assert_eq!(span.resource.get("service.instance.id").map(String::as_str), Some("a1"), "{name}");
        assert!(!span.error, "{name} is not an error");
    }
    for name in ["run", "finish"] {
        assert_eq!(spans[name].attr("cronrun.status"), Some("succeeded"), "{name}");
    }
    // Lateness: the run's start against its fire, as the record has both.
    let lateness = (run.started_at.unwrap() - run.scheduled_at.unwrap()).num_milliseconds();
    let reported: i64 = spans["run"].attr("cronrun.lateness_ms").unwrap().parse().unwrap();
    assert!((reported - lateness).abs() <= 1, "lateness {reported} ms, the record says {lateness} ms");

    // The job was given the run span as its parent.
    let given = std::fs::read_to_string(out.join(&run.run_id)).unwrap();
    assert_eq!(given, format!("00-{trace}-{}-01", spans["run"].span_id));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_is_traced_with_status_failed_and_its_run_span_an_error() {
    let nats = Nats::start().await;
    let collector = Receiver::start(0, 0).await;
    let agent = traced_agent(&nats, &collector);
    ready(&agent).await;
    apply(&nats, "[[job]]\nname = \"breaks\"\nschedule = \"*/2 * * * * *\"\nshell = \"exit 3\"\n");
    let store = nats.store().await;
    let run = a_run_ended(&store, "breaks", Status::Failed).await;
    let spans = spans_of(&collector, &run.run_id).await;
    for name in ["run", "finish"] {
        assert_eq!(spans[name].attr("cronrun.status"), Some("failed"), "{name}");
    }
    assert!(spans["run"].error, "the run span's status is an error");
    assert!(!spans["finish"].error, "recording the failure went well");
    assert_eq!(spans["claim"].parent, spans["dispatch"].span_id);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_attempt_joins_its_runs_trace_under_the_same_fire() {
    let nats = Nats::start().await;
    let collector = Receiver::start(0, 0).await;
    let agent = traced_agent(&nats, &collector);
    ready(&agent).await;
    apply(
        &nats,
        "[[job]]\nname = \"flaky\"\nschedule = \"*/2 * * * * *\"\nshell = \"exit 3\"\n\
         retries = { max = 1, backoff = \"1s\" }\n",
    );
    let store = nats.store().await;
    let run = eventually(Duration::from_secs(40), "a run of flaky to fail its second attempt", || async {
        runs(&store, "flaky").await.into_iter().find(|r| r.status == Status::Failed && r.attempt == 2)
    })
    .await;
    let spans = eventually(Duration::from_secs(20), "both attempts' spans", || async {
        let spans: Vec<OtlpSpan> =
            collector.spans().into_iter().filter(|s| s.attr("cronrun.run_id") == Some(run.run_id.as_str())).collect();
        let finishes = spans.iter().filter(|s| s.name == "finish").count();
        (finishes == 2).then_some(spans)
    })
    .await;
    let fire: Vec<&OtlpSpan> = spans.iter().filter(|s| s.name == "fire").collect();
    assert_eq!(fire.len(), 1, "one fire for both attempts: {spans:#?}");
    assert!(spans.iter().all(|s| s.trace_id == fire[0].trace_id), "one trace: {spans:#?}");
    let of_attempt = |name: &str, attempt: &str| {
        spans.iter().find(|s| s.name == name && s.attr("cronrun.attempt") == Some(attempt)).unwrap()
    };
    for attempt in ["1", "2"] {
        let dispatch = of_attempt("dispatch", attempt);
        assert_eq!(dispatch.parent, fire[0].span_id, "attempt {attempt}'s dispatch hangs from the fire");
        for child in ["claim", "run", "finish"] {
            assert_eq!(of_attempt(child, attempt).parent, dispatch.span_id, "attempt {attempt}'s {child}");
        }
    }
    assert_eq!(of_attempt("dispatch", "2").attr("cronrun.trigger"), Some("retry"));
    assert_eq!(of_attempt("run", "2").attr("cronrun.status"), Some("failed"));
}

/// A guest reads its run's trace context from the SDK (`ctx.traceparent()`): the example
/// `hello` logs it, and it names the run's trace and its `run` span.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_reads_its_runs_traceparent_from_the_sdk() {
    let nats = Nats::start().await;
    let collector = Receiver::start(0, 0).await;
    let agent = traced_agent(&nats, &collector);
    ready(&agent).await;
    // `hello` fires every 10 seconds.
    nats.ok(&["deploy", &plugin("hello").display().to_string()]);
    let store = nats.store().await;
    let run = a_run_ended(&store, "hello", Status::Succeeded).await;
    let spans = spans_of(&collector, &run.run_id).await;
    let expected = format!("traceparent 00-{}-{}-01", spans["run"].trace_id, spans["run"].span_id);
    assert!(run.output.iter().any(|l| l.contains(&expected)), "{expected} not in {:?}", run.output);
}
