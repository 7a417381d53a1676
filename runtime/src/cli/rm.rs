//! `cronrun rm NAME`

use anyhow::{Context, Result};
use clap::Args;
use futures::StreamExt;
use serde_json::json;

use super::Ctx;

#[derive(Args)]
pub struct RmArgs {
    pub name: String,
    /// Keep the job's run records (`cronrun runs` still lists them)
    #[arg(long)]
    pub keep_history: bool,
}

/// Removes the spec, then (unless --keep-history) the job's run records and its Wasm KV
/// store, so that nothing of a removed job stays in NATS. A run in flight loses its record:
/// its next write is refused and its runner stops it. Pause a job and let it go idle
/// before removing it.
pub async fn run(ctx: &Ctx, a: RmArgs) -> Result<()> {
    let store = ctx.store().await?;
    store.delete_job(&a.name).await?;
    ctx.audit(&store, &a.name, crate::events::EventKind::Removed, "removed".into()).await;
    let records = match a.keep_history {
        true => 0,
        false => store.purge_runs(&a.name).await?,
    };
    let job_kv = match a.keep_history {
        true => 0,
        false => purge_job_kv(&store, &a.name).await?,
    };
    ctx.print(&json!({ "removed": a.name, "run_records_removed": records, "kv_keys_removed": job_kv }), || {
        format!("removed {} ({records} run records, {job_kv} keys of its KV store)", a.name)
    })
}

/// Purges `<job>.*` from the Wasm jobs' KV bucket, if there is one.
async fn purge_job_kv(store: &crate::store::Store, job: &str) -> Result<usize> {
    let bucket = store.names.job_kv_bucket();
    let Ok(kv) = store.js.get_key_value(&bucket).await else { return Ok(0) };
    let keys: Vec<String> = match kv.keys().await {
        Ok(keys) => keys.filter_map(|k| async move { k.ok() }).collect().await,
        Err(_) => return Ok(0),
    };
    let prefix = format!("{job}.");
    let mut removed = 0;
    for key in keys.iter().filter(|k| k.starts_with(&prefix)) {
        kv.purge(key).await.with_context(|| format!("removing {key} from {bucket}"))?;
        removed += 1;
    }
    Ok(removed)
}
