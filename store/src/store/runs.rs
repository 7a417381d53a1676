//! Run records in `cronrun_runs`. Every change after creation is a compare-and-set on the
//! record's revision: a runner that lost its run finds its write refused.

use std::time::Duration;

use super::Store;
use super::kv::Fenced;
use crate::error::Error;
use crate::record::{RunRecord, Status, run_key};
use crate::spec::History;

/// Purge markers of pruned runs expire after this long.
const PRUNE_MARKER_TTL: Duration = crate::store::kv::RELEASE_MARKER_TTL;

#[derive(Debug, Clone)]
pub struct StoredRun {
    pub record: RunRecord,
    pub revision: u64,
}

impl Store {
    /// Creates the record if its key is free. `ErrorKind::AlreadyExists` means this run
    /// (for a scheduled run: this fire) was already dispatched.
    pub async fn create_run(&self, record: &RunRecord) -> Result<u64, Error> {
        self.runs.create(&record.key(), record.to_json_within(self.record_budget)?, None).await
    }

    pub async fn get_run(&self, job: &str, run_id: &str) -> Result<StoredRun, Error> {
        let key = run_key(job, run_id);
        let v = self
            .runs
            .get(&key)
            .await?
            .ok_or_else(|| Error::not_found(format!("run {key} not found; `cronrun runs {job}` lists runs")))?;
        Ok(StoredRun { record: RunRecord::from_json(&v.value)?, revision: v.revision })
    }

    /// Writes `record` if it is still at `revision`; `ErrorKind::Conflict` otherwise.
    pub async fn update_run(&self, record: &RunRecord, revision: u64) -> Result<u64, Error> {
        self.runs.update(&record.key(), record.to_json_within(self.record_budget)?, revision, None).await
    }

    /// `update_run` from the fence's revision, reading back a write whose answer was lost
    /// (see `Fenced`): the runner's writes, which fence a run against its retry.
    pub async fn update_run_fenced(&self, record: &RunRecord, fence: &mut Fenced) -> Result<u64, Error> {
        self.runs.update_fenced(&record.key(), record.to_json_within(self.record_budget)?, fence, None).await
    }

    /// All records of `job`, oldest fire first.
    pub async fn list_runs(&self, job: &str) -> Result<Vec<StoredRun>, Error> {
        let mut runs: Vec<StoredRun> = self
            .runs
            .scan_last(&format!("{job}.*"))
            .await?
            .into_iter()
            .filter_map(|(_, v)| {
                RunRecord::from_json(&v.value).ok().map(|record| StoredRun { record, revision: v.revision })
            })
            .collect();
        runs.sort_by(|a, b| (a.record.scheduled_at, &a.record.run_id).cmp(&(b.record.scheduled_at, &b.record.run_id)));
        Ok(runs)
    }

    /// Every job's kept runs, by fire.
    pub async fn list_all_runs(&self) -> Result<Vec<RunRecord>, Error> {
        let mut runs: Vec<RunRecord> =
            self.runs.scan(">").await?.into_iter().filter_map(|(_, v)| RunRecord::from_json(&v.value).ok()).collect();
        runs.sort_by(|a, b| (a.scheduled_at, &a.job, &a.run_id).cmp(&(b.scheduled_at, &b.job, &b.run_id)));
        Ok(runs)
    }

    /// Removes every record of `job` (after `rm`); returns how many.
    pub async fn purge_runs(&self, job: &str) -> Result<usize, Error> {
        let runs = self.runs.scan_last(&format!("{job}.*")).await?;
        for (key, _) in &runs {
            self.runs.purge(key, PRUNE_MARKER_TTL).await?;
        }
        Ok(runs.len())
    }

    /// Removes finished runs of `job` beyond its history limits, oldest first.
    /// Returns how many were removed.
    pub async fn prune_runs(&self, job: &str, history: &History) -> Result<usize, Error> {
        let runs = self.list_runs(job).await?;
        let (ok, not_ok): (Vec<_>, Vec<_>) =
            runs.iter().filter(|r| r.record.status.is_final()).partition(|r| r.record.status == Status::Succeeded);
        let excess = |v: &Vec<&StoredRun>, keep: u32| v.len().saturating_sub(keep as usize);
        let doomed =
            ok[..excess(&ok, history.succeeded)].iter().chain(not_ok[..excess(&not_ok, history.failed)].iter());
        let mut removed = 0;
        for run in doomed {
            self.runs.purge(&run.record.key(), PRUNE_MARKER_TTL).await?;
            removed += 1;
        }
        Ok(removed)
    }
}
