//! What starts jobs besides their schedules, for the whole deployment: the `after` edges
//! and the `on` subjects of every job.
//!
//! No agent reads every spec, so no agent could find these by itself. Each shard's
//! leader, which reads all of its shard's jobs, publishes the triggers among them under
//! `triggers.<shard>` in `cronrun_leases` (`ShardTriggers`), and every scheduler follows
//! those keys into one index (`Triggers`): a few keys, however many jobs there are.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

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
    /// Replaces what shard `n` had by what its key holds now (None: no key).
    pub fn set_shard(&mut self, n: u32, now: Option<ShardTriggers>) {
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
    }

    /// Drops the shards whose key was not seen when the watch was opened again.
    pub fn retain_shards(&mut self, seen: &std::collections::HashSet<u32>) {
        let gone: Vec<u32> = self.shards.keys().filter(|n| !seen.contains(n)).copied().collect();
        for n in gone {
            self.set_shard(n, None);
        }
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
}
