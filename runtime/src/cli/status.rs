//! `cronrun status`: live runners (from their presence keys) and scheduler lease holders.

use anyhow::Result;
use serde_json::json;

use super::{Ctx, fmt_time, table};
use crate::runner::RunnerPresence;
use crate::store::lease::LeaseValue;

pub async fn run(ctx: &Ctx) -> Result<()> {
    let store = ctx.store().await?;
    let runners: Vec<RunnerPresence> = store
        .leases
        .scan("runner.*")
        .await?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_slice(&v.value).ok())
        .collect();
    let shards: Vec<(String, LeaseValue)> = store
        .leases
        .scan("shard.*")
        .await?
        .into_iter()
        .filter_map(|(k, v)| serde_json::from_slice(&v.value).ok().map(|l| (k, l)))
        .collect();
    let value = json!({
        "runners": runners,
        "schedulers": shards.iter().map(|(k, l)| json!({ "shard": k, "lease": l })).collect::<Vec<_>>(),
    });
    ctx.print(&value, || {
        let rows: Vec<Vec<String>> = runners
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
        let leases: Vec<Vec<String>> = shards
            .iter()
            .map(|(k, l)| vec![k.clone(), l.holder.clone(), fmt_time(&l.acquired_at), fmt_time(&l.renewed_at)])
            .collect();
        let none = if shards.is_empty() { "\n(no scheduler holds a lease: no fires are dispatched)" } else { "" };
        format!(
            "{}\n\n{}{none}",
            table(&["RUNNER", "POOLS", "RUNNING", "HEARTBEAT", "VERSION"], &rows),
            table(&["SHARD", "HOLDER", "SINCE", "RENEWED"], &leases)
        )
    })
}
