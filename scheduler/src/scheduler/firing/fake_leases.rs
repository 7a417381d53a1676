//! An in-memory lease table for the unit tests of the lease keeping and the takeover (see
//! `shard_lease.rs`), on tokio's clock (paused in the tests). A fake of our lease traits,
//! not of NATS: a key expires its TTL after its last write landed, as in the leases bucket;
//! writes are compare-and-set by revision; a release is fenced by the revision; watches
//! hear every change. Each holder's renewals are answered as the test scripts them, and
//! what happened to the keys is logged in milliseconds since the table was made.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::shard_lease::{KeyWatch, ShardLease, ShardLeases};
use crate::error::Error;
use crate::store::kv::Change;

/// How a write is answered.
#[derive(Clone, Copy, Debug)]
pub(super) enum Answer {
    Now,
    /// The write lands at once (the server applied it), its answer comes this long after.
    After(Duration),
    /// Never: the request hangs, nothing lands.
    Never,
    /// Refused at once: `ErrorKind::Conflict`.
    Conflict,
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Acquired,
    Renewed,
    Refused,
    Released,
    Expired,
}

/// (milliseconds since the table was made, holder, what).
pub(super) type Entry = (u64, String, Op);

#[derive(Clone)]
pub(super) struct Table(Arc<Mutex<State>>);

struct State {
    start: Instant,
    revision: u64,
    keys: HashMap<String, Held>,
    /// Each holder's renewals' answers, in turn; `Answer::Now` once run out.
    scripts: HashMap<String, VecDeque<Answer>>,
    watchers: Vec<(String, mpsc::UnboundedSender<Change>)>,
    watches: bool,
    log: Vec<Entry>,
}

struct Held {
    holder: String,
    revision: u64,
    expires: Instant,
}

impl Table {
    pub fn new() -> Self {
        Table(Arc::new(Mutex::new(State {
            start: Instant::now(),
            revision: 0,
            keys: HashMap::new(),
            scripts: HashMap::new(),
            watchers: Vec::new(),
            watches: true,
            log: Vec::new(),
        })))
    }

    /// Watches fail to start: a stand-by then tries every second only.
    pub fn without_watches(self) -> Self {
        self.state().watches = false;
        self
    }

    /// How `holder`'s next renewals are answered.
    pub fn script(&self, holder: &str, answers: impl IntoIterator<Item = Answer>) {
        self.state().scripts.entry(holder.into()).or_default().extend(answers);
    }

    pub fn log(&self) -> Vec<Entry> {
        self.state().log.clone()
    }

    /// The log's entries of `op`, as (ms, holder).
    pub fn of(&self, op: Op) -> Vec<(u64, String)> {
        self.log().into_iter().filter(|e| e.2 == op).map(|(at, holder, _)| (at, holder)).collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes `key` for `holder` if it is at `revision` (None: absent), to expire `ttl` on.
    fn write(&self, key: &str, holder: &str, revision: Option<u64>, ttl: Duration) -> Result<u64, Error> {
        let mut state = self.state();
        state.expire_if_due(key);
        match (state.keys.get(key), revision) {
            (None, None) => {}
            (Some(held), Some(revision)) if held.revision == revision => {}
            (Some(_), None) => return Err(Error::new(crate::ErrorKind::AlreadyExists, key)),
            _ => {
                state.note(holder, Op::Refused);
                return Err(Error::conflict(format!("{key} is not at the revision written from")));
            }
        }
        state.revision += 1;
        let (now, written) = (Instant::now(), state.revision);
        state.keys.insert(key.into(), Held { holder: holder.into(), revision: written, expires: now + ttl });
        state.note(holder, if revision.is_some() { Op::Renewed } else { Op::Acquired });
        state.tell(key, Some(holder), written, false);
        let table = self.clone();
        let key = key.to_string();
        tokio::spawn(async move {
            tokio::time::sleep_until(now + ttl).await;
            table.state().expire_if_due(&key);
        });
        Ok(written)
    }
}

impl State {
    fn note(&mut self, holder: &str, op: Op) {
        let at = Instant::now().duration_since(self.start).as_millis() as u64;
        self.log.push((at, holder.into(), op));
    }

