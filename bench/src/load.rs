//! Scheduler load time and memory with N schedules.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use chrono::Utc;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;

use super::{every_second_job, open, shard_range, shard_share};
use cronrun::cli::Ctx;
use cronrun::scheduler::loader::read;
use cronrun::scheduler::{DEFAULT_SHARDS, FireQueue};
use cronrun::store::Store;

pub(super) struct LoadArgs {
    pub schedules: usize,
    /// Processes loading at once, each an equal share of the shards.
    pub agents: u32,
    /// Set in a loading process: the shards it loads, `FIRST-LAST`.
    pub probe: Option<String>,
    /// The nats-server's, when the bench started it: its memory is reported beside.
    pub server_pid: Option<u32>,
}

/// Writes N jobs, then loads them in fresh processes as schedulers leading every shard do
/// (each shard's jobs from the schedules index, validated, into its fire queue), `agents`
/// processes at once each leading its share of the shards, and reports their time and
/// resident memory.
pub(super) async fn run(ctx: &Ctx, url: &str, a: LoadArgs) -> Result<()> {
    let namespace = "benchload";
    if let Some(shards) = &a.probe {
        return probe(url, namespace, shards).await;
    }
    let store = open(url, namespace).await?;
    let write_start = Instant::now();
    write_jobs(&store, a.schedules, &LOAD_SHAPES.map(String::from)).await?;
    eprintln!("wrote {} jobs in {:.1}s", a.schedules, write_start.elapsed().as_secs_f64());
    filed(&store, a.schedules).await?;
    let exe = crate::binaries::this_binary()?;
    let probes = (0..a.agents).map(|i| {
        let exe = exe.clone();
        async move {
            let args = ["--nats", url, "load", "--probe", &shard_share(i, a.agents)];
            let out = tokio::process::Command::new(exe).args(args).output().await.context("running a load probe")?;
            if !out.status.success() {
                bail!("load probe failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            serde_json::from_slice::<serde_json::Value>(&out.stdout).context("reading a probe's report")
        }
    });
    let loads: Vec<serde_json::Value> = futures::future::try_join_all(probes).await?;
    let server_kib = a.server_pid.map(super::deployment::rss_kib);
    let v = json!({ "agents": loads, "nats_server_rss_kib": server_kib });
    ctx.print(&v, || {
        let mut lines: Vec<String> = loads
            .iter()
            .map(|l| {
                format!(
                    "shards {}: loaded {} schedules in {:.1}s; resident memory {} MiB",
                    l["shards"].as_str().unwrap_or("?"),
                    l["schedules"],
                    l["load_s"].as_f64().unwrap_or(f64::NAN),
                    l["rss_after_kib"].as_u64().unwrap_or(0) / 1024
                )
            })
            .collect();
        if let Some(kib) = server_kib {
            lines.push(format!("nats-server resident memory {} MiB", kib / 1024));
        }
        lines.join("\n")
    })
}

/// Loads shards `FIRST-LAST` in one pass, as an agent's shard tasks read them when it
/// starts, and prints time and memory as JSON.
async fn probe(url: &str, namespace: &str, shards: &str) -> Result<()> {
    let range = shard_range("--probe", shards)?;
    let store = open(url, namespace).await?;
    let index = store.schedules_index(DEFAULT_SHARDS).await?;
    let rss_before = rss_kib();
    let start = Instant::now();
    let now = Utc::now();
    let wanted: Vec<u32> = range.collect();
    let (by_shard, _) = read(&index, DEFAULT_SHARDS, &wanted).await?;
    let queues: Vec<FireQueue> = by_shard
        .into_values()
        .map(|jobs| {
            let mut queue = FireQueue::with_capacity(jobs.len());
            for job in cronrun::scheduler::prefetching(jobs) {
                queue.upsert(job, now);
            }
            queue
        })
        .collect();
    let took = start.elapsed();
    let value = json!({ "shards": shards, "schedules": queues.iter().map(FireQueue::len).sum::<usize>(),
                        "load_s": took.as_secs_f64(), "rss_before_kib": rss_before, "rss_after_kib": rss_kib() });
    println!("{value}");
    Ok(())
}

/// The mix of schedule shapes the loaders load.
const LOAD_SHAPES: [&str; 6] =
    ["*/5 * * * *", "0 3 * * *", "*/10 * * * * *", "0 0 1 * *", "30 9 * * MON-FRI", "@every 90s"];

/// Jobs `load-0000000`, ... on `shapes` in turn and a mix of zones, written straight to the
/// jobs bucket with many publishes in flight (millions through `cronrun apply` would take
/// hours).
pub(super) async fn write_jobs(store: &Store, n: usize, shapes: &[String]) -> Result<()> {
    const ZONES: [&str; 4] = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"];
    let mut acks = FuturesUnordered::new();
    for i in 0..n {
        let mut spec = every_second_job(format!("load-{i:07}"), 10);
        spec.schedule = shapes[i % shapes.len()].clone();
        spec.timezone = ZONES[i % ZONES.len()].into();
        let subject = format!("$KV.{}.{}", store.names.jobs_bucket(), spec.name);
        let ack = store.js.publish(subject, spec.to_json()?).await.context("publishing a job")?;
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
pub(super) async fn filed(store: &Store, schedules: usize) -> Result<()> {
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
