//! `cronrun bench lateness|dispatch|load`: measurements on this machine, reported in
//! the README (Benchmarks). Each starts its own nats-server in a temp directory unless
//! --nats is given, and works in a namespace of its own.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::Utc;
use clap::{Args, Subcommand};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::Ctx;
use crate::catalog::Catalog;
use crate::config::AgentConfig;
use crate::dispatch::{DispatchMsg, dispatch};
use crate::embedded::{EmbeddedNats, ServerOptions};
use crate::names::Names;
use crate::record::{Trigger, fire_run_id};
use crate::scheduler::FireQueue;
use crate::spec::{History, JobSpec, ShellSpec};
use crate::store::{LayoutOptions, Store};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchKind,
}

#[derive(Subcommand)]
pub enum BenchKind {
    /// Fire-to-start lateness of N shell jobs that all fire every second
    Lateness {
        #[arg(long, default_value_t = 200)]
        jobs: usize,
        #[arg(long, default_value_t = 20)]
        seconds: i64,
        /// Run this Wasm component (e.g. target/wasm32-wasip2/release/hello.wasm) instead
        /// of a shell command
        #[arg(long)]
        wasm: Option<std::path::PathBuf>,
    },
    /// Runs per second end to end: dispatched, run by an agent, recorded
    Throughput {
        #[arg(long, default_value_t = 10_000)]
        runs: usize,
        /// Run this Wasm component instead of a shell command
        #[arg(long)]
        wasm: Option<std::path::PathBuf>,
    },
    /// Fires per second through the dispatch path (record create + publish)
    Dispatch {
        #[arg(long, default_value_t = 20_000)]
        fires: usize,
    },
    /// Scheduler load time and memory with N schedules
    Load {
        #[arg(long, default_value_t = 1_000_000)]
        schedules: usize,
        /// Internal: only load (the jobs exist) and report, in a fresh process
        #[arg(long, hide = true)]
        probe: bool,
    },
}

pub async fn run(ctx: &Ctx, a: BenchArgs) -> Result<()> {
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let (url, server) = match &ctx.global.nats {
        Some(url) => (url.clone(), None),
        None => {
            let server = EmbeddedNats::start(dir.path(), &ServerOptions::default()).await?;
            (server.url.clone(), Some(server))
        }
    };
    let result = match a.what {
        BenchKind::Lateness { jobs, seconds, wasm } => lateness(ctx, &url, jobs, seconds, wasm).await,
        BenchKind::Dispatch { fires } => dispatch_rate(ctx, &url, fires).await,
        BenchKind::Throughput { runs, wasm } => throughput(ctx, &url, runs, wasm).await,
        BenchKind::Load { schedules, probe } => load(ctx, &url, schedules, probe).await,
    };
    if let Some(server) = server {
        server.stop().await;
    }
    result
}

async fn open(url: &str, namespace: &str) -> Result<Store> {
    let client = crate::connect::connect(url, None, "cronrun-bench").await?;
    Ok(Store::open(client, Names::new(namespace)?, &LayoutOptions::default()).await?)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Stores the component at `path`, if any; returns its digest.
async fn store_plugin(store: &Store, path: Option<&std::path::Path>) -> Result<Option<String>> {
    let Some(path) = path else { return Ok(None) };
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Some(store.put_plugin(&bytes).await?.0))
}

/// `spec` running the plugin `digest` instead of its command, when one is given.
fn run_plugin(mut spec: JobSpec, digest: Option<&str>) -> JobSpec {
    if let Some(digest) = digest {
        spec.shell = None;
        spec.wasm = Some(crate::spec::WasmSpec { plugin: digest.into(), ..Default::default() });
    }
    spec
}

/// An every-second job that prints when its own code ran (ns since the epoch).
fn every_second_job(name: String, history: u32) -> JobSpec {
    let shell = ShellSpec { command: Some("date +%s%N".into()), ..Default::default() };
    let mut spec = JobSpec::shell(&name, "* * * * * *", shell);
    spec.history = History { succeeded: history, failed: history };
    spec
}

