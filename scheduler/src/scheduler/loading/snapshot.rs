//! Snapshots of the schedules index, shard by shard: what a scheduler taking a shard reads
//! instead of passing over the whole index.
//!
//! Why: nats-server finds one shard's entries by passing over every entry of the index
//! (shards are interleaved in the order the jobs were written). With 10,000,000 jobs, the
//! three agents taking the shards of a fourth that left each made the server pass over all
//! of it, side by side: 40 s. A snapshot holds a shard's entries as a pass read them,
//! compressed, in the bucket `cronrun_snapshots`; a reader takes it, then only the entries
//! written to the index since (`Head::after`), which the server finds from that sequence on.
//!
//! Keys of the bucket:
//! - `<shard>`: the head (`Head`, JSON): the slot holding the snapshot, its chunks, the
//!   index sequence it covers, the index it was taken of.
//! - `<shard>.<slot>.<k>`: chunk `k`: the snapshot's generation (8 bytes), then an LZ4 block
//!   of entries. A writer fills the slot the head does not name, then writes the head, so a
//!   read of the snapshot in place is not disturbed; a reader finding a chunk of another
//!   generation (two writes during its read) reads the index instead.
//!
//! The entries replay what the pass saw, in its order: a job's value with its revision, or
//! its removal. A job edited during the pass is in it twice, the later one counting, as in
//! the pass. Entries written after `after` may be in it; the reader's tail from `after`
//! holds whatever changed them since.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::index::decode_entry;
use crate::catalog::CatalogJob;
use crate::error::{Error, ErrorKind};
use crate::store::Bucket;

/// The format of heads and chunks; a head of another is not read (read the index instead).
const FORMAT: u32 = 1;
/// A chunk's entries are compressed once this many bytes are waiting. Well under NATS's
/// default 1 MiB payload even for an entry near the 64 KiB a spec may take.
const RAW_CHUNK: usize = 256 << 10;
/// A chunk is refused past this many bytes of entries (a bound for hostile heads and chunks).
const RAW_CHUNK_MAX: usize = 4 << 20;
/// Chunks of one snapshot at most (16 GiB of entries): a head claiming more is not read.
const MAX_CHUNKS: u32 = 1 << 16;
/// Chunk writes awaiting their acknowledgement at once, per shard.
const WRITES_IN_FLIGHT: usize = 8;
/// Leaders' rewrites of their shards' snapshots at once, per scheduler: each decompresses
/// and compresses its whole shard, and all of an agent's shards may be due together (after
/// a bulk import, at a stop).
const REWRITES_AT_ONCE: usize = 2;

/// A shard's snapshot, as its head says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Head {
    format: u32,
    /// The deployment's shard count when taken.
    shards: u32,
    /// Every entry of the index up to this sequence is in the snapshot.
    pub after: u64,
    /// When the index was made: a snapshot of an index deleted and made again is not used.
    index: String,
    slot: u8,
    generation: u64,
    chunks: u32,
    /// Entries in all (jobs, their removals, and jobs seen twice).
    pub entries: u64,
}

/// The index as a snapshot is taken or read against, and as a pass reads it.
#[derive(Debug, Clone)]
pub struct IndexAt {
    pub shards: u32,
    /// The index's first and last sequences.
    pub first: u64,
    pub last: u64,
    /// When the index was made (its stream's `created`).
    pub created: String,
    /// Its entries (jobs and removed jobs' markers), and its subjects.
    pub messages: u64,
    pub subjects: u64,
}

impl Head {
    /// Whether the snapshot may be read for the index as it is now.
    fn fits(&self, index: &IndexAt) -> bool {
        self.format == FORMAT
            && self.shards == index.shards
            && self.index == index.created
            && self.after <= index.last
            && self.chunks <= MAX_CHUNKS
    }
}

/// The snapshots bucket.
#[derive(Clone)]
pub struct Snapshots {
    bucket: Bucket,
    /// The largest chunk the server takes.
    chunk_max: usize,
    rewrites: Arc<tokio::sync::Semaphore>,
}

