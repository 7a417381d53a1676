//! The schedules index, `cronrun_schedules`: every job of `cronrun_jobs` under the key
//! `<shard>.<job>`, so that a scheduler reads only the jobs of the shards it leads (a
//! watch on `<shard>.>`) instead of every spec of the deployment.
//!
//! The server keeps it: the index is a stream sourcing the jobs bucket's stream, each
//! subject mapped by NATS's own `{{partition(shards,1)}}` (which `scheduler::shard_of`
//! computes too). Nothing writes to it, so it cannot disagree with the jobs for longer
//! than the sourcing takes, and a job written while no scheduler runs is still filed.
//! Each entry carries the revision of the job it copies in its `Nats-Stream-Source`
//! header (see `kv::Watch`).

use std::time::Duration;

use async_nats::jetstream::stream;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Bucket, Store};
use crate::error::{Error, ErrorKind};

/// How long a scheduler waits at start for the server to file every job in the index.
pub const INDEX_FILL_WAIT: Duration = Duration::from_secs(600);

impl Store {
    /// Opens the index for `shards` shards, creating it if it is missing. An index made for
    /// another shard count is refused: its keys would name other shards.
    ///
    /// The index has as many replicas as the jobs bucket it copies: schedulers cannot lead
    /// without it, so it must survive what the jobs survive (an index on one node of a
    /// cluster stops every scheduler while that node is down). One found with fewer (the
    /// jobs bucket's raised by hand) is said at start; schedulers may not edit streams.
    pub async fn schedules_index(&self, shards: u32) -> Result<Bucket, Error> {
        let name = self.names.schedules_bucket();
        let stream_name = format!("KV_{name}");
        let jobs_stream = format!("KV_{}", self.names.jobs_bucket());
        let replicas = self
            .js
            .get_stream(&jobs_stream)
            .await
            .map_err(|e| Error::nats(&format!("reading stream {jobs_stream}"), e))?
            .cached_info()
            .config
            .num_replicas;
        let transform = stream::SubjectTransform {
            source: format!("$KV.{}.*", self.names.jobs_bucket()),
            destination: format!("$KV.{name}.{{{{partition({shards},1)}}}}.{{{{wildcard(1)}}}}"),
        };
        let config = stream::Config {
            name: stream_name.clone(),
            description: Some(format!("cronrun job specs by shard, sourced from {}", self.names.jobs_bucket())),
            max_messages_per_subject: 1,
            allow_direct: true,
            // A purge of a job is copied with its rollup header, which a stream that
            // does not allow rollups would refuse (and the source would stop there).
            allow_rollup: true,
            num_replicas: replicas,
            // Where the jobs bucket is ([layout] placement): the index is sourced from it.
            placement: super::layout::placement_of(&self.js, &jobs_stream).await,
            sources: Some(vec![stream::Source {
                name: jobs_stream.clone(),
                subject_transforms: vec![transform.clone()],
                ..Default::default()
            }]),
            ..Default::default()
        };
        let found = match self.js.get_stream(&stream_name).await {
            Ok(found) => found,
            // Several schedulers may race here: identical creates are accepted.
            Err(_) => match self.js.create_stream(config).await {
                Ok(created) => created,
                Err(create_err) => self
                    .js
                    .get_stream(&stream_name)
                    .await
                    .map_err(|_| Error::nats(&format!("creating stream {stream_name}"), create_err))?,
            },
        };
        let made_for = found.cached_info().config.sources.iter().flatten().flat_map(|s| &s.subject_transforms);
        if !made_for.clone().any(|t| *t == transform) {
            let found: Vec<&str> = made_for.map(|t| t.destination.as_str()).collect();
            return Err(Error::new(
                ErrorKind::Other,
                format!(
                    "stream {stream_name} files jobs under {found:?}, not {:?}: it was made for another shard \
                     count; delete it (`nats stream rm {stream_name}`) and a scheduler makes it again",
                    transform.destination
                ),
            ));
        }
        let has = found.cached_info().config.num_replicas;
        if has < replicas {
            warn!(
                "stream {stream_name} has {has} replica(s), the jobs bucket {replicas}: schedulers stop while \
                 a node holding it is down; raise it with `nats stream edit {stream_name} --replicas {replicas}`"
            );
        }
        let kv = self.js.get_key_value(&name).await.map_err(|e| Error::nats(&format!("opening {name}"), e))?;
        Ok(Bucket::sourced(kv, self.js.clone(), self.js_api()))
    }

    /// The snapshots of the index (see `scheduler::snapshot`), made if missing, with as
    /// many replicas as the index: a snapshot lost only makes a reader pass over the index.
    pub async fn snapshots_bucket(&self, index: &Bucket) -> Result<Bucket, Error> {
        let config = async_nats::jetstream::kv::Config {
            bucket: self.names.snapshots_bucket(),
            description: "cronrun snapshots of the schedules index, by shard".into(),
            history: 1,
            num_replicas: index.kv.stream.cached_info().config.num_replicas,
            placement: index.kv.stream.cached_info().config.placement.clone(),
            ..Default::default()
        };
        let kv = super::layout::ensure_kv(&self.js, super::layout::Missing::Create, config).await?;
        Ok(Bucket::new(kv, self.js.clone(), self.js_api()))
    }

    /// Waits until the server has filed every job written so far in the index: a new
    /// index (a new deployment, an upgrade, one deleted by hand) fills while the jobs are
    /// sourced, and a leader that read its shard before would start the jobs filed after
    /// from now, never catching up their fires since the watermark.
    pub async fn index_filled(&self, index: &Bucket, cancel: &CancellationToken) -> Result<(), Error> {
        let jobs_stream = format!("KV_{}", self.names.jobs_bucket());
        let mut jobs = self.js.get_stream(&jobs_stream).await.map_err(|e| Error::nats("reading the jobs stream", e))?;
        let written = jobs.info().await.map_err(|e| Error::nats("reading the jobs stream", e))?.state.last_sequence;
        let deadline = tokio::time::Instant::now() + INDEX_FILL_WAIT;
        let mut said = false;
        loop {
            let mut stream = index.kv.stream.clone();
            let info = stream.info().await.map_err(|e| Error::nats("reading the schedules index", e))?;
            let source = info.sources.first();
            // Caught up: nothing to source, or the source ran and nothing is left.
            let lag = source.map_or(u64::MAX, |s| if s.active.is_some() { s.lag } else { u64::MAX });
            if written == 0 || lag == 0 {
                if said {
                    info!("the schedules index holds every job");
                }
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Other,
                    format!(
                        "the schedules index has not filed every job within {INDEX_FILL_WAIT:?} ({} of {written} messages \
                         of the jobs bucket left): see `nats stream info {}`",
                        source.map_or(written, |s| s.lag),
                        info.config.name
                    ),
                ));
            }
            if !std::mem::replace(&mut said, true) {
                info!(
                    jobs_stream_messages = written,
                    "waiting for the server to file every job in the schedules index"
                );
            }
            tokio::select! {
                _ = cancel.cancelled() => return Err(Error::new(ErrorKind::Other, "stopped while the schedules index filled")),
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
}
