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
//!
//! A pass also writes a snapshot of each shard it read (see `snapshot`), which its leader
//! then keeps current (see `refresh`). In a deployment of `snapshots_from` jobs or more, a
//! later read takes the shards' snapshots and only the entries written to the index since,
//! as long as those are under half the index; otherwise it passes over the index again,
//! which writes new snapshots.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::index::decode;
use super::refresh::{KEEP_BYTES_MAX, Kept};
use super::snapshot::{Changes, Head, IndexAt, ShardEntries, Snapshots, Writer};
use crate::catalog::CatalogJob;
use crate::error::Error;
use crate::silence::Silence;
use crate::store::Bucket;
use crate::store::kv::{Change, Watch};

/// How long a request waits for others to share its pass.
const BATCH_WINDOW: Duration = Duration::from_millis(100);
/// Up to this many jobs in the index, a read for several shards (a pass, or the changes
/// after their snapshots) reads all of it and keeps the shards wanted (one filter is not
/// affected by what follows).
/// nats-server (2.14) looks for the next block holding a match of a consumer filtering on
/// several subjects by walking the stream's whole subject tree whenever the rest of a
/// block holds none (`checkSkipFirstBlockMulti`, skipped above 1,000,000 subjects): once
/// per block and consumer. Four agents leading 16 shards each of 1,000,000 jobs took 36-62
/// s to load that way; reading everything, each drops what is not its own unread.
const WHOLE_INDEX_UP_TO: u64 = 1_000_000;
/// A pass that delivers nothing for this long (to twice this: see `Silence`) has stalled
/// (the index purged by hand?).
const PASS_IDLE_MAX: Duration = Duration::from_secs(30);
/// How many times a pass asks for the index's first entry before it is given up.
const FIRST_ENTRY_ASKS: u32 = 3;
/// Errors in a row after which a pass is given up (the consumer beneath recovers from
/// fewer by itself).
const PASS_ERRORS_MAX: u32 = 10;

/// One shard's jobs, the index's sequence they are read up to, and the shard's snapshot
/// for its leader to keep (see `refresh`).
pub struct Loaded {
    pub jobs: Vec<Arc<CatalogJob>>,
    pub after: u64,
    pub(in crate::scheduler) kept: Option<Kept>,
}

type Request = (u32, oneshot::Sender<Result<Loaded, Error>>);

/// What a read of several shards gives.
#[derive(Default)]
struct Read {
    /// Their jobs by shard.
    jobs: HashMap<u32, Vec<Arc<CatalogJob>>>,
    /// The index's sequence they are read up to.
    after: u64,
    /// Their snapshots as written or read, with the changes read after each.
    kept: HashMap<u32, Kept>,
}

/// The loader of one scheduler's shards.
#[derive(Clone)]
pub struct Loader {
    index: Bucket,
    shards: u32,
    /// The snapshots, used once the index holds this many jobs.
    snapshots: Option<(Snapshots, u64)>,
    /// Requests waiting for the next pass.
    waiting: Arc<Mutex<Vec<Request>>>,
}

impl Loader {
    pub fn new(index: Bucket, shards: u32, snapshots: Option<(Snapshots, u64)>) -> Self {
        Self { index, shards, snapshots, waiting: Arc::default() }
    }

