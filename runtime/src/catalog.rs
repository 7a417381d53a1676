//! The live set of job specs: a watch on `cronrun_jobs`, shared by the scheduler and the
//! runner of one process. A spec that fails validation stays in the catalog as an error
//! (logged once) so it is skipped, never fatal.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use chrono_tz::Tz;

use crate::error::Error;
use crate::schedule::Schedule;
use crate::spec::after::{After, AfterOn};
use crate::spec::on::OnMessage;
use crate::spec::{Catchup, History, JobSpec, Retries};
use crate::store::{Store, StoredJob, kv::Versioned};

/// A job as the catalog knows it: what scheduling needs, kept small because a scheduler
/// holds a million of them. Runners fetch the full spec of the jobs they run.
#[derive(Debug)]
pub struct CatalogJob {
    pub name: String,
    pub revision: u64,
    /// Why the stored spec is refused, if it is.
    pub summary: Result<JobSummary, Error>,
}

#[derive(Debug)]
pub struct JobSummary {
    pub schedule: Schedule,
    pub tz: Tz,
    pub paused: bool,
    pub pool: Box<str>,
    pub starting_deadline: Option<Duration>,
    pub jitter: Duration,
    pub retries: Retries,
    pub catchup: Catchup,
    pub catchup_window: Duration,
    pub history: History,
    pub notify: Vec<crate::spec::notify::Notify>,
    /// A Wasm job (a shell job otherwise).
    pub wasm: bool,
    /// The jobs whose runs start this one.
    pub after: Vec<After>,
    /// The subject whose messages start runs of this one.
    pub on: Option<OnMessage>,
}

impl JobSummary {
    pub fn of(spec: &JobSpec) -> Result<Self, Error> {
        let (schedule, tz) = spec.parsed_schedule()?;
        Ok(Self {
            schedule,
            tz,
            paused: spec.paused,
            pool: spec.pool.as_str().into(),
            starting_deadline: spec.starting_deadline,
            jitter: spec.jitter,
            retries: spec.retries.clone(),
            catchup: spec.catchup,
            catchup_window: spec.catchup_window,
            history: spec.history.clone(),
            notify: spec.notify.clone(),
            wasm: spec.wasm.is_some(),
            after: spec.after.clone(),
            on: spec.on.clone(),
        })
    }
}

impl CatalogJob {
    pub fn from_spec(spec: &JobSpec, revision: u64) -> Self {
        Self { name: spec.name.clone(), revision, summary: JobSummary::of(spec) }
    }
}

/// A change for the scheduler: the job's new state, or None when it was removed.
#[derive(Debug, Clone)]
pub struct CatalogEvent {
    pub name: String,
    pub job: Option<Arc<CatalogJob>>,
}

#[derive(Clone, Debug)]
pub struct Catalog {
    jobs: Arc<RwLock<HashMap<String, Arc<CatalogJob>>>>,
    triggers: Arc<RwLock<Triggers>>,
    loaded: watch::Receiver<bool>,
}

/// What starts jobs besides their schedules, indexed so that no lookup scans the catalog.
#[derive(Debug, Default)]
struct Triggers {
    /// The `after` edges by upstream job: who a run's end starts.
    after: HashMap<String, Vec<(String, AfterOn)>>,
    /// The jobs with `on` and their trigger.
    on: HashMap<String, OnMessage>,
}

impl Triggers {
    fn summary(job: Option<&CatalogJob>) -> Option<&JobSummary> {
        job.and_then(|j| j.summary.as_ref().ok())
    }

    /// Replaces what `name` had (its old version `old`) by what `new` has.
    fn update(&mut self, name: &str, old: Option<&CatalogJob>, new: Option<&CatalogJob>) {
        for a in Self::summary(old).map(|s| s.after.as_slice()).unwrap_or_default() {
            if let Some(downstream) = self.after.get_mut(&a.job) {
                downstream.retain(|(d, _)| d != name);
                if downstream.is_empty() {
                    self.after.remove(&a.job);
                }
            }
        }
        let new = Self::summary(new);
        for a in new.map(|s| s.after.as_slice()).unwrap_or_default() {
            self.after.entry(a.job.clone()).or_default().push((name.to_string(), a.on));
        }
        match new.and_then(|s| s.on.clone()) {
            Some(on) => self.on.insert(name.to_string(), on),
            None => self.on.remove(name),
        };
    }
}

impl Catalog {
    /// Starts watching. Changes go to `events` when given (the scheduler's inbox).
    pub fn start(store: Store, events: Option<mpsc::UnboundedSender<CatalogEvent>>, cancel: CancellationToken) -> Self {
        let jobs = Arc::new(RwLock::new(HashMap::new()));
        let triggers = Arc::new(RwLock::new(Triggers::default()));
        let (loaded_tx, loaded) = watch::channel(false);
        let task = Follower { store, jobs: jobs.clone(), triggers: triggers.clone(), events, loaded: loaded_tx };
        tokio::spawn(task.run(cancel));
        Self { jobs, triggers, loaded }
    }

    /// The jobs chained after `upstream`, and on which of its endings.
    pub fn downstream_of(&self, upstream: &str) -> Vec<(String, AfterOn)> {
        self.triggers.read().ok().and_then(|t| t.after.get(upstream).cloned()).unwrap_or_default()
    }

    /// Whether any job has `after`.
    pub fn has_chains(&self) -> bool {
        self.triggers.read().is_ok_and(|t| !t.after.is_empty())
    }

