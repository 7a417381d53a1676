//! Scheduler membership: each scheduler keeps `scheduler.<name>.<instance>` in the leases
//! bucket alive with the scheduler lease TTL and follows everyone's keys, so all of them
//! see the same member list and compute the same shard owners. A scheduler that dies
//! drops out when its key expires; one that stops deletes its key at once.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::names::lease_keys;
use crate::store::Store;
use crate::store::lease::LeaseValue;

/// Writes our key every third of `ttl` until `cancel`, then deletes it.
pub(super) async fn publish(store: Store, holder: String, ttl: Duration, cancel: CancellationToken) {
    let key = lease_keys::scheduler(&holder);
    let started = Utc::now();
    let mut tick = tokio::time::interval(ttl / 3);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        let value = LeaseValue {
            holder: holder.clone(),
            acquired_at: started,
            renewed_at: Utc::now(),
            ttl_ms: ttl.as_millis() as u64,
        };
        let body = serde_json::to_vec(&value).unwrap_or_default().into();
        if let Err(e) = store.leases.put(&key, body, Some(ttl)).await {
            warn!("scheduler presence not written: {e}");
        }
    }
    if let Err(e) = store.leases.purge(&key, crate::store::kv::RELEASE_MARKER_TTL).await {
        warn!("scheduler presence not removed: {e}");
    }
}

/// The member list to act on: `list` with us in it once we have joined, that is once the
/// list acted on `before` held us. Our own key missing means that our presence writes
/// came late (the server or this agent too busy to get them through within the TTL), not
/// that we left: we leave by deleting it, when stopping. Dropping out would hand every
/// shard we lead to the others, each read from the schedules index again, and back once
/// our key returns: at 10,000,000 jobs that cascade kept four agents loading for minutes. Shards stay
/// fenced by their leases, whatever the list says: the others stand by for ours until we
/// release or lose them.
pub(super) fn with_self(mut list: Vec<String>, holder: &str, before: &[String]) -> Vec<String> {
    let joined = before.iter().any(|m| m == holder);
    if joined && let Err(at) = list.binary_search_by(|m| m.as_str().cmp(holder)) {
        list.insert(at, holder.to_string());
    }
    list
}

/// Keeps `members` at the sorted holders of the live keys, resyncing after errors.
pub(super) async fn follow(store: Store, members: watch::Sender<Vec<String>>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            result = follow_once(&store, &members) => warn!("scheduler member watch interrupted, resyncing: {result:?}"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

async fn follow_once(store: &Store, members: &watch::Sender<Vec<String>>) -> Result<(), crate::error::Error> {
    let mut watch = store.leases.watch("scheduler.>").await?;
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    let mut synced = watch.initially_empty;
    if synced {
        members.send_replace(Vec::new());
    }
    while let Some(change) = watch.next().await {
        let change = change?;
        match change.value.and_then(|v| serde_json::from_slice::<LeaseValue>(&v).ok()) {
            Some(value) => live.insert(change.key, value.holder),
            None => live.remove(&change.key),
        };
        synced |= change.caught_up;
        if synced {
            let mut list: Vec<String> = live.values().cloned().collect();
            list.sort();
            list.dedup();
            members.send_if_modified(|old| {
                let changed = *old != list;
                *old = std::mem::take(&mut list);
                changed
            });
        }
    }
    Err(crate::error::Error::nats("scheduler member watch", "ended"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_that_joined_stays_in_its_own_list_when_its_key_lapses() {
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let mut before = Vec::new();
        // (the list the watch holds, what we act on, joined after)
        let steps: [(&[&str], &[&str], bool); 5] = [
            (&["a", "c"], &["a", "c"], false),
            (&["a", "b", "c"], &["a", "b", "c"], true),
            (&["a", "c"], &["a", "b", "c"], true),
            (&[], &["b"], true),
            (&["c"], &["b", "c"], true),
        ];
        for (seen, acted_on, joined_after) in steps {
            let acted = with_self(list(seen), "b", &before);
            assert_eq!(acted, list(acted_on), "{seen:?}");
            assert_eq!(acted.iter().any(|m| m == "b"), joined_after, "{seen:?}");
            before = acted;
        }
    }
}
