//! Each role's allow-lists, built from [`Names`] by the subject builders of `Api`.

use super::{Permissions, Role};
use crate::names::{Names, lease_keys};

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
                // (see the runtime's `scheduler::recovery::reaper`). `overlap = "replace"` asks the
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