    /// Every job with `on`, and its trigger.
    pub fn listeners(&self) -> HashMap<String, OnMessage> {
        self.triggers.read().map(|t| t.on.clone()).unwrap_or_default()
    }

    pub fn get(&self, name: &str) -> Option<Arc<CatalogJob>> {
        self.jobs.read().ok()?.get(name).cloned()
    }

    /// Every job known now.
    pub fn snapshot(&self) -> Vec<Arc<CatalogJob>> {
        self.jobs.read().map(|j| j.values().cloned().collect()).unwrap_or_default()
    }

    /// Every job known now whose name passes `keep`.
    pub fn snapshot_where(&self, keep: impl Fn(&str) -> bool) -> Vec<Arc<CatalogJob>> {
        self.jobs
            .read()
            .map(|j| j.iter().filter(|(name, _)| keep(name)).map(|(_, job)| job.clone()).collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.jobs.read().map(|j| j.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every job that existed at start has been read.
    pub fn is_loaded(&self) -> bool {
        *self.loaded.borrow()
    }

    /// Waits until every job that existed at start has been read.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.loaded.clone();
        let _ = loaded.wait_for(|l| *l).await;
    }
}

struct Follower {
    store: Store,
    jobs: Arc<RwLock<HashMap<String, Arc<CatalogJob>>>>,
    triggers: Arc<RwLock<Triggers>>,
    events: Option<mpsc::UnboundedSender<CatalogEvent>>,
    loaded: watch::Sender<bool>,
}

impl Follower {
    async fn run(self, cancel: CancellationToken) {
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
            let job = change.value.map(|value| {
                let stored = StoredJob::decode(&change.key, &Versioned { value, revision: change.revision });
                if let Err(e) = &stored.spec {
                    error!(job = %change.key, revision = change.revision, "job skipped: {e}");
                }
                Arc::new(CatalogJob {
                    name: stored.name,
                    revision: stored.revision,
                    summary: stored.spec.and_then(|spec| JobSummary::of(&spec)),
                })
            });
            self.apply(change.key, job);
            if syncing && change.caught_up {
                self.finish_sync(&seen);
                syncing = false;
            }
        }
        Err(Error::nats("job watch", "ended"))
    }

    fn apply(&self, name: String, job: Option<Arc<CatalogJob>>) {
        if let Ok(mut jobs) = self.jobs.write() {
            let old = match &job {
                Some(j) => jobs.insert(name.clone(), j.clone()),
                None => jobs.remove(&name),
            };
            if let Ok(mut triggers) = self.triggers.write() {
                triggers.update(&name, old.as_deref(), job.as_deref());
            }
        }
        if let Some(events) = &self.events {
            let _ = events.send(CatalogEvent { name, job });
        }
    }

    fn finish_sync(&self, seen: &std::collections::HashSet<String>) {
        let gone: Vec<String> = match self.jobs.read() {
            Ok(jobs) => jobs.keys().filter(|k| !seen.contains(*k)).cloned().collect(),
            Err(_) => Vec::new(),
        };
        for name in gone {
            self.apply(name, None);
        }
        if !*self.loaded.borrow() {
            info!(jobs = seen.len(), "job catalog loaded");
            let _ = self.loaded.send(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ShellSpec;

    fn job_on(name: &str, after: &[(&str, AfterOn)], on: Option<OnMessage>) -> CatalogJob {
        let mut spec = JobSpec::shell(name, "", ShellSpec { command: Some("true".into()), ..Default::default() });
        spec.after = after.iter().map(|(j, on)| After { job: j.to_string(), on: *on }).collect();
        spec.on = on;
        CatalogJob::from_spec(&spec, 1)
    }

    fn job(name: &str, after: &[(&str, AfterOn)]) -> CatalogJob {
        job_on(name, after, None)
    }

    #[test]
    fn the_trigger_index_follows_edits_and_removals() {
        let mut chains = Triggers::default();
        let load = job("load", &[("extract", AfterOn::Succeeded), ("audit", AfterOn::Failed)]);
        chains.update("load", None, Some(&load));
        let report = job("report", &[("extract", AfterOn::Finished)]);
        chains.update("report", None, Some(&report));
        assert_eq!(
            chains.after["extract"],
            [("load".into(), AfterOn::Succeeded), ("report".into(), AfterOn::Finished)]
        );
        // An edit drops the old edges of the job and adds its new ones.
        let edited = job("load", &[("audit", AfterOn::Finished)]);
        chains.update("load", Some(&load), Some(&edited));
        assert_eq!(chains.after["extract"], [("report".to_string(), AfterOn::Finished)]);
        assert_eq!(chains.after["audit"], [("load".to_string(), AfterOn::Finished)]);
        chains.update("report", Some(&report), None);
        chains.update("load", Some(&edited), None);
        assert!(chains.after.is_empty(), "{chains:?}");
        // A listener comes and goes with its `on`.
        let on = OnMessage { subject: "orders.created".into(), concurrency: 1, redeliver: 3 };
        let listening = job_on("orders", &[], Some(on.clone()));
        chains.update("orders", None, Some(&listening));
        assert_eq!(chains.on.get("orders"), Some(&on));
        chains.update("orders", Some(&listening), Some(&job("orders", &[("extract", AfterOn::Succeeded)])));
        assert!(chains.on.is_empty());
    }
}
