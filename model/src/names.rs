//! Every name cronrun uses in NATS, derived from one namespace.
//!
//! The namespace (default `cronrun`) prefixes buckets, streams and subjects so that two
//! deployments can share one NATS account. Stream names are upper-cased, as NATS
//! convention has it; bucket names and subjects keep the namespace as given.

use crate::error::Error;
use crate::jsapi::JsApi;

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
    /// The JetStream API this deployment's clients address (a domain's, for clients on a
    /// leaf node of the hub): where the store's own requests and KV puts go.
    api: JsApi,
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
        Ok(Self { ns: namespace.to_string(), api: JsApi::local() })
    }

    /// These names for a client that reaches JetStream through `api` (see `jsapi`).
    pub fn with_js_api(mut self, api: JsApi) -> Self {
        self.api = api;
        self
    }

    /// The JetStream API this client addresses.
    pub fn js_api(&self) -> &JsApi {
        &self.api
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
    /// The schedules index: `cronrun_jobs` seen by shard, keys `<shard>.<job>`. The server
    /// keeps it (a stream sourcing the jobs bucket's, each subject mapped by NATS's own
    /// `partition`), so that a scheduler reads only the jobs of the shards it leads.
    pub fn schedules_bucket(&self) -> String {
        format!("{}_schedules", self.ns)
    }
    /// Snapshots of the schedules index by shard (keys `<shard>` and `<shard>.<slot>.<k>`),
    /// from which a scheduler taking a shard reads its jobs instead of passing over the
    /// whole index.
    pub fn snapshots_bucket(&self) -> String {
        format!("{}_snapshots", self.ns)
    }
    /// The Wasm jobs' own KV stores: keys `<job>.<key>`.
    pub fn job_kv_bucket(&self) -> String {
        format!("{}_jobkv", self.ns)
    }
    /// Secrets by name (`cronrun secret set`), read by runners when a run starts and by
    /// schedulers when they deliver a notice; written by admins; never readable by viewers
    /// (docs/security.md). Not part of the layout: the first `secret set` creates it.
    pub fn secrets_bucket(&self) -> String {
        format!("{}_secrets", self.ns)
    }

    /// Named calendars of days jobs exclude (`cronrun calendar set`).
    pub fn calendars_bucket(&self) -> String {
        format!("{}_calendars", self.ns)
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
    /// Messages on the subjects of jobs' `on`, kept until every job listening has run them.
    pub fn messages_stream(&self) -> String {
        format!("{}_MESSAGES", self.ns.to_uppercase())
    }
    /// The durable consumer of `messages_stream` whose messages start runs of `job`.
    pub fn message_consumer(&self, job: &str) -> String {
        format!("on-{job}")
    }
    /// `cronrun.dead.<job>`: where a message whose run did not succeed is published.
    pub fn dead_letter_subject(&self, job: &str) -> String {
        format!("{}.dead.{job}", self.ns)
    }
    /// `cronrun.dispatch.<pool>`
    pub fn dispatch_subject(&self, pool: &str) -> String {
        format!("{}.dispatch.{pool}", self.ns)
    }
    /// The durable pull consumer shared by all runners of one pool.
    pub fn pool_consumer(&self, pool: &str) -> String {
        format!("pool-{pool}")
    }
    /// `cronrun.notify.<subject>`: where notification rules with a `subject` publish.
    pub fn notify_subject(&self, subject: &str) -> String {
        format!("{}.notify.{subject}", self.ns)
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
    /// `cronrun.ctl.answer.<token>`: where a control request asks for its answer. Runners
    /// answer only here, never into a reply subject of the asker's choosing: an identity
    /// that may answer any reply subject (`allow_responses`) can be made to publish
    /// anywhere by a request it sends itself (docs/security.md).
    pub fn control_answer_subject(&self, token: &str) -> String {
        format!("{}.ctl.answer.{token}", self.ns)
    }
    /// Whether `subject` is a control answer subject (see [`Self::control_answer_subject`]).
    pub fn is_control_answer(&self, subject: &str) -> bool {
        subject
            .strip_prefix(&format!("{}.ctl.answer.", self.ns))
            .is_some_and(|token| !token.is_empty() && !token.contains(['.', '*', '>']))
    }
    /// Subjects no Wasm guest may publish to, whatever its grant: JetStream's API, KV and
    /// object store subjects, the system account, reply inboxes, and this deployment's own
    /// subjects (dispatch, logs, events, control).
    pub fn reserved_subjects(&self) -> [String; 6] {
        ["$JS.>".into(), "$KV.>".into(), "$O.>".into(), "$SYS.>".into(), "_INBOX.>".into(), format!("{}.>", self.ns)]
    }

    /// The reserved subjects a publish grant (a subject pattern) could reach, if any.
    pub fn grant_reaches_reserved(&self, grant: &str) -> Option<String> {
        self.reserved_subjects().into_iter().find(|reserved| patterns_intersect(grant, reserved))
    }

    pub fn wildcard(&self, kind: &str) -> String {
        format!("{}.{kind}.>", self.ns)
    }
}

/// Whether two subject patterns (`*` one token, `>` one or more) match a subject in common.
pub fn patterns_intersect(a: &str, b: &str) -> bool {
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) | (Some(_), Some(">")) => return true,
            (Some(p), Some(q)) if p == "*" || q == "*" || p == q => {}
            _ => return false,
        }
    }
}

