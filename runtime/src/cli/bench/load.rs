//! Scheduler load time and memory with N schedules.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use chrono::Utc;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;

use super::{every_second_job, open};
use crate::cli::Ctx;
use crate::scheduler::loader::read;
use crate::scheduler::{DEFAULT_SHARDS, FireQueue};
use crate::store::Store;

/// Writes N jobs, then loads them in a fresh process as schedulers leading every shard do
/// (each shard's jobs from the schedules index, validated, into its fire queue) and
/// reports time and resident memory.
pub(super) async fn run(ctx: &Ctx, url: &str, schedules: usize, probe: bool) -> Result<()> {
    let namespace = "benchload";
    if probe {
        let store = open(url, namespace).await?;
        let index = store.schedules_index(DEFAULT_SHARDS).await?;
        let rss_before = rss_kib();
        let start = Instant::now();
        let now = Utc::now();
        // All shards in one pass, as an agent's shard tasks read them when it starts.
        let every: Vec<u32> = (0..DEFAULT_SHARDS).collect();
        let (by_shard, _) = read(&index, DEFAULT_SHARDS, &every).await?;
        let queues: Vec<FireQueue> = by_shard
            .into_values()
            .map(|jobs| {
                let mut queue = FireQueue::default();
                for job in jobs {
                    queue.upsert(job, now);
                }
                queue
            })
            .collect();
        let took = start.elapsed();
        let value = json!({ "schedules": queues.iter().map(FireQueue::len).sum::<usize>(), "load_s": took.as_secs_f64(),
                            "rss_before_kib": rss_before, "rss_after_kib": rss_kib() });
        println!("{value}");
        return Ok(());
    }
    let store = open(url, namespace).await?;
    let write_start = Instant::now();
    write_jobs(&store, schedules).await?;
    eprintln!("wrote {schedules} jobs in {:.1}s", write_start.elapsed().as_secs_f64());
    filed(&store, schedules).await?;
    let exe = std::env::current_exe().context("finding the cronrun binary")?;
    let out = tokio::process::Command::new(exe)
        .args(["--nats", url, "bench", "load", "--probe", "--schedules", &schedules.to_string()])
        .output()
        .await
        .context("running the load probe")?;
    if !out.status.success() {
        bail!("load probe failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("reading the probe's report")?;
    ctx.print(&v, || {
        format!(
            "loaded {} schedules into 64 shard queues, all shards in one pass, in {:.1}s; resident memory {} MiB",
            v["schedules"],
            v["load_s"].as_f64().unwrap_or(f64::NAN),
            v["rss_after_kib"].as_u64().unwrap_or(0) / 1024
        )
    })
}

/// A mix of schedule shapes and zones, written with many publishes in flight.
async fn write_jobs(store: &Store, n: usize) -> Result<()> {
    const SHAPES: [&str; 6] =
        ["*/5 * * * *", "0 3 * * *", "*/10 * * * * *", "0 0 1 * *", "30 9 * * MON-FRI", "@every 90s"];
    const ZONES: [&str; 4] = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"];
    let mut acks = FuturesUnordered::new();
    for i in 0..n {
        let mut spec = every_second_job(format!("load-{i:07}"), 10);
        spec.schedule = SHAPES[i % SHAPES.len()].into();
        spec.timezone = ZONES[i % ZONES.len()].into();
        let subject = format!("$KV.{}.{}", store.names.jobs_bucket(), spec.name);
        let ack = store.js.publish(subject, spec.to_json()).await.context("publishing a job")?;
        acks.push(ack.into_future());
        if acks.len() >= 4096 {
            acks.next().await.transpose().context("storing a job")?;
        }
    }
    while let Some(ack) = acks.next().await {
        ack.context("storing a job")?;
    }
    Ok(())
}

/// Waits until the server has filed every job in the schedules index (it sources them
/// from the jobs bucket as they come).
async fn filed(store: &Store, schedules: usize) -> Result<()> {
    let index = store.schedules_index(DEFAULT_SHARDS).await?;
    let start = Instant::now();
    loop {
        let mut stream = index.kv.stream.clone();
        let filed = stream.info().await.context("reading the index's state")?.state.messages;
        if filed >= schedules as u64 {
            eprintln!("index holds every job {:.1}s after the last write", start.elapsed().as_secs_f64());
            return Ok(());
        }
        if start.elapsed() > std::time::Duration::from_secs(600) {
            bail!("the schedules index holds {filed} of {schedules} jobs after 10 minutes");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn rss_kib() -> u64 {
    super::deployment::rss_kib(std::process::id())
}