    fn expire_if_due(&mut self, key: &str) {
        let Some(held) = self.keys.get(key).filter(|held| Instant::now() >= held.expires) else { return };
        let (holder, revision) = (held.holder.clone(), held.revision);
        self.keys.remove(key);
        self.note(&holder, Op::Expired);
        self.tell(key, None, revision, true);
    }

    fn tell(&mut self, key: &str, holder: Option<&str>, revision: u64, expired: bool) {
        let change = Change {
            key: key.into(),
            value: holder.map(|h| bytes::Bytes::from(h.to_string())),
            revision,
            caught_up: true,
            expired,
            sequence: revision,
        };
        self.watchers.retain(|(watched, tx)| watched != key || tx.send(change.clone()).is_ok());
    }
}

pub(super) struct FakeLease {
    table: Table,
    key: String,
    holder: String,
    revision: u64,
    ttl: Duration,
    held_until: Instant,
}

impl ShardLease for FakeLease {
    fn held_until(&self) -> Instant {
        self.held_until
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    async fn renew(&mut self) -> Result<(), Error> {
        let asked = Instant::now();
        let answer = self.table.state().scripts.get_mut(&self.holder).and_then(|s| s.pop_front());
        let answer = answer.unwrap_or(Answer::Now);
        match answer {
            Answer::Now | Answer::After(_) => {}
            Answer::Never => std::future::pending().await,
            Answer::Conflict => {
                self.table.state().note(&self.holder, Op::Refused);
                return Err(Error::conflict(format!("{} was lost", self.key)));
            }
        }
        let landed = self.table.write(&self.key, &self.holder, Some(self.revision), self.ttl);
        if let Answer::After(wait) = answer {
            tokio::time::sleep(wait).await;
        }
        self.revision = landed?;
        self.held_until = crate::store::lease::held_until(asked, self.ttl);
        Ok(())
    }
    async fn release(self) -> Result<(), Error> {
        let mut state = self.table.state();
        state.expire_if_due(&self.key);
        if state.keys.get(&self.key).is_some_and(|held| held.revision == self.revision) {
            state.keys.remove(&self.key);
            state.note(&self.holder, Op::Released);
            state.tell(&self.key, None, self.revision, false);
        }
        Ok(())
    }
}

pub(super) struct FakeWatch(mpsc::UnboundedReceiver<Change>);

impl KeyWatch for FakeWatch {
    async fn next(&mut self) -> Option<Result<Change, Error>> {
        self.0.recv().await.map(Ok)
    }
}

impl ShardLeases for Table {
    type Lease = FakeLease;
    type Watch = FakeWatch;
    async fn try_acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Option<FakeLease>, Error> {
        let asked = Instant::now();
        match self.write(key, holder, None, ttl) {
            Ok(revision) => Ok(Some(FakeLease {
                table: self.clone(),
                key: key.into(),
                holder: holder.into(),
                revision,
                ttl,
                held_until: crate::store::lease::held_until(asked, ttl),
            })),
            Err(e) if *e.kind() == crate::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }
    async fn watch(&self, key: &str) -> Result<FakeWatch, Error> {
        let mut state = self.state();
        if !state.watches {
            return Err(Error::nats_msg("watching a lease", "watches are off in this test"));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        // Starting with the key's latest value, as the bucket's watches do.
        if let Some(held) = state.keys.get(key) {
            let _ = tx.send(Change {
                key: key.into(),
                value: Some(bytes::Bytes::from(held.holder.clone())),
                revision: held.revision,
                caught_up: true,
                expired: false,
                sequence: held.revision,
            });
        }
        state.watchers.push((key.into(), tx));
        Ok(FakeWatch(rx))
    }
}
