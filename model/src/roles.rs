//! The NATS permissions of each cronrun role, derived from [`Names`]: the one place that
//! says which subjects a role publishes to and subscribes to. `cronrun auth init` writes
//! them into nats-server's `authorization` block; docs/security.md explains each line.
//!
//! JetStream is reached through subjects, so "may read a bucket" is a set of API subjects
//! (`$JS.API.STREAM.INFO.KV_x`, direct gets, ordered consumers) and "may write a key" is a
//! publish to `$KV.<bucket>.<key>`. Replies come to the identity's own inbox prefix
//! (`_INBOX.<public key>`), so no identity reads the answers meant for another.

use serde::Serialize;

use crate::jsapi::JsApi;
use crate::names::{Names, lease_keys, pattern_covers};

/// What an identity is for. An agent holds the roles it runs (`scheduler`, `runner`);
/// guests (Wasm jobs) hold none: they reach NATS only through their runner's host checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Everything the CLI writes: jobs, deploy, pause, trigger, kill, rm.
    Admin,
    /// Reads only: ls, get, runs, logs, status.
    Viewer,
    /// Fires schedules: reads jobs, leads shards, publishes dispatches, records lost runs.
    Scheduler,
    /// Executes runs: pulls dispatches, writes records and run leases, publishes output.
    Runner,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Viewer, Role::Scheduler, Role::Runner];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
            Role::Scheduler => "scheduler",
            Role::Runner => "runner",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// Publish and subscribe allow-lists (nats-server semantics: `*` one token, `>` the rest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
    /// Publishes refused though an allowed pattern covers them: the server checks these
    /// first. No identity has `allow_responses` (answering any reply subject a message
    /// carries): a client holding it can send itself a request whose reply subject is any
    /// subject at all, and "answer" it (docs/security.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub publish_deny: Vec<String>,
}

impl Permissions {
    /// The union of two roles' permissions, for an agent that runs both.
    pub fn union(mut self, other: Permissions) -> Permissions {
        for s in other.publish {
            if !self.publish.contains(&s) {
                self.publish.push(s);
            }
        }
        for s in other.subscribe {
            if !self.subscribe.contains(&s) {
                self.subscribe.push(s);
            }
        }
        // Refused to the union only where refused to both: a right one role needs is kept.
        self.publish_deny.retain(|d| other.publish_deny.contains(d));
        self
    }

    /// These permissions with, beside each subject of the publish lists, its form in the
    /// JetStream domain of `api` (see `jsapi`), so that one authorization serves clients
    /// of the hub (plain forms) and of its leaf nodes (domain forms). Never a right more:
    /// an allowed domain form reaches through the hub's mapping exactly the plain subject
    /// it mirrors, and every refusal is refused in its domain form too (a refusal's form
    /// may refuse more, never less). An allowed pattern whose token after `$JS.API.` is a
    /// wildcard gets no domain form: `$JS.<d>.API.>` would also reach `$JS.<d>.API.$KV.>`,
    /// every key of every bucket. Subscriptions are to inboxes and plain subjects: as they are.
    pub fn with_domain_forms(mut self, api: &JsApi) -> Permissions {
        let mirrors = |list: &[String], allow: bool| -> Vec<String> {
            list.iter()
                .filter(|p| !allow || !api_token_is_wildcard(p))
                .filter_map(|p| api.domain_form(p))
                .filter(|d| !list.contains(d))
                .collect()
        };
        let (publish, deny) = (mirrors(&self.publish, true), mirrors(&self.publish_deny, false));
        self.publish.extend(publish);
        self.publish_deny.extend(deny);
        self
    }

    /// Whether a publish to `subject` is allowed.
    pub fn may_publish(&self, subject: &str) -> bool {
        self.publish.iter().any(|p| pattern_covers(p, subject))
            && !self.publish_deny.iter().any(|p| pattern_covers(p, subject))
    }

    /// Whether subscribing to `subject` is allowed.
    pub fn may_subscribe(&self, subject: &str) -> bool {
        self.subscribe.iter().any(|p| pattern_covers(p, subject))
    }
}

/// Whether `pattern` is `$JS.API.*…` or `$JS.API.>`: a pattern of the whole API, whose
/// domain form would reach the KV and object store subjects too.
fn api_token_is_wildcard(pattern: &str) -> bool {
    pattern.strip_prefix("$JS.API.").is_some_and(|rest| matches!(rest.split('.').next(), Some("*" | ">")))
}

