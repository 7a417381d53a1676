//! The jobs of one shard as its leader follows them: a watch on `<shard>.>` of the
//! schedules index (see `store::schedules`) from where `loader` read them up to.

use std::sync::Arc;

use bytes::Bytes;

use tracing::{error, warn};

use crate::catalog::{CatalogJob, JobTriggers, ShardTriggers};
use crate::error::Error;
use crate::names::lease_keys;
use crate::scheduler::membership::shards::shard_of;
use crate::store::Bucket;
use crate::store::kv::{Change, Versioned, Watch};

/// Errors in a row after which a shard's job watch is given up (and the shard with it).
const WATCH_ERRORS_MAX: u32 = 10;

/// What changed in the shard.
pub(in crate::scheduler) enum ShardChange {
    /// A job was added or edited, and its spec as the index holds it.
    Put(Arc<CatalogJob>, Bytes),
    /// A job was removed.
    Removed(String),
}

/// The watch of one shard's jobs.
pub(in crate::scheduler) struct ShardJobs {
    index: Bucket,
    n: u32,
    shards: u32,
    /// None while it is to be opened (again).
    watch: Option<Watch>,
    /// The index's sequence of the last change seen.
    last: u64,
    /// Watch errors since the last change.
    errors: u32,
}

impl ShardJobs {
    /// Follows shard `n`'s changes after `sequence` of the index.
    pub async fn follow_after(index: &Bucket, n: u32, shards: u32, sequence: u64) -> Result<Self, Error> {
        let mut jobs = Self { index: index.clone(), n, shards, watch: None, last: sequence, errors: 0 };
        jobs.open().await?;
        Ok(jobs)
    }

    /// The index's sequence of the last change seen.
    pub fn last(&self) -> u64 {
        self.last
    }

    async fn open(&mut self) -> Result<(), Error> {
        self.watch = Some(self.index.changes_after(&format!("{}.>", self.n), self.last).await?);
        Ok(())
    }

    /// The next change; an error once the watch has ended, or failed `WATCH_ERRORS_MAX`
    /// times in a row (the index deleted?). Errors on the way (a missed heartbeat while
    /// NATS is away) are logged: the ordered consumer beneath makes itself again, after
    /// the last change it delivered, or from the start of the index if it had delivered
    /// none; then the watch is opened again after the last change seen here, rather than
    /// read the whole shard again.
    pub async fn next(&mut self) -> Result<ShardChange, Error> {
        loop {
            let Some(watch) = self.watch.as_mut() else {
                self.open().await?;
                continue;
            };
            let change = match watch.next().await {
                None => return Err(Error::nats_msg("the shard's job watch", "ended")),
                Some(Err(e)) => {
                    self.errors += 1;
                    if self.errors >= WATCH_ERRORS_MAX {
                        return Err(e);
                    }
                    warn!("the shard's job watch: {e}");
                    continue;
                }
                Some(Ok(change)) => change,
            };
            self.errors = 0;
            if change.sequence <= self.last {
                self.watch = None;
                continue;
            }
            self.last = change.sequence;
            let Some(value) = change.value.clone() else {
                return Ok(ShardChange::Removed(name_of(&change.key).to_string()));
            };
            if let Some(job) = decode(self.n, self.shards, change) {
                return Ok(ShardChange::Put(job, value));
            }
        }
    }
}

/// The job's name in a key `<shard>.<job>`.
fn name_of(key: &str) -> &str {
    key.split_once('.').map_or(key, |(_, name)| name)
}

/// The job a live entry of shard `n` holds; None for a removal, and for a job filed under
/// another shard than its own (a disagreement with the server's partition, which must not
/// be: that shard's leader would fire it).
pub(super) fn decode(n: u32, shards: u32, change: Change) -> Option<Arc<CatalogJob>> {
    decode_entry(n, shards, name_of(&change.key), change.value?, change.revision)
}

/// Job `name` stored as `value` at `revision` in shard `n`; None if that is not its shard.
pub(super) fn decode_entry(n: u32, shards: u32, name: &str, value: Bytes, revision: u64) -> Option<Arc<CatalogJob>> {
    if shard_of(name, shards) != n {
        error!(job = %name, "the schedules index files this job under shard {n}, but its shard is {}", shard_of(name, shards));
        return None;
    }
    Some(CatalogJob::decode(name, &Versioned { value, revision }))
}

/// The triggers of the shard's jobs, and their publication under `triggers.<shard>` (see
/// `catalog::triggers`).
pub(in crate::scheduler) struct PublishedTriggers {
    n: u32,
    jobs: ShardTriggers,
    /// Changed since last written.
    dirty: bool,
    /// The revision of our last write: another one found there (a former leader's late
    /// write) is replaced.
    written: Option<u64>,
}

impl PublishedTriggers {
    pub fn new(n: u32) -> Self {
        Self { n, jobs: ShardTriggers::new(), dirty: true, written: None }
    }

    /// Notes the job's triggers now (None: removed, or without any).
    pub fn set(&mut self, job: &CatalogJob) {
        let now = job.summary.as_ref().ok().and_then(|s| JobTriggers::of(s.after(), s.on()));
        self.put(&job.name, now);
    }

    pub fn remove(&mut self, name: &str) {
        self.put(name, None);
    }

    /// Whether the triggers changed since last written.
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    fn put(&mut self, name: &str, now: Option<JobTriggers>) {
        let changed = match now {
            Some(t) => self.jobs.insert(name.to_string(), t.clone()).is_none_or(|old| old != t),
            None => self.jobs.remove(name).is_some(),
        };
        self.dirty |= changed;
    }

    /// Writes the shard's triggers (`{}` when it has none: every shard says what it has)
    /// if they changed, or if someone else wrote the key since.
    pub async fn publish(&mut self, leases: &Bucket, budget: usize) -> Result<(), Error> {
        let key = lease_keys::triggers(self.n);
        let there = leases.get(&key).await?.map(|v| v.revision);
        if !self.dirty && there.is_some() && there == self.written {
            return Ok(());
        }
        let value = serde_json::to_vec(&self.jobs)
            .map_err(|e| Error::other(&format!("encoding the triggers of shard {}", self.n), e))?;
        if value.len() > budget {
            // Said once per change, not at every renewal.
            self.dirty = false;
            return Err(Error::new(
                crate::ErrorKind::Other,
                format!(
                    "the triggers of shard {}'s {} jobs with `after` or `on` take {} bytes, over the {budget} a key may \
                     hold: chains and message triggers of the shard's jobs keep their former set",
                    self.n,
                    self.jobs.len(),
                    value.len()
                ),
            ));
        }
        // Still dirty until written: a write that failed (or was given up) is made again.
        self.written = Some(leases.put(&key, value.into(), None).await?);
        self.dirty = false;
        Ok(())
    }
}
