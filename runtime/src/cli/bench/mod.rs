//! `cronrun bench lateness|throughput|nats|dispatch|load`: measurements on this machine,
//! reported in the README (Benchmarks). Each starts its own nats-server in a temp
//! directory unless --nats is given, and works in a namespace of its own.
//!
//! - `lateness.rs`: fire to start of N every-second jobs.
//! - `throughput.rs`: runs per second end to end; `raw_nats.rs` the same NATS work alone.
//! - `dispatch.rs`: fires per second through the dispatch path.
//! - `load.rs`: load time and memory with a million schedules.

mod dispatch;
mod lateness;
mod load;
mod raw_nats;
mod throughput;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use super::Ctx;
use crate::embedded::{EmbeddedNats, ServerOptions};
use crate::names::Names;
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
    /// What the same NATS work costs without cronrun: per run a KV create, a publish, a
    /// pull and ack and two compare-and-sets
    Nats {
        #[arg(long, default_value_t = 10_000)]
        runs: usize,
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
        BenchKind::Lateness { jobs, seconds, wasm } => lateness::run(ctx, &url, jobs, seconds, wasm).await,
        BenchKind::Dispatch { fires } => dispatch::run(ctx, &url, fires).await,
        BenchKind::Throughput { runs, wasm } => throughput::run(ctx, &url, runs, wasm).await,
        BenchKind::Nats { runs } => raw_nats::run(ctx, &url, runs).await,
        BenchKind::Load { schedules, probe } => load::run(ctx, &url, schedules, probe).await,
    };
    if let Some(server) = server {
        server.stop().await;
    }
    result
}

pub(super) async fn open(url: &str, namespace: &str) -> Result<Store> {
    let client = crate::connect::connect(url, None, "cronrun-bench").await?;
    Ok(Store::open(client, Names::new(namespace)?, &LayoutOptions::default()).await?)
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Stores the component at `path`, if any; returns its digest.
pub(super) async fn store_plugin(store: &Store, path: Option<&std::path::Path>) -> Result<Option<String>> {
    let Some(path) = path else { return Ok(None) };
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Some(store.put_plugin(&bytes).await?.0))
}

/// `spec` running the plugin `digest` instead of its command, when one is given.
pub(super) fn run_plugin(mut spec: JobSpec, digest: Option<&str>) -> JobSpec {
    if let Some(digest) = digest {
        spec.shell = None;
        spec.wasm = Some(crate::spec::WasmSpec { plugin: digest.into(), ..Default::default() });
    }
    spec
}

/// An every-second job that prints when its own code ran (ns since the epoch).
pub(super) fn every_second_job(name: String, history: u32) -> JobSpec {
    let shell = ShellSpec { command: Some("date +%s%N".into()), ..Default::default() };
    let mut spec = JobSpec::shell(&name, "* * * * * *", shell);
    spec.history = History { succeeded: history, failed: history };
    spec
}

/// The agent of a benchmark: defaults, and shell jobs run as the benchmark's own user,
/// root included (a runner running as root refuses that unless told, see `account`).
fn bench_config(namespace: &str) -> crate::config::AgentConfig {
    let mut config =
        crate::config::AgentConfig { namespace: namespace.into(), name: "bench".into(), ..Default::default() };
    config.runner.allow_root = true;
    config
}