/// One shard's jobs by name as read: None for a job removed.
pub type ShardEntries = foldhash::HashMap<Arc<str>, Option<Arc<CatalogJob>>>;

impl Snapshots {
    pub fn new(bucket: Bucket, max_payload: usize) -> Self {
        let rewrites = Arc::new(tokio::sync::Semaphore::new(REWRITES_AT_ONCE));
        Self { bucket, chunk_max: max_payload.saturating_sub(1024), rewrites }
    }

    /// Shard `n`'s snapshot if there is one that fits the index now; None otherwise (none
    /// taken yet, another shard count, an index made again).
    pub async fn head(&self, n: u32, index: &IndexAt) -> Result<Option<Head>, Error> {
        let Some(stored) = self.bucket.get(&n.to_string()).await? else { return Ok(None) };
        match serde_json::from_slice::<Head>(&stored.value) {
            Ok(head) => Ok(head.fits(index).then_some(head)),
            Err(e) => {
                warn!(
                    shard = n,
                    "the snapshot's head in {} is unreadable ({e}); it is written again",
                    self.bucket.name()
                );
                Ok(None)
            }
        }
    }

    /// The entries of shard `n`'s snapshot. An error if a chunk is missing, of another
    /// generation, or unreadable. Chunks are decoded one at a time, the next one fetched
    /// meanwhile, giving way to the agent's other tasks between two (a chunk is a few
    /// milliseconds of work).
    pub async fn read(&self, n: u32, head: &Head, index: &IndexAt) -> Result<ShardEntries, Error> {
        // Room for them at once (a head says how many, the index bounds that).
        let room = usize::try_from(head.entries.min(index.messages)).unwrap_or(0);
        let mut jobs = ShardEntries::with_capacity_and_hasher(room, Default::default());
        if head.chunks == 0 {
            return Ok(jobs);
        }
        let mut chunk = self.chunk(n, head, 0).await?;
        for k in 0..head.chunks {
            // Polled first: the next chunk is asked for before this one is decoded.
            let fetch = async {
                match k + 1 < head.chunks {
                    true => Some(self.chunk(n, head, k + 1).await),
                    false => None,
                }
            };
            let decode = async {
                let decoded = replay_chunk(&mut jobs, n, index.shards, head.generation, k, &chunk);
                tokio::task::consume_budget().await;
                decoded
            };
            let (next, decoded) = tokio::join!(fetch, decode);
            decoded?;
            match next {
                Some(next) => chunk = next?,
                None => break,
            }
        }
        Ok(jobs)
    }

    async fn chunk(&self, n: u32, head: &Head, k: u32) -> Result<Bytes, Error> {
        let key = chunk_key(n, head.slot, k);
        match self.bucket.get(&key).await? {
            Some(stored) => Ok(stored.value),
            None => Err(unreadable(n, format!("chunk {key} is missing"))),
        }
    }

    /// A writer of shard `n`'s snapshot of the index as it was at `index.last`, into the
    /// slot `current` (the head there now, if any) does not name.
    pub fn writer(&self, n: u32, index: &IndexAt, current: Option<&Head>) -> Writer {
        let slot = current.map_or(0, |h| 1 - h.slot.min(1));
        self.writer_of(n, index.shards, &index.created, index.last, slot)
    }

    fn writer_of(&self, n: u32, shards: u32, index: &str, after: u64, slot: u8) -> Writer {
        let head = Head {
            format: FORMAT,
            shards,
            after,
            index: index.to_string(),
            slot,
            generation: rand::random(),
            chunks: 0,
            entries: 0,
        };
        Writer { snapshots: self.clone(), n, head, raw: Vec::new(), writes: FuturesUnordered::new(), failed: None }
    }

