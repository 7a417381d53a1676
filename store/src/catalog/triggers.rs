//! What starts jobs besides their schedules, for the whole deployment: the `after` edges
//! and the `on` subjects of every job.
//!
//! No agent reads every spec, so no agent could find these by itself. Each shard's
//! leader, which reads all of its shard's jobs, publishes the triggers among them under
//! `triggers.<shard>` in `cronrun_leases` (`ShardTriggers`), and every scheduler follows
//! those keys into one index (`Triggers`): a few keys, however many jobs there are.
//!
//! The index is shared (`SharedTriggers`) with a signal of its changes (`TriggerChanges`),
//! so that chains and message triggers take a change up when it comes instead of looking
//! at the index every so often.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::spec::after::{After, AfterOn};
use crate::spec::on::OnMessage;

/// The triggers of one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTriggers {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<After>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<OnMessage>,
}

impl JobTriggers {
    /// The triggers of a job, if it has any.
    pub fn of(after: &[After], on: Option<&OnMessage>) -> Option<Self> {
        (!after.is_empty() || on.is_some()).then(|| Self { after: after.to_vec(), on: on.cloned() })
    }
}

/// The triggers of one shard's jobs, by job, as its leader publishes them.
pub type ShardTriggers = BTreeMap<String, JobTriggers>;

/// Every shard's triggers, indexed so that no lookup scans them.
#[derive(Debug, Default)]
pub(super) struct Triggers {
    /// What each shard's key holds (an empty map: a key saying the shard has none).
    shards: HashMap<u32, ShardTriggers>,
    /// The `after` edges by upstream job: who a run's end starts.
    after: HashMap<String, Vec<(String, AfterOn)>>,
    /// The jobs with `on` and their trigger.
    on: HashMap<String, OnMessage>,
}

impl Triggers {
    /// Replaces what shard `n` had by what its key holds now (None: no key); true if that
    /// changed anything (a leader may publish the same triggers again).
    pub fn set_shard(&mut self, n: u32, now: Option<ShardTriggers>) -> bool {
        if self.shards.get(&n) == now.as_ref() {
            return false;
        }
        let old = self.shards.remove(&n).unwrap_or_default();
        for (job, triggers) in &old {
            self.unlink(job, triggers);
        }
        if let Some(now) = now {
            for (job, triggers) in &now {
                self.link(job, triggers);
            }
            self.shards.insert(n, now);
        }
        true
    }

    /// Drops the shards whose key was not seen when the watch was opened again; true if
    /// there were any.
    pub fn retain_shards(&mut self, seen: &HashSet<u32>) -> bool {
        let gone: Vec<u32> = self.shards.keys().filter(|n| !seen.contains(n)).copied().collect();
        for &n in &gone {
            self.set_shard(n, None);
        }
        !gone.is_empty()
    }

    /// Whether every one of `count` shards has said what triggers its jobs have.
    pub fn complete(&self, count: u32) -> bool {
        self.shards.len() >= count as usize
    }

    fn unlink(&mut self, job: &str, triggers: &JobTriggers) {
        for a in &triggers.after {
            if let Some(downstream) = self.after.get_mut(&a.job) {
                downstream.retain(|(d, _)| d != job);
                if downstream.is_empty() {
                    self.after.remove(&a.job);
                }
            }
        }
        self.on.remove(job);
    }

    fn link(&mut self, job: &str, triggers: &JobTriggers) {
        for a in &triggers.after {
            self.after.entry(a.job.clone()).or_default().push((job.to_string(), a.on));
        }
        if let Some(on) = &triggers.on {
            self.on.insert(job.to_string(), on.clone());
        }
    }

    /// Shards with any trigger.
    pub fn shards(&self) -> usize {
        self.shards.values().filter(|t| !t.is_empty()).count()
    }

    pub fn downstream_of(&self, upstream: &str) -> Vec<(String, AfterOn)> {
        self.after.get(upstream).cloned().unwrap_or_default()
    }

