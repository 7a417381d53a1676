//! Creates the layout of docs/nats.md idempotently. What exists is used as it is: a second
//! agent, or ten starting at once, never reconfigures or recreates anything.

use std::time::Duration;

use async_nats::jetstream::{self, kv, object_store, stream};
use serde::Deserialize;

use crate::error::Error;
use crate::names::Names;

/// Settings for creating the layout. Existing buckets and streams keep their own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LayoutOptions {
    /// Replicas of every bucket and stream: 1 on one server, 3 on a cluster. Default 1.
    pub replicas: usize,
    /// How long live output is kept. Default 24h.
    #[serde(with = "crate::spec::codec::duration")]
    pub logs_max_age: Duration,
    /// Bytes of live output kept at most, oldest dropped first. Default 1 GiB.
    pub logs_max_bytes: i64,
    /// Events kept at most. Default 1,000,000.
    pub events_max_msgs: i64,
    /// Window in which a second dispatch of one run is dropped by `Nats-Msg-Id`. Default 10m.
    #[serde(with = "crate::spec::codec::duration")]
    pub dedup_window: Duration,
}

impl Default for LayoutOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            logs_max_age: Duration::from_secs(24 * 3600),
            logs_max_bytes: 1 << 30,
            events_max_msgs: 1_000_000,
            dedup_window: Duration::from_secs(600),
        }
    }
}

/// Markers left when a lease's TTL expires are themselves removed after this long. A
/// scheduler that takes over reads the markers of run leases that expired meanwhile, so
/// this bounds how long a shard may go unled without losing track of dead runs.
pub const LEASE_MARKER_TTL: Duration = Duration::from_secs(15 * 60);

/// Limits of the dispatch stream (see `ensure`).
pub const DISPATCH_MAX_MSGS: i64 = 1_000_000;
pub const DISPATCH_MAX_BYTES: i64 = 1 << 30;
pub const DISPATCH_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Whether `ensure` creates what is missing, or only finds what is there (an identity that
/// may not create streams: a runner, a viewer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Create,
    Refuse,
}

pub(super) async fn ensure(
    js: &jetstream::Context,
    names: &Names,
    opts: &LayoutOptions,
    missing: Missing,
) -> Result<(kv::Store, kv::Store, kv::Store), Error> {
    let jobs = ensure_kv(
        js,
        missing,
        kv::Config {
            bucket: names.jobs_bucket(),
            description: "cronrun job specs".into(),
            history: 5,
            num_replicas: opts.replicas,
            ..Default::default()
        },
    )
    .await?;
    let runs = ensure_kv(
        js,
        missing,
        kv::Config {
            bucket: names.runs_bucket(),
            description: "cronrun run records".into(),
            history: 1,
            num_replicas: opts.replicas,
            // Run records are pruned by purging; the purge markers carry a TTL.
            limit_markers: Some(LEASE_MARKER_TTL),
            ..Default::default()
        },
    )
    .await?;
    let leases = ensure_kv(
        js,
        missing,
        kv::Config {
            bucket: names.leases_bucket(),
            description: "cronrun leases, locks and runner presence".into(),
            history: 1,
            num_replicas: opts.replicas,
            limit_markers: Some(LEASE_MARKER_TTL),
            ..Default::default()
        },
    )
    .await?;
    ensure_kv(
        js,
        missing,
        kv::Config {
            bucket: names.job_kv_bucket(),
            description: "cronrun Wasm jobs' private key-value data".into(),
            history: 1,
            num_replicas: opts.replicas,
            // A deleted key's marker expires, so that it stops counting against the job's
            // quota (see `wasm::nats`).
            limit_markers: Some(LEASE_MARKER_TTL),
            ..Default::default()
        },
    )
    .await?;
    if js.get_object_store(names.plugins_store()).await.is_err() {
        refuse_missing(missing, &names.plugins_store())?;
        js.create_object_store(object_store::Config {
            bucket: names.plugins_store(),
            description: Some("cronrun Wasm components by digest".into()),
            num_replicas: opts.replicas,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::nats(&format!("creating object store {}", names.plugins_store()), e))?;
    }
    ensure_stream(
        js,
        missing,
        stream::Config {
            name: names.dispatch_stream(),
            description: Some("cronrun due runs, pulled by runners".into()),
            subjects: vec![names.wildcard("dispatch")],
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: opts.dedup_window,
            // Bounded like every stream: a run not taken within a week is long past any
            // deadline, and a full queue refuses new dispatches (retried within the fire's
            // deadline, then logged as lost) rather than dropping queued ones.
            max_messages: DISPATCH_MAX_MSGS,
            max_bytes: DISPATCH_MAX_BYTES,
            max_age: DISPATCH_MAX_AGE,
            discard: stream::DiscardPolicy::New,
            num_replicas: opts.replicas,
            ..Default::default()
        },
    )
    .await?;
    ensure_stream(
        js,
        missing,
        stream::Config {
            name: names.logs_stream(),
            description: Some("cronrun live output lines".into()),
            subjects: vec![names.wildcard("logs")],
            max_age: opts.logs_max_age,
            max_bytes: opts.logs_max_bytes,
            discard: stream::DiscardPolicy::Old,
            num_replicas: opts.replicas,
            ..Default::default()
        },
    )
    .await?;
    ensure_stream(
        js,
        missing,
        stream::Config {
            name: names.events_stream(),
            description: Some("cronrun run events".into()),
            subjects: vec![names.wildcard("events")],
            max_messages: opts.events_max_msgs,
            discard: stream::DiscardPolicy::Old,
            num_replicas: opts.replicas,
            ..Default::default()
        },
    )
    .await?;
    Ok((jobs, runs, leases))
}

/// The error for a missing part of the layout this identity may not create.
fn refuse_missing(missing: Missing, name: &str) -> Result<(), Error> {
    match missing {
        Missing::Create => Ok(()),
        Missing::Refuse => Err(Error::new(
            crate::ErrorKind::NotFound,
            format!("{name} does not exist yet: a scheduler or an admin command creates the layout"),
        )),
    }
}

pub(super) async fn ensure_kv(
    js: &jetstream::Context,
    missing: Missing,
    config: kv::Config,
) -> Result<kv::Store, Error> {
    let bucket = config.bucket.clone();
    if let Ok(store) = js.get_key_value(&bucket).await {
        return Ok(store);
    }
    refuse_missing(missing, &bucket)?;
    // Several agents may race here; the server accepts identical creates, and a loser of
    // a differing one finds the winner's bucket on the second look.
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        Err(create_err) => {
            js.get_key_value(&bucket).await.map_err(|_| Error::nats(&format!("creating bucket {bucket}"), create_err))
        }
    }
}

async fn ensure_stream(js: &jetstream::Context, missing: Missing, config: stream::Config) -> Result<(), Error> {
    let name = config.name.clone();
    if js.get_stream(&name).await.is_ok() {
        return Ok(());
    }
    refuse_missing(missing, &name)?;
    match js.create_stream(config).await {
        Ok(_) => Ok(()),
        Err(create_err) => js
            .get_stream(&name)
            .await
            .map(|_| ())
            .map_err(|_| Error::nats(&format!("creating stream {name}"), create_err)),
    }
}
