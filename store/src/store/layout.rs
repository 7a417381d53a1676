//! Creates the layout of docs/nats.md idempotently. What exists is used as it is: a second
//! agent, or ten starting at once, never reconfigures or recreates anything. The two streams
//! that reserve storage (their max_bytes) are sized within what JetStream gives when they
//! are created (`ensure_reserving`).

use std::time::Duration;

use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
use async_nats::jetstream::{self, ErrorCode, kv, object_store, stream};
use serde::Deserialize;
use tracing::warn;

use super::usage::fmt_bytes;
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
    /// Bytes of due runs queued at most; a full queue refuses new dispatches. Default 1 GiB.
    pub dispatch_max_bytes: i64,
    /// Events kept at most. Default 1,000,000.
    pub events_max_msgs: i64,
    /// Window in which a second dispatch of one run is dropped by `Nats-Msg-Id`. Default 10m.
    #[serde(with = "crate::spec::codec::duration")]
    pub dedup_window: Duration,
    /// The cluster every bucket and stream is placed in: on a supercluster (regions joined
    /// by gateways), the region that keeps cronrun's state. Without it JetStream places
    /// each in the cluster of the server its creator is connected to, so the first agent
    /// or CLI command to start would choose the region. Default: none.
    pub placement_cluster: Option<String>,
    /// Server tags (nats-server `server_tags`) the servers holding every bucket and stream
    /// must all have, e.g. `["region:east"]`. Default: none.
    pub placement_tags: Vec<String>,
}

impl Default for LayoutOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            logs_max_age: Duration::from_secs(24 * 3600),
            logs_max_bytes: 1 << 30,
            dispatch_max_bytes: DISPATCH_MAX_BYTES,
            events_max_msgs: 1_000_000,
            dedup_window: Duration::from_secs(600),
            placement_cluster: None,
            placement_tags: Vec::new(),
        }
    }
}

impl LayoutOptions {
    /// JetStream's placement of what the layout creates (`placement_cluster`,
    /// `placement_tags`); None leaves it to the server. What is created later beside the
    /// layout (the schedules index, snapshots, secrets, messages) follows the stream it
    /// is made from (`placement_of`).
    pub fn placement(&self) -> Option<stream::Placement> {
        let placement =
            stream::Placement { cluster: self.placement_cluster.clone(), tags: self.placement_tags.clone() };
        (placement.cluster.is_some() || !placement.tags.is_empty()).then_some(placement)
    }
}

/// The placement stream `name` was created with (None if it has none or cannot be read):
/// what is made beside the layout later is placed where the layout is.
pub(super) async fn placement_of(js: &jetstream::Context, name: &str) -> Option<stream::Placement> {
    js.get_stream(name).await.ok()?.cached_info().config.placement.clone()
}

/// Markers left when a lease's TTL expires are themselves removed after this long. A
/// scheduler that takes over reads the markers of run leases that expired meanwhile, so
/// this bounds how long a shard may go unled without losing track of dead runs.
pub const LEASE_MARKER_TTL: Duration = Duration::from_secs(15 * 60);

/// Limits of the dispatch stream (see `ensure`); its max_bytes is `[layout]
/// dispatch_max_bytes`, this by default.
pub const DISPATCH_MAX_MSGS: i64 = 1_000_000;
pub const DISPATCH_MAX_BYTES: i64 = 1 << 30;
pub const DISPATCH_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the first refusal of a stream's size divides both sizes by: the storage free is
/// then below that size, and each stream at a sixteenth of it leaves most of it free for
/// the other and the buckets (1 GiB refused on a 256 MiB server: 64 MiB each).
const AFTER_REFUSAL: i64 = 16;

/// The least the layout shrinks CRONRUN_DISPATCH and CRONRUN_LOGS to when JetStream cannot
/// give their configured max_bytes (a configured size below it is kept as it is): 16 MiB
/// queues some 10,000 runs and holds the output of hundreds. Below it, an agent that
/// schedules nothing and keeps no output would look healthy: it refuses to start instead.
pub const MIN_STREAM_BYTES: i64 = 16 << 20;

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
            placement: opts.placement(),
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
            placement: opts.placement(),
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
            placement: opts.placement(),
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
            placement: opts.placement(),
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
            placement: opts.placement(),
            ..Default::default()
        })
        .await
        .map_err(|e| Error::nats(&format!("creating object store {}", names.plugins_store()), e))?;
    }
    ensure_reserving(js, names, opts, missing).await?;
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
            placement: opts.placement(),
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

/// The max_bytes of the streams that reserve storage, as they are (to be) created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sizes {
    dispatch: i64,
    logs: i64,
}

impl Sizes {
    /// The least each is shrunk to: `MIN_STREAM_BYTES`, or its configured size if smaller
    /// (0 or less: unlimited, nothing reserved).
    fn floor(self) -> Sizes {
        Sizes { dispatch: self.dispatch.min(MIN_STREAM_BYTES), logs: self.logs.min(MIN_STREAM_BYTES) }
    }

