//! Reads the jobs of the shards a scheduler takes, many shards in one pass.
//!
//! The server finds one shard's entries in the schedules index by passing over all of it
//! (every shard's jobs are interleaved in the order they were written): with 1,000,000
//! jobs, about a second of its CPU per shard read alone, 16-20 s for 64 shards read side
//! by side. A request waits `BATCH_WINDOW` for others (an agent starting, a member
//! leaving: shards are taken within moments), and all are read together through one
//! consumer filtering on all of them (on everything, up to `WHOLE_INDEX_UP_TO` jobs): one
//! pass. Each shard's leader then follows its shard
//! from where the pass ended, which costs the server only the changes themselves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::index::decode;
use crate::catalog::CatalogJob;
use crate::error::Error;
use crate::store::Bucket;

/// How long a request waits for others to share its pass.
const BATCH_WINDOW: Duration = Duration::from_millis(100);
/// Up to this many jobs in the index, a pass for several shards reads all of it and keeps
/// the shards wanted (one filter is not affected by what follows).
/// nats-server (2.14) looks for the next block holding a match of a consumer filtering on
/// several subjects by walking the stream's whole subject tree whenever the rest of a
/// block holds none (`checkSkipFirstBlockMulti`, skipped above 1,000,000 subjects): once
/// per block and consumer. Four agents leading 16 shards each of 1,000,000 jobs took 36-62
/// s to load that way; reading everything, each drops what is not its own unread.
const WHOLE_INDEX_UP_TO: u64 = 1_000_000;
/// A pass that delivers nothing for this long has stalled (the index purged by hand?).
const PASS_IDLE_MAX: Duration = Duration::from_secs(30);
/// Errors in a row after which a pass is given up (the consumer beneath recovers from
/// fewer by itself).
const PASS_ERRORS_MAX: u32 = 10;

/// One shard's jobs, and the index's sequence they are read up to.
pub struct Loaded {
    pub jobs: Vec<Arc<CatalogJob>>,
    pub after: u64,
}

type Request = (u32, oneshot::Sender<Result<Loaded, Error>>);

/// The loader of one scheduler's shards.
#[derive(Clone)]
pub struct Loader {
    index: Bucket,
    shards: u32,
    /// Requests waiting for the next pass.
    waiting: Arc<Mutex<Vec<Request>>>,
}

impl Loader {
    pub fn new(index: Bucket, shards: u32) -> Self {
        Self { index, shards, waiting: Arc::default() }
    }

    /// Every job of shard `n` now. The first request of a batch starts a task that makes
    /// the pass for all (a task, so that a request given up meanwhile leaves none waiting).
    pub async fn load(&self, n: u32) -> Result<Loaded, Error> {
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            waiting.push((n, tx));
            waiting.len() == 1
        };
        if first {
            let loader = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(BATCH_WINDOW).await;
                let batch = std::mem::take(&mut *loader.waiting.lock().unwrap_or_else(|p| p.into_inner()));
                loader.pass(batch).await;
            });
        }
        rx.await.map_err(|_| Error::new(crate::ErrorKind::Other, "the pass over the schedules index ended abruptly"))?
    }

    async fn pass(&self, batch: Vec<Request>) {
        let wanted: Vec<u32> = batch.iter().map(|(n, _)| *n).collect();
        match read(&self.index, self.shards, &wanted).await {
            Ok((mut by_shard, after)) => {
                debug!(shards = wanted.len(), after, "shards read from the index in one pass");
                for (n, tx) in batch {
                    let _ = tx.send(Ok(Loaded { jobs: by_shard.remove(&n).unwrap_or_default(), after }));
                }
            }
            Err(e) => {
                for (_, tx) in batch {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}

/// The jobs of `wanted` shards by shard, and the sequence the index is read up to.
pub async fn read(
    index: &Bucket,
    shards: u32,
    wanted: &[u32],
) -> Result<(HashMap<u32, Vec<Arc<CatalogJob>>>, u64), Error> {
    if wanted.is_empty() {
        return Ok((HashMap::new(), 0));
    }
    // Everything up to here is read: a shard with nothing in it is followed from here on.
    let mut stream = index.kv.stream.clone();
    let info = stream.info().await.map_err(|e| Error::nats("reading the schedules index", e))?;
    let floor = info.state.last_sequence;
    let filters: Vec<String> = match wanted.len() > 1 && info.state.subjects_count <= WHOLE_INDEX_UP_TO {
        true => vec![">".to_string()],
        false => wanted.iter().map(|n| format!("{n}.>")).collect(),
    };
    let mut watch = index.watch_all_of(&filters).await?;
    // By shard and name: a job removed or edited during the pass is seen again, later.
    let mut seen: HashMap<u32, foldhash::HashMap<Arc<str>, Option<Arc<CatalogJob>>>> = HashMap::new();
    let (mut after, mut errors) = (floor, 0);
    while !watch.initially_empty {
        let change = match tokio::time::timeout(PASS_IDLE_MAX, watch.next()).await {
            Err(_) => return Err(Error::nats("reading the schedules index", format!("nothing for {PASS_IDLE_MAX:?}"))),
            Ok(None) => return Err(Error::nats("reading the schedules index", "the watch ended")),
            Ok(Some(Err(e))) => {
                errors += 1;
                if errors >= PASS_ERRORS_MAX {
                    return Err(e);
                }
                warn!("reading the schedules index: {e}");
                continue;
            }
            Ok(Some(Ok(change))) => change,
        };
        errors = 0;
        let caught_up = change.caught_up;
        after = after.max(change.sequence);
        let shard = change.key.split_once('.').and_then(|(n, name)| Some((n.parse::<u32>().ok()?, name)));
        if let Some((n, name)) = shard.filter(|(n, _)| wanted.contains(n)) {
            // Keyed by the job's own name (no copy), or the removed job's.
            let removed: Option<Arc<str>> = change.value.is_none().then(|| name.into());
            match (decode(n, shards, change), removed) {
                (Some(job), _) => seen.entry(n).or_default().insert(job.name.clone(), Some(job)),
                (None, Some(name)) => seen.entry(n).or_default().insert(name, None),
                (None, None) => None,
            };
        }
        if caught_up {
            break;
        }
    }
    let by_shard = seen.into_iter().map(|(n, jobs)| (n, jobs.into_values().flatten().collect())).collect();
    Ok((by_shard, after))
}
