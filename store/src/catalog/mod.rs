//! Job specs as the agent's tasks look them up.
//!
//! - `mod.rs`: `Catalog`, a job's summary by name: fetched from `cronrun_jobs` when first
//!   asked for, kept up to date by a feed of the bucket's changes from the agent's start,
//!   so no agent reads every spec (a deployment may have millions; a shard's leader reads
//!   its own shard's from the schedules index, see `scheduler::loader`).
//! - `cache.rs`: what was read, and when a read may be kept.
//! - `triggers.rs`: the `after` and `on` of every job, which shard leaders publish, and a
//!   signal of their changes (`Catalog::trigger_changes`).
//! - `all.rs`: every job in memory, for the dashboard only.

mod all;
mod cache;
mod triggers;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::error::Error;
use crate::names::lease_keys;
use crate::schedule::Schedule;
use crate::spec::after::{After, AfterOn};
use crate::spec::on::OnMessage;
use crate::spec::{Catchup, History, JobSpec, Retries};
use crate::store::{Store, StoredJob, kv::Versioned};

pub use all::AllJobs;
use cache::Cache;
use triggers::SharedTriggers;
pub use triggers::{JobTriggers, ShardTriggers, TriggerChanges};

/// A job as the catalog knows it: what scheduling needs, kept small because a leader holds
/// one per job of its shards. Runners fetch the full spec of the jobs they run.
#[derive(Debug)]
pub struct CatalogJob {
    /// Shared with the fire queue's index of names, so a leader keeps one copy per job.
    pub name: Arc<str>,
    pub revision: u64,
    /// Why the stored spec is refused, if it is.
    pub summary: Result<JobSummary, Error>,
}

#[derive(Debug)]
pub struct JobSummary {
    pub schedule: Arc<Schedule>,
    pub tz: Tz,
    pub paused: bool,
    pub pool: Arc<str>,
    pub starting_deadline: Option<Duration>,
    pub jitter: Duration,
    pub retries: Retries,
    pub catchup: Catchup,
    pub catchup_window: Duration,
    pub history: History,
    /// A Wasm job (a shell job otherwise).
    pub wasm: bool,
    /// Notifications and triggers, which most jobs have none of: boxed, so that those pay
    /// one pointer for them.
    rare: Option<Box<Rare>>,
}

#[derive(Debug)]
struct Rare {
    notify: Vec<crate::spec::notify::Notify>,
    after: Vec<After>,
    on: Option<OnMessage>,
    exclude: Vec<String>,
}

impl JobSummary {
    pub fn of(spec: &JobSpec) -> Result<Self, Error> {
        Ok(Self::of_parsed(spec, spec.parsed_schedule()?))
    }

    /// The summary of `spec`, whose schedule and zone are parsed already.
    fn of_parsed(spec: &JobSpec, (schedule, tz): (Arc<Schedule>, Tz)) -> Self {
        Self {
            schedule,
            tz,
            paused: spec.paused,
            pool: crate::model::shared::pool(&spec.pool),
            starting_deadline: spec.starting_deadline,
            jitter: spec.jitter,
            retries: spec.retries.clone(),
            catchup: spec.catchup,
            catchup_window: spec.catchup_window,
            history: spec.history.clone(),
            wasm: spec.wasm.is_some(),
            rare: (!spec.notify.is_empty() || !spec.after.is_empty() || spec.on.is_some() || !spec.exclude.is_empty())
                .then(|| {
                    Box::new(Rare {
                        notify: spec.notify.clone(),
                        after: spec.after.clone(),
                        on: spec.on.clone(),
                        exclude: spec.exclude.clone(),
                    })
                }),
        }
    }

    /// Where the job's run events are sent besides the defaults.
    pub fn notify(&self) -> &[crate::spec::notify::Notify] {
        self.rare.as_ref().map_or(&[], |r| &r.notify)
    }

    /// The jobs whose runs start this one.
    pub fn after(&self) -> &[After] {
        self.rare.as_ref().map_or(&[], |r| &r.after)
    }

    /// The subject whose messages start runs of this one.
    pub fn on(&self) -> Option<&OnMessage> {
        self.rare.as_ref().and_then(|r| r.on.as_ref())
    }

    /// The calendars whose days the job's fires skip.
    pub fn exclude(&self) -> &[String] {
        self.rare.as_ref().map_or(&[], |r| &r.exclude)
    }
}

impl CatalogJob {
    pub fn from_spec(spec: &JobSpec, revision: u64) -> Self {
        Self { name: spec.name.as_str().into(), revision, summary: JobSummary::of(spec) }
    }

    /// The job stored as `value` under `name`; a spec that is refused is kept as its error,
    /// logged here, so that every reader skips it and none trips over it.
    pub fn decode(name: &str, value: &Versioned) -> Arc<Self> {
        Self::decode_spec(name, value).0
    }

