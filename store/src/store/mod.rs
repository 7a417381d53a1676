//! Everything cronrun keeps in NATS, behind typed operations.
//!
//! - `layout.rs`: creates the buckets and streams once, never reconfigures existing ones.
//! - `kv.rs`: create-if-absent and compare-and-set with an optional per-key TTL.
//! - `jobs.rs`, `runs.rs`: job specs and run records.
//! - `schedules.rs`: the jobs by shard, an index the server keeps.
//! - `lease.rs`: a lease held through a TTL key, renewed by compare-and-set.
//! - `plugins.rs`: Wasm components in the object store, by digest.
//! - `pull.rs`: pulling from a consumer only into free slots (runner and notifier).
//! - `secrets.rs`: secrets by name, read at each run and delivery, never by viewers.
//! - `calendars.rs`: named calendars of days jobs exclude, read as their fires come.
//! - `on_demand.rs`: a bucket outside the layout (secrets, calendars), made by its first write.
//! - `usage.rs`: how full the layout's streams are against their limits.

pub mod calendars;
mod control;
mod jobs;
pub mod kv;
mod layout;
pub mod lease;
mod messages;
mod on_demand;
mod plugins;
pub mod pull;
mod runs;
mod schedules;
pub mod secrets;
mod usage;

use async_nats::jetstream;

use crate::error::Error;
use crate::model::jsapi::JsApi;
use crate::names::Names;

pub use calendars::{Calendars, Excluded};
pub use jobs::StoredJob;
pub use kv::{Bucket, Revision};
pub use layout::{LEASE_MARKER_TTL, LayoutOptions, MIN_STREAM_BYTES, Missing};
pub use messages::MESSAGES_MAX_AGE;
pub use plugins::{MAX_PLUGIN_BYTES, plugin_digest};
pub use runs::StoredRun;
pub use secrets::{SecretInfo, Secrets};
pub use usage::{NEARLY_FULL, StreamUse, StreamUseCache, fmt_bytes};

/// Handles to one deployment's buckets and streams.
#[derive(Clone, Debug)]
pub struct Store {
    pub names: Names,
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub jobs: Bucket,
    pub runs: Bucket,
    pub leases: Bucket,
    /// Secrets by name, opened at their first use (see `secrets`).
    pub secrets: Secrets,
    /// Calendars by name, opened at their first use (see `calendars`).
    pub calendars: Calendars,
    /// The most a run record may take as JSON: the server's max payload (at most 1 MiB)
    /// less room for headers, so that a record write is never refused for its size.
    pub record_budget: usize,
    /// Who this handle's job writes and events are made by (the CLI's identity).
    pub actor: Option<std::sync::Arc<str>>,
    /// Which of a run's optional events this handle's dispatches and runs publish.
    pub lifecycle: Lifecycle,
}

/// A run's `dispatched` and `started` events, published by an agent with `[events]
/// lifecycle = true` only (each is a stored message per run). Without it `dispatched` goes
/// out only where a `late` notice needs it: for jobs whose rules ask for `late`, or whose
/// rules are the scheduler's `[notify] default` when that asks for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// `[events] lifecycle`: both events for every run.
    pub every_run: bool,
    /// `[notify] default` asks for `late` (jobs without rules of their own need `dispatched`).
    pub late_by_default: bool,
}

/// Headers of a KV write (expected revision, TTL) and a margin.
const RECORD_HEADROOM: usize = 8 * 1024;

impl Store {
    /// Opens the layout, creating what is missing.
    pub async fn open(client: async_nats::Client, names: Names, opts: &LayoutOptions) -> Result<Self, Error> {
        Self::open_with(client, names, opts, Missing::Create).await
    }

    /// Opens the layout as it is: a missing part is an `ErrorKind::NotFound` error.
    pub async fn open_existing(client: async_nats::Client, names: Names) -> Result<Self, Error> {
        Self::open_with(client, names, &LayoutOptions::default(), Missing::Refuse).await
    }

    async fn open_with(
        client: async_nats::Client,
        names: Names,
        opts: &LayoutOptions,
        missing: Missing,
    ) -> Result<Self, Error> {
        let js = js_context(client.clone(), names.js_api());
        let (jobs, runs, leases) =
            layout::ensure(&js, &names, opts, missing).await.map_err(|e| hint_domain(e, names.js_api()))?;
        let max_payload = client.server_info().max_payload;
        let record_budget = max_payload.min(1024 * 1024).saturating_sub(RECORD_HEADROOM).max(4 * 1024);
        let secrets = Secrets::new(js.clone(), &names);
        let calendars = Calendars::new(js.clone(), &names);
        Ok(Self {
            record_budget,
            client,
            jobs: Bucket::new(jobs, js.clone(), names.js_api()),
            runs: Bucket::new(runs, js.clone(), names.js_api()),
            leases: Bucket::new(leases, js.clone(), names.js_api()),
            secrets,
            calendars,
            js,
            names,
            actor: None,
            lifecycle: Lifecycle::default(),
        })
    }

    /// The JetStream API of this store's names.
    pub fn js_api(&self) -> &JsApi {
        self.names.js_api()
    }

    /// This store publishing the optional events `lifecycle` asks for.
    pub fn with_lifecycle(mut self, lifecycle: Lifecycle) -> Self {
        self.lifecycle = lifecycle;
        self
    }

    /// This store with every job write and event marked as made by `by` (see
    /// `auth::actor`): the audit trail of the CLI.
    pub fn acting_as(mut self, by: &str) -> Self {
        self.jobs = self.jobs.signed_by(by);
        self.secrets = self.secrets.signed_by(by);
        self.actor = Some(by.into());
        self
    }
}

/// A JetStream context of `client` for `api`: the servers' own API, or a domain's, whose
/// requests (and KV puts of async-nats's own) go to `$JS.<domain>.API.…` (see `jsapi`).
pub fn js_context(client: async_nats::Client, api: &JsApi) -> jetstream::Context {
    match api.domain_name() {
        Some(domain) => jetstream::with_domain(client, domain),
        None => jetstream::new(client),
    }
}

/// `error` with what to do when it says JetStream is out of reach and no domain is set:
/// the likeliest cause is a leaf node without JetStream, whose link denies `$JS.API.>`.
fn hint_domain(error: Error, api: &JsApi) -> Error {
    let unreachable = ["JetStream unavailable", "no responders"].iter().any(|s| error.message().contains(s));
    if !unreachable || api.domain_name().is_some() || *error.kind() != crate::error::ErrorKind::Nats {
        return error;
    }
    let hinted = Error::nats_msg(
        error.message(),
        "connected to a leaf node of the servers with JetStream? set their domain with \
         `jetstream_domain` in cronrun.toml or --jetstream-domain (docs/deploy.md, \"Leaf nodes\")",
    );
    hinted.with_source(error)
}
