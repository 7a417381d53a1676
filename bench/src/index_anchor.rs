//! The anchor of `bench scale`'s first start: what nats-server itself takes to deliver the
//! schedules index through the consumers a first start makes, to readers that only count.
//!
//! As many reader processes as there were agents, each over an equal share of the shards,
//! start together. Each makes the consumer an agent's pass makes (ordered, filtering on its
//! shards, from after the index's first entry, which it reads on its own: see
//! `scheduler::loader`) and counts what comes until nothing is pending. Nothing is decoded,
//! filed or queued: what is left is NATS's work, the server's delivery and the client's
//! handling of each message, so the first start over this is what cronrun adds.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::process::Command;

use super::deployment::{Cpu, Deployment};
use super::{shard_range, shard_share};
use cronrun::names::Names;
use cronrun::scheduler::loader::pass_filters;

/// The bench user's password, handed to a reader process (not on its command line).
const PASSWORD_ENV: &str = "CRONRUN_BENCH_PASSWORD";
/// How long a reader waits for its consumer to be made (10,000,000 entries: tens of
/// seconds with the others made alongside), and for all it is to be delivered (one bound
/// for the whole pass: a timer per message would cost the reader more than its counting).
const CREATE_WAIT: Duration = Duration::from_secs(300);
const PASS_MAX: Duration = Duration::from_secs(1800);

/// The readers' pass, timed from their start to the last one's end.
pub(super) struct Anchor {
    pub took_s: f64,
    /// CPU seconds: the readers' and the server's.
    pub cpu_s: Value,
}

/// Runs `readers` reader processes over the index of `deployment` (its agents stopped) and
/// checks that together they were delivered each of its `entries` entries once.
pub(super) async fn measure(deployment: &Deployment, readers: u32, entries: u64) -> Result<Anchor> {
    let exe = crate::binaries::this_binary()?;
    let (server_before, _) = deployment.cpu();
    let readers_before = Cpu::of_self();
    let start = Instant::now();
    let children = (0..readers).map(|i| {
        let mut command = Command::new(&exe);
        command
            .args(["--nats", &deployment.url, "--namespace", deployment.namespace(), "index-reader"])
            .args(["--shards", &shard_share(i, readers)])
            .env(PASSWORD_ENV, deployment.bench_password())
            .kill_on_drop(true);
        async move {
            let out = command.output().await.context("running an index reader")?;
            if !out.status.success() {
                bail!("index reader failed: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
            serde_json::from_slice::<Value>(&out.stdout).context("reading an index reader's report")
        }
    });
    let reports = futures::future::try_join_all(children).await?;
    let took_s = start.elapsed().as_secs_f64();
    let (server, _) = deployment.cpu();
    let delivered: u64 = reports.iter().map(|r| r["entries"].as_u64().unwrap_or(0)).sum();
    if delivered != entries {
        bail!("the index readers were delivered {delivered} entries, the index holds {entries}");
    }
    let cpu_s = json!({
        "readers": Cpu::of_self().since(readers_before).children,
        "nats_server": server.since(server_before).own,
    });
    Ok(Anchor { took_s, cpu_s })
}

/// A reader process: makes the consumer an agent's pass over shards `FIRST-LAST` makes
/// (on the whole index, up to a size: see `pass_filters`), counts its shards' entries
/// and prints `{"entries": N, "took_s": T}`.
pub(super) async fn reader(url: &str, namespace: &str, shards: &str) -> Result<()> {
    let range = shard_range("--shards", shards)?;
    let password = std::env::var(PASSWORD_ENV).with_context(|| format!("{PASSWORD_ENV} is not set"))?;
    let client = async_nats::ConnectOptions::with_user_and_password("bench".into(), password)
        .connect(url)
        .await
        .context("connecting as the bench user")?;
    let mut js = async_nats::jetstream::new(client.clone());
    js.set_timeout(CREATE_WAIT);
    let bucket = Names::new(namespace)?.schedules_bucket();
    let mut stream = js.get_stream(format!("KV_{bucket}")).await.context("opening the schedules index")?;
    let state = stream.info().await.context("reading the schedules index")?.state.clone();
    let start = Instant::now();
    let wanted: Vec<u32> = range.collect();
    let prefixes: Vec<String> = wanted.iter().map(|n| format!("$KV.{bucket}.{n}.")).collect();
    let mine = |subject: &str| prefixes.iter().any(|p| subject.starts_with(p.as_str()));
    let first = state.first_sequence;
    let first_is_mine = stream.get_raw_message(first).await.is_ok_and(|m| mine(&m.subject));
    let config = push::OrderedConfig {
        deliver_subject: client.new_inbox(),
        filter_subjects: pass_filters(&wanted, state.subjects_count)
            .into_iter()
            .map(|f| format!("$KV.{bucket}.{f}"))
            .collect(),
        deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: first + 1 },
        replay_policy: ReplayPolicy::Instant,
        ..Default::default()
    };
    let consumer = stream.create_consumer(config).await.context("making the reader's consumer")?;
    let mut entries = u64::from(first_is_mine);
    if consumer.cached_info().num_pending > 0 {
        let mut messages = consumer.messages().await.context("reading the schedules index")?;
        let pass = async {
            while let Some(message) = messages.next().await {
                let message = message.context("reading the schedules index")?;
                entries += u64::from(mine(&message.subject));
                if message.info().map_err(|e| anyhow::anyhow!("{e}"))?.pending == 0 {
                    return anyhow::Ok(());
                }
            }
            bail!("the reader's consumer ended")
        };
        tokio::time::timeout(PASS_MAX, pass).await.with_context(|| format!("the pass took over {PASS_MAX:?}"))??;
    }
    println!("{}", json!({ "entries": entries, "took_s": start.elapsed().as_secs_f64() }));
    Ok(())
}
