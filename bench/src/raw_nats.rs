//! The NATS work of a run without cronrun, measured the way `throughput` measures runs:
//! per run a KV create and a deduplicated publish to a work queue (256 in flight), then a
//! pull, two compare-and-sets and an ack. Beside `throughput` it shows what cronrun adds.
//!
//! That is 4 stored messages a run, where a cronrun run, a fire due at once with `overlap
//! = "allow"` (as `throughput` runs them), stores 7 (docs/nats.md, What a run stores). With
//! `--layout` each run stores what such a run does: no record until the worker's first
//! compare-and-set (a create, as a fire on time is dispatched with none), a run lease taken and
//! released (a key with a TTL, then purged with a marker), the `succeeded` event and
//! three output lines with their end in one message (core publishes into streams,
//! unacknowledged), with a durable consumer acking each event (the notifier) and a watch
//! handed each lease change (the reaper): what NATS itself costs for what a run stores,
//! so that the gap to `throughput` is cronrun's own. `--cluster 3`: every bucket and
//! stream at three replicas on a local cluster. The dispatch of a fire on time alone (the
//! publish, nobody working the queue off: such a fire has no record until its runner's) is
//! `bench dispatch`'s anchor.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, consumer::pull, kv, stream};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;

use super::deployment::CpuWindow;
use cronrun::cli::Ctx;
use cronrun::store::LEASE_MARKER_TTL;
use cronrun::store::kv::RELEASE_MARKER_TTL;

const BUCKET: &str = "benchnats";
const STREAM: &str = "BENCHNATS";
const LEASES: &str = "benchnatsleases";
const EVENTS: &str = "BENCHNATS_EVENTS";
const LOGS: &str = "BENCHNATS_LOGS";
/// What a run stores beside the 4 messages: a `hello` run's lines, as cronrun stores them.
const LINES: [&str; 3] = [
    "hello from thru-000",
    "run thru-000.20261127T120000Z (attempt 1, trigger schedule) scheduled at 2026-11-27T12:00:00Z",
    "config keys: ",
];

/// Which NATS work a run does, raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Work {
    /// A scheduler's dispatch of a fire on time alone: a deduplicated publish (1 stored).
    Dispatch,
    /// And a runner's work on it: a pull, two compare-and-sets and an ack (4 stored).
    Run,
    /// What a fire on time stores under the layout instead, with its readers: its record
    /// created by the worker, not before the publish (7 stored).
    Layout,
}

impl Work {
    fn stored(self) -> u32 {
        match self {
            Work::Dispatch => 1,
            Work::Run => 4,
            Work::Layout => 7,
        }
    }
}

/// The raw work measured: its figures, its line, and its rate (runs per second).
pub(super) struct Measured {
    pub value: serde_json::Value,
    pub text: String,
    pub runs_per_second: f64,
}

pub(super) async fn run(ctx: &Ctx, url: &str, runs: usize, work: Work, servers: (usize, &[u32])) -> Result<()> {
    let measured = measure(url, runs, work, servers).await?;
    ctx.print(&measured.value, || measured.text.clone())
}

