//! What `cronrun status` and the dashboard's status page show: live runners and
//! schedulers (their presence keys), which scheduler leads which shard, shards no one
//! leads, pools that jobs name and no live runner serves, and each stream's use against
//! its limits.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::error::Error;
use crate::runner::RunnerPresence;
use crate::store::lease::LeaseValue;
use crate::store::{Store, StreamUse};

pub struct StatusReport {
    pub runners: Vec<RunnerPresence>,
    pub schedulers: Vec<crate::scheduler::SchedulerPresence>,
    /// Shard leases by shard number.
    pub shards: Vec<(u32, LeaseValue)>,
    /// How many shards the deployment has; 0 before the first scheduler starts.
    pub shard_count: u32,
    /// Pools that jobs (not paused) name and no live runner serves, with how many jobs
    /// name each: their runs wait (a typo in `pool` looks just like this).
    pub unserved_pools: Vec<(String, usize)>,
    /// The layout's streams (KV buckets' included): use against limits.
    pub streams: Vec<StreamUse>,
}

impl StatusReport {
    /// Reads the presence and lease keys; `pools` counts the jobs (not paused) per pool.
    pub async fn gather(store: &Store, pools: BTreeMap<String, usize>) -> Result<Self, Error> {
        let runners: Vec<RunnerPresence> = decoded(store.leases.scan("runner.*").await?);
        let schedulers = decoded(store.leases.scan("scheduler.>").await?);
        let mut shards: Vec<(u32, LeaseValue)> = store
            .leases
            .scan("shard.*")
            .await?
            .into_iter()
            .filter_map(|(k, v)| {
                Some((k.strip_prefix("shard.")?.parse().ok()?, serde_json::from_slice(&v.value).ok()?))
            })
            .collect();
        shards.sort_by_key(|(n, _)| *n);
        let stored = store.leases.get(crate::scheduler::SHARDS_KEY).await?;
        let shard_count =
            stored.and_then(|v| crate::scheduler::parse_count(&String::from_utf8_lossy(&v.value))).unwrap_or(0);
        let served = |pool: &str| runners.iter().any(|r| r.pools.iter().any(|p| p == pool));
        let unserved_pools = pools.into_iter().filter(|(pool, _)| !served(pool)).collect();
        let streams = store.stream_use().await;
        Ok(Self { runners, schedulers, shards, shard_count, unserved_pools, streams })
    }

    /// The shards `holder` leads.
    pub fn led_by(&self, holder: &str) -> Vec<u32> {
        self.shards.iter().filter(|(_, l)| l.holder == holder).map(|(n, _)| *n).collect()
    }

    /// The shards no scheduler leads: their fires wait for one.
    pub fn unled(&self) -> Vec<u32> {
        (0..self.shard_count).filter(|n| self.shards.binary_search_by_key(n, |(s, _)| *s).is_err()).collect()
    }

    /// The warnings of the streams nearly full (see `StreamUse::warning`).
    pub fn stream_warnings(&self, names: &crate::names::Names) -> Vec<String> {
        self.streams.iter().filter_map(|s| s.warning(names)).collect()
    }

    pub fn to_json(&self, names: &crate::names::Names) -> Value {
        let unled = self.unled();
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                let mut v = json!(s);
                v["use_ratio"] = json!(s.ratio());
                v["warning"] = json!(s.warning(names));
                v
            })
            .collect();
        let led: Vec<Value> = self
            .schedulers
            .iter()
            .map(|s| {
                let mine = self.led_by(&s.lease.holder);
                json!({ "holder": s.lease.holder, "count": mine.len(), "shards": crate::scheduler::ranges(mine) })
            })
            .collect();
        json!({
            "unserved_pools": self.unserved_pools.iter().map(|(pool, jobs)| json!({ "pool": pool, "jobs": jobs })).collect::<Vec<_>>(),
            "runners": self.runners,
            "schedulers": self.schedulers,
            "shards": {
                "count": self.shard_count,
                "leases": self.shards.iter().map(|(n, l)| json!({ "shard": n, "lease": l })).collect::<Vec<_>>(),
                "led": led,
                "unled": if unled.is_empty() { String::new() } else { crate::scheduler::ranges(unled) },
            },
            "streams": streams,
        })
    }
}

fn decoded<T: serde::de::DeserializeOwned>(found: Vec<(String, crate::store::kv::Versioned)>) -> Vec<T> {
    found.into_iter().filter_map(|(_, v)| serde_json::from_slice(&v.value).ok()).collect()
}

/// Jobs (not paused) per pool, for `StatusReport::gather`.
pub fn pools_of<'a>(jobs: impl IntoIterator<Item = (&'a str, bool)>) -> BTreeMap<String, usize> {
    let mut pools = BTreeMap::new();
    for (pool, paused) in jobs {
        if !paused {
            *pools.entry(pool.to_string()).or_default() += 1;
        }
    }
    pools
}
