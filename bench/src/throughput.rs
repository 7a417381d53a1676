//! Runs per second end to end: dispatched, run by an agent, recorded; beside it, its
//! anchor: the same NATS work without cronrun (`raw_nats.rs`), on the same servers.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chrono::Utc;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::deployment::{CpuWindow, StoredWindow};
use super::raw_nats;
use super::{every_second_job, open_with, run_plugin, store_plugin};
use cronrun::cli::Ctx;
use cronrun::dispatch::{DispatchMsg, dispatch_unrecorded};
use cronrun::record::{Trigger, fire_run_id};
use cronrun::store::LayoutOptions;

/// N runs of one job dispatched at once to an agent with production settings, as fires
/// due now (a scheduler's dispatch of a fire on time: no record until its runner's); the
/// rate is runs recorded as finished per second, from the first dispatch to the last record.
pub(super) async fn run(
    ctx: &Ctx,
    (url, layout): (&str, &LayoutOptions),
    runs: usize,
    wasm: Option<std::path::PathBuf>,
    server_pids: &[u32],
) -> Result<()> {
    let namespace = "benchthru";
    let store = open_with(url, namespace, layout).await?;
    // Runs are spread over jobs of 500, below what history keeps: none of them is pruned
    // (prunes still read each job every 250 runs).
    const PER_JOB: usize = 500;
    let plugin = store_plugin(&store, wasm.as_deref()).await?;
    let mut revisions = Vec::new();
    for j in 0..runs.div_ceil(PER_JOB) {
        let mut spec = every_second_job(format!("thru-{j:03}"), PER_JOB as u32);
        spec.schedule = "@yearly".into();
        spec.overlap = cronrun::spec::Overlap::Allow;
        spec.output_lines = 5;
        revisions.push(store.put_job(&run_plugin(spec, plugin.as_deref())).await?.0);
    }
    let cancel = CancellationToken::new();
    let config = cronrun::config::AgentConfig { layout: layout.clone(), ..super::bench_config(namespace) };
    let client = cronrun::connect::connect(url, None, "cronrun-bench-agent").await?;
    let agent = tokio::spawn(cronrun::agent::run(client, config, cronrun::clock::system(), cancel.clone()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Completion is counted from the runs' final events (plain NATS fan-out, no reads
    // from JetStream while the runs go), then checked once against the records.
    let mut finals = store.client.subscribe(format!("{namespace}.events.*.*")).await?;
    // Counted beside the dispatches: a subscription holds 65,536 messages, and left unread
    // until all were dispatched, the events of 30,000 runs overflowed it.
    let counting = tokio::spawn(async move {
        let mut ended = 0;
        while ended < runs {
            let event = tokio::time::timeout(Duration::from_secs(60), finals.next()).await;
            let Ok(Some(event)) = event else { return Err(ended) };
            let kind = event.subject.rsplit('.').next().unwrap_or_default();
            if ["succeeded", "failed", "timed_out", "cancelled", "skipped", "lost"].contains(&kind) {
                ended += 1;
            }
        }
        Ok(())
    });
    let start = Instant::now();
    let cpu = CpuWindow::start(server_pids);
    let stored = StoredWindow::start(&store).await?;
    let base = Utc::now();
    let mut in_flight = FuturesUnordered::new();
    for i in 0..runs {
        let msg = DispatchMsg {
            job: format!("thru-{:03}", i / PER_JOB),
            run_id: format!("{}-b{i:06}", fire_run_id(base)),
            attempt: 1,
            trigger: Trigger::Schedule,
            scheduled_at: base,
            spec_revision: revisions[i / PER_JOB],
            queued: None,
            overlap: None,
        };
        let store = store.clone();
        in_flight.push(async move { dispatch_unrecorded(&store, "default", &msg, Utc::now()).await });
        if in_flight.len() >= 256 {
            in_flight.next().await.transpose()?;
        }
    }
    while let Some(r) = in_flight.next().await {
        r?;
    }
    let dispatched = start.elapsed();
    if let Err(ended) = counting.await? {
        bail!("only {ended} of {runs} runs finished; none for a minute");
    }
    let finished = start.elapsed();
    let (cpu_json, cpu_text) = cpu.report(runs, "dispatcher and agent");
    let (stored_json, stored_text) = stored.report(&store, runs).await?;
    // This invocation's runs only: the namespace may hold an earlier one's.
    let ours = format!("{}-b", fire_run_id(base));
    let all = store.list_all_runs().await?;
    let ok =
        all.iter().filter(|r| r.run_id.starts_with(&ours) && r.status == cronrun::record::Status::Succeeded).count();
    cancel.cancel();
    let _ = agent.await;
    let rate = runs as f64 / finished.as_secs_f64();
    // The anchor, on the same servers once the agent has stopped: the NATS work these runs
    // store (`bench nats --layout`: 7 messages a run, as a fire with `overlap = "allow"`).
    let anchor = raw_nats::measure(url, runs, raw_nats::Work::Layout, (layout.replicas, server_pids)).await?;
    let of_anchor = rate / anchor.runs_per_second;
    let kind = if wasm.is_some() { "wasm" } else { "shell" };
    let value = json!({ "kind": kind, "runs": runs, "succeeded": ok, "dispatch_s": dispatched.as_secs_f64(),
                        "total_s": finished.as_secs_f64(), "runs_per_second": rate, "cpu_per_run": cpu_json,
                        "stored_per_run": stored_json, "replicas": layout.replicas,
                        "anchor": anchor.value, "rate_of_anchor": of_anchor });
    ctx.print(&value, || {
        format!(
            "{runs} {kind} runs end to end (R{}) in {:.1}s: {rate:.0} runs/s ({ok} succeeded; dispatching took {:.1}s){cpu_text}{stored_text}\n\
             anchor, the same NATS work alone (bench nats --layout): {}\n\
             end to end: {:.0} % of the anchor's rate",
            layout.replicas,
            finished.as_secs_f64(),
            dispatched.as_secs_f64(),
            anchor.text,
            100.0 * of_anchor
        )
    })
}
