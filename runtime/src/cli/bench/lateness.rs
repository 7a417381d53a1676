//! Fire-to-start lateness of N jobs that all fire every second.

use std::time::Duration;

use anyhow::{Result, bail};
use chrono::Utc;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{every_second_job, open, percentile, run_plugin, store_plugin};
use crate::cli::Ctx;

/// An agent with production settings runs N every-second jobs; lateness is
/// `started_at - scheduled_at` over a window after a warm-up. The second figure is when
/// the job's own code ran: a shell job prints the time, a Wasm job has ended by
/// `finished_at`.
pub(super) async fn run(
    ctx: &Ctx,
    url: &str,
    jobs: usize,
    seconds: i64,
    wasm: Option<std::path::PathBuf>,
) -> Result<()> {
    let namespace = "benchlate";
    let store = open(url, namespace).await?;
    let cancel = CancellationToken::new();
    let config = super::bench_config(namespace);
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
                    let printed = r.output.first().and_then(|l| l.trim().parse::<i64>().ok());
                    let ran = match (&plugin, printed, r.finished_at) {
                        (None, Some(ns), _) => Some(ns - at.timestamp_nanos_opt().unwrap_or(0)),
                        (Some(_), _, Some(end)) => (end - at).num_nanoseconds(),
                        _ => None,
                    };
                    ran_ms.extend(ran.map(|ns| ns as f64 / 1e6));
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
             p99 {:.2} ms, max {:.2} ms; fire to {} p50 {:.1} ms, p99 {:.1} ms \
             ({} of {expected} fires succeeded, {not_ok} not)",
            if plugin.is_some() { "wasm" } else { "shell" },
            percentile(&late_ms, 50.0),
            percentile(&late_ms, 99.0),
            late_ms.last().copied().unwrap_or(f64::NAN),
            if plugin.is_some() { "the run's end (finished_at)" } else { "the job's own first command" },
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