    /// `decode`, and the job as stored, its spec decoded the once (a runner about to run
    /// it needs the whole spec).
    fn decode_stored(name: &str, value: &Versioned) -> (Arc<Self>, StoredJob) {
        let (job, spec) = Self::decode_spec(name, value);
        (job, StoredJob { name: name.to_string(), revision: value.revision, spec })
    }

    /// The job and its spec; `decode` (a scheduler's load, millions of jobs) drops the spec
    /// without making a `StoredJob` of it.
    fn decode_spec(name: &str, value: &Versioned) -> (Arc<Self>, Result<JobSpec, Error>) {
        let decoded = JobSpec::from_json_checked(&value.value).and_then(|(spec, parsed)| {
            StoredJob::check_name(name, &spec)?;
            Ok((JobSummary::of_parsed(&spec, parsed), spec))
        });
        let (summary, spec) = match decoded {
            Ok((summary, spec)) => (Ok(summary), Ok(spec)),
            Err(e) => {
                error!(job = %name, revision = value.revision, "job skipped: {e}");
                (Err(e.clone()), Err(e))
            }
        };
        (Arc::new(Self { name: name.into(), revision: value.revision, summary }), spec)
    }
}

/// Job summaries by name, read on first use and kept current by a feed of changes.
#[derive(Clone, Debug)]
pub struct Catalog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    cache: Cache,
    /// With the deployment's shard count: every job's triggers, for a scheduler.
    shards: Option<u32>,
    triggers: SharedTriggers,
    loaded: watch::Sender<bool>,
}

impl Catalog {
    /// Starts the feed of changes; with `shards` (a scheduler's), also the index of every
    /// job's triggers, which its chains and message triggers need.
    pub fn start(store: Store, shards: Option<u32>, cancel: CancellationToken) -> Self {
        let (loaded, _) = watch::channel(false);
        let inner =
            Arc::new(Inner { store, cache: Cache::default(), shards, triggers: SharedTriggers::default(), loaded });
        tokio::spawn(feed(inner.clone(), cancel));
        Self { inner }
    }

    /// The job's summary now; None if it does not exist.
    pub async fn get(&self, name: &str) -> Result<Option<Arc<CatalogJob>>, Error> {
        Ok(self.get_read(name).await?.map(|(job, _)| job))
    }

    /// `get`, and the job as stored when it was read from KV now (not cached): a caller
    /// needing the whole spec too reads and decodes it once.
    pub async fn get_read(&self, name: &str) -> Result<Option<(Arc<CatalogJob>, Option<StoredJob>)>, Error> {
        let ticket = match self.inner.cache.get(name) {
            Ok(job) => return Ok(Some((job, None))),
            Err(ticket) => ticket,
        };
        let Some(value) = self.inner.store.jobs.get(name).await? else { return Ok(None) };
        let (job, stored) = CatalogJob::decode_stored(name, &value);
        if let Some(ticket) = ticket {
            self.inner.cache.keep(ticket, job.clone());
        }
        Ok(Some((job, Some(stored))))
    }

    /// Whether the job was removed while this agent ran (and not added again).
    pub fn was_removed(&self, name: &str) -> bool {
        self.inner.cache.was_removed(name)
    }

    /// Forgets removed jobs that `keep` says nothing shows any more.
    pub fn retain_removed(&self, keep: impl Fn(&str) -> bool) {
        self.inner.cache.retain_removed(keep);
    }

    /// The jobs chained after `upstream`, and on which of its endings.
    pub fn downstream_of(&self, upstream: &str) -> Vec<(String, AfterOn)> {
        self.inner.triggers.read(|t| t.downstream_of(upstream)).unwrap_or_default()
    }

    /// Whether any job has `after`.
    pub fn has_chains(&self) -> bool {
        self.inner.triggers.read(|t| t.has_chains()).unwrap_or(false)
    }

    /// Whether every shard has published its triggers: until then, no job's `after` may
    /// be taken for absent (a shard not led yet, an upgrade).
    pub fn triggers_complete(&self) -> bool {
        let Some(shards) = self.inner.shards else { return false };
        self.inner.triggers.read(|t| t.complete(shards)).unwrap_or(false)
    }

    /// Every job with `on`, and its trigger.
    pub fn listeners(&self) -> HashMap<String, OnMessage> {
        self.inner.triggers.read(|t| t.listeners()).unwrap_or_default()
    }

    /// A signal of every change to what `has_chains`, `triggers_complete`, `listeners`
    /// and a listening job's pause say (and of the feed opened again, after which changes
    /// may have been missed), for waiting on those instead of looking every so often.
    pub fn trigger_changes(&self) -> TriggerChanges {
        self.inner.triggers.subscribe()
    }

    /// Whether the feed follows changes (and the triggers are read, if asked for).
    pub fn is_loaded(&self) -> bool {
        *self.inner.loaded.borrow()
    }