/// Whether pattern `wide` matches every subject that pattern `narrow` matches.
pub fn pattern_covers(wide: &str, narrow: &str) -> bool {
    let (mut x, mut y) = (wide.split('.'), narrow.split('.'));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// Lease and lock keys in the leases bucket.
pub mod lease_keys {
    /// The deployment's shard count, written once by the first scheduler.
    pub const SHARD_COUNT: &str = "shards";
    /// The scheduler lease of shard `n`.
    pub fn shard(n: u32) -> String {
        format!("shard.{n}")
    }
    /// The triggers (`after`, `on`) of shard `n`'s jobs, published by its leader.
    pub fn triggers(n: u32) -> String {
        format!("triggers.{n}")
    }
    /// Every shard's `triggers` key.
    pub fn triggers_all() -> String {
        "triggers.*".to_string()
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
    /// The place in line of run `run_id` of `job` while it waits for `active.<job>`,
    /// holding its fire instant: the waiting runs take the lease in fire order.
    pub fn waiting(job: &str, run_id: &str) -> String {
        format!("wait.{job}.{run_id}")
    }
    /// A lock shared by jobs (`lock = "name"`).
    pub fn lock(name: &str) -> String {
        format!("lock.{name}")
    }
    /// The fires of `job` backfilled so far (`cronrun backfill`), as ranges: written by
    /// admins, kept without TTL (one key per job backfilled, whatever the runs).
    pub fn backfilled(job: &str) -> String {
        format!("backfilled.{job}")
    }
    /// A scheduler's presence; `holder` is `<agent name>/<instance>`.
    pub fn scheduler(holder: &str) -> String {
        format!("scheduler.{}", holder.replace('/', "."))
    }
    /// A runner's presence record.
    pub fn runner(host: &str) -> String {
        format!("runner.{host}")
    }
    /// Written once rule `rule` delivered its notice of the event at `seq` of the events
    /// stream, so that a redelivery of the event does not repeat it (a day's TTL).
    pub fn notified(seq: u64, rule: usize) -> String {
        format!("notified.{seq}.{rule}")
    }

    /// Written once the chained run `run_id` of `job` was dispatched, so that a later look
    /// at its upstream run starts nothing even if the run's record is pruned (a day's TTL).
    pub fn chained(job: &str, run_id: &str) -> String {
        format!("chained.{job}.{run_id}")
    }

    /// The newest signing time (`wasm.signed_at`) a runner with trusted keys has seen for
    /// `job`: written by runners only, never moved back, never expiring (see `docs/security.md`).
    pub fn signed(job: &str) -> String {
        format!("signed.{job}")
    }

    /// Written when the run `run_id` of `job` was dispatched for a message, so that the
    /// message seen again after its run's record was pruned starts nothing.
    pub fn message(job: &str, run_id: &str) -> String {
        format!("message.{job}.{run_id}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn grants_that_could_reach_reserved_subjects_are_found() {
        let names = super::Names::new("cronrun").unwrap();
        let cases = [
            (">", Some("$JS.>")),
            ("$KV.>", Some("$KV.>")),
            ("$KV.cronrun_jobs.x", Some("$KV.>")),
            ("*.API.>", Some("$JS.>")),
            ("$O.*.x", Some("$O.>")),
            ("$SYS.REQ.SERVER.PING", Some("$SYS.>")),
            ("_INBOX.abc", Some("_INBOX.>")),
            ("cronrun.dispatch.default", Some("cronrun.>")),
            ("cronrun.ctl.run.j.r.kill", Some("cronrun.>")),
            ("orders.>", None),
            ("orders.*.created", None),
            ("cronrunner.x", None),
            ("$JSX.y", None),
            ("cronrun", None),
        ];
        for (grant, reached) in cases {
            assert_eq!(names.grant_reaches_reserved(grant).as_deref(), reached, "{grant}");
        }
        assert!(!super::patterns_intersect("a.b", "a.b.>"), "`>` needs a token");
        assert!(super::patterns_intersect("a.*", "a.>"));
    }

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
        assert_eq!(n.secrets_bucket(), "blue_secrets");
        assert_eq!(n.dispatch_stream(), "BLUE_DISPATCH");
        assert_eq!(n.logs_subject("j", "r"), "blue.logs.j.r");
        assert!(Names::new("a.b").is_err());
    }
}
