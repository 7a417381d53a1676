//! Runs whose runner died: every run holds a lease (`run.<job>.<run-id>`) that its runner
//! renews with each heartbeat. When the server expires one, the lease holder of the shard
//! marks the run `lost` by compare-and-set (so the stalled runner, should it wake, finds
//! its writes refused) and queues another attempt if the job's retry policy allows.

use chrono::{DateTime, Utc};
use tracing::{info, warn};

use crate::catalog::Catalog;
use crate::dispatch::retry;
use crate::error::Error;
use crate::events::{Event, publish_event};
use crate::record::{Status, parse_run_key};
use crate::store::Store;

/// Handles the expiry of lease `key`. Idempotent: a run that is over, or whose lease was
/// taken again meanwhile, is left alone.
pub(super) async fn run_lease_expired(store: &Store, catalog: &Catalog, key: &str, now: DateTime<Utc>) -> Result<(), Error> {
    let Some((job, run_id)) = key.strip_prefix("run.").and_then(|k| parse_run_key(k).ok()) else {
        return Ok(());
    };
    let stored = match store.get_run(job, run_id).await {
        Ok(s) => s,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut record = stored.record;
    let claimed = record.status == Status::Running || (record.status == Status::Queued && record.host.is_some());
    if !claimed || store.leases.get(key).await?.is_some() {
        return Ok(());
    }
    let host = record.host.clone().unwrap_or_default();
    warn!(job, run = run_id, attempt = record.attempt, %host, "run lost: its runner stopped renewing the run's lease");
    record.status = Status::Lost;
    record.error = Some(format!("runner {host} stopped renewing the run's lease"));
    record.finished_at = Some(now);
    let revision = store.update_run(&record, stored.revision).await?;
    let detail = record.error.clone().unwrap_or_default();
    publish_event(store, &Event::new(job, run_id, "lost", record.attempt, now).with_detail(detail)).await;
    let Some(summary) = catalog.get(job).and_then(|j| j.summary.as_ref().ok().map(|s| (s.retries.clone(), s.pool.clone()))) else {
        return Ok(());
    };
    let (retries, pool) = summary;
    if retries.allow_after(record.attempt) {
        let start_at = now + retries.delay_after(record.attempt);
        info!(job, run = run_id, next_attempt = record.attempt + 1, %start_at, "retrying lost run");
        retry(store, &pool, record, revision, start_at, now).await?;
    }
    Ok(())
}
