//! Scheduler membership: each scheduler keeps `scheduler.<name>.<instance>` in the leases
//! bucket alive with the scheduler lease TTL and follows everyone's keys, so all of them
//! see the same member list and compute the same shard owners. A scheduler that dies
//! drops out when its key expires; one that stops deletes its key at once. A scheduler
//! whose clock is off the server's (`server_time`) says so in its key and is left out of
//! the list, unless every one is.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::names::lease_keys;
use crate::scheduler::SchedulerCtx;
use crate::store::Store;
use crate::store::lease::LeaseValue;

/// What a scheduler's presence key holds: a lease's fields, and its clock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Presence {
    #[serde(flatten)]
    pub lease: LeaseValue,
    /// Its clock is off the NATS server's by more than its `max_clock_offset`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clock_off: bool,
    /// The offset last measured: the server's clock less its own, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
}

/// Writes our key every third of the lease TTL until `cancel`, then deletes it. Each
/// write measures our clock against the server's.
pub(in crate::scheduler) async fn publish(ctx: SchedulerCtx, cancel: CancellationToken) {
    let (store, holder, ttl) = (&ctx.store, &ctx.holder, ctx.config.lease_ttl);
    let key = lease_keys::scheduler(holder);
    let started = ctx.clock.now();
    let mut tick = tokio::time::interval(ttl / 3);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {}
        }
        let clock = ctx.server_time.state();
        let value = Presence {
            lease: LeaseValue {
                holder: holder.clone(),
                acquired_at: started,
                renewed_at: ctx.clock.now(),
                ttl_ms: ttl.as_millis() as u64,
                ended_at: None,
            },
            clock_off: clock.off,
            clock_offset_ms: clock.offset.map(|s| (s * 1000.0).round() as i64),
        };
        let body = match serde_json::to_vec(&value) {
            Ok(body) => body.into(),
            Err(e) => {
                warn!("scheduler presence not written: cannot encode it: {e}");
                continue;
            }
        };
        if let Err(e) = ctx.server_time.write_and_measure(&store.leases, (&key, body, Some(ttl)), &ctx.clock).await {
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
/// While our own clock is off (`clock_off`), we are left out at once, as the others leave
/// us out once our key says so; unless every member's clock is off, when the list holds
/// them all.
pub(in crate::scheduler) fn with_self(
    members: Members,
    holder: &str,
    before: &[String],
    clock_off: bool,
) -> Vec<String> {
    let Members { mut list, all_off } = members;
    let joined = before.iter().any(|m| m == holder);
    match list.binary_search_by(|m| m.as_str().cmp(holder)) {
        Err(at) if joined && (!clock_off || all_off) => list.insert(at, holder.to_string()),
        Ok(at) if clock_off && !all_off => {
            list.remove(at);
        }
        _ => {}
    }
    list
}

/// The live members whose clocks are within, or all of them if none is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::scheduler) struct Members {
    pub list: Vec<String>,
    /// Every live member's clock is off: the list holds them all.
    pub all_off: bool,
}

impl Members {
    /// From each live member's holder and whether its clock is off.
    fn of(live: &BTreeMap<String, (String, bool)>) -> Members {
        let all_off = !live.is_empty() && live.values().all(|(_, off)| *off);
        let mut list: Vec<String> =
            live.values().filter(|(_, off)| all_off || !off).map(|(holder, _)| holder.clone()).collect();
        list.sort();
        list.dedup();
        Members { list, all_off }
    }
}

/// Keeps `members` at the sorted holders of the live keys, resyncing after errors.
pub(in crate::scheduler) async fn follow(store: Store, members: watch::Sender<Members>, cancel: CancellationToken) {
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

async fn follow_once(store: &Store, members: &watch::Sender<Members>) -> Result<(), crate::error::Error> {
    let mut watch = store.leases.watch("scheduler.>").await?;
    let mut live: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut synced = watch.initially_empty;
    if synced {
        members.send_replace(Members::default());
    }
    while let Some(change) = watch.next().await {
        let change = change?;
        match change.value.and_then(|v| serde_json::from_slice::<Presence>(&v).ok()) {
            Some(value) => live.insert(change.key, (value.lease.holder, value.clock_off)),
            None => live.remove(&change.key),
        };
        synced |= change.caught_up;
        if synced {
            let mut now = Members::of(&live);
            members.send_if_modified(|old| {
                let changed = *old != now;
                *old = std::mem::take(&mut now);
                changed
            });
        }
    }
    Err(crate::error::Error::nats_msg("scheduler member watch", "ended"))
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
            let acted = with_self(Members { list: list(seen), all_off: false }, "b", &before, false);
            assert_eq!(acted, list(acted_on), "{seen:?}");
            assert_eq!(acted.iter().any(|m| m == "b"), joined_after, "{seen:?}");
            before = acted;
        }
    }

    #[test]
    fn a_scheduler_whose_clock_is_off_leaves_the_list_unless_every_clock_is() {
        let live = |members: &[(&str, bool)]| -> BTreeMap<String, (String, bool)> {
            members.iter().map(|(m, off)| (format!("scheduler.{m}"), (m.to_string(), *off))).collect()
        };
        let names = |l: &[&str]| l.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        // (live members and their clocks, our clock off, the list we act on)
        type Case<'a> = (&'a [(&'a str, bool)], bool, &'a [&'a str]);
        let cases: [Case; 5] = [
            (&[("a", false), ("b", false)], false, &["a", "b"]),
            // Our clock went off: we leave at once, before our key says so.
            (&[("a", false), ("b", false)], true, &["a"]),
            (&[("a", false), ("b", true)], true, &["a"]),
            // Another's is off: the others lead its shards.
            (&[("a", true), ("b", false)], false, &["b"]),
            // Every clock off: all lead, as before (a wrong clock beats none).
            (&[("a", true), ("b", true)], true, &["a", "b"]),
        ];
        for (members, off, expected) in cases {
            let acted = with_self(Members::of(&live(members)), "b", &names(&["a", "b"]), off);
            assert_eq!(acted, names(expected), "{members:?}, ours off: {off}");
        }
    }
}
