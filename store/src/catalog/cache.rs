//! The summaries an agent has read, kept current by the feed of the jobs bucket's changes.
//!
//! A summary read from KV may be kept only if no change could have overtaken it: the feed
//! must have been open from before the read began until it is kept, and have delivered no
//! change in between (it may have been the job's). Both are decided under one lock, with
//! the changes counted by the feed itself, so a change always either reaches a kept
//! summary or stops it being kept.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::CatalogJob;

/// Summaries kept at most; past this the cache starts again empty (a runner serving more
/// jobs than this reads a spec again now and then). 100,000: a summary is a few hundred
/// bytes, and with 10,000 an agent serving 100,000 jobs a minute read a spec from KV for
/// nearly every run and every notice check (`bench lateness --jobs 100000 --spread`:
/// fire to the guest's code p50 731 ms with 10,000, 395 ms with 100,000).
const CACHE_MAX: usize = 100_000;

#[derive(Debug, Default)]
pub(super) struct Cache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    jobs: HashMap<String, Arc<CatalogJob>>,
    /// Changes the feed has delivered (and feeds opened and lost).
    changes: u64,
    /// The feed is open: every change from now on reaches `changed`.
    live: bool,
    /// Jobs removed while the agent ran (and not added again), for /metrics.
    removed: HashSet<String>,
}

/// What a read must show to be kept: the changes counted when it began.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ticket(u64);

impl Cache {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The kept summary of `name`, or a ticket for reading it (None: nothing can be kept
    /// now, the feed is not open).
    pub fn get(&self, name: &str) -> Result<Arc<CatalogJob>, Option<Ticket>> {
        let state = self.state();
        match state.jobs.get(name) {
            Some(job) => Ok(job.clone()),
            None => Err(state.live.then_some(Ticket(state.changes))),
        }
    }

    /// Keeps a summary read with `ticket`, unless a change came meanwhile.
    pub fn keep(&self, ticket: Ticket, job: Arc<CatalogJob>) {
        let mut state = self.state();
        if !state.live || state.changes != ticket.0 {
            return;
        }
        if state.jobs.len() >= CACHE_MAX {
            state.jobs.clear();
        }
        state.jobs.insert(job.name.to_string(), job);
    }

    /// A change from the feed: `now` is the job's new summary, None when it was removed.
    /// `decode` makes it, only for a job that is kept (and never to go back in time).
    pub fn changed(&self, name: &str, revision: u64, removed: bool, decode: impl FnOnce() -> Arc<CatalogJob>) {
        let mut state = self.state();
        state.changes += 1;
        if removed {
            state.jobs.remove(name);
            state.removed.insert(name.to_string());
            return;
        }
        state.removed.remove(name);
        if state.jobs.get(name).is_some_and(|known| known.revision < revision) {
            state.jobs.insert(name.to_string(), decode());
        }
    }

    /// The feed is open (true) or lost (false): everything kept is forgotten, since
    /// changes may have been missed in between.
    pub fn set_live(&self, live: bool) {
        let mut state = self.state();
        state.live = live;
        state.changes += 1;
        state.jobs.clear();
    }

    pub fn was_removed(&self, name: &str) -> bool {
        self.state().removed.contains(name)
    }

    /// Forgets removed jobs `keep` says nothing shows any more.
    pub fn retain_removed(&self, keep: impl Fn(&str) -> bool) {
        self.state().removed.retain(|name| keep(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{JobSpec, ShellSpec};

    fn job(name: &str, revision: u64) -> Arc<CatalogJob> {
        let spec = JobSpec::shell(name, "* * * * *", ShellSpec { command: Some("true".into()), ..Default::default() });
        Arc::new(CatalogJob::from_spec(&spec, revision))
    }

    fn live() -> Cache {
        let cache = Cache::default();
        cache.set_live(true);
        cache
    }

    fn kept_revision(cache: &Cache, name: &str) -> Option<u64> {
        cache.get(name).ok().map(|j| j.revision)
    }

    /// (what happens between a read's ticket and keeping it, whether the read is kept)
    #[test]
    fn a_read_is_kept_only_if_nothing_could_have_overtaken_it() {
        type Between = fn(&Cache);
        let cases: [(&str, Between, bool); 5] = [
            ("nothing", |_| {}, true),
            ("a change of this job", |c| c.changed("a", 2, false, || job("a", 2)), false),
            ("a change of another job", |c| c.changed("b", 7, false, || job("b", 7)), false),
            ("the feed lost", |c| c.set_live(false), false),
            (
                "the feed lost and opened again",
                |c| {
                    c.set_live(false);
                    c.set_live(true)
                },
                false,
            ),
        ];
        for (what, between, kept) in cases {
            let cache = live();
            let Err(Some(ticket)) = cache.get("a") else { panic!("{what}: a ticket") };
            between(&cache);
            cache.keep(ticket, job("a", 1));
            assert_eq!(kept_revision(&cache, "a").is_some(), kept, "{what}");
        }
        // While the feed is not open there is no ticket at all.
        assert!(matches!(Cache::default().get("a"), Err(None)));
    }

    #[test]
    fn changes_reach_kept_jobs_and_never_go_back() {
        let cache = live();
        let Err(Some(ticket)) = cache.get("a") else { panic!("a ticket") };
        cache.keep(ticket, job("a", 5));
        cache.changed("a", 4, false, || job("a", 4));
        assert_eq!(kept_revision(&cache, "a"), Some(5), "an older change seen late");
        cache.changed("a", 6, false, || job("a", 6));
        assert_eq!(kept_revision(&cache, "a"), Some(6));
        // A job not kept is not decoded.
        cache.changed("b", 9, false, || panic!("decoded a job nobody asked for"));
        cache.changed("a", 7, true, || unreachable!());
        assert_eq!(kept_revision(&cache, "a"), None);
        assert!(cache.was_removed("a"));
        cache.changed("a", 8, false, || job("a", 8));
        assert!(!cache.was_removed("a"), "added again");
        cache.changed("c", 9, true, || unreachable!());
        cache.retain_removed(|name| name != "c");
        assert!(!cache.was_removed("c"));
    }
}