/// The inbox prefix of the identity with public key `public_key`: its replies and the
/// deliveries of its ordered consumers arrive under it.
pub fn inbox_prefix(public_key: &str) -> String {
    format!("_INBOX.{public_key}")
}

/// Subject builders for the JetStream API, per stream.
struct Api<'a> {
    publish: &'a mut Vec<String>,
}

impl Api<'_> {
    fn add(&mut self, s: impl Into<String>) {
        let s = s.into();
        if !self.publish.contains(&s) {
            self.publish.push(s);
        }
    }
    /// Stream info, message gets and ordered (ephemeral) consumers: reading a stream.
    fn read_stream(&mut self, stream: &str) {
        self.add(format!("$JS.API.STREAM.INFO.{stream}"));
        self.add(format!("$JS.API.STREAM.MSG.GET.{stream}"));
        self.add(format!("$JS.API.DIRECT.GET.{stream}"));
        self.add(format!("$JS.API.DIRECT.GET.{stream}.>"));
        self.add(format!("$JS.API.CONSUMER.CREATE.{stream}"));
        self.add(format!("$JS.API.CONSUMER.CREATE.{stream}.>"));
        // A watch that ends deletes its consumer.
        self.add(format!("$JS.API.CONSUMER.DELETE.{stream}.>"));
        // Flow control of push consumers is answered on `$JS.FC.<stream>.…`.
        self.add(format!("$JS.FC.{stream}.>"));
    }
    /// Reading secrets one by one, by name: the bucket's stream info (which opening a
    /// bucket asks for; with a subject filter it lists names, never values) and a direct
    /// get of a key's last value. No consumer, no message get by sequence: nothing that
    /// reads the bucket whole. Runners resolve a run's `env` and `config` with it, and
    /// schedulers a webhook's URL and headers (docs/security.md says why they need it).
    fn read_secrets_by_name(&mut self, names: &Names) {
        self.read_by_name(&names.secrets_bucket());
    }
    /// Reading `bucket` key by key (see `read_secrets_by_name`).
    fn read_by_name(&mut self, bucket: &str) {
        let stream = kv_stream(bucket);
        self.add(format!("$JS.API.STREAM.INFO.{stream}"));
        self.add(format!("$JS.API.DIRECT.GET.{stream}.$KV.{bucket}.>"));
    }
    /// Reading every stream of the layout but the work queue (a consumer there takes runs
    /// off it: runners only), and creating any that is missing (never updating or deleting).
    fn read_and_create_layout(&mut self, names: &Names) {
        for stream in names.layout_streams() {
            if stream != names.dispatch_stream() {
                self.read_stream(&stream);
            }
            self.add(format!("$JS.API.STREAM.CREATE.{stream}"));
        }
    }
}

/// The durable consumer of the events stream that notifications are delivered from.
pub const NOTIFY_CONSUMER: &str = "notify";

/// The durable consumer of the runs bucket's stream that chained runs are started from.
pub const CHAIN_CONSUMER: &str = "chains";

fn kv_stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}

fn obj_stream(store: &str) -> String {
    format!("OBJ_{store}")
}

impl Names {
    /// Every bucket and stream of the layout, by stream name.
    pub fn layout_streams(&self) -> Vec<String> {
        let mut streams: Vec<String> =
            [self.jobs_bucket(), self.runs_bucket(), self.leases_bucket(), self.job_kv_bucket()]
                .iter()
                .map(|b| kv_stream(b))
                .collect();
        streams.push(obj_stream(&self.plugins_store()));
        streams.extend([self.dispatch_stream(), self.logs_stream(), self.events_stream()]);
        streams
    }

