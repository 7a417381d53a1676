//! Reads the jobs of the shards a scheduler takes, many shards in one pass.
//!
//! The server finds one shard's entries in the schedules index by passing over all of it
//! (every shard's jobs are interleaved in the order they were written): with 1,000,000
//! jobs, about a second of its CPU per shard read alone, 16-20 s for 64 shards read side
//! by side. Shards taken within `BATCH_WINDOW` of each other (an agent starting, a member
//! leaving) are read together, through one consumer filtering on all of them: one pass.
//! Each shard's leader then follows its shard from where the pass ended, which costs the
//! server nothing more than the changes themselves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::index::decode;
use crate::catalog::CatalogJob;
use crate::error::Error;
use crate::store::Bucket;

/// How long a request waits for others to share its pass.
const BATCH_WINDOW: Duration = Duration::from_millis(100);

/// One shard's jobs, and the index's sequence they are read up to.
pub struct Loaded {
    pub jobs: Vec<Arc<CatalogJob>>,
    pub after: u64,
}

type Request = (u32, oneshot::Sender<Result<Loaded, Error>>);

/// The loader of one scheduler's shards.
#[derive(Clone)]
pub struct Loader {
    requests: mpsc::UnboundedSender<Request>,
}

impl Loader {
    /// Starts serving reads until `cancel`.
    pub fn start(index: Bucket, shards: u32, cancel: CancellationToken) -> Self {
        let (requests, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(index, shards, rx, cancel));
        Self { requests }
    }

    /// Every job of shard `n` now.
    pub async fn load(&self, n: u32) -> Result<Loaded, Error> {
        let (tx, rx) = oneshot::channel();
        let stopped = || Error::new(crate::ErrorKind::Other, "the shard loader stopped");
        self.requests.send((n, tx)).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

async fn serve(index: Bucket, shards: u32, mut requests: mpsc::UnboundedReceiver<Request>, cancel: CancellationToken) {
    loop {
        let first = tokio::select! {
            _ = cancel.cancelled() => return,
            first = requests.recv() => match first {
                Some(first) => first,
                None => return,
            },
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(BATCH_WINDOW) => {}
        }
        let mut batch = vec![first];
        while let Ok(more) = requests.try_recv() {
            batch.push(more);
        }
        let wanted: Vec<u32> = batch.iter().map(|(n, _)| *n).collect();
        let read = tokio::select! {
            _ = cancel.cancelled() => return,
            read = read(&index, shards, &wanted) => read,
        };
        match read {
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
    // Everything up to here is read: a shard with nothing in it is followed from here on.
    let mut stream = index.kv.stream.clone();
    let floor = stream.info().await.map_err(|e| Error::nats("reading the schedules index", e))?.state.last_sequence;
    let filters: Vec<String> = wanted.iter().map(|n| format!("{n}.>")).collect();
    let mut watch = index.watch_all_of(&filters).await?;
    let mut by_shard: HashMap<u32, Vec<Arc<CatalogJob>>> = HashMap::new();
    let mut after = floor;
    while !watch.initially_empty
        && let Some(change) = watch.next().await
    {
        let change = change?;
        let caught_up = change.caught_up;
        after = after.max(change.sequence);
        // A removed job's marker decodes to nothing.
        let shard = change.key.split_once('.').and_then(|(n, _)| n.parse::<u32>().ok());
        if let Some((n, job)) = shard.and_then(|n| Some((n, decode(n, shards, change)?))) {
            by_shard.entry(n).or_default().push(job);
        }
        if caught_up {
            break;
        }
    }
    Ok((by_shard, after))
}