/// `runs` runs of the raw `work` on the server at `url`; what it stores is removed after.
pub(super) async fn measure(
    url: &str,
    runs: usize,
    work: Work,
    (replicas, server_pids): (usize, &[u32]),
) -> Result<Measured> {
    let client = cronrun::connect::connect(url, None, "cronrun-bench-nats").await?;
    let js = jetstream::new(client.clone());
    let layout = match work {
        Work::Layout => Some(Layout::create(&js, replicas).await?),
        Work::Dispatch | Work::Run => None,
    };
    let kv = js
        .create_key_value(kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .context("creating the bench bucket")?;
    let queue = js
        .get_or_create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["benchnats.work".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: Duration::from_secs(600),
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .context("creating the bench stream")?;
    let worker = match work {
        Work::Dispatch => None,
        Work::Run | Work::Layout => Some(work_off(&queue, kv.clone(), layout.clone(), runs).await?),
    };

    let start = Instant::now();
    let cpu = CpuWindow::start(server_pids);
    let mut in_flight = FuturesUnordered::new();
    for i in 0..runs {
        let (kv, js) = (kv.clone(), js.clone());
        in_flight.push(async move {
            let key = format!("run.{i:07}");
            // A fire on time is published with no record (its worker creates it, from
            // revision 0); `bench nats` creates the record first.
            let revision = match work {
                Work::Dispatch | Work::Layout => 0,
                Work::Run => kv.create(&key, Bytes::from_static(b"queued")).await?,
            };
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", key.as_str());
            let body = format!("{key} {revision}");
            js.publish_with_headers("benchnats.work", headers, body.into_bytes().into()).await?.await?;
            anyhow::Ok(())
        });
        if in_flight.len() >= 256 {
            in_flight.next().await.transpose()?;
        }
    }
    while let Some(r) = in_flight.next().await {
        r?;
    }
    if let Some(worker) = worker {
        match tokio::time::timeout(Duration::from_secs(600), worker).await {
            Ok(Ok(result)) => result?,
            Ok(Err(e)) => bail!("bench worker: {e}"),
            Err(_) => bail!("the worker did not finish {runs} runs in 10 minutes"),
        }
    }
    let took = start.elapsed();
    let (cpu_json, cpu_text) = cpu.report(runs, "client");
    let rate = runs as f64 / took.as_secs_f64();
    js.delete_stream(STREAM).await.ok();
    js.delete_key_value(BUCKET).await.ok();
    if let Some(layout) = layout {
        layout.delete(&js).await;
    }
    let stored = work.stored();
    let value = json!({ "runs": runs, "stored_per_run": stored, "replicas": replicas, "total_s": took.as_secs_f64(),
                        "runs_per_second": rate, "cpu_per_run": cpu_json });
    let text = format!(
        "{runs} runs of raw NATS work ({stored} stored messages each, R{replicas}) in {:.1}s: {rate:.0} runs/s{cpu_text}",
        took.as_secs_f64()
    );
    Ok(Measured { value, text, runs_per_second: rate })
}

/// The worker: what a runner does per message, with up to 1,024 messages in hand, until
/// `runs` are done.
async fn work_off(
    queue: &stream::Stream,
    kv: kv::Store,
    layout: Option<Layout>,
    runs: usize,
) -> Result<tokio::task::JoinHandle<Result<()>>> {
    let consumer = queue
        .get_or_create_consumer(
            "work",
            pull::Config { durable_name: Some("work".into()), ack_wait: Duration::from_secs(30), ..Default::default() },
        )
        .await
        .context("creating the bench consumer")?;
    let mut messages = consumer.stream().max_messages_per_batch(256).messages().await?;
    Ok(tokio::spawn(async move {
        let mut in_hand = FuturesUnordered::new();
        let mut done = 0;
        while done < runs {
            tokio::select! {
                Some(msg) = messages.next(), if in_hand.len() < 1024 => {
                    let msg = msg.map_err(|e| anyhow::anyhow!("pulling: {e}"))?;
                    let (kv, layout) = (kv.clone(), layout.clone());
                    in_hand.push(async move {
                        // "<key> <revision>", as cronrun's dispatch message carries the record.
                        let body = String::from_utf8_lossy(&msg.payload).into_owned();
                        let (key, revision) = body.split_once(' ').context("bench message")?;
                        let lease = match &layout {
                            Some(layout) => Some(layout.start(key).await?),
                            None => None,
                        };
                        let revision = kv.update(key, Bytes::from_static(b"running"), revision.parse()?).await?;
                        if let Some(layout) = &layout {
                            layout.output(key).await?;
                        }
                        kv.update(key, Bytes::from_static(b"succeeded"), revision).await?;
                        if let (Some(layout), Some(lease)) = (&layout, lease) {
                            layout.event(key, "succeeded").await?;
                            layout.leases.purge_expect_revision_with_ttl(key, lease, RELEASE_MARKER_TTL).await?;
                        }
                        msg.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
                        anyhow::Ok(())
                    });
                }
                Some(result) = in_hand.next() => {
                    result?;
                    done += 1;
                }
            }
        }
        anyhow::Ok(())
    }))
}

/// What `--layout` adds to each run, and the readers cronrun has of it.
#[derive(Clone)]
struct Layout {
    client: async_nats::Client,
    leases: kv::Store,
    readers: std::sync::Arc<tokio_util::task::AbortOnDropHandle<()>>,
}

impl Layout {
    async fn create(js: &jetstream::Context, replicas: usize) -> Result<Self> {
        let leases = js
            .create_key_value(kv::Config {
                bucket: LEASES.into(),
                history: 1,
                limit_markers: Some(LEASE_MARKER_TTL),
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .context("creating the bench leases bucket")?;
        for (name, subject) in [(EVENTS, "benchnats.events.>"), (LOGS, "benchnats.logs.>")] {
            let config = stream::Config {
                name: name.into(),
                subjects: vec![subject.into()],
                num_replicas: replicas,
                ..Default::default()
            };
            js.get_or_create_stream(config).await.with_context(|| format!("creating {name}"))?;
        }
        let notifier = js
            .get_stream(EVENTS)
            .await?
            .get_or_create_consumer(
                "notify",
                pull::Config { durable_name: Some("notify".into()), ..Default::default() },
            )
            .await
            .context("creating the bench notifier")?;
        let mut events = notifier.stream().max_messages_per_batch(256).messages().await?;
        let mut lease_changes = leases.watch_all().await?;
        let readers = tokio::spawn(async move {
            let notify = async {
                while let Some(Ok(event)) = events.next().await {
                    let _ = event.ack().await;
                }
            };
            let reap = async { while let Some(Ok(_)) = lease_changes.next().await {} };
            futures::join!(notify, reap);
        });
        let client = js.client();
        Ok(Self { client, leases, readers: std::sync::Arc::new(tokio_util::task::AbortOnDropHandle::new(readers)) })
    }

    /// A run's start: its lease taken (the lease's revision).
    async fn start(&self, key: &str) -> Result<u64> {
        Ok(self.leases.create_with_ttl(key, Bytes::from_static(b"runner"), Duration::from_secs(30)).await?)
    }

    async fn event(&self, key: &str, event: &str) -> Result<()> {
        let body = format!(r#"{{"job":"bench","run_id":"{key}","event":"{event}"}}"#);
        Ok(self.client.publish(format!("benchnats.events.{key}.{event}"), body.into()).await?)
    }

    /// A `hello` run's three lines and their end in one message, as a runner publishes a
    /// short run's output.
    async fn output(&self, key: &str) -> Result<()> {
        let mut payload = String::new();
        LINES.iter().for_each(|line| cronrun::output::push_log_line(&mut payload, line));
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Cronrun-Eof", "succeeded");
        Ok(self.client.publish_with_headers(format!("benchnats.logs.{key}"), headers, payload.into()).await?)
    }

    async fn delete(self, js: &jetstream::Context) {
        drop(self.readers);
        js.delete_key_value(LEASES).await.ok();
        js.delete_stream(EVENTS).await.ok();
        js.delete_stream(LOGS).await.ok();
    }
}