    /// Shard `n`'s snapshot `base` and the `changes` made since, written as the shard's
    /// snapshot of the index up to `after`: `base`'s entries of the jobs not changed, in
    /// their order, then the changed jobs (a removed one left out). No pass over the index:
    /// what a leader does to keep its shard's snapshot current. Refused if the head in
    /// place is not `base` any more (None): another scheduler wrote the shard's snapshot
    /// since, and what it covers is not ours to merge with.
    pub async fn rewrite(&self, n: u32, base: &Head, changes: &Changes, after: u64) -> Result<Option<Head>, Error> {
        let _turn = self.rewrites.acquire().await.map_err(|e| unreadable(n, e.to_string()))?;
        let in_place = self.bucket.get(&n.to_string()).await?;
        if in_place.and_then(|h| serde_json::from_slice::<Head>(&h.value).ok()).as_ref() != Some(base) {
            return Ok(None);
        }
        let mut writer = self.writer_of(n, base.shards, &base.index, after, 1 - base.slot.min(1));
        for k in 0..base.chunks {
            let chunk = self.chunk(n, base, k).await?;
            for_each_entry(n, base.generation, k, &chunk, |name, revision, value| {
                if !changes.by_name.contains_key(name) {
                    writer.push(name, revision, value);
                }
            })?;
            writer.flush_full().await;
            tokio::task::consume_budget().await;
        }
        for (name, (revision, value)) in &changes.by_name {
            if let Some(value) = value {
                writer.add(name, *revision, Some(value)).await;
            }
        }
        writer.finish().await.map(Some)
    }
}

/// A shard's changes since its snapshot, by job: the last revision and value seen (None:
/// removed), and the bytes their names and values take.
#[derive(Default)]
pub struct Changes {
    by_name: foldhash::HashMap<Arc<str>, (u64, Option<Bytes>)>,
    bytes: usize,
}

impl Changes {
    /// Notes job `name`'s `value` at `revision` (None: removed). The value is copied: a
    /// message's payload shares the buffer it was read into, which it would keep alive.
    pub fn note(&mut self, name: Arc<str>, revision: u64, value: Option<&[u8]>) {
        let value = value.map(Bytes::copy_from_slice);
        self.bytes += name.len() + value.as_ref().map_or(0, Bytes::len);
        if let Some((_, old)) = self.by_name.insert(name.clone(), (revision, value)) {
            self.bytes -= name.len() + old.as_ref().map_or(0, Bytes::len);
        }
    }

    /// Jobs changed.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The bytes of their names and values.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `older`'s changes of the jobs not changed here since (a write that failed
    /// gives back what it was to write).
    pub fn keep_older(&mut self, older: Changes) {
        for (name, (revision, value)) in older.by_name {
            if !self.by_name.contains_key(&name) {
                self.bytes += name.len() + value.as_ref().map_or(0, Bytes::len);
                self.by_name.insert(name, (revision, value));
            }
        }
    }
}

fn chunk_key(n: u32, slot: u8, k: u32) -> String {
    format!("{n}.{slot}.{k}")
}

fn unreadable(n: u32, why: String) -> Error {
    Error::new(ErrorKind::Other, format!("shard {n}'s snapshot: {why}"))
}

/// Writes one shard's snapshot as a pass reads the shard.
pub struct Writer {
    snapshots: Snapshots,
    n: u32,
    head: Head,
    /// Entries not yet in a chunk.
    raw: Vec<u8>,
    writes: FuturesUnordered<BoxFuture<'static, Result<u64, Error>>>,
    /// The first failure: nothing more is written, and no head.
    failed: Option<Error>,
}

impl Writer {
    /// Adds an entry: `value` of job `name` at `revision`, or its removal (None).
    pub async fn add(&mut self, name: &str, revision: u64, value: Option<&[u8]>) {
        self.push(name, revision, value);
        self.flush_full().await;
    }

    /// Adds an entry to those waiting, without compressing them however many there are.
    fn push(&mut self, name: &str, revision: u64, value: Option<&[u8]>) {
        if self.failed.is_none() {
            encode_entry(&mut self.raw, name, revision, value);
            self.head.entries += 1;
        }
    }

