//! What a run costs in NATS: the messages it stores, counted as the server stores them
//! (an ordered consumer per stream, from before the first run, filtered to the job; the
//! dispatches as they are published), and
//! what `cronrun logs`, `nats sub` and the events show of it with the defaults.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, push};
use cronrun::record::Status;
use futures::StreamExt;

use crate::support::*;

/// Stored messages by stream, then by subject.
type Stored = Arc<Mutex<BTreeMap<String, BTreeMap<String, usize>>>>;

/// Counts what `stream` stores on `subjects` from now on.
async fn tap(store: &cronrun::store::Store, stream: &str, subjects: Vec<String>, stored: Stored) {
    let consumer = store
        .js
        .get_stream(stream)
        .await
        .unwrap()
        .create_consumer(push::OrderedConfig {
            deliver_subject: store.client.new_inbox(),
            filter_subjects: subjects,
            deliver_policy: DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let stream = stream.to_string();
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            let mut stored = stored.lock().unwrap();
            *stored.entry(stream.clone()).or_default().entry(message.subject.to_string()).or_default() += 1;
        }
    });
}

/// With the defaults (`overlap = "skip"`, no `[events] lifecycle`), each run of an
/// every-second job printing three lines publishes one log message (its lines and its
/// end), one event (its end) and one dispatch; all it stores, leases and record writes
/// included (places in line apart), stays within 8 messages a run: its record is written
/// twice, created `running` by its runner and made final (9 while the scheduler created
/// it `queued` first), and its overlap lease is its lease (10-11 while each run took a
/// lease of its own besides, 12 while a runner
/// wrote its claim into the record, 13 while the overlap lease was marked ended at every
/// run's end, 17 before the events became opt-in and the lines batched; docs/nats.md,
/// "What a run stores", has the rest of the way to 6). `cronrun logs` and a plain
/// subscriber still read the three lines.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_with_the_defaults_stores_one_log_message_one_event_and_its_output_reads_back_whole() {
    let nats = Nats::start().await;
    let agent = nats.agent_with_env("a", &default_events(&test_config("a")), &[]);
    ready(&agent).await;
    let store = nats.store().await;
    let stored: Stored = Arc::default();
    let (runs_stream, leases_stream) =
        (format!("KV_{}", store.names.runs_bucket()), format!("KV_{}", store.names.leases_bucket()));
    let kv = |bucket: &str, key: &str| format!("$KV.{bucket}.{key}");
    let (runs_bucket, leases_bucket) = (store.names.runs_bucket(), store.names.leases_bucket());
    let taps = [
        (runs_stream.as_str(), vec![kv(&runs_bucket, "cost.>")]),
        (
            leases_stream.as_str(),
            ["run.cost.>", "active.cost", "queued.cost", "wait.cost.>"].map(|key| kv(&leases_bucket, key)).to_vec(),
        ),
        (&store.names.events_stream(), vec![store.names.wildcard("events")]),
        (&store.names.logs_stream(), vec![store.names.wildcard("logs")]),
    ];
    for (stream, subjects) in taps {
        tap(&store, stream, subjects, stored.clone()).await;
    }
    // A work queue takes no second consumer: its publishes are counted as they go by
    // (one deduplicated by the server would count too).
    let mut dispatches = store.client.subscribe(store.names.wildcard("dispatch")).await.unwrap();
    let counted = stored.clone();
    let dispatch_stream = store.names.dispatch_stream();
    tokio::spawn(async move {
        while let Some(message) = dispatches.next().await {
            let mut stored = counted.lock().unwrap();
            *stored.entry(dispatch_stream.clone()).or_default().entry(message.subject.to_string()).or_default() += 1;
        }
    });
    let mut live = store.client.subscribe(store.names.logs_subject("cost", "*")).await.unwrap();
    store.client.flush().await.unwrap();

    apply(&nats, "[[job]]\nname = \"cost\"\nschedule = \"* * * * * *\"\nshell = \"echo one; echo two; echo three\"\n");
    eventually(Duration::from_secs(30), "six runs of cost to end", || async {
        let ended = runs(&store, "cost").await.iter().filter(|r| r.status.is_final()).count();
        (ended >= 6).then_some(())
    })
    .await;
    nats.ok(&["pause", "cost"]);
    // Whatever was dispatched before the pause ends, and its last writes land.
    let records = eventually(Duration::from_secs(20), "the runs of cost to end", || async {
        let records = runs(&store, "cost").await;
        records.iter().all(|r| r.status.is_final()).then_some(records)
    })
    .await;
    // Each run's last messages: its end event and its lease released (the job's overlap
    // lease, taken and purged by each run that started).
    let leases = leases_stream.clone();
    let events_stream = store.names.events_stream();
    let started = records.iter().filter(|r| r.started_at.is_some()).count();
    let active = format!("$KV.{}.active.cost", store.names.leases_bucket());
    let landed = |stored: &BTreeMap<String, BTreeMap<String, usize>>| {
        let ends: usize = stored
            .get(&events_stream)
            .map_or(0, |e| e.iter().filter(|(s, _)| !s.ends_with(".changed")).map(|(_, n)| n).sum());
        let released = stored.get(&leases).and_then(|l| l.get(&active)).is_some_and(|n| *n >= 2 * started);
        ends == records.len() && released
    };
    eventually(Duration::from_secs(20), "each run's end event and released lease", || async {
        landed(&stored.lock().unwrap()).then_some(())
    })
    .await;
    let stored = stored.lock().unwrap().clone();
    let total: usize = stored.values().flat_map(|subjects| subjects.values()).sum();
    // A fire that comes while the run before it still ends stands in line (a place set and
    // removed): a matter of the machine's load, not of what a run costs. Counted apart.
    let in_line: usize =
        stored.values().flat_map(|s| s.iter()).filter(|(s, _)| s.contains(".wait.")).map(|(_, n)| n).sum();
    let per_run = (total - in_line) as f64 / records.len() as f64;
    println!(
        "{} runs stored {total} messages ({in_line} places in line), {per_run:.2} a run: {stored:#?}",
        records.len()
    );
    assert!(records.iter().filter(|r| r.status == Status::Succeeded).count() >= 6, "{records:?}");
    assert!(per_run <= 8.0, "{per_run:.2} stored messages a run: {stored:#?}");
    let of = |stream: String| stored.get(&stream).cloned().unwrap_or_default();
    // Each record written at most twice: by its runner only, created at its start (or its
    // skip), then final.
    let written = of(runs_stream.clone());
    assert_eq!(written.len(), records.len(), "{written:?}");
    assert!(written.values().all(|n| *n <= 2), "{written:?}");
    // One log message a run, one dispatch a run.
    let logs = of(store.names.logs_stream());
    assert_eq!(logs.len(), records.len(), "{logs:?}");
    assert!(logs.values().all(|n| *n == 1), "{logs:?}");
    assert_eq!(of(store.names.dispatch_stream()).values().sum::<usize>(), records.len(), "{stored:#?}");
    // The events: each run's end, nothing of its dispatch or start (the two `changed` are
    // the apply and the pause).
    let events = of(store.names.events_stream());
    let kind = |subject: &str| subject.rsplit('.').next().unwrap_or_default().to_string();
    let ends: usize = events.iter().filter(|(subject, _)| kind(subject) != "changed").map(|(_, n)| n).sum();
    let finals = ["succeeded", "failed", "skipped", "timed_out", "lost", "cancelled"];
    assert!(events.keys().all(|s| kind(s) == "changed" || finals.contains(&kind(s).as_str())), "{events:?}");
    assert_eq!(ends, records.len(), "{events:?}");
    // A run's output, as `cronrun logs` and a plain subscriber see it.
    let key = records.iter().find(|r| r.status == Status::Succeeded).unwrap().key();
    assert_eq!(nats.ok(&["logs", &key]), "one\ntwo\nthree\n");
    let message = tokio::time::timeout(Duration::from_secs(5), live.next()).await.unwrap().unwrap();
    let status = message.headers.as_ref().and_then(|h| h.get("Cronrun-Eof")).map(|s| s.to_string());
    assert_eq!(
        (String::from_utf8_lossy(&message.payload).as_ref(), status.as_deref()),
        ("one\ntwo\nthree\n", Some("succeeded")),
        "a short run's lines and its end in one message"
    );
}