    pub fn has_chains(&self) -> bool {
        !self.after.is_empty()
    }

    pub fn listeners(&self) -> HashMap<String, OnMessage> {
        self.on.clone()
    }

    fn listens(&self, job: &str) -> bool {
        self.on.contains_key(job)
    }
}

/// The index as the catalog shares it: written by the catalog's feed, read by any task,
/// with a count of its changes that wakes whoever waits for one.
#[derive(Debug)]
pub(super) struct SharedTriggers {
    index: RwLock<Triggers>,
    /// Changes so far; only that it moved matters.
    changes: watch::Sender<u64>,
}

impl Default for SharedTriggers {
    fn default() -> Self {
        Self { index: RwLock::default(), changes: watch::channel(0).0 }
    }
}

impl SharedTriggers {
    /// What `look` finds in the index; None while a panic left it poisoned (the feed
    /// then reads it again from the start, see `reset`).
    pub fn read<T>(&self, look: impl FnOnce(&Triggers) -> T) -> Option<T> {
        self.index.read().ok().map(|index| look(&index))
    }

    /// `Triggers::set_shard`, signalled if it changed anything.
    pub fn set_shard(&self, n: u32, now: Option<ShardTriggers>) {
        if self.index.write().is_ok_and(|mut index| index.set_shard(n, now)) {
            self.signal();
        }
    }

    /// `Triggers::retain_shards`, signalled if it dropped any.
    pub fn retain_shards(&self, seen: &HashSet<u32>) {
        if self.index.write().is_ok_and(|mut index| index.retain_shards(seen)) {
            self.signal();
        }
    }

    /// Empties the index (a panic may have left it half-written), to be read again.
    pub fn reset(&self) {
        self.index.clear_poison();
        if let Ok(mut index) = self.index.write() {
            *index = Triggers::default();
        }
        self.signal();
    }

    /// A change of job `name` seen by the feed: signalled if the job has `on`, since
    /// message triggers follow whether such a job is paused (which is not in the index).
    pub fn job_changed(&self, name: &str) {
        if self.read(|index| index.listens(name)).unwrap_or(false) {
            self.signal();
        }
    }

    /// Wakes every waiter: something they follow may have changed.
    pub fn signal(&self) {
        // `send_modify`, not `send`: it counts the change even with no waiter yet.
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn subscribe(&self) -> TriggerChanges {
        TriggerChanges(self.changes.subscribe())
    }
}

/// A signal of changes to the jobs' `after` and `on` (`Catalog::trigger_changes`).
///
/// Used as: `seen` before reading the catalog, then `changed`: a change made while the
/// catalog was read wakes it at once, so none is missed.
#[derive(Debug)]
pub struct TriggerChanges(watch::Receiver<u64>);

impl TriggerChanges {
    /// Takes every change so far as seen.
    pub fn seen(&mut self) {
        self.0.borrow_and_update();
    }

    /// Returns at the first change not seen yet. Never once the catalog is dropped (no
    /// more changes can come): callers bound their waits anyway.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(upstream: &[(&str, AfterOn)]) -> JobTriggers {
        JobTriggers { after: upstream.iter().map(|(j, on)| After { job: j.to_string(), on: *on }).collect(), on: None }
    }

    fn shard(jobs: &[(&str, JobTriggers)]) -> ShardTriggers {
        jobs.iter().map(|(name, t)| (name.to_string(), t.clone())).collect()
    }