    /// Writes the waiting entries as a chunk once they are enough for one.
    async fn flush_full(&mut self) {
        if self.raw.len() >= RAW_CHUNK && self.failed.is_none() {
            self.flush().await;
        }
    }

    /// Compresses the waiting entries into the next chunk and writes it.
    async fn flush(&mut self) {
        if self.head.chunks >= MAX_CHUNKS {
            self.failed = Some(unreadable(self.n, format!("the shard takes over {MAX_CHUNKS} chunks")));
            return;
        }
        let mut chunk = self.head.generation.to_le_bytes().to_vec();
        chunk.extend_from_slice(&lz4_flex::block::compress_prepend_size(&self.raw));
        self.raw.clear();
        if chunk.len() > self.snapshots.chunk_max {
            let why =
                format!("a chunk of {} bytes is over the {} the server takes", chunk.len(), self.snapshots.chunk_max);
            self.failed = Some(unreadable(self.n, why));
            return;
        }
        let (bucket, key) = (self.snapshots.bucket.clone(), chunk_key(self.n, self.head.slot, self.head.chunks));
        self.head.chunks += 1;
        self.writes.push(Box::pin(async move { bucket.put(&key, Bytes::from(chunk), None).await }));
        while self.writes.len() >= WRITES_IN_FLIGHT {
            self.settle_one().await;
        }
    }

    async fn settle_one(&mut self) {
        if let Some(Err(e)) = self.writes.next().await {
            self.failed.get_or_insert(e);
        }
    }

    /// Writes the last chunk and, once every chunk is stored, the head. The snapshot's
    /// head in place stays if anything failed.
    pub async fn finish(mut self) -> Result<Head, Error> {
        if !self.raw.is_empty() && self.failed.is_none() {
            self.flush().await;
        }
        while !self.writes.is_empty() {
            self.settle_one().await;
        }
        if let Some(e) = self.failed {
            return Err(e);
        }
        let value = serde_json::to_vec(&self.head)
            .map_err(|e| Error::other(&format!("encoding the snapshot head of shard {}", self.n), e))?;
        self.snapshots.bucket.put(&self.n.to_string(), value.into(), None).await?;
        Ok(self.head)
    }
}

/// Kinds of entry.
const PUT: u8 = 1;
const REMOVED: u8 = 0;

