//! `cronrun status`: live runners and schedulers (from their presence keys) and which
//! scheduler holds which shard, and how full each stream is (see `crate::status`).

use anyhow::Result;

use super::{Ctx, fmt_time, table};
use crate::status::{StatusReport, pools_of};
use crate::store::{StreamUse, fmt_bytes};

pub async fn run(ctx: &Ctx) -> Result<()> {
    let store = ctx.store().await?;
    let jobs: Vec<_> = store.list_jobs().await?.into_iter().filter_map(|j| j.spec.ok()).collect();
    let pools = pools_of(jobs.iter().map(|s| (s.pool.as_str(), s.paused)));
    let report = StatusReport::gather(&store, pools).await?;
    ctx.print(&report.to_json(&store.names), || {
        let rows: Vec<Vec<String>> = report
            .runners
            .iter()
            .map(|r| {
                vec![
                    r.host.clone(),
                    r.pools.join(","),
                    format!("{}/{}", r.running, r.slots),
                    fmt_time(&r.heartbeat_at),
                    r.version.clone(),
                ]
            })
            .collect();
        let members: Vec<Vec<String>> = report
            .schedulers
            .iter()
            .map(|m| {
                let mine = report.led_by(&m.lease.holder);
                let which = crate::scheduler::ranges(mine.iter().copied());
                let clock = match (m.clock_offset_ms, m.clock_off) {
                    (Some(ms), off) => format!("{:+.1} s{}", ms as f64 / 1000.0, if off { " OFF" } else { "" }),
                    (None, _) => "-".to_string(),
                };
                vec![m.lease.holder.clone(), mine.len().to_string(), which, clock, fmt_time(&m.lease.acquired_at)]
            })
            .collect();
        let clocks_off = report
            .schedulers
            .iter()
            .filter(|m| m.clock_off)
            .map(|m| {
                format!(
                    "\nscheduler {}'s clock is off the NATS server's (CLOCK: the server's less its own): it leads no shards until its time is fixed",
                    m.lease.holder
                )
            })
            .collect::<String>();
        let note = match (report.shard_count, report.unled().len()) {
            (0, _) => "\n(no scheduler has started yet: no fires are dispatched)".to_string(),
            (_, 0) => String::new(),
            (c, u) => format!("\n({u} of {c} shards have no scheduler: their fires wait for one)"),
        };
        let unserved = report
            .unserved_pools
            .iter()
            .map(|(pool, jobs)| {
                format!("\npool {pool:?} has {jobs} job(s) and no live runner: their runs wait for one")
            })
            .collect::<String>();
        let streams: Vec<Vec<String>> = report.streams.iter().map(stream_row).collect();
        let full: String = report.stream_warnings(&store.names).iter().map(|w| format!("\n{w}")).collect();
        format!(
            "{}\n\n{}{note}{clocks_off}{unserved}\n\n{}{full}",
            table(&["RUNNER", "POOLS", "RUNNING", "HEARTBEAT", "VERSION"], &rows),
            table(&["SCHEDULER", "SHARDS", "WHICH", "CLOCK", "SINCE"], &members),
            table(&["STREAM", "BYTES", "MESSAGES", "USE"], &streams)
        )
    })
}

/// A stream's row: bytes and messages used / their limit (`-` for none), and the larger
/// share of the two.
fn stream_row(s: &StreamUse) -> Vec<String> {
    let of = |used: String, max: Option<String>| format!("{used} / {}", max.unwrap_or_else(|| "-".into()));
    vec![
        s.stream.clone(),
        of(fmt_bytes(s.bytes as i64), s.max_bytes.map(fmt_bytes)),
        of(s.messages.to_string(), s.max_messages.map(|m| m.to_string())),
        if s.max_bytes.is_none() && s.max_messages.is_none() {
            "-".into()
        } else {
            format!("{:.0}%", s.ratio() * 100.0)
        },
    ]
}