/// An agent with production settings runs N every-second jobs; lateness is
/// `started_at - scheduled_at` over a window after a warm-up.
async fn lateness(ctx: &Ctx, url: &str, jobs: usize, seconds: i64, wasm: Option<std::path::PathBuf>) -> Result<()> {
    let namespace = "benchlate";
    let store = open(url, namespace).await?;
    let cancel = CancellationToken::new();
    let config = AgentConfig { namespace: namespace.into(), name: "bench".into(), ..AgentConfig::default() };
    let client = crate::connect::connect(url, None, "cronrun-bench-agent").await?;
    let agent = tokio::spawn(crate::agent::run(client, config, crate::clock::system(), cancel.clone()));
    let names: Vec<String> = (0..jobs).map(|i| format!("late-{i:04}")).collect();
    let plugin = store_plugin(&store, wasm.as_deref()).await?;
    for name in &names {
        let spec = every_second_job(name.clone(), seconds as u32 + 30);
        store.put_job(&run_plugin(spec, plugin.as_deref())).await?;
    }
    let from = Utc::now() + chrono::Duration::seconds(3);
    let from = chrono::DateTime::from_timestamp(from.timestamp(), 0).unwrap_or(from);
    let to = from + chrono::Duration::seconds(seconds);
    eprintln!("{jobs} jobs every second; measuring {from} .. {to}");
    tokio::time::sleep((to - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(3)).await;
    let mut late_ms = Vec::new();
    let mut ran_ms = Vec::new();
    let mut not_ok = 0;
    for name in &names {
        for run in store.list_runs(name).await? {
            let r = run.record;
            let Some(at) = r.scheduled_at.filter(|t| *t >= from && *t < to) else { continue };
            match r.started_at {
                Some(started) if r.status == crate::record::Status::Succeeded => {
                    late_ms.push((started - at).num_microseconds().unwrap_or(0) as f64 / 1000.0);
                    if let Some(ns) = r.output.first().and_then(|l| l.trim().parse::<i64>().ok()) {
                        ran_ms.push((ns - at.timestamp_nanos_opt().unwrap_or(0)) as f64 / 1e6);
                    }
                }
                _ => not_ok += 1,
            }
        }
    }
    cancel.cancel();
    let _ = agent.await;
    late_ms.sort_by(f64::total_cmp);
    ran_ms.sort_by(f64::total_cmp);
    let expected = jobs as i64 * seconds;
    let value = json!({
        "jobs": jobs, "seconds": seconds, "fires_expected": expected, "fires_succeeded": late_ms.len(),
        "fires_not_succeeded": not_ok,
        "lateness_ms": { "p50": percentile(&late_ms, 50.0), "p99": percentile(&late_ms, 99.0),
                         "max": late_ms.last().copied().unwrap_or(f64::NAN) },
        "job_code_ran_ms": { "p50": percentile(&ran_ms, 50.0), "p99": percentile(&ran_ms, 99.0),
                             "max": ran_ms.last().copied().unwrap_or(f64::NAN) },
    });
    ctx.print(&value, || {
        format!(
            "lateness of {jobs} every-second {} jobs over {seconds}s: fire to started_at p50 {:.2} ms, \
             p99 {:.2} ms, max {:.2} ms; fire to the job's own first command p50 {:.1} ms, p99 {:.1} ms \
             ({} of {expected} fires succeeded, {not_ok} not)",
            if plugin.is_some() { "wasm" } else { "shell" },
            percentile(&late_ms, 50.0),
            percentile(&late_ms, 99.0),
            late_ms.last().copied().unwrap_or(f64::NAN),
            percentile(&ran_ms, 50.0),
            percentile(&ran_ms, 99.0),
            late_ms.len()
        )
    })?;
    if late_ms.len() as i64 != expected {
        bail!("{} of {expected} fires ran", late_ms.len());
    }
    Ok(())
}

/// Fires through `dispatch` (record create-if-absent + deduplicated publish + event),
/// as many in flight as the scheduler allows by default.
async fn dispatch_rate(ctx: &Ctx, url: &str, fires: usize) -> Result<()> {
    let store = open(url, "benchdisp").await?;
    let in_flight_max = crate::scheduler::SchedulerConfig::default().max_in_flight;
    let base = chrono::DateTime::from_timestamp(1_900_000_000, 0).unwrap_or_default();
    let start = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut done = 0usize;
    for i in 0..fires {
        let at = base + chrono::Duration::seconds(i as i64 / 100);
        let msg = DispatchMsg {
            job: format!("disp-{:03}", i % 100),
            run_id: fire_run_id(at),
            attempt: 1,
            trigger: Trigger::Schedule,
            scheduled_at: at,
            spec_revision: 1,
            queued: None,
        };
        let store = store.clone();
        in_flight.push(async move { dispatch(&store, "bench", &msg, Utc::now()).await });
        if in_flight.len() >= in_flight_max {
            in_flight.next().await.transpose()?;
            done += 1;
        }
    }
    while let Some(r) = in_flight.next().await {
        r?;
        done += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = done as f64 / secs;
    ctx.print(&json!({ "fires": done, "seconds": secs, "fires_per_second": rate }), || {
        format!("dispatched {done} fires in {secs:.2}s: {rate:.0} fires/s ({in_flight_max} in flight)")
    })
}

/// N runs of one job dispatched at once to an agent with production settings; the rate
/// is runs recorded as finished per second, from the first dispatch to the last record.
async fn throughput(ctx: &Ctx, url: &str, runs: usize, wasm: Option<std::path::PathBuf>) -> Result<()> {
    let namespace = "benchthru";
    let store = open(url, namespace).await?;
    // Runs are spread over jobs of 500, below what history keeps, so none is pruned.
    const PER_JOB: usize = 500;
    let plugin = store_plugin(&store, wasm.as_deref()).await?;
    let mut revisions = Vec::new();
    for j in 0..runs.div_ceil(PER_JOB) {
        let mut spec = every_second_job(format!("thru-{j:03}"), PER_JOB as u32);
        spec.schedule = "@yearly".into();
        spec.overlap = crate::spec::Overlap::Allow;
        spec.output_lines = 5;
        revisions.push(store.put_job(&run_plugin(spec, plugin.as_deref())).await?.0);
    }
    let cancel = CancellationToken::new();
    let config = AgentConfig { namespace: namespace.into(), name: "bench".into(), ..AgentConfig::default() };
    let client = crate::connect::connect(url, None, "cronrun-bench-agent").await?;
    let agent = tokio::spawn(crate::agent::run(client, config, crate::clock::system(), cancel.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Completion is counted from the runs' final events (plain NATS fan-out, no reads
    // from JetStream while the runs go), then checked once against the records.
    let mut finals = store.client.subscribe(format!("{namespace}.events.*.*")).await?;
    let start = Instant::now();
    let base = Utc::now();
    let mut in_flight = FuturesUnordered::new();
    for i in 0..runs {
        let msg = DispatchMsg {
            job: format!("thru-{:03}", i / PER_JOB),
            run_id: format!("{}-b{i:06}", fire_run_id(base)),
            attempt: 1,
            trigger: Trigger::Manual,
            scheduled_at: base,
            spec_revision: revisions[i / PER_JOB],
            queued: None,
        };
        let store = store.clone();
        in_flight.push(async move { dispatch(&store, "default", &msg, Utc::now()).await });
        if in_flight.len() >= 256 {
            in_flight.next().await.transpose()?;
        }
    }
    while let Some(r) = in_flight.next().await {
        r?;
    }
    let dispatched = start.elapsed();
    let mut ended = 0;
    while ended < runs {
        let event = tokio::time::timeout(Duration::from_secs(60), finals.next()).await;
        let Ok(Some(event)) = event else { bail!("only {ended} of {runs} runs finished; none for a minute") };
        let kind = event.subject.rsplit('.').next().unwrap_or_default();
        if ["succeeded", "failed", "timed_out", "cancelled", "skipped", "lost"].contains(&kind) {
            ended += 1;
        }
    }
    let finished = start.elapsed();
    let mut ok = 0;
    for j in 0..runs.div_ceil(PER_JOB) {
        let done = store.list_runs(&format!("thru-{j:03}")).await?;
        ok += done.iter().filter(|r| r.record.status == crate::record::Status::Succeeded).count();
    }
    cancel.cancel();
    let _ = agent.await;
    let rate = runs as f64 / finished.as_secs_f64();
    let kind = if wasm.is_some() { "wasm" } else { "shell" };
    let value = json!({ "kind": kind, "runs": runs, "succeeded": ok, "dispatch_s": dispatched.as_secs_f64(),
                        "total_s": finished.as_secs_f64(), "runs_per_second": rate });
    ctx.print(&value, || {
        format!("{runs} {kind} runs end to end in {:.1}s: {rate:.0} runs/s ({ok} succeeded; dispatching took {:.1}s)",
            finished.as_secs_f64(), dispatched.as_secs_f64())
    })
}

/// Writes N jobs, then loads them in a fresh process as a scheduler does (catalog watch,
/// validation, fire queue) and reports time and resident memory.
async fn load(ctx: &Ctx, url: &str, schedules: usize, probe: bool) -> Result<()> {
    let namespace = "benchload";
    if probe {
        let store = open(url, namespace).await?;
        let rss_before = rss_kib();
        let start = Instant::now();
        let cancel = CancellationToken::new();
        let catalog = Catalog::start(store, None, cancel.clone());
        catalog.wait_loaded().await;
        let loaded = start.elapsed();
        let mut queue = FireQueue::default();
        let now = Utc::now();
        for job in catalog.snapshot() {
            queue.upsert(job, now);
        }
        let total = start.elapsed();
        let value = json!({ "schedules": queue.len(), "catalog_s": loaded.as_secs_f64(), "total_s": total.as_secs_f64(),
                            "rss_before_kib": rss_before, "rss_after_kib": rss_kib() });
        println!("{value}");
        cancel.cancel();
        return Ok(());
    }
    let store = open(url, namespace).await?;
    let write_start = Instant::now();
    write_jobs(&store, schedules).await?;
    eprintln!("wrote {schedules} jobs in {:.1}s", write_start.elapsed().as_secs_f64());
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
            "loaded {} schedules in {:.1}s (catalog {:.1}s, then fire queue); resident memory {} MiB",
            v["schedules"],
            v["total_s"].as_f64().unwrap_or(f64::NAN),
            v["catalog_s"].as_f64().unwrap_or(f64::NAN),
            v["rss_after_kib"].as_u64().unwrap_or(0) / 1024
        )
    })
}

/// A mix of schedule shapes and zones, written with many publishes in flight.
async fn write_jobs(store: &Store, n: usize) -> Result<()> {
    const SHAPES: [&str; 6] = ["*/5 * * * *", "0 3 * * *", "*/10 * * * * *", "0 0 1 * *", "30 9 * * MON-FRI", "@every 90s"];
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

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
