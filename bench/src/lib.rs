//! cronrun-bench: the measurements of docs/benchmarks.md, a crate of their own so that the
//! `cronrun` binary users deploy carries none of them (`cronrun bench ...` execs the
//! `cronrun-bench` binary built beside it). `lateness|throughput|nats|dispatch|load|scale|soak`
//! each starts its own nats-server in a temp directory unless --nats is given, and works in a
//! namespace of its own.
//!
//! - `lateness.rs`: fire to the job's own code of N jobs (every second, on one
//!   schedule, or spread over the minute), on `deployment.rs`
//!   (nats-server with authentication and `cronrun agent` processes, as users deploy),
//!   beside its anchor (`anchor.rs`: NATS's own scheduler, a plain spawn).
//! - `throughput.rs`: runs per second end to end, beside its anchor (`raw_nats.rs`: the same
//!   NATS work alone).
//! - `dispatch.rs`: fires per second through the dispatch path, beside the same writes
//!   done raw (`raw_nats.rs`).
//! - `load.rs`: load time and memory with a million schedules.
//! - `soak.rs`: many runs through agent and nats-server restarts, on `deployment.rs`.
//! - `scale.rs`: whole agents loading millions of schedules, and one leaving, on
//!   `deployment.rs`, beside its anchor (`index_anchor.rs`: the same passes over the
//!   schedules index by readers that only count).
//! - `binaries.rs`: the binaries they spawn: `cronrun` beside `cronrun-bench`, and
//!   `cronrun-bench` itself for a measurement that needs a fresh process.

mod anchor;
mod binaries;
mod deployment;
mod dispatch;
mod effect;
mod executions;
mod index_anchor;
mod lateness;
mod load;
mod raw_nats;
mod scale;
mod servers;
mod soak;
mod throughput;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cronrun::cli::{Ctx, Global};
use cronrun::embedded::ServerOptions;
use cronrun::names::Names;
use cronrun::spec::{History, JobSpec, ShellSpec};
use cronrun::store::{LayoutOptions, Store};

/// `cronrun-bench [GLOBAL FLAGS] KIND ...`: `cronrun bench KIND ...` passes its global
/// flags (`--nats`, `--namespace`, `--output`, ...) on as these.
#[derive(Parser)]
#[command(
    name = "cronrun-bench",
    version,
    about = "Measure lateness, dispatch throughput and scheduler load on this machine (results in docs/benchmarks.md)"
)]
pub struct BenchCli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub what: BenchKind,
}

