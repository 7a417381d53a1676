//! `cronrun status`: live runners and schedulers (from their presence keys) and which
//! scheduler holds which shard.

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
    let schedulers: Vec<LeaseValue> = store
        .leases
        .scan("scheduler.>")
        .await?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_slice(&v.value).ok())
        .collect();
    let mut shards: Vec<(u32, LeaseValue)> = store
        .leases
        .scan("shard.*")
        .await?
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("shard.")?.parse().ok()?, serde_json::from_slice(&v.value).ok()?)))
        .collect();
    shards.sort_by_key(|(n, _)| *n);
    let stored = store.leases.get(crate::scheduler::SHARDS_KEY).await?;
    let count = stored.and_then(|v| crate::scheduler::parse_count(&String::from_utf8_lossy(&v.value))).unwrap_or(0);
    let unserved = unserved_pools(&store, &runners).await?;
    let value = json!({
        "unserved_pools": unserved.iter().map(|(pool, jobs)| json!({ "pool": pool, "jobs": jobs })).collect::<Vec<_>>(),
        "runners": runners,
        "schedulers": schedulers,
        "shards": { "count": count, "leases": shards.iter().map(|(n, l)| json!({ "shard": n, "lease": l })).collect::<Vec<_>>() },
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
        let owned =
            |holder: &str| shards.iter().filter(|(_, l)| l.holder == holder).map(|(n, _)| *n).collect::<Vec<_>>();
        let members: Vec<Vec<String>> = schedulers
            .iter()
            .map(|m| {
                let mine = owned(&m.holder);
                let which = crate::scheduler::ranges(mine.iter().copied());
                vec![m.holder.clone(), mine.len().to_string(), which, fmt_time(&m.acquired_at)]
            })
            .collect();
        let unowned = count as usize - shards.len().min(count as usize);
        let note = match (count, unowned) {
            (0, _) => "\n(no scheduler has started yet: no fires are dispatched)".to_string(),
            (_, 0) => String::new(),
            (c, u) => format!("\n({u} of {c} shards have no scheduler: their fires wait for one)"),
        };
        let unserved = unserved
            .iter()
            .map(|(pool, jobs)| {
                format!("\npool {pool:?} has {jobs} job(s) and no live runner: their runs wait for one")
            })
            .collect::<String>();
        format!(
            "{}\n\n{}{note}{unserved}",
            table(&["RUNNER", "POOLS", "RUNNING", "HEARTBEAT", "VERSION"], &rows),
            table(&["SCHEDULER", "SHARDS", "WHICH", "SINCE"], &members)
        )
    })
}

/// Pools that jobs (not paused) name and no live runner serves, with how many jobs name each: their
/// runs wait (a typo in `pool` looks just like this).
async fn unserved_pools(store: &crate::store::Store, runners: &[RunnerPresence]) -> Result<Vec<(String, usize)>> {
    let mut pools: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for job in store.list_jobs().await? {
        if let Ok(spec) = job.spec
            && !spec.paused
        {
            *pools.entry(spec.pool).or_default() += 1;
        }
    }
    let served = |pool: &str| runners.iter().any(|r| r.pools.iter().any(|p| p == pool));
    Ok(pools.into_iter().filter(|(pool, _)| !served(pool)).collect())
}