    /// Both halved (their proportion kept until one reaches its floor), neither below
    /// `floor`; None when both are there already.
    fn halved(self, floor: Sizes) -> Option<Sizes> {
        self.divided(2, floor)
    }

    /// Both divided by `by`, neither below `floor`; None when both are there already.
    fn divided(self, by: i64, floor: Sizes) -> Option<Sizes> {
        let part = |size: i64, least: i64| (size / by).max(least);
        let next = Sizes { dispatch: part(self.dispatch, floor.dispatch), logs: part(self.logs, floor.logs) };
        (next != self).then_some(next)
    }

    /// What the streams named in `absent` reserve together, on `replicas` servers.
    fn reserved(self, absent: &[Reserving], replicas: usize) -> i64 {
        absent.iter().map(|r| r.pick(self, self).0.max(0)).sum::<i64>() * replicas as i64
    }

    /// The storage they need free: what they reserve and as much again, unreserved, for
    /// the buckets and events (which reserve nothing, yet are refused by a server whose
    /// storage is all reserved, and hold the specs and records).
    fn needed(self, absent: &[Reserving], replicas: usize) -> i64 {
        2 * self.reserved(absent, replicas)
    }
}

/// The streams of the layout whose max_bytes the server reserves at creation.
#[derive(Debug, Clone, Copy)]
enum Reserving {
    Dispatch,
    Logs,
}

impl Reserving {
    fn name(self, names: &Names) -> String {
        match self {
            Reserving::Dispatch => names.dispatch_stream(),
            Reserving::Logs => names.logs_stream(),
        }
    }

    /// This stream's size in `a` and in `b`.
    fn pick(self, a: Sizes, b: Sizes) -> (i64, i64) {
        match self {
            Reserving::Dispatch => (a.dispatch, b.dispatch),
            Reserving::Logs => (a.logs, b.logs),
        }
    }

    fn config(self, names: &Names, opts: &LayoutOptions, sizes: Sizes) -> stream::Config {
        match self {
            Reserving::Dispatch => stream::Config {
                name: names.dispatch_stream(),
                description: Some("cronrun due runs, pulled by runners".into()),
                subjects: vec![names.wildcard("dispatch")],
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: opts.dedup_window,
                // Bounded like every stream: a run not taken within a week is long past any
                // deadline, and a full queue refuses new dispatches (retried within the fire's
                // deadline, then logged as lost) rather than dropping queued ones.
                max_messages: DISPATCH_MAX_MSGS,
                max_bytes: sizes.dispatch,
                max_age: DISPATCH_MAX_AGE,
                discard: stream::DiscardPolicy::New,
                num_replicas: opts.replicas,
                placement: opts.placement(),
                ..Default::default()
            },
            Reserving::Logs => stream::Config {
                name: names.logs_stream(),
                description: Some("cronrun live output lines".into()),
                subjects: vec![names.wildcard("logs")],
                max_age: opts.logs_max_age,
                max_bytes: sizes.logs,
                discard: stream::DiscardPolicy::Old,
                num_replicas: opts.replicas,
                placement: opts.placement(),
                ..Default::default()
            },
        }
    }
}

/// Creates CRONRUN_DISPATCH and CRONRUN_LOGS where missing, sized within the storage
/// JetStream gives. The account's limit is read first; the server's own `max_file_store`
/// is visible to no client, so its refusal (insufficient storage) is the signal. The first
/// refusal divides both sizes by [`AFTER_REFUSAL`], each further one halves them, down to
/// `MIN_STREAM_BYTES`; below, one line says what is needed and what to change. With room
/// enough, the sizes are `[layout]`'s.
///
/// A stream once created cannot be shrunk by the identities that create the layout (they
/// may not update or delete a stream: an update could move its subjects), so the sizes
/// after a refusal leave room: a stream taking all the storage that was free would leave
/// none for the other one, nor for the buckets, which reserve nothing but are refused
/// once all of it is reserved.
async fn ensure_reserving(
    js: &jetstream::Context,
    names: &Names,
    opts: &LayoutOptions,
    missing: Missing,
) -> Result<(), Error> {
    let wanted = Sizes { dispatch: opts.dispatch_max_bytes, logs: opts.logs_max_bytes };
    let floor = wanted.floor();
    let mut absent = Vec::new();
    for stream in [Reserving::Dispatch, Reserving::Logs] {
        if js.get_stream(stream.name(names)).await.is_err() {
            refuse_missing(missing, &stream.name(names))?;
            absent.push(stream);
        }
    }
    if absent.is_empty() {
        return Ok(());
    }
    let created = absent.clone();
    let account = js.query_account().await.ok();
    let mut sizes = wanted;
    // An account's limit is known: start from sizes that fit what it has not reserved.
    if let Some(free) = account.as_ref().and_then(|a| Some(a.limits.max_storage? - a.reserved_storage as i64)) {
        while sizes.needed(&absent, opts.replicas) > free {
            let Some(next) = sizes.halved(floor) else { break };
            sizes = next;
        }
    }
    // Each round either creates every absent stream or shrinks the sizes: at most a few.
    let mut refusals = 0;
    while !absent.is_empty() {
        let mut refused = Vec::new();
        for stream in absent {
            if create_reserving(js, stream.config(names, opts, sizes)).await? {
                refused.push(stream);
            }
        }
        absent = refused;
        if !absent.is_empty() {
            refusals += 1;
            let shrunk = if refusals == 1 { sizes.divided(AFTER_REFUSAL, floor) } else { sizes.halved(floor) };
            sizes = shrunk.ok_or_else(|| too_small(names, opts, floor, account.as_ref()))?;
        }
    }
    if sizes != wanted {
        let sized: Vec<String> = created
            .iter()
            .map(|s| {
                let (now, configured) = s.pick(sizes, wanted);
                format!("{} max_bytes {} (configured {})", s.name(names), fmt_bytes(now), fmt_bytes(configured))
            })
            .collect();
        warn!(
            "sized the layout down to fit the JetStream storage it is given: {}; give JetStream more storage \
             (nats-server `jetstream {{ max_file_store }}`, the account's `max_file`) to keep more",
            sized.join(", ")
        );
    }
    Ok(())
}

