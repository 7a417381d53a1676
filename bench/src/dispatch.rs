//! Fires per second through the dispatch path of fires on time, beside its anchor: the
//! same write a fire (a deduplicated publish: such a fire has no record until its runner
//! creates it) done raw on the same server (`raw_nats.rs`).

use std::time::Instant;

use anyhow::Result;
use chrono::Utc;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::json;

use super::deployment::{CpuWindow, StoredWindow};
use super::open_with;
use super::raw_nats::{self, Work};
use cronrun::cli::Ctx;
use cronrun::dispatch::{DispatchMsg, dispatch_unrecorded};
use cronrun::record::{Trigger, fire_run_id};
use cronrun::store::LayoutOptions;

/// Fires through `dispatch_unrecorded` (a deduplicated publish; the `dispatched` event is
/// opt-in), as many in flight as the scheduler allows by default.
pub(super) async fn run(
    ctx: &Ctx,
    (url, layout): (&str, &LayoutOptions),
    fires: usize,
    server_pids: &[u32],
) -> Result<()> {
    let store = open_with(url, "benchdisp", layout).await?;
    let in_flight_max = cronrun::scheduler::SchedulerConfig::default().max_in_flight;
    let base = chrono::DateTime::from_timestamp(1_900_000_000, 0).unwrap_or_default();
    let (cpu, stored) = (CpuWindow::start(server_pids), StoredWindow::start(&store).await?);
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
            overlap: None,
        };
        let store = store.clone();
        in_flight.push(async move { dispatch_unrecorded(&store, "bench", &msg, Utc::now()).await });
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
    let (cpu_json, cpu_text) = cpu.report(done, "dispatcher");
    let (stored_json, stored_text) = stored.report(&store, done).await?;
    let anchor = raw_nats::measure(url, fires, Work::Dispatch, (layout.replicas, server_pids)).await?;
    let of_anchor = rate / anchor.runs_per_second;
    let value = json!({ "fires": done, "replicas": layout.replicas, "seconds": secs, "fires_per_second": rate, "cpu_per_fire": cpu_json,
                        "stored_per_fire": stored_json, "anchor": anchor.value, "rate_of_anchor": of_anchor });
    ctx.print(&value, || {
        format!(
            "dispatched {done} fires (R{}) in {secs:.2}s: {rate:.0} fires/s ({in_flight_max} in flight){cpu_text}{stored_text}\n\
             anchor, the same writes done raw (256 in flight): {}\n\
             dispatch: {:.0} % of the anchor's rate",
            layout.replicas,
            anchor.text,
            100.0 * of_anchor
        )
    })
}
