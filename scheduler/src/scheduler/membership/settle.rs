//! When a scheduler acts on a change of the member list.
//!
//! A member leaving is acted on at once (with any join seen with it or before): its
//! shards have no leader until taken. Members only joining are acted on once the list has been quiet for `QUIET` (at most `MAX_WAIT` after
//! the first join): the shards' owners keep leading meanwhile, and agents starting
//! together (a deployment's start, a rolling restart) then move each shard once instead of
//! once per arrival. Every move makes the new owner read the schedules index again, which
//! costs the server a pass over the whole index: four agents starting within a second on
//! 1,000,000 jobs took 36-62 s to load with shards moving up to three times.

use std::time::Duration;

use tokio::time::Instant;

/// How long the list must stay unchanged after a join.
pub const QUIET: Duration = Duration::from_secs(1);
/// The longest a join waits for the list to settle.
pub const MAX_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub struct Settle {
    /// The first join not acted on yet.
    since: Option<Instant>,
    due: Option<Instant>,
}

impl Settle {
    /// The list went from `before` to `after` at `now`: true to rebalance now, false to
    /// wait until `due`.
    pub fn changed(&mut self, before: &[String], after: &[String], now: Instant) -> bool {
        if before.iter().any(|m| !after.contains(m)) || !after.iter().any(|m| !before.contains(m)) {
            // One left (its shards have no leader until taken): at once, with any join
            // still waiting.
            *self = Self::default();
            return true;
        }
        let since = *self.since.get_or_insert(now);
        self.due = Some((now + QUIET).min(since + MAX_WAIT));
        false
    }

    /// When to rebalance for the joins seen; None when none waits.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// The wait is over and the rebalance done.
    pub fn done(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn joins_wait_for_a_quiet_list_and_leaving_is_acted_on_at_once() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = Settle::default();
        // Agents arriving one after another: each arrival pushes the rebalance back.
        assert!(!s.changed(&list(&[]), &list(&["a"]), at(0)));
        assert_eq!(s.due(), Some(at(1000)));
        assert!(!s.changed(&list(&["a"]), &list(&["a", "b"]), at(900)));
        assert_eq!(s.due(), Some(at(1900)));
        // ... but not beyond MAX_WAIT after the first.
        for (i, ms) in [1800, 2700, 3600, 4500].into_iter().enumerate() {
            let (before, after) = (format!("m{i}"), format!("m{}", i + 1));
            assert!(!s.changed(&list(&["a", &before]), &list(&["a", &before, &after]), at(ms)));
        }
        assert_eq!(s.due(), Some(at(5000)));
        s.done();
        assert_eq!(s.due(), None);
        // A member leaving: at once, and a join waiting is acted on with it.
        assert!(!s.changed(&list(&["a"]), &list(&["a", "b"]), at(6000)));
        assert!(s.changed(&list(&["a", "b"]), &list(&["b"]), at(6100)));
        assert_eq!(s.due(), None);
        // One leaving and another joining in the same change: at once too.
        assert!(!s.changed(&list(&["a"]), &list(&["a", "b"]), at(7000)));
        assert!(s.changed(&list(&["a", "b"]), &list(&["a", "c"]), at(7100)));
        assert_eq!(s.due(), None);
    }
}
