//! Every job of the deployment in memory, for the dashboard's table: a watch on
//! `cronrun_jobs` from each job's latest spec on. Only an agent serving the dashboard
//! holds it (a summary per job; mind the memory with millions of jobs). A spec that fails
//! validation stays in as an error (logged once), so it is shown, never fatal.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::CatalogJob;
use crate::error::Error;
use crate::store::{Store, kv::Versioned};

#[derive(Clone, Debug)]
pub struct AllJobs {
    jobs: Arc<RwLock<HashMap<String, Arc<CatalogJob>>>>,
    loaded: watch::Receiver<bool>,
}

impl AllJobs {
    /// The jobs, empty until the follower, run by the caller (on a task it watches),
    /// has read them.
    pub fn new(store: Store) -> (Self, Follower) {
        let jobs = Arc::new(RwLock::new(HashMap::new()));
        let (loaded_tx, loaded) = watch::channel(false);
        let follower = Follower { store, jobs: jobs.clone(), loaded: loaded_tx };
        (Self { jobs, loaded }, follower)
    }

    pub fn get(&self, name: &str) -> Option<Arc<CatalogJob>> {
        self.jobs.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }

    /// Every job known now.
    pub fn snapshot(&self) -> Vec<Arc<CatalogJob>> {
        self.jobs.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// Whether every job that existed at start has been read.
    pub fn is_loaded(&self) -> bool {
        *self.loaded.borrow()
    }
}

/// Keeps an `AllJobs` current.
pub struct Follower {
    store: Store,
    jobs: Arc<RwLock<HashMap<String, Arc<CatalogJob>>>>,
    loaded: watch::Sender<bool>,
}

impl Follower {
    /// Follows the jobs bucket until `cancel`, watching again after a lost watch.
    pub async fn run(&self, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                result = self.follow() => {
                    if let Err(e) = result {
                        warn!("job watch interrupted, resyncing: {e}");
                    }
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    /// One watch from the latest state of every key; on a resync, keys not seen again
    /// before catching up were deleted meanwhile.
    async fn follow(&self) -> Result<(), Error> {
        let mut watch = self.store.jobs.watch(">").await?;
        let mut seen = std::collections::HashSet::new();
        let mut syncing = true;
        if watch.initially_empty {
            self.finish_sync(&seen);
            syncing = false;
        }
        while let Some(change) = watch.next().await {
            let change = change?;
            if syncing {
                seen.insert(change.key.clone());
            }
            let job = change
                .value
                .map(|value| CatalogJob::decode(&change.key, &Versioned { value, revision: change.revision }));
            self.apply(change.key, job);
            if syncing && change.caught_up {
                self.finish_sync(&seen);
                syncing = false;
            }
        }
        Err(Error::nats_msg("job watch", "ended"))
    }

    fn apply(&self, name: String, job: Option<Arc<CatalogJob>>) {
        let mut jobs = self.jobs.write().unwrap_or_else(PoisonError::into_inner);
        match job {
            Some(j) => jobs.insert(name, j),
            None => jobs.remove(&name),
        };
    }

    fn finish_sync(&self, seen: &std::collections::HashSet<String>) {
        let jobs = self.jobs.read().unwrap_or_else(PoisonError::into_inner);
        let gone: Vec<String> = jobs.keys().filter(|k| !seen.contains(*k)).cloned().collect();
        drop(jobs);
        for name in gone {
            self.apply(name, None);
        }
        if !*self.loaded.borrow() {
            info!(jobs = seen.len(), "every job loaded for the dashboard");
            let _ = self.loaded.send(true);
        }
    }
}