#[derive(Subcommand)]
pub enum BenchKind {
    /// Lateness from the fire to the job's own code of N jobs (every second by default) on agents
    /// running as separate processes, beside its anchor measured in the same run. Always
    /// starts its own nats-server
    Lateness {
        #[arg(long, default_value_t = 200)]
        jobs: usize,
        #[arg(long, default_value_t = 20)]
        seconds: i64,
        #[arg(long, default_value_t = 2)]
        agents: usize,
        /// Every job's schedule, six fields (the NATS anchor takes the same), e.g.
        /// "0 * * * * *" with --seconds 60 for all jobs firing at one instant
        #[arg(long, default_value = "* * * * * *", conflicts_with = "spread")]
        schedule: String,
        /// Spread the jobs over the minute instead: job i fires at second i mod 60 of
        /// every minute ("S * * * * *"), e.g. --jobs 100000 for 100,000 jobs a minute
        #[arg(long)]
        spread: bool,
        /// Run this Wasm component instead of a shell command: one that logs its own clock
        /// first, target/wasm32-wasip2/release/clock.wasm from plugins/build.sh
        #[arg(long)]
        wasm: Option<std::path::PathBuf>,
        /// Each job also publishes one event per fire into a stream of the user's (the clock
        /// component with config `subject`), timed from the fire to the event stored: the
        /// job's effect. Needs --wasm clock.wasm
        #[arg(long, requires = "wasm")]
        emit: bool,
        /// nats-server nodes: 1, or 3 for a local cluster with the layout at three
        /// replicas (R3), the production shape
        #[arg(long, default_value_t = 1)]
        cluster: usize,
    },
    /// Runs per second end to end: dispatched, run by an agent, recorded; then its
    /// anchor, the same NATS work alone (`nats --layout`) on the same servers
    Throughput {
        #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
        runs: usize,
        /// Run this Wasm component instead of a shell command
        #[arg(long)]
        wasm: Option<std::path::PathBuf>,
        /// nats-server nodes: 1, or 3 for a local cluster with the layout at three
        /// replicas (R3), the production shape
        #[arg(long, default_value_t = 1)]
        cluster: usize,
    },
    /// What the same NATS work costs without cronrun: per run a KV create, a publish, a
    /// pull and ack and two compare-and-sets
    Nats {
        #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
        runs: usize,
        /// Store all a run stores under the NATS layout (7 messages, not 4): its lease,
        /// events and output too, with their readers
        #[arg(long)]
        layout: bool,
        /// nats-server nodes: 1, or 3 for a local cluster with the layout at three
        /// replicas (R3), the production shape
        #[arg(long, default_value_t = 1)]
        cluster: usize,
    },
    /// Fires per second through the dispatch path (record create + publish); then its
    /// anchor, the same two writes done raw on the same servers
    Dispatch {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        fires: usize,
        /// nats-server nodes: 1, or 3 for a local cluster with the layout at three
        /// replicas (R3), the production shape
        #[arg(long, default_value_t = 1)]
        cluster: usize,
    },
    /// Scheduler load time and memory with N schedules
    Load {
        #[arg(long, default_value_t = 1_000_000)]
        schedules: usize,
        /// Loading processes, each leading an equal share of the shards, all at once (as
        /// the agents of a deployment starting together)
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        agents: u32,
        /// Internal: only load shards FIRST-LAST (the jobs exist) and report, in a fresh process
        #[arg(long, hide = true)]
        probe: Option<String>,
    },
    /// Whole agents at scale: N schedules led and loaded by agents starting together (each
    /// only its shards' jobs), then one leaving and the others taking its shards over,
    /// while every-second jobs record their own fires. Always starts its own nats-server
    Scale {
        #[arg(long, default_value_t = 1_000_000)]
        schedules: usize,
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=64))]
        agents: u32,
        /// Every-second shell jobs among the schedules, judged once each through the handover
        #[arg(long, default_value_t = 64)]
        firing: usize,
        /// Write the schedules while the agents run (a deployment grown while running), not
        /// before they start
        #[arg(long)]
        grow: bool,
    },
    /// Internal: count the schedules index's entries of shards FIRST-LAST as an agent's
    /// first pass is delivered them (`bench scale`'s anchor), in a fresh process
    #[command(hide = true)]
    IndexReader {
        #[arg(long)]
        shards: String,
    },
    /// Every-second jobs for a long time through agent and nats-server restarts, on
    /// agents running as separate processes; fails when a fire ran twice or state grew
    /// with the runs. Always starts its own nats-server (it restarts it)
    Soak {
        #[arg(long, default_value_t = 20)]
        jobs: usize,
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        #[arg(long, default_value_t = 2)]
        agents: usize,
        /// Seconds between restarts (an agent, then nats-server, in turn)
        #[arg(long, default_value_t = 30)]
        restart_every: u64,
    },
}

pub async fn run(cli: BenchCli) -> Result<()> {
    let BenchCli { global, what } = cli;
    let ctx = &Ctx::new(global);
    // These start a deployment of their own: nats-server and agent processes.
    match what {
        BenchKind::Soak { .. } | BenchKind::Lateness { .. } | BenchKind::Scale { .. } if ctx.global.nats.is_some() => {
            anyhow::bail!("bench soak, lateness and scale start their own nats-server and agents: leave out --nats")
        }
        BenchKind::IndexReader { shards } => {
            let url = ctx.global.nats.as_deref().context("bench index-reader needs --nats")?;
            return index_anchor::reader(url, &ctx.global.namespace, &shards).await;
        }
        BenchKind::Scale { schedules, agents, firing, grow } => {
            return scale::run(ctx, scale::ScaleArgs { schedules, agents: agents as usize, firing, grow }).await;
        }
        BenchKind::Soak { jobs, minutes, agents, restart_every } => {
            let restart_every = std::time::Duration::from_secs(restart_every);
            return soak::run(ctx, soak::SoakArgs { jobs, minutes, agents, restart_every }).await;
        }
        BenchKind::Lateness { jobs, seconds, agents, schedule, spread, wasm, emit, cluster } => {
            let schedules = if spread { lateness::Schedules::Spread } else { lateness::Schedules::One(schedule) };
            let a = lateness::LatenessArgs { jobs, schedules, seconds, agents, wasm, emit, cluster };
            return lateness::run(ctx, a).await;
        }
        _ => {}
    }
    let nodes = match what {
        BenchKind::Throughput { cluster, .. }
        | BenchKind::Nats { cluster, .. }
        | BenchKind::Dispatch { cluster, .. } => cluster,
        _ => 1,
    };
    if nodes != 1 && ctx.global.nats.is_some() {
        anyhow::bail!("--cluster starts a cluster of its own: leave out --nats");
    }
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let (url, servers) = match &ctx.global.nats {
        Some(url) => (url.clone(), None),
        None => {
            let servers = servers::Servers::start(dir.path(), nodes, &ServerOptions::default()).await?;
            (servers.url.clone(), Some(servers))
        }
    };
    let server_pids = servers.as_ref().map(servers::Servers::pids).unwrap_or_default();
    let server_pid = server_pids.first().copied();
    let layout = servers.as_ref().map(servers::Servers::layout).unwrap_or_default();
    let result = match what {
        BenchKind::Dispatch { fires, .. } => dispatch::run(ctx, (&url, &layout), fires, &server_pids).await,
        BenchKind::Throughput { runs, wasm, .. } => {
            throughput::run(ctx, (&url, &layout), runs, wasm, &server_pids).await
        }
        BenchKind::Nats { runs, layout: stored, .. } => {
            let work = if stored { raw_nats::Work::Layout } else { raw_nats::Work::Run };
            raw_nats::run(ctx, &url, runs, work, (layout.replicas, &server_pids)).await
        }
        BenchKind::Load { schedules, agents, probe } => {
            load::run(ctx, &url, load::LoadArgs { schedules, agents, probe, server_pid }).await
        }
        // Run on their own deployment above.
        BenchKind::Soak { .. }
        | BenchKind::Lateness { .. }
        | BenchKind::Scale { .. }
        | BenchKind::IndexReader { .. } => Ok(()),
    };
    if let Some(servers) = servers {
        servers.stop().await;
    }
    result
}

