//! The NATS work of a run without cronrun, measured the way `throughput` measures runs:
//! per run a KV create and a deduplicated publish to a work queue (256 in flight), then a
//! pull, two compare-and-sets and an ack. Beside `throughput` it shows what cronrun adds.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_nats::jetstream::{self, consumer::pull, kv, stream};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;

use crate::cli::Ctx;

const BUCKET: &str = "benchnats";
const STREAM: &str = "BENCHNATS";

pub(super) async fn run(ctx: &Ctx, url: &str, runs: usize) -> Result<()> {
    let client = crate::connect::connect(url, None, "cronrun-bench-nats").await?;
    let js = jetstream::new(client.clone());
    let kv = js
        .create_key_value(kv::Config { bucket: BUCKET.into(), history: 1, ..Default::default() })
        .await
        .context("creating the bench bucket")?;
    let queue = js
        .get_or_create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["benchnats.work".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: Duration::from_secs(600),
            ..Default::default()
        })
        .await
        .context("creating the bench stream")?;
    let consumer = queue
        .get_or_create_consumer(
            "work",
            pull::Config { durable_name: Some("work".into()), ack_wait: Duration::from_secs(30), ..Default::default() },
        )
        .await
        .context("creating the bench consumer")?;

    // The worker: what a runner does per message, with up to 1,024 messages in hand.
    let worker_kv = kv.clone();
    let worker = tokio::spawn(async move {
        let mut messages = consumer.stream().max_messages_per_batch(256).messages().await?;
        let mut in_hand = FuturesUnordered::new();
        let mut done = 0;
        while done < runs {
            tokio::select! {
                Some(msg) = messages.next(), if in_hand.len() < 1024 => {
                    let msg = msg.map_err(|e| anyhow::anyhow!("pulling: {e}"))?;
                    let kv = worker_kv.clone();
                    in_hand.push(async move {
                        // "<key> <revision>", as cronrun's dispatch message carries the record.
                        let body = String::from_utf8_lossy(&msg.payload).into_owned();
                        let (key, revision) = body.split_once(' ').context("bench message")?;
                        let revision = kv.update(key, Bytes::from_static(b"running"), revision.parse()?).await?;
                        kv.update(key, Bytes::from_static(b"succeeded"), revision).await?;
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
    });

    let start = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    for i in 0..runs {
        let (kv, js) = (kv.clone(), js.clone());
        in_flight.push(async move {
            let key = format!("run.{i:07}");
            let revision = kv.create(&key, Bytes::from_static(b"queued")).await?;
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
    match tokio::time::timeout(Duration::from_secs(600), worker).await {
        Ok(Ok(result)) => result?,
        Ok(Err(e)) => bail!("bench worker: {e}"),
        Err(_) => bail!("the worker did not finish {runs} runs in 10 minutes"),
    }
    let took = start.elapsed();
    let rate = runs as f64 / took.as_secs_f64();
    js.delete_stream(STREAM).await.ok();
    js.delete_key_value(BUCKET).await.ok();
    let value = json!({ "runs": runs, "total_s": took.as_secs_f64(), "runs_per_second": rate });
    ctx.print(&value, || format!("{runs} runs of raw NATS work in {:.1}s: {rate:.0} runs/s", took.as_secs_f64()))
}
