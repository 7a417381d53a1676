//! Every name cronrun uses in NATS, derived from one namespace.
//!
//! The namespace (default `cronrun`) prefixes buckets, streams and subjects so that two
//! deployments can share one NATS account. Stream names are upper-cased, as NATS
//! convention has it; bucket names and subjects keep the namespace as given.

use crate::error::Error;

/// The default namespace.
pub const DEFAULT_NAMESPACE: &str = "cronrun";

/// Checks a job name: 1 to 128 of `A-Z a-z 0-9 _ -`.
pub fn validate_job_name(name: &str) -> Result<(), Error> {
    let ok_len = (1..=128).contains(&name.len());
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok_len && ok_chars {
        return Ok(());
    }
    Err(Error::invalid("name", format!("job name {name:?} must be 1 to 128 characters of A-Z a-z 0-9 _ -")))
}

/// The names of one deployment's buckets, streams and subjects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    ns: String,
}

impl Names {
    /// Names for `namespace`, which must be a valid job-name-like token.
    pub fn new(namespace: &str) -> Result<Self, Error> {
        let ok = !namespace.is_empty()
            && namespace.len() <= 32
            && namespace.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(Error::invalid(
                "namespace",
                format!("namespace {namespace:?} must be 1 to 32 characters of A-Z a-z 0-9 _ -"),
            ));
        }
        Ok(Self { ns: namespace.to_string() })
    }

    pub fn namespace(&self) -> &str {
        &self.ns
    }
    pub fn jobs_bucket(&self) -> String {
        format!("{}_jobs", self.ns)
    }
    pub fn runs_bucket(&self) -> String {
        format!("{}_runs", self.ns)
    }
    pub fn leases_bucket(&self) -> String {
        format!("{}_leases", self.ns)
    }
    /// The Wasm jobs' own KV stores: keys `<job>.<key>`.
    pub fn job_kv_bucket(&self) -> String {
        format!("{}_jobkv", self.ns)
    }
    pub fn plugins_store(&self) -> String {
        format!("{}_plugins", self.ns)
    }
    pub fn dispatch_stream(&self) -> String {
        format!("{}_DISPATCH", self.ns.to_uppercase())
    }
    pub fn logs_stream(&self) -> String {
        format!("{}_LOGS", self.ns.to_uppercase())
    }
    pub fn events_stream(&self) -> String {
        format!("{}_EVENTS", self.ns.to_uppercase())
    }
    /// `cronrun.dispatch.<pool>`
    pub fn dispatch_subject(&self, pool: &str) -> String {
        format!("{}.dispatch.{pool}", self.ns)
    }
    /// The durable pull consumer shared by all runners of one pool.
    pub fn pool_consumer(&self, pool: &str) -> String {
        format!("pool-{pool}")
    }
    /// `cronrun.logs.<job>.<run-id>`
    pub fn logs_subject(&self, job: &str, run_id: &str) -> String {
        format!("{}.logs.{job}.{run_id}", self.ns)
    }
    /// `cronrun.events.<job>.<event>`
    pub fn event_subject(&self, job: &str, event: &str) -> String {
        format!("{}.events.{job}.{event}", self.ns)
    }
    /// `cronrun.ctl.run.<job>.<run-id>.kill`: answered by the runner holding that run.
    pub fn kill_subject(&self, job: &str, run_id: &str) -> String {
        format!("{}.ctl.run.{job}.{run_id}.kill", self.ns)
    }
    pub fn wildcard(&self, kind: &str) -> String {
        format!("{}.{kind}.>", self.ns)
    }
}

/// Lease and lock keys in the leases bucket.
pub mod lease_keys {
    /// The scheduler lease of shard `n`.
    pub fn shard(n: u32) -> String {
        format!("shard.{n}")
    }
    /// How far shard `n` has dispatched, kept beside its lease without a TTL.
    pub fn watermark(n: u32) -> String {
        format!("watermark.{n}")
    }
    /// The lease of one run, held by the runner executing it; its expiry means the
    /// runner died or stalled.
    pub fn run(job: &str, run_id: &str) -> String {
        format!("run.{job}.{run_id}")
    }
    /// Held by the run of `job` in progress, for overlap policies other than `allow`.
    pub fn active(job: &str) -> String {
        format!("active.{job}")
    }
    /// Held by the one run of `job` waiting for the active one (overlap `queue`).
    pub fn queued(job: &str) -> String {
        format!("queued.{job}")
    }
    /// A lock shared by jobs (`lock = "name"`).
    pub fn lock(name: &str) -> String {
        format!("lock.{name}")
    }
    /// A scheduler's presence; `holder` is `<agent name>/<instance>`.
    pub fn scheduler(holder: &str) -> String {
        format!("scheduler.{}", holder.replace('/', "."))
    }
    /// A runner's presence record.
    pub fn runner(host: &str) -> String {
        format!("runner.{host}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names() {
        assert!(validate_job_name("backup-db_2").is_ok());
        assert!(validate_job_name(&"a".repeat(128)).is_ok());
        for bad in ["", "a.b", "a b", "ä", "a*", &"a".repeat(129)] {
            let err = validate_job_name(bad).unwrap_err().to_string();
            assert!(err.contains("A-Z a-z 0-9 _ -"), "{bad}: {err}");
        }
    }

    #[test]
    fn names_follow_namespace() {
        let n = Names::new("blue").unwrap();
        assert_eq!(n.jobs_bucket(), "blue_jobs");
        assert_eq!(n.dispatch_stream(), "BLUE_DISPATCH");
        assert_eq!(n.logs_subject("j", "r"), "blue.logs.j.r");
        assert!(Names::new("a.b").is_err());
    }
}