async fn open(url: &str, namespace: &str) -> Result<Store> {
    open_with(url, namespace, &LayoutOptions::default()).await
}

async fn open_with(url: &str, namespace: &str, layout: &LayoutOptions) -> Result<Store> {
    let client = cronrun::connect::connect(url, None, "cronrun-bench").await?;
    Ok(Store::open(client, Names::new(namespace)?, layout).await?)
}

/// Share `i` of `of` (1 to 64) of the shards, as `FIRST-LAST`: what one of `of` agents
/// starting together leads.
fn shard_share(i: u32, of: u32) -> String {
    let shards = cronrun::scheduler::DEFAULT_SHARDS;
    format!("{}-{}", i * shards / of, (i + 1) * shards / of - 1)
}

/// The shards `FIRST-LAST` given to `flag` (a process measuring one agent's share).
fn shard_range(flag: &str, arg: &str) -> Result<std::ops::RangeInclusive<u32>> {
    let shards = cronrun::scheduler::DEFAULT_SHARDS;
    let range = arg.split_once('-').and_then(|(a, b)| Some(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?));
    range
        .filter(|r| !r.is_empty() && *r.end() < shards)
        .with_context(|| format!("{flag} {arg:?}: give FIRST-LAST shards below {shards}"))
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
        spec.wasm = Some(cronrun::spec::WasmSpec { plugin: digest.into(), ..Default::default() });
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

/// The agent of a benchmark: defaults, and shell jobs run as the benchmark's own user,
/// root included (a runner running as root refuses that unless told, see `account`).
fn bench_config(namespace: &str) -> cronrun::config::AgentConfig {
    let mut config =
        cronrun::config::AgentConfig { namespace: namespace.into(), name: "bench".into(), ..Default::default() };
    config.runner.allow_root = true;
    config
}

/// A count of runs or fires: at least one, as a benchmark of none has no rate to set
/// beside its anchor's.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::{BenchCli, shard_range, shard_share};
    use clap::Parser;

    #[test]
    fn a_count_of_runs_or_fires_below_one_or_not_a_number_is_refused() {
        let parse = |args: &[&str]| BenchCli::try_parse_from([&["cronrun-bench"], args].concat());
        for kind in [["throughput", "--runs"], ["nats", "--runs"], ["dispatch", "--fires"]] {
            assert!(parse(&[kind[0], kind[1], "1"]).is_ok(), "{kind:?} 1");
            for bad in ["0", "-1", "ten", "1e3", "99999999999999999999999"] {
                let flag = format!("{}={bad}", kind[1]);
                let e = parse(&[kind[0], &flag]).err().map(|e| e.to_string()).unwrap_or_default();
                assert!(e.contains(&format!("'{bad}' for '{} <", kind[1])), "{kind:?} {bad}: {e}");
            }
        }
    }

    #[test]
    fn the_shares_of_agents_cover_every_shard_once_and_bad_ranges_are_refused() {
        for of in [1, 2, 3, 4, 7, 64] {
            let mut next = 0;
            for i in 0..of {
                let range = shard_range("--shards", &shard_share(i, of)).unwrap();
                assert_eq!(*range.start(), next, "share {i} of {of}");
                next = range.end() + 1;
            }
            assert_eq!(next, 64, "{of} shares");
        }
        for bad in ["", "3", "5-2", "0-64", "a-b", "-1-3", "0-18446744073709551616", "0 - 3", "0-3-5"] {
            let e = shard_range("--shards", bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--shards {bad:?}")) && e.contains("below 64"), "{bad}: {e}");
        }
    }
}