    #[test]
    fn the_index_follows_each_shards_triggers() {
        let mut index = Triggers::default();
        let load = after(&[("extract", AfterOn::Succeeded), ("audit", AfterOn::Failed)]);
        index.set_shard(3, Some(shard(&[("load", load)])));
        index.set_shard(9, Some(shard(&[("report", after(&[("extract", AfterOn::Finished)]))])));
        assert!(index.complete(2) && !index.complete(3));
        assert_eq!(
            index.downstream_of("extract"),
            [("load".into(), AfterOn::Succeeded), ("report".into(), AfterOn::Finished)]
        );
        // A shard published again replaces only its own jobs' edges.
        index.set_shard(3, Some(shard(&[("load", after(&[("audit", AfterOn::Finished)]))])));
        assert_eq!(index.downstream_of("extract"), [("report".to_string(), AfterOn::Finished)]);
        assert_eq!(index.downstream_of("audit"), [("load".to_string(), AfterOn::Finished)]);
        index.set_shard(9, Some(ShardTriggers::new()));
        assert!(index.complete(2), "a shard without triggers has said so");
        index.retain_shards(&[9].into());
        assert!(!index.has_chains(), "{index:?}");
        assert!(!index.complete(2), "shard 3's key is gone");
        // A listener comes and goes with its `on`.
        let on = OnMessage { subject: "orders.created".into(), concurrency: 1, redeliver: 3 };
        let listening = JobTriggers { after: Vec::new(), on: Some(on.clone()) };
        index.set_shard(5, Some(shard(&[("orders", listening)])));
        assert_eq!(index.listeners().get("orders"), Some(&on));
        index.set_shard(5, Some(shard(&[("orders", after(&[("extract", AfterOn::Succeeded)]))])));
        assert!(index.listeners().is_empty());
        assert!(index.has_chains());
    }

    fn load_after_extract() -> JobTriggers {
        after(&[("extract", AfterOn::Succeeded)])
    }

    fn on_orders() -> JobTriggers {
        JobTriggers {
            after: Vec::new(),
            on: Some(OnMessage { subject: "orders.created".into(), concurrency: 1, redeliver: 3 }),
        }
    }

    /// Whether a waiter is woken within a minute (of tokio's paused time, which runs ahead
    /// as soon as every task waits).
    async fn woken(changes: &mut TriggerChanges) -> bool {
        tokio::time::timeout(std::time::Duration::from_secs(60), changes.changed()).await.is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_of_the_index_wakes_a_waiter_and_nothing_else_does() {
        let shared = SharedTriggers::default();
        let mut changes = shared.subscribe();
        assert!(!woken(&mut changes).await, "nothing happened");
        // A waiter already waiting is woken by a change made elsewhere.
        let mut waiter = shared.subscribe();
        let waiting = tokio::spawn(async move { woken(&mut waiter).await });
        tokio::task::yield_now().await;
        shared.set_shard(3, Some(shard(&[("load", load_after_extract())])));
        assert!(waiting.await.unwrap(), "a waiter when a shard gained a chain");
        assert!(woken(&mut changes).await, "a chain added before `changed` was called");
        assert!(!woken(&mut changes).await, "one change wakes once");
        type Step = fn(&SharedTriggers);
        let steps: [(&str, Step, bool); 9] = [
            (
                "the same shard published again",
                |s| s.set_shard(3, Some(shard(&[("load", load_after_extract())]))),
                false,
            ),
            ("a shard saying it has none", |s| s.set_shard(4, Some(ShardTriggers::new())), true),
            ("that said again", |s| s.set_shard(4, Some(ShardTriggers::new())), false),
            ("a job without `on` changed", |s| s.job_changed("load"), false),
            ("every shard seen again", |s| s.retain_shards(&[3, 4].into()), false),
            ("a shard's key gone", |s| s.retain_shards(&[3].into()), true),
            ("a job gained `on`", |s| s.set_shard(5, Some(shard(&[("orders", on_orders())]))), true),
            ("a job with `on` changed (paused?)", |s| s.job_changed("orders"), true),
            ("the index read again after a panic", SharedTriggers::reset, true),
        ];
        for (what, step, wakes) in steps {
            changes.seen();
            step(&shared);
            assert_eq!(woken(&mut changes).await, wakes, "{what}");
        }
    }
}