/// Whether JetStream refused a stream for the storage it would reserve (10047 on a server
/// or account short of it, 10023 on a cluster with no peer that has it).
fn storage_refused(e: &CreateStreamError) -> bool {
    let codes = [ErrorCode::STORAGE_RESOURCES_EXCEEDED, ErrorCode::INSUFFICIENT_RESOURCES];
    code_of(e).is_some_and(|code| codes.contains(&code))
}

/// The JetStream error code of a refused create.
fn code_of(e: &CreateStreamError) -> Option<ErrorCode> {
    match e.kind() {
        CreateStreamErrorKind::JetStream(j) => Some(j.error_code()),
        _ => None,
    }
}

/// Creates a reserving stream; true if JetStream refused it for storage. A create that
/// fails otherwise is fine if the stream exists (another agent made it meanwhile).
async fn create_reserving(js: &jetstream::Context, config: stream::Config) -> Result<bool, Error> {
    let name = config.name.clone();
    match js.create_stream(config).await {
        Ok(_) => Ok(false),
        Err(e) if storage_refused(&e) => Ok(true),
        Err(e) => {
            js.get_stream(&name).await.map(|_| false).map_err(|_| Error::nats(&format!("creating stream {name}"), e))
        }
    }
}

/// The one line when even the floor does not fit: what is needed, what is given, what to do.
fn too_small(
    names: &Names,
    opts: &LayoutOptions,
    floor: Sizes,
    account: Option<&jetstream::account::Account>,
) -> Error {
    let given = match account.and_then(|a| Some((a.limits.max_storage?, a.reserved_storage))) {
        Some((max, reserved)) => format!(
            "the account's JetStream file storage is {} ({} reserved already)",
            fmt_bytes(max),
            fmt_bytes(reserved as i64)
        ),
        None => "the account's storage is unlimited, so the server's `max_file_store` is what is short".into(),
    };
    Error::new(
        crate::ErrorKind::Other,
        format!(
            "JetStream does not have the storage the cronrun layout needs: {} and {} need at least {} free \
             (max_bytes {} and {}, {} replica(s), and as much again for the buckets) and {given}; give \
             JetStream more file storage (nats-server `jetstream {{ max_file_store }}`, or the account's \
             JetStream `max_file`), or lower `[layout] dispatch_max_bytes` and `logs_max_bytes` (or \
             `replicas`) in cronrun.toml",
            names.dispatch_stream(),
            names.logs_stream(),
            fmt_bytes(floor.needed(&[Reserving::Dispatch, Reserving::Logs], opts.replicas)),
            fmt_bytes(floor.dispatch),
            fmt_bytes(floor.logs),
            opts.replicas,
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_layout_shrinks_to_a_sixteenth_then_halves_down_to_its_floor() {
        const MIB: i64 = 1 << 20;
        let sizes = |dispatch, logs| Sizes { dispatch: dispatch * MIB, logs: logs * MIB };
        let wanted = sizes(1024, 1024);
        let floor = wanted.floor();
        assert_eq!(floor, sizes(16, 16));
        // (what, from, shrunk by the first refusal or a later one, expected)
        let cases = [
            ("the first refusal", wanted, AFTER_REFUSAL, Some(sizes(64, 64))),
            ("a later one", sizes(64, 64), 2, Some(sizes(32, 32))),
            ("one reaches its floor first", sizes(64, 20), 2, Some(sizes(32, 16))),
            ("both at their floor", sizes(16, 16), 2, None),
        ];
        for (what, from, by, expected) in cases {
            assert_eq!(from.divided(by, floor), expected, "{what}");
        }
        // A configured size below the floor is its own floor.
        assert_eq!(sizes(8, 1024).floor(), sizes(8, 16));
        // Twice what they reserve, on every replica, is what they need free.
        assert_eq!(sizes(64, 64).needed(&[Reserving::Dispatch, Reserving::Logs], 3), 2 * 128 * MIB * 3);
        assert_eq!(sizes(64, 64).needed(&[Reserving::Logs], 1), 2 * 64 * MIB);
    }
}