    /// Waits until `is_loaded`.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.inner.loaded.subscribe();
        let _ = loaded.wait_for(|l| *l).await;
    }
}

impl Inner {
    fn set_loaded(&self) {
        if !self.loaded.send_replace(true) {
            let shards = self.triggers.read(|t| t.shards()).unwrap_or(0);
            info!(
                shards_with_triggers = shards,
                "job catalog loaded: following job changes, specs read when first needed"
            );
        }
    }

    /// What shard `n`'s triggers key holds now.
    fn shard_triggers(&self, n: u32, value: Option<&[u8]>) {
        let published = value.map(|value| {
            serde_json::from_slice::<ShardTriggers>(value).unwrap_or_else(|e| {
                error!(shard = n, "unreadable triggers of the shard, taken as none: {e}");
                ShardTriggers::new()
            })
        });
        self.triggers.set_shard(n, published);
    }
}

/// Follows the changes of every job (and the shards' triggers) until `cancel`; a feed that
/// ends is opened again, with everything kept forgotten, since changes may have been
/// missed in between.
async fn feed(inner: Arc<Inner>, cancel: CancellationToken) {
    use futures::FutureExt;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            // A panic is caught too: the feed is the cache's only source of changes, and
            // a cache left live without it would serve stale specs for ever.
            result = std::panic::AssertUnwindSafe(follow(&inner)).catch_unwind() => {
                inner.cache.set_live(false);
                match result {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => warn!("job feed interrupted, opening it again: {e}"),
                    Err(panic) => {
                        error!("job feed panicked, opening it again: {}", crate::watchdog::panic_message(panic.as_ref()));
                        // Read again from the start: what a panic left half-written (and
                        // its lock poisoned) is not kept.
                        inner.triggers.reset();
                    }
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

async fn follow(inner: &Inner) -> Result<(), Error> {
    let mut jobs = inner.store.jobs.changes(">").await?;
    inner.cache.set_live(true);
    // Whatever changed while the feed was closed came by no change: waiters look again.
    inner.triggers.signal();
    let mut shards = match inner.shards {
        Some(_) => Some(inner.store.leases.watch(&lease_keys::triggers_all()).await?),
        None => None,
    };
    // The shards whose key is seen until the watch caught up; the others' were removed.
    let mut seen = shards.as_ref().filter(|w| !w.initially_empty).map(|_| HashSet::new());
    if seen.is_none() {
        inner.triggers.retain_shards(&HashSet::new());
        inner.set_loaded();
    }
    loop {
        tokio::select! {
            change = jobs.next() => {
                let change = change.ok_or_else(|| Error::nats_msg("job feed", "ended"))??;
                let removed = change.value.is_none();
                let (name, revision) = (change.key.as_str(), change.revision);
                inner.cache.changed(name, revision, removed, || {
                    CatalogJob::decode(name, &Versioned { value: change.value.clone().unwrap_or_default(), revision })
                });
                inner.triggers.job_changed(name);
            }
            change = async {
                match shards.as_mut() {
                    Some(watch) => watch.next().await,
                    None => std::future::pending().await,
                }
            } => {
                let change = change.ok_or_else(|| Error::nats_msg("trigger watch", "ended"))??;
                let Some(n) = change.key.strip_prefix("triggers.").and_then(|n| n.parse::<u32>().ok()) else { continue };
                inner.shard_triggers(n, change.value.as_deref());
                if let Some(seen_now) = seen.as_mut() {
                    seen_now.insert(n);
                    if change.caught_up {
                        inner.triggers.retain_shards(seen_now);
                        seen = None;
                        inner.set_loaded();
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ShellSpec;

    #[test]
    fn a_job_read_for_a_runner_gives_its_summary_and_the_spec_the_store_decodes() {
        let shell = |schedule: &str| {
            let command = ShellSpec { command: Some("true".into()), ..Default::default() };
            JobSpec::shell("nightly", schedule, command).to_json().unwrap()
        };
        let cases = [
            ("a valid spec", "nightly", shell("0 3 * * *"), true),
            ("stored under another name", "daily", shell("0 3 * * *"), false),
            ("not JSON", "nightly", bytes::Bytes::from_static(b"{nope"), false),
            ("a schedule refused", "nightly", shell("99 * * * *"), false),
        ];
        for (what, name, value, valid) in cases {
            let versioned = Versioned { value, revision: 7 };
            let (job, stored) = CatalogJob::decode_stored(name, &versioned);
            let alone = StoredJob::decode(name, &versioned);
            assert_eq!((job.revision, stored.revision, job.name.as_ref()), (7, 7, name), "{what}");
            assert_eq!((job.summary.is_ok(), stored.spec.is_ok()), (valid, valid), "{what}");
            assert_eq!(
                stored.spec.map(|s| s.to_json().unwrap()).ok(),
                alone.spec.map(|s| s.to_json().unwrap()).ok(),
                "{what}: the spec as the store decodes it"
            );
        }
    }
}