    /// The snapshots, if this scheduler may use them.
    pub fn snapshots(&self) -> Option<Snapshots> {
        self.snapshots.as_ref().map(|(s, _)| s.clone())
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
        let started = std::time::Instant::now();
        match self.read(&wanted).await {
            Ok(mut read) => {
                let (jobs, after) = (read.jobs.values().map(Vec::len).sum::<usize>(), read.after);
                info!(shards = ?wanted, jobs, after, took_ms = started.elapsed().as_millis() as u64, "shards read");
                for (n, tx) in batch {
                    let jobs = read.jobs.remove(&n).unwrap_or_default();
                    let _ = tx.send(Ok(Loaded { jobs, after, kept: read.kept.remove(&n) }));
                }
            }
            Err(e) => {
                for (_, tx) in batch {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }

    /// The jobs of `wanted` shards: from their snapshots and the index's entries since,
    /// when the index holds `snapshots_from` jobs or more, every shard has a snapshot that
    /// fits and those entries are under half the index; from a pass over the index
    /// otherwise, which writes their snapshots.
    async fn read(&self, wanted: &[u32]) -> Result<Read, Error> {
        let at = index_at(&self.index, self.shards).await?;
        let Some((snapshots, from)) = self.snapshots.as_ref() else {
            return counted("index", wanted, pass_over(&self.index, &at, wanted, &mut HashMap::new()).await);
        };
        let mut heads = Vec::with_capacity(wanted.len());
        for &n in wanted {
            let head = snapshots.head(n, &at).await.unwrap_or_else(|e| {
                warn!(shard = n, "reading the shard's snapshot: {e}");
                None
            });
            heads.push((n, head));
        }
        let all: Option<Vec<(u32, Head)>> = heads.iter().map(|(n, h)| Some((*n, h.clone()?))).collect();
        let oldest = all.iter().flatten().map(|(_, h)| h.after).min().unwrap_or(0);
        match all {
            Some(_) if at.messages < *from => {}
            // The entries since are fewer than half the index (the sequences since count
            // entries replaced meanwhile too: at most as many).
            Some(all) if at.last - oldest <= at.messages / 2 => {
                match from_snapshots(snapshots, &self.index, &at, &all).await {
                    Ok(read) => return counted("snapshot", wanted, Ok(read)),
                    Err(e) => warn!("{e}; reading the shards from the whole schedules index instead"),
                }
            }
            Some(_) => info!(oldest, last = at.last, "the shards' snapshots are old: reading the whole index"),
            None => {}
        }
        let mut writers: HashMap<u32, Writer> =
            heads.iter().map(|(n, head)| (*n, snapshots.writer(*n, &at, head.as_ref()))).collect();
        let mut read = counted("index", wanted, pass_over(&self.index, &at, wanted, &mut writers).await)?;
        let finished = writers.into_iter().map(|(n, writer)| async move { (n, writer.finish().await) });
        for (n, finished) in futures::future::join_all(finished).await {
            match finished {
                Ok(head) => {
                    debug!(shard = n, after = head.after, "the shard's snapshot is written");
                    metrics::counter!("cronrun_snapshots_written_total", "by" => "pass").increment(1);
                    read.kept.insert(n, Kept { head, changes: Changes::default() });
                }
                Err(e) => warn!(shard = n, "writing the shard's snapshot: {e}; the next reader reads the whole index"),
            }
        }
        Ok(read)
    }
}

/// Counts the shards read from `from` (`cronrun_shard_loads_total`).
fn counted(from: &'static str, wanted: &[u32], read: Result<Read, Error>) -> Result<Read, Error> {
    if read.is_ok() {
        metrics::counter!("cronrun_shard_loads_total", "from" => from).increment(wanted.len() as u64);
    }
    read
}

/// The index now.
async fn index_at(index: &Bucket, shards: u32) -> Result<IndexAt, Error> {
    let mut stream = index.kv.stream.clone();
    let info = stream.info().await.map_err(|e| Error::nats("reading the schedules index", e))?;
    Ok(IndexAt {
        shards,
        first: info.state.first_sequence,
        last: info.state.last_sequence,
        created: info.created.to_string(),
        messages: info.state.messages,
        subjects: info.state.subjects_count,
    })
}

/// The jobs of `wanted` shards by shard, and the sequence the index is read up to: one
/// pass over the index (the bench's probe reads this way).
pub async fn read(
    index: &Bucket,
    shards: u32,
    wanted: &[u32],
) -> Result<(HashMap<u32, Vec<Arc<CatalogJob>>>, u64), Error> {
    let read = pass_over(index, &index_at(index, shards).await?, wanted, &mut HashMap::new()).await?;
    Ok((read.jobs, read.after))
}

/// One pass over the index for `wanted` shards, each entry also handed to the shard's
/// snapshot writer if it has one.
async fn pass_over(
    index: &Bucket,
    at: &IndexAt,
    wanted: &[u32],
    writers: &mut HashMap<u32, Writer>,
) -> Result<Read, Error> {
    if wanted.is_empty() {
        return Ok(Read::default());
    }
    let shards = at.shards;
    // Everything up to here is read: a shard with nothing in it is followed from here on.
    let floor = at.last;
    let mut pass = match at.messages {
        0 => Pass::new(index.watch_all_of(&pass_filters(wanted, at.subjects)).await?, floor),
        // A consumer filtering on several shards that starts at the index's first entry
        // costs nats-server (2.14) a walk over the subjects of all of them to find where
        // it starts (`LoadNextMsgMulti`), on top of the one counting what it will deliver:
        // with 10,000,000 jobs, seconds before a first start hears anything. Started
        // after it, it does not; the first entry is read on its own (the index keeps one
        // entry per job, so from there on is all of it).
        _ => Pass::new(index.changes_after_all_of(&pass_filters(wanted, at.subjects), at.first).await?, floor)
            .with_first(first_entry(index, at.first).await?),
    };
    let share = usize::try_from(at.messages / u64::from(shards)).unwrap_or(0);
    let mut passed: HashMap<u32, Passed> = HashMap::new();
    while let Some(change) = pass.next().await? {
        let Some((n, name)) = shard_and_name(&change.key).filter(|(n, _)| wanted.contains(n)) else { continue };
        if let Some(writer) = writers.get_mut(&n) {
            writer.add(name, change.revision, change.value.as_deref()).await;
        }
        passed.entry(n).or_insert_with(|| Passed::with_capacity(share)).take(n, shards, floor, change);
    }
    let jobs = passed.into_iter().map(|(n, passed)| (n, passed.jobs())).collect();
    Ok(Read { jobs, after: pass.after, kept: HashMap::new() })
}

/// The index's entry at `sequence`, asked up to `FIRST_ENTRY_ASKS` times a second apart:
/// the pass's consumer was just made, so the index has a leader, but another may be
/// being elected (a node gone), and a pass given up is made again from the start.
async fn first_entry(index: &Bucket, sequence: u64) -> Result<Option<Change>, Error> {
    let mut asked = 1;
    loop {
        match index.entry_at(sequence).await {
            Err(e) if asked < FIRST_ENTRY_ASKS => warn!("reading the schedules index's first entry, asked again: {e}"),
            read => return read,
        }
        asked += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One shard's jobs as a pass reads them. The index keeps one entry per job, so its
/// entries up to where it was when the pass began are each another job, and are listed as
/// they come; only a job written during the pass can come twice (its entry from before,
/// then its new one or its removal), and what came of it later replaces what was listed,
/// at the end. Filing every job by name as it came was about a ninth of the agents' CPU
/// at a first start of 10,000,000 jobs.
struct Passed {
    listed: Vec<Arc<CatalogJob>>,
    /// By name, the jobs written or removed during the pass (None: removed).
    later: ShardEntries,
}

impl Passed {
    /// Room for `jobs` jobs (the shard's share of the index): growing by doubling would
    /// move them all about once more.
    fn with_capacity(jobs: usize) -> Self {
        Self { listed: Vec::with_capacity(jobs), later: ShardEntries::default() }
    }

    /// Takes in an entry of shard `n`; `floor` is the index's last sequence when the pass
    /// began. A removal up to it is a job that is not there.
    fn take(&mut self, n: u32, shards: u32, floor: u64, change: Change) {
        match change.sequence <= floor {
            true => self.listed.extend(decode(n, shards, change)),
            false => take(&mut self.later, n, shards, change),
        }
    }

    fn jobs(self) -> Vec<Arc<CatalogJob>> {
        let Self { mut listed, later } = self;
        if !later.is_empty() {
            listed.retain(|job| !later.contains_key(&*job.name));
            listed.extend(later.into_values().flatten());
        }
        listed
    }
}

/// The jobs of the shards of `heads` from their snapshots, then the index's entries
/// written after each one's snapshot, which are also kept as they are stored for the
/// shard's leader to write into its next snapshot (while they take under
/// `KEEP_BYTES_MAX`: past it, the leader does not keep the snapshot).
async fn from_snapshots(
    snapshots: &Snapshots,
    index: &Bucket,
    at: &IndexAt,
    heads: &[(u32, Head)],
) -> Result<Read, Error> {
    let mut seen: HashMap<u32, ShardEntries> = HashMap::new();
    for (n, head) in heads {
        seen.insert(*n, snapshots.read(*n, head, at).await?);
    }
    let oldest = heads.iter().map(|(_, h)| h.after).min().unwrap_or(0);
    let wanted: Vec<u32> = heads.iter().map(|(n, _)| *n).collect();
    let mut pass = Pass::new(index.changes_after_all_of(&pass_filters(&wanted, at.subjects), oldest).await?, at.last);
    let mut changes: HashMap<u32, Option<Changes>> =
        heads.iter().map(|(n, _)| (*n, Some(Changes::default()))).collect();
    let mut since = 0u64;
    while let Some(change) = pass.next().await? {
        let Some((n, name)) = shard_and_name(&change.key) else { continue };
        if heads.iter().any(|(m, h)| *m == n && change.sequence > h.after) {
            since += 1;
            if let Some(slot) = changes.get_mut(&n)
                && let Some(kept) = slot.as_mut()
            {
                kept.note(name.into(), change.revision, change.value.as_deref());
                if kept.bytes() > KEEP_BYTES_MAX {
                    *slot = None;
                }
            }
            take(seen.entry(n).or_default(), n, at.shards, change);
        }
    }
    info!(shards = heads.len(), oldest, since, "shards read from their snapshots and the index's changes since");
    let kept = heads
        .iter()
        .filter_map(|(n, head)| Some((*n, Kept { head: head.clone(), changes: changes.remove(n)?? })))
        .collect();
    Ok(Read { jobs: by_shard(seen), after: pass.after, kept })
}

/// What a read of `wanted` shards filters an index of `subjects` jobs on: the shards, or
/// everything when several are read from an index of up to `WHOLE_INDEX_UP_TO` jobs
/// (entries of others are dropped unread). The bench's anchor makes the same consumers.
pub fn pass_filters(wanted: &[u32], subjects: u64) -> Vec<String> {
    match wanted.len() > 1 && subjects <= WHOLE_INDEX_UP_TO {
        true => vec![">".to_string()],
        false => wanted.iter().map(|n| format!("{n}.>")).collect(),
    }
}

/// `<shard>.<job>` split.
fn shard_and_name(key: &str) -> Option<(u32, &str)> {
    key.split_once('.').and_then(|(n, name)| Some((n.parse::<u32>().ok()?, name)))
}

/// Takes in one entry of shard `n`: keyed by the job's own name (no copy), or the removed
/// job's.
fn take(seen: &mut ShardEntries, n: u32, shards: u32, change: Change) {
    let removed: Option<Arc<str>> =
        change.value.is_none().then(|| shard_and_name(&change.key).map_or("", |(_, name)| name).into());
    match (decode(n, shards, change), removed) {
        (Some(job), _) => seen.insert(job.name.clone(), Some(job)),
        (None, Some(name)) => seen.insert(name, None),
        (None, None) => None,
    };
}

fn by_shard(seen: HashMap<u32, ShardEntries>) -> HashMap<u32, Vec<Arc<CatalogJob>>> {
    seen.into_iter().map(|(n, jobs)| (n, jobs.into_values().flatten().collect())).collect()
}

/// A watch read until it has caught up, with the pass's bounds.
struct Pass {
    /// An entry read apart, given before the watch's.
    first: Option<Change>,
    watch: Watch,
    /// The highest sequence seen, at least the index's last when the pass began.
    after: u64,
    errors: u32,
    done: bool,
    silence: Silence,
}

impl Pass {
    fn new(watch: Watch, floor: u64) -> Self {
        let done = watch.initially_empty;
        Self { first: None, watch, after: floor, errors: 0, done, silence: Silence::new(PASS_IDLE_MAX) }
    }

    fn with_first(self, first: Option<Change>) -> Self {
        Self { first, ..self }
    }

    /// The next entry; None once caught up. An error if nothing comes for
    /// `PASS_IDLE_MAX` (to twice that), the watch ends, or fails `PASS_ERRORS_MAX` times
    /// in a row.
    async fn next(&mut self) -> Result<Option<Change>, Error> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        while !self.done {
            let change = match self.silence.bound(self.watch.next()).await {
                None => {
                    return Err(Error::nats_msg(
                        "reading the schedules index",
                        format!("nothing for {PASS_IDLE_MAX:?} or more"),
                    ));
                }
                Some(None) => return Err(Error::nats_msg("reading the schedules index", "the watch ended")),
                Some(Some(Err(e))) => {
                    self.errors += 1;
                    if self.errors >= PASS_ERRORS_MAX {
                        return Err(e);
                    }
                    warn!("reading the schedules index: {e}");
                    continue;
                }
                Some(Some(Ok(change))) => change,
            };
            self.errors = 0;
            self.done = change.caught_up;
            self.after = self.after.max(change.sequence);
            return Ok(Some(change));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{JobSpec, ShellSpec};

    /// An entry of the index at `sequence`: job `name` on `schedule`, or its removal.
    fn entry(name: &str, schedule: Option<&str>, sequence: u64) -> Change {
        let spec = |s: &str| JobSpec::shell(name, s, ShellSpec { command: Some("true".into()), ..Default::default() });
        Change {
            key: format!("0.{name}"),
            value: schedule.map(|s| spec(s).to_json().unwrap()),
            revision: sequence,
            caught_up: false,
            expired: false,
            sequence,
        }
    }

    /// A pass began with the index at sequence 10: each job is what its last entry says,
    /// whether that came before the pass began or during it.
    #[test]
    fn a_pass_keeps_each_jobs_last_entry_whenever_it_came() {
        let mut passed = Passed::with_capacity(4);
        let entries = [
            entry("kept", Some("* * * * *"), 1),
            entry("edited", Some("* * * * *"), 2),
            entry("removed", Some("* * * * *"), 3),
            entry("gone-before", None, 4),
            entry("edited", Some("0 3 * * *"), 11),
            entry("removed", None, 12),
            entry("added", Some("@every 90s"), 13),
            entry("added-then-removed", Some("* * * * *"), 14),
            entry("added-then-removed", None, 15),
        ];
        for change in entries {
            passed.take(0, 1, 10, change);
        }
        let mut jobs: Vec<(String, String, u64)> = passed
            .jobs()
            .iter()
            .map(|job| (job.name.to_string(), job.summary.as_ref().unwrap().schedule.expr().to_string(), job.revision))
            .collect();
        jobs.sort();
        let expected = [("added", "@every 90s", 13), ("edited", "0 3 * * *", 11), ("kept", "* * * * *", 1)];
        assert_eq!(jobs, expected.map(|(n, s, r)| (n.to_string(), s.to_string(), r)));
    }
}