    /// The permissions of `role`, whose replies arrive under `inbox` (see [`inbox_prefix`]).
    /// `guest_publish` lists the subjects Wasm jobs on a runner may publish to (their grants
    /// are checked by the runner first; this is the server's own bound on them).
    pub fn permissions(&self, role: Role, inbox: &str, guest_publish: &[String]) -> Permissions {
        let mut publish = vec!["$JS.API.INFO".to_string()];
        let mut api = Api { publish: &mut publish };
        // Every role checks the layout is there when it starts.
        for stream in self.layout_streams() {
            api.add(format!("$JS.API.STREAM.INFO.{stream}"));
        }
        let kv_write = |bucket: String, key: &str| format!("$KV.{bucket}.{key}");
        let mut subscribe = vec![format!("{inbox}.>")];
        let mut publish_deny = Vec::new();
        match role {
            Role::Admin => {
                api.read_and_create_layout(self);
                // Replacing a plugin purges the old chunks of its name.
                api.add(format!("$JS.API.STREAM.PURGE.{}", obj_stream(&self.plugins_store())));
                for bucket in [self.jobs_bucket(), self.runs_bucket(), self.job_kv_bucket()] {
                    api.add(kv_write(bucket, ">"));
                }
                // What `backfill` has run, so that it never runs a fire twice.
                api.add(kv_write(self.leases_bucket(), &lease_keys::backfilled("*")));
                api.add(format!("$O.{}.>", self.plugins_store()));
                // Secrets: `secret set` writes them (creating the bucket at the first),
                // `secret ls` lists them with an ordered consumer, `apply` checks that the
                // secrets a spec names exist. Not in the layout: no other role gets its
                // stream info through it.
                let secrets = kv_stream(&self.secrets_bucket());
                api.read_stream(&secrets);
                api.add(format!("$JS.API.STREAM.CREATE.{secrets}"));
                api.add(kv_write(self.secrets_bucket(), ">"));
                // Calendars: `calendar set` writes them (creating the bucket at the first).
                let calendars = kv_stream(&self.calendars_bucket());
                api.read_stream(&calendars);
                api.add(format!("$JS.API.STREAM.CREATE.{calendars}"));
                api.add(kv_write(self.calendars_bucket(), ">"));
                // The stream of jobs' trigger subjects, kept up to date by `apply`.
                let messages = self.messages_stream();
                for action in ["INFO", "CREATE", "UPDATE"] {
                    api.add(format!("$JS.API.STREAM.{action}.{messages}"));
                }
                // trigger, kill, and the audit events of CLI writes.
                api.add(self.wildcard("dispatch"));
                api.add(self.wildcard("ctl"));
                api.add(self.wildcard("events"));
                // Where the runner holding a run answers a kill (see `control_answer_subject`).
                subscribe.push(self.control_answer_subject(">"));
            }
            Role::Viewer => {
                for bucket in [self.jobs_bucket(), self.runs_bucket(), self.leases_bucket(), self.schedules_bucket()] {
                    api.read_stream(&kv_stream(&bucket));
                }
                api.read_stream(&self.logs_stream());
                api.read_stream(&self.events_stream());
                api.read_stream(&kv_stream(&self.calendars_bucket()));
                // Reading makes and ends consumers of its own; the schedulers' durables are
                // not its own to delete, nor their names to take.
                publish_deny = self.durables_api();
            }
            Role::Scheduler => {
                api.read_and_create_layout(self);
                // The schedules index, made by the first scheduler once the shard count
                // is fixed; nobody writes to it (the server sources it from the jobs).
                let schedules = kv_stream(&self.schedules_bucket());
                api.read_stream(&schedules);
                api.add(format!("$JS.API.STREAM.CREATE.{schedules}"));
                // The index's snapshots, a bucket the schedulers make and write.
                let snapshots = self.snapshots_bucket();
                api.read_stream(&kv_stream(&snapshots));
                api.add(format!("$JS.API.STREAM.CREATE.{}", kv_stream(&snapshots)));
                api.add(kv_write(snapshots, ">"));
                api.add(kv_write(self.runs_bucket(), ">"));
                for key in [
                    "shard.*".to_string(),
                    "watermark.*".to_string(),
                    lease_keys::triggers_all(),
                    lease_keys::scheduler(">"),
                    lease_keys::SHARD_COUNT.to_string(),
                    "notified.>".to_string(),
                    "chained.>".to_string(),
                    "message.>".to_string(),
                ] {
                    api.add(kv_write(self.leases_bucket(), &key));
                }
                api.add(self.wildcard("dispatch"));
                api.add(self.wildcard("events"));
                // Notifications: the one `notify` consumer of the events stream (created as
                // any consumer of a layout stream), pulled from and acknowledged; rules with
                // a subject publish under `notify.`.
                let events = self.events_stream();
                api.add(format!("$JS.API.CONSUMER.INFO.{events}.{NOTIFY_CONSUMER}"));
                api.add(format!("$JS.API.CONSUMER.MSG.NEXT.{events}.{NOTIFY_CONSUMER}"));
                api.add(format!("$JS.ACK.{events}.{NOTIFY_CONSUMER}.>"));
                api.add(self.wildcard("notify"));
                // A webhook's URL and headers may name secrets, resolved at delivery.
                api.read_secrets_by_name(self);
                // The calendars a job excludes, read as its fires come.
                api.read_by_name(&self.calendars_bucket());
                // Chains: the one `chains` consumer of the runs bucket (created and
                // deleted as any consumer of a layout stream), pulled from and acknowledged.
                let runs = kv_stream(&self.runs_bucket());
                api.add(format!("$JS.API.CONSUMER.INFO.{runs}.{CHAIN_CONSUMER}"));
                api.add(format!("$JS.API.CONSUMER.MSG.NEXT.{runs}.{CHAIN_CONSUMER}"));
                api.add(format!("$JS.ACK.{runs}.{CHAIN_CONSUMER}.>"));
                // Message triggers: a consumer per listening job, created, pulled from,
                // acknowledged and deleted; messages whose run failed go to `dead.`.
                let messages = self.messages_stream();
                api.add(format!("$JS.API.STREAM.INFO.{messages}"));
                for action in ["CREATE", "DELETE", "INFO", "MSG.NEXT"] {
                    api.add(format!("$JS.API.CONSUMER.{action}.{messages}.>"));
                }
                // Consumers left by jobs removed while no scheduler ran are found and deleted.
                api.add(format!("$JS.API.CONSUMER.NAMES.{messages}"));
                api.add(format!("$JS.ACK.{messages}.>"));
                api.add(self.wildcard("dead"));
            }
            Role::Runner => {
                for bucket in [self.jobs_bucket(), self.runs_bucket(), self.leases_bucket(), self.job_kv_bucket()] {
                    api.read_stream(&kv_stream(&bucket));
                }
                api.read_stream(&obj_stream(&self.plugins_store()));
                // A run's `env` and `config` may name secrets, resolved when it starts.
                api.read_secrets_by_name(self);
                // The dashboard's next fires skip the days of the calendars a job excludes.
                api.read_by_name(&self.calendars_bucket());
                let dispatch = self.dispatch_stream();
                // The pool consumers: created once, then pulled from and acknowledged.
                api.add(format!("$JS.API.CONSUMER.CREATE.{dispatch}.>"));
                api.add(format!("$JS.API.CONSUMER.INFO.{dispatch}.>"));
                api.add(format!("$JS.API.CONSUMER.MSG.NEXT.{dispatch}.>"));
                api.add(format!("$JS.ACK.{dispatch}.>"));
                // Which stream captures a guest's subject (publish with acknowledgement).
                api.add("$JS.API.STREAM.NAMES");
                api.add(kv_write(self.runs_bucket(), ">"));
                api.add(kv_write(self.job_kv_bucket(), ">"));
                for key in [
                    lease_keys::run("*", ">"),
                    lease_keys::active(">"),
                    lease_keys::queued(">"),
                    lease_keys::waiting("*", ">"),
                    lease_keys::lock(">"),
                    lease_keys::runner(">"),
                    // The replay guard of signed Wasm jobs: no admin, scheduler or viewer
                    // may move it.
                    lease_keys::signed(">"),
                ] {
                    api.add(kv_write(self.leases_bucket(), &key));
                }
                // No dispatches: a failed attempt's retry is dispatched by the scheduler
                // (see the runtime's `scheduler::reaper`). `overlap = "replace"` asks the
                // active run's runner to stop it.
                api.add(self.wildcard("ctl"));
                api.add(self.wildcard("logs"));
                api.add(self.wildcard("events"));
                for subject in guest_publish {
                    api.add(subject.clone());
                }
                subscribe.push(self.wildcard("ctl"));
                // It reads the runs bucket as a viewer does: nor are the durables its own.
                publish_deny = self.durables_api();
            }
        }
        Permissions { publish, subscribe, publish_deny }
    }