/// An entry: kind, name (u16 length), revision, and for a put its value (u32 length).
fn encode_entry(out: &mut Vec<u8>, name: &str, revision: u64, value: Option<&[u8]>) {
    out.push(if value.is_some() { PUT } else { REMOVED });
    // Job names are short (validated); a longer one stored by hand is cut, and then filed
    // under a name its shard's check refuses when read back.
    let name = &name.as_bytes()[..name.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(&revision.to_le_bytes());
    if let Some(value) = value {
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
}

/// Takes in chunk `k` of shard `n`'s snapshot of generation `generation`, entry by entry.
fn replay_chunk(
    jobs: &mut ShardEntries,
    n: u32,
    shards: u32,
    generation: u64,
    k: u32,
    chunk: &[u8],
) -> Result<(), Error> {
    for_each_entry(n, generation, k, chunk, |name, revision, value| match value {
        Some(value) => {
            if let Some(job) = decode_entry(n, shards, name, Bytes::copy_from_slice(value), revision) {
                jobs.insert(job.name.clone(), Some(job));
            }
        }
        None => {
            jobs.insert(name.into(), None);
        }
    })
}

/// Hands each entry of chunk `k` of shard `n`'s snapshot of generation `generation` to
/// `take`, in order. An error, and nothing handed, if the chunk is of another generation
/// or unreadable; an error after the entries before it if an entry is cut short.
fn for_each_entry(
    n: u32,
    generation: u64,
    k: u32,
    chunk: &[u8],
    mut take: impl FnMut(&str, u64, Option<&[u8]>),
) -> Result<(), Error> {
    let bad = |why: &str| unreadable(n, format!("chunk {k}: {why}"));
    let Some((found, block)) = chunk.split_first_chunk::<8>() else { return Err(bad("too short")) };
    if u64::from_le_bytes(*found) != generation {
        return Err(bad("of another generation (written again meanwhile)"));
    }
    // The size is checked before decompressing: a hostile one would be allocated.
    let Some((size, compressed)) = block.split_first_chunk::<4>() else { return Err(bad("too short")) };
    let size = u32::from_le_bytes(*size) as usize;
    if size > RAW_CHUNK_MAX {
        return Err(bad(&format!("claims {size} bytes of entries, over {RAW_CHUNK_MAX}")));
    }
    let raw = lz4_flex::block::decompress(compressed, size).map_err(|e| bad(&e.to_string()))?;
    let mut rest = raw.as_slice();
    while !rest.is_empty() {
        let (name, revision, value) = next_entry(&mut rest).ok_or_else(|| bad("an entry is cut short"))?;
        let name = std::str::from_utf8(name).map_err(|_| bad("a job name is not UTF-8"))?;
        take(name, revision, value);
    }
    Ok(())
}

/// An entry as stored: the job's name, its revision, its value (None: removed).
type Entry<'a> = (&'a [u8], u64, Option<&'a [u8]>);

/// The next entry of `rest`, moving past it; None if it is cut short or of no known kind.
fn next_entry<'a>(rest: &mut &'a [u8]) -> Option<Entry<'a>> {
    let (&kind, after) = rest.split_first()?;
    let (len, after) = after.split_first_chunk::<2>()?;
    let (name, after) = after.split_at_checked(u16::from_le_bytes(*len) as usize)?;
    let (revision, mut after) = after.split_first_chunk::<8>()?;
    let value = match kind {
        PUT => {
            let (len, tail) = after.split_first_chunk::<4>()?;
            let (value, tail) = tail.split_at_checked(u32::from_le_bytes(*len) as usize)?;
            after = tail;
            Some(value)
        }
        REMOVED => None,
        _ => return None,
    };
    *rest = after;
    Some((name, u64::from_le_bytes(*revision), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARDS: u32 = 4;

    /// The jobs of shard `n` that `chunks` hold, as `Snapshots::read` takes them in.
    fn replay(n: u32, shards: u32, generation: u64, chunks: &[Bytes]) -> Result<ShardEntries, Error> {
        let mut jobs = ShardEntries::default();
        for (k, chunk) in chunks.iter().enumerate() {
            replay_chunk(&mut jobs, n, shards, generation, k as u32, chunk)?;
        }
        Ok(jobs)
    }

    fn spec(name: &str) -> Vec<u8> {
        format!(r#"{{"name":"{name}","schedule":"0 0 1 1 *","shell":"true"}}"#).into_bytes()
    }

    /// A job name of shard `n` (the partition NATS computes).
    fn names_of(n: u32, count: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("job-{i}"))
            .filter(|name| crate::scheduler::membership::shards::shard_of(name, SHARDS) == n)
            .take(count)
            .collect()
    }

    fn chunk(generation: u64, raw: &[u8]) -> Bytes {
        let mut chunk = generation.to_le_bytes().to_vec();
        chunk.extend_from_slice(&lz4_flex::block::compress_prepend_size(raw));
        chunk.into()
    }

    #[test]
    fn entries_replay_in_order_across_chunks_with_the_last_one_counting() {
        let names = names_of(1, 3);
        let (mut first, mut second) = (Vec::new(), Vec::new());
        encode_entry(&mut first, &names[0], 7, Some(&spec(&names[0])));
        encode_entry(&mut first, &names[1], 8, Some(&spec(&names[1])));
        encode_entry(&mut second, &names[0], 9, None);
        encode_entry(&mut second, &names[2], 10, Some(&spec(&names[2])));
        encode_entry(&mut second, &names[1], 11, Some(&spec(&names[1])));
        let jobs = replay(1, SHARDS, 5, &[chunk(5, &first), chunk(5, &second)]).unwrap();
        assert_eq!(jobs.len(), 3);
        assert!(jobs[names[0].as_str()].is_none(), "removed after it was put");
        assert_eq!(jobs[names[1].as_str()].as_ref().unwrap().revision, 11);
        assert_eq!(jobs[names[2].as_str()].as_ref().unwrap().revision, 10);
    }

    #[test]
    fn bad_chunks_are_refused_not_read_in_part() {
        let name = &names_of(0, 1)[0];
        let mut raw = Vec::new();
        encode_entry(&mut raw, name, 1, Some(&spec(name)));
        let mut huge_claim = 0u64.to_le_bytes().to_vec();
        huge_claim.extend_from_slice(&u32::MAX.to_le_bytes());
        huge_claim.extend_from_slice(&[0; 16]);
        let mut unknown_kind = raw.clone();
        unknown_kind[0] = 9;
        let cases: [(&str, Vec<Bytes>, &str); 6] = [
            ("another generation", vec![chunk(6, &raw)], "another generation"),
            ("too short", vec![Bytes::from_static(b"abc")], "too short"),
            ("a size claim past the bound", vec![Bytes::from(huge_claim)], "over"),
            (
                "not LZ4",
                vec![Bytes::from([0u64.to_le_bytes().as_slice(), &[200, 0, 0, 0, 1, 2, 3]].concat())],
                "chunk 0",
            ),
            ("an entry cut short", vec![chunk(0, &raw[..raw.len() - 3])], "cut short"),
            ("an unknown kind", vec![chunk(0, &unknown_kind)], "cut short"),
        ];
        for (what, chunks, says) in cases {
            let generation = if what == "another generation" { 5 } else { 0 };
            let err = replay(0, SHARDS, generation, &chunks).expect_err(what);
            assert!(err.to_string().contains(says), "{what}: {err}");
        }
    }

    #[test]
    fn changes_keep_each_jobs_last_value_and_count_its_bytes_once() {
        let value = |s: &'static str| Some(s.as_bytes());
        let mut changes = Changes::default();
        changes.note("a".into(), 1, value("1234"));
        changes.note("a".into(), 2, value("12"));
        changes.note("bb".into(), 3, None);
        assert_eq!((changes.len(), changes.bytes()), (2, 1 + 2 + 2));
        // A write that failed gives back what it held: changed since, a job keeps its newer value.
        let mut older = Changes::default();
        older.note("a".into(), 1, value("1234"));
        older.note("c".into(), 1, value("123"));
        changes.keep_older(older);
        assert_eq!(changes.by_name["a"].0, 2);
        assert_eq!(changes.by_name["c"].0, 1);
        assert_eq!((changes.len(), changes.bytes()), (3, 3 + 2 + 4));
    }

    #[test]
    fn a_job_filed_under_another_shard_is_not_taken() {
        let name = &names_of(2, 1)[0];
        let mut raw = Vec::new();
        encode_entry(&mut raw, name, 1, Some(&spec(name)));
        assert!(replay(3, SHARDS, 0, &[chunk(0, &raw)]).unwrap().is_empty());
    }

    #[test]
    fn a_head_fits_only_the_index_it_was_taken_of() {
        let index = IndexAt { shards: 64, first: 1, last: 100, created: "t0".into(), messages: 100, subjects: 100 };
        let head = Head {
            format: FORMAT,
            shards: 64,
            after: 90,
            index: "t0".into(),
            slot: 0,
            generation: 1,
            chunks: 1,
            entries: 1,
        };
        assert!(head.fits(&index));
        let cases = [
            ("another format", Head { format: FORMAT + 1, ..head.clone() }),
            ("another shard count", Head { shards: 16, ..head.clone() }),
            ("an index made again", Head { index: "t1".into(), ..head.clone() }),
            ("past the index's end (made again, or purged)", Head { after: 101, ..head.clone() }),
            ("an absurd chunk count", Head { chunks: u32::MAX, ..head.clone() }),
        ];
        for (what, head) in cases {
            assert!(!head.fits(&index), "{what}");
        }
    }
}
