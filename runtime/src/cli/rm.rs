//! `cronrun rm NAME`

use anyhow::{Context, Result};
use clap::Args;
use futures::StreamExt;
use serde::Serialize;

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
    let removed = remove(ctx, &store, &a.name, None, a.keep_history, "removed".into()).await?;
    ctx.print(&removed, || removed.to_string())
}

/// What removing a job removed.
#[derive(Serialize)]
pub(super) struct Removed {
    removed: String,
    run_records_removed: usize,
    kv_keys_removed: usize,
}

impl std::fmt::Display for Removed {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let Self { removed, run_records_removed: records, kv_keys_removed: keys } = self;
        write!(f, "removed {removed} ({records} run records, {keys} keys of its KV store)")
    }
}

/// Removes job `name` as `cronrun rm` does (the spec, its audit event `detail`, then its
/// records and KV keys unless `keep_history`), for `rm` and `apply --prune` alike. With
/// `revision`, only if the job is still at it: a job changed since the caller read it (its
/// owner changed, say) is not the one it meant to remove.
pub(super) async fn remove(
    ctx: &Ctx,
    store: &crate::store::Store,
    name: &str,
    revision: Option<u64>,
    keep_history: bool,
    detail: String,
) -> Result<Removed> {
    match revision {
        Some(revision) => store
            .jobs
            .delete_at(name, revision)
            .await
            .with_context(|| format!("removing job {name} (changed since it was read? run it again)"))?,
        None => store.delete_job(name).await?,
    }
    ctx.audit(store, name, crate::events::EventKind::Removed, detail).await;
    let (records, job_kv) = match keep_history {
        true => (0, 0),
        false => {
            // What was backfilled goes with the runs: a job made again under the name
            // backfills its fires afresh.
            // Looked for first: an identity from before backfill may not write the key.
            let backfilled = crate::names::lease_keys::backfilled(name);
            if store.leases.get(&backfilled).await?.is_some() {
                store.leases.purge(&backfilled, crate::store::LEASE_MARKER_TTL).await?;
            }
            (store.purge_runs(name).await?, purge_job_kv(store, name).await?)
        }
    };
    Ok(Removed { removed: name.to_string(), run_records_removed: records, kv_keys_removed: job_kv })
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