    /// The JetStream API subjects that create, delete or update the schedulers' durable
    /// consumers (`notify` of the events stream, `chains` of the runs bucket's stream), by
    /// every form of the API that names a consumer.
    fn durables_api(&self) -> Vec<String> {
        let durables = [(self.events_stream(), NOTIFY_CONSUMER), (kv_stream(&self.runs_bucket()), CHAIN_CONSUMER)];
        let mut subjects = vec!["$JS.API.CONSUMER.DURABLE.CREATE.>".to_string()];
        for (stream, name) in durables {
            for action in ["CREATE", "DELETE", "UPDATE"] {
                subjects.push(format!("$JS.API.CONSUMER.{action}.{stream}.{name}"));
            }
            subjects.push(format!("$JS.API.CONSUMER.CREATE.{stream}.{name}.>"));
        }
        subjects
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(role: Role) -> Permissions {
        Names::new("cronrun").unwrap().permissions(role, "_INBOX.UABC", &["orders.>".into()])
    }

    /// (role, subject, may publish): the lines of the README's permission table that matter most.
    #[test]
    fn roles_publish_only_what_they_need() {
        for &(role, subject, allowed) in PUBLISH_CASES {
            assert_eq!(perms(role).may_publish(subject), allowed, "{} publish {subject}", role.as_str());
        }
    }

    /// (role, subject, may publish), for `roles_publish_only_what_they_need` and the domain
    /// forms' test.
    const PUBLISH_CASES: &[(Role, &str, bool)] = {
        use Role::*;
        &[
            (Admin, "$KV.cronrun_jobs.backup", true),
            (Admin, "$O.cronrun_plugins.M.abc", true),
            (Admin, "cronrun.ctl.run.j.r.kill", true),
            (Admin, "$JS.API.STREAM.DELETE.KV_cronrun_jobs", false),
            (Admin, "$KV.other_jobs.x", false),
            (Admin, "$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.x.cronrun.dispatch.a", false),
            (Scheduler, "$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.x.cronrun.dispatch.a", false),
            (Admin, "orders.new", false),
            (Viewer, "$KV.cronrun_jobs.backup", false),
            (Viewer, "$KV.cronrun_runs.j.r", false),
            (Viewer, "cronrun.dispatch.default", false),
            (Viewer, "cronrun.ctl.run.j.r.kill", false),
            (Viewer, "$JS.API.STREAM.INFO.KV_cronrun_jobs", true),
            (Viewer, "$JS.API.CONSUMER.CREATE.KV_cronrun_schedules.x.$KV.cronrun_schedules.7.>", true),
            (Viewer, "$JS.API.STREAM.CREATE.KV_cronrun_schedules", false),
            (Scheduler, "$JS.API.STREAM.CREATE.KV_cronrun_schedules", true),
            (Scheduler, "$JS.API.STREAM.UPDATE.KV_cronrun_schedules", false),
            // Ordered consumers take no acks: no identity needs these.
            (Scheduler, "$JS.ACK.KV_cronrun_schedules.x.1.2.3.4.5.6.7", false),
            (Runner, "$JS.ACK.KV_cronrun_schedules.x.1.2.3.4.5.6.7", false),
            (Scheduler, "$JS.ACK.KV_cronrun_leases.x.1.2.3.4.5.6.7", false),
            (Runner, "$JS.ACK.KV_cronrun_leases.x.1.2.3.4.5.6.7", false),
            (Runner, "$JS.ACK.KV_cronrun_jobs.x.1.2.3.4.5.6.7", false),
            (Runner, "$KV.cronrun_jobs.pwned", false),
            (Runner, "cronrun.ctl.answer.t1", true),
            (Runner, "$JS.ACK.KV_cronrun_runs.chains.1.2.3.4.5.6.7", false),
            (Viewer, "$JS.ACK.KV_cronrun_leases.x.1.2.3.4.5.6.7", false),
            (Admin, "$JS.ACK.KV_cronrun_jobs.x.1.2.3.4.5.6.7", false),
            (Scheduler, "$KV.cronrun_schedules.7.backup", false),
            (Scheduler, "$KV.cronrun_leases.triggers.7", true),
            (Runner, "$KV.cronrun_leases.triggers.7", false),
            (Admin, "$KV.cronrun_schedules.7.backup", false),
            (Runner, "$JS.API.STREAM.INFO.KV_cronrun_schedules", false),
            (Viewer, "$JS.API.STREAM.CREATE.KV_cronrun_jobs", false),
            (Viewer, "$JS.API.STREAM.PURGE.CRONRUN_LOGS", false),
            (Scheduler, "$KV.cronrun_jobs.backup", false),
            (Scheduler, "$KV.cronrun_leases.shard.3", true),
            (Scheduler, "$KV.cronrun_leases.run.j.r", false),
            (Scheduler, "$KV.cronrun_leases.shards", true),
            (Scheduler, "$KV.cronrun_leases.scheduler.a.b", true),
            (Scheduler, "cronrun.dispatch.default", true),
            (Scheduler, "cronrun.ctl.run.j.r.kill", false),
            (Scheduler, "$O.cronrun_plugins.M.abc", false),
            (Scheduler, "$KV.cronrun_snapshots.3.0.1", true),
            (Scheduler, "$JS.API.STREAM.CREATE.KV_cronrun_snapshots", true),
            (Scheduler, "$JS.API.STREAM.PURGE.KV_cronrun_snapshots", false),
            (Scheduler, "$JS.API.STREAM.DELETE.KV_cronrun_snapshots", false),
            (Runner, "$KV.cronrun_snapshots.3", false),
            (Admin, "$KV.cronrun_snapshots.3", false),
            (Viewer, "$JS.API.STREAM.CREATE.KV_cronrun_snapshots", false),
            (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_EVENTS.notify", true),
            (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_EVENTS.other", false),
            (Scheduler, "$JS.ACK.CRONRUN_EVENTS.notify.1.2.3.4.5.6.7", true),
            (Scheduler, "cronrun.notify.ops.alerts", true),
            (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.KV_cronrun_runs.chains", true),
            (Scheduler, "$JS.ACK.KV_cronrun_runs.chains.1.2.3.4.5.6.7", true),
            (Runner, "$JS.API.CONSUMER.MSG.NEXT.KV_cronrun_runs.chains", false),
            (Scheduler, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_MESSAGES.on-orders", true),
            (Scheduler, "cronrun.dead.orders", true),
            (Scheduler, "$JS.API.STREAM.UPDATE.CRONRUN_MESSAGES", false),
            (Admin, "$JS.API.STREAM.UPDATE.CRONRUN_MESSAGES", true),
            (Admin, "$JS.API.STREAM.DELETE.CRONRUN_MESSAGES", false),
            (Runner, "$JS.ACK.CRONRUN_MESSAGES.on-orders.1.2.3.4.5.6.7", false),
            (Viewer, "cronrun.dead.orders", false),
            (Viewer, "$JS.ACK.KV_cronrun_runs.chains.1.2.3.4.5.6.7", false),
            (Runner, "cronrun.notify.ops", false),
            (Viewer, "cronrun.notify.ops", false),
            (Runner, "$KV.cronrun_jobs.backup", false),
            (Runner, "$O.cronrun_plugins.M.abc", false),
            (Runner, "$O.cronrun_plugins.C.abc", false),
            (Runner, "$KV.cronrun_leases.shard.3", false),
            (Runner, "$KV.cronrun_leases.shards", false),
            (Runner, "$KV.cronrun_leases.run.j.r", true),
            (Runner, "$KV.cronrun_leases.wait.j.r", true),
            (Runner, "$KV.cronrun_leases.signed.j", true),
            (Admin, "$KV.cronrun_leases.signed.j", false),
            (Scheduler, "$KV.cronrun_leases.signed.j", false),
            (Viewer, "$KV.cronrun_leases.signed.j", false),
            (Runner, "$KV.cronrun_runs.j.r", true),
            (Runner, "$JS.API.STREAM.CREATE.KV_cronrun_jobs", false),
            (Runner, "$JS.API.STREAM.PURGE.OBJ_cronrun_plugins", false),
            (Runner, "$JS.API.CONSUMER.MSG.NEXT.CRONRUN_DISPATCH.pool-a", true),
            // Consumers are made through `CONSUMER.CREATE.<stream>.<name>.<filter>` (what
            // async-nats sends); the older `DURABLE.CREATE` API is granted to no one.
            (Runner, "$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.pool-a.cronrun.dispatch.a", true),
            (Runner, "$JS.API.CONSUMER.DURABLE.CREATE.CRONRUN_DISPATCH.pool-a", false),
            (Scheduler, "$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify.cronrun.events.*.*", true),
            (Scheduler, "$JS.API.CONSUMER.DURABLE.CREATE.CRONRUN_EVENTS.notify", false),
            (Runner, "cronrun.dispatch.default", false),
            (Runner, "orders.new", true),
            (Runner, "payments.new", false),
            // Secrets: admins write and read them; runners and schedulers read one by name
            // (no consumer, no get by sequence); viewers have no route at all.
            (Admin, "$KV.cronrun_secrets.tok", true),
            (Admin, "$JS.API.STREAM.CREATE.KV_cronrun_secrets", true),
            (Admin, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", true),
            (Admin, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", true),
            (Admin, "$JS.API.STREAM.UPDATE.KV_cronrun_secrets", false),
            (Admin, "$JS.API.STREAM.DELETE.KV_cronrun_secrets", false),
            (Admin, "$JS.API.STREAM.PURGE.KV_cronrun_secrets", false),
            (Runner, "$JS.API.STREAM.INFO.KV_cronrun_secrets", true),
            (Runner, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", true),
            (Runner, "$JS.API.DIRECT.GET.KV_cronrun_secrets", false),
            (Runner, "$JS.API.STREAM.MSG.GET.KV_cronrun_secrets", false),
            (Runner, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", false),
            (Runner, "$KV.cronrun_secrets.tok", false),
            (Runner, "$JS.API.STREAM.CREATE.KV_cronrun_secrets", false),
            (Scheduler, "$JS.API.STREAM.INFO.KV_cronrun_secrets", true),
            (Scheduler, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", true),
            (Scheduler, "$JS.API.STREAM.MSG.GET.KV_cronrun_secrets", false),
            (Scheduler, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", false),
            (Scheduler, "$KV.cronrun_secrets.tok", false),
            (Scheduler, "$JS.API.STREAM.CREATE.KV_cronrun_secrets", false),
            (Viewer, "$JS.API.STREAM.INFO.KV_cronrun_secrets", false),
            (Viewer, "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok", false),
            (Viewer, "$JS.API.DIRECT.GET.KV_cronrun_secrets", false),
            (Viewer, "$JS.API.STREAM.MSG.GET.KV_cronrun_secrets", false),
            (Viewer, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets", false),
            (Viewer, "$JS.API.CONSUMER.CREATE.KV_cronrun_secrets.x.$KV.cronrun_secrets.>", false),
            (Viewer, "$KV.cronrun_secrets.tok", false),
        ]
    };

    #[test]
    fn beyond_their_inbox_runners_subscribe_to_kills_and_admins_to_their_answers_only() {
        for role in Role::ALL {
            let p = perms(role);
            assert!(p.may_subscribe("_INBOX.UABC.x1"), "{role:?}");
            assert!(!p.may_subscribe("_INBOX.UOTHER.x1"), "{role:?} reads another's replies");
            assert!(!p.may_subscribe("cronrun.dispatch.default"), "{role:?}");
            assert_eq!(p.may_subscribe("cronrun.ctl.run.j.r.kill"), role == Role::Runner, "{role:?}");
            assert_eq!(
                p.may_subscribe("cronrun.ctl.answer.t1"),
                matches!(role, Role::Admin | Role::Runner),
                "{role:?}"
            );
        }
    }

    #[test]
    fn viewers_and_runners_read_with_consumers_of_their_own_but_cannot_touch_the_schedulers_durables() {
        let viewer = perms(Role::Viewer);
        let cases = [
            ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS", true),
            ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.oc1.cronrun.events.>", true),
            ("$JS.API.CONSUMER.DELETE.CRONRUN_EVENTS.oc1", true),
            ("$JS.API.CONSUMER.DELETE.CRONRUN_EVENTS.notify", false),
            ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify", false),
            ("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify.cronrun.events.>", false),
            ("$JS.API.CONSUMER.UPDATE.CRONRUN_EVENTS.notify", false),
            ("$JS.API.CONSUMER.DELETE.KV_cronrun_runs.chains", false),
            ("$JS.API.CONSUMER.CREATE.KV_cronrun_runs.chains", false),
            ("$JS.API.CONSUMER.DURABLE.CREATE.CRONRUN_EVENTS.notify", false),
        ];
        for (subject, allowed) in cases {
            assert_eq!(viewer.may_publish(subject), allowed, "viewer publish {subject}");
        }
        let runner = perms(Role::Runner);
        assert!(!runner.may_publish("$JS.API.CONSUMER.DELETE.KV_cronrun_runs.chains"));
        assert!(runner.may_publish("$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.pool-default.cronrun.dispatch.default"));
        // An agent holding the scheduler's role keeps its right to make its durables.
        let agent = perms(Role::Scheduler).union(perms(Role::Runner));
        assert!(agent.may_publish("$JS.API.CONSUMER.CREATE.CRONRUN_EVENTS.notify"));
        assert!(agent.publish_deny.is_empty());
    }

    /// Not one subject of a viewer's lists names the secrets bucket: no stream info, no
    /// get, no consumer, no flow control. Nobody subscribes to its keys' subjects.
    #[test]
    fn a_viewer_has_no_route_to_the_secrets_bucket() {
        let viewer = perms(Role::Viewer);
        let lists = viewer.publish.iter().chain(&viewer.subscribe);
        assert!(lists.filter(|s| s.contains("secrets")).count() == 0, "{viewer:?}");
        for role in Role::ALL {
            assert!(!perms(role).may_subscribe("$KV.cronrun_secrets.tok"), "{role:?}");
        }
    }

    /// With the domain forms of `hub`, every role may publish a subject's domain form exactly
    /// when it may publish the subject, may still publish every plain subject it could, and
    /// gains nothing that no plain subject of its lists mirrors.
    #[test]
    fn domain_forms_mirror_each_right_and_refusal_and_add_none() {
        let hub = JsApi::domain("hub").unwrap();
        for role in Role::ALL {
            let plain = perms(role);
            let both = plain.clone().with_domain_forms(&hub);
            for subject in PUBLISH_CASES.iter().map(|c| c.1).chain(plain.publish.iter().map(String::as_str)) {
                let allowed = plain.may_publish(subject);
                assert_eq!(both.may_publish(subject), allowed, "{role:?} {subject}");
                assert_eq!(both.may_publish(&hub.subject(subject)), allowed, "{role:?} {}", hub.subject(subject));
            }
            for s in both.publish.iter().filter(|s| !plain.publish.contains(s)) {
                assert!(plain.publish.iter().any(|p| hub.domain_form(p).as_ref() == Some(s)), "{role:?}: {s}");
            }
            for s in &plain.publish_deny {
                assert!(both.publish_deny.contains(&hub.subject(s)), "{role:?}: refusal {s}");
            }
            assert_eq!(both.subscribe, plain.subscribe, "{role:?}");
            // No other domain, no object store through the domain, no `$OBJ`.
            for other in ["$JS.edge.API.STREAM.INFO.KV_cronrun_jobs", "$JS.hub.API.$O.cronrun_plugins.C.x"] {
                assert!(!both.may_publish(other), "{role:?} {other}");
            }
            // Without a domain, nothing changes.
            assert_eq!(plain.clone().with_domain_forms(&JsApi::local()), plain);
        }
        // A wildcard over the whole API is not mirrored (its form would reach every key);
        // a refusal is, even where it refuses more.
        let wide = Permissions {
            publish: vec!["$JS.API.>".into(), "$JS.API.*.INFO.x".into(), "$KV.b.>".into()],
            subscribe: vec![],
            publish_deny: vec!["$JS.API.*.DELETE.>".into(), "$KV.b.secret".into()],
        }
        .with_domain_forms(&hub);
        assert!(!wide.may_publish("$JS.hub.API.$KV.other.k"));
        assert!(!wide.may_publish("$JS.hub.API.STREAM.INFO.x"));
        assert!(wide.may_publish("$JS.hub.API.$KV.b.k"));
        assert!(!wide.may_publish("$JS.hub.API.$KV.b.secret"));
        assert!(!wide.may_publish("$KV.b.secret"));
        assert!(wide.publish_deny.contains(&"$JS.hub.API.*.DELETE.>".to_string()));
    }

    #[test]
    fn union_keeps_both() {
        let both = perms(Role::Scheduler).union(perms(Role::Runner));
        assert!(both.may_publish("$KV.cronrun_leases.shard.1"));
        assert!(both.may_publish("$KV.cronrun_leases.run.j.r"));
        assert!(both.may_subscribe("cronrun.ctl.run.j.r.kill"));
        assert!(!both.may_publish("$KV.cronrun_jobs.x"));
    }
}
