//! Starting runs exactly at their instant, however many share it.
//!
//! Runs of one instant are prepared ahead of it (see `shell::prepare`) with the read end
//! of one shared pipe as stdin. At the instant a single write of one line per run
//! releases them all: each run's supervisor reads exactly one line. A run that is
//! discarded before the instant leaves a spare line behind, which is harmless; the pipe
//! is dropped with its group.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;
use tracing::warn;

use crate::clock::SharedClock;

/// How long before its instant a group stops taking runs, so a run that joins is
/// always prepared before the release.
const JOIN_MARGIN: TimeDelta = TimeDelta::milliseconds(20);

struct Group {
    write: std::fs::File,
    read: OwnedFd,
    members: usize,
    released: watch::Sender<Option<DateTime<Utc>>>,
}

#[derive(Clone)]
pub struct Starter {
    groups: Arc<Mutex<HashMap<i64, Group>>>,
    clock: SharedClock,
}

/// A place in the group of one instant.
pub struct Ticket {
    /// The stdin to prepare the run's process with.
    pub stdin: OwnedFd,
    released: watch::Receiver<Option<DateTime<Utc>>>,
}

impl Ticket {
    /// Waits for the release; returns its time.
    pub async fn released(mut self) -> Option<DateTime<Utc>> {
        let value = self.released.wait_for(Option::is_some).await.ok()?;
        *value
    }
}

impl Starter {
    pub fn new(clock: SharedClock) -> Self {
        Self { groups: Arc::default(), clock }
    }

    /// A ticket for `instant`, or None when it is too close or past (start directly).
    pub fn ticket(&self, instant: DateTime<Utc>) -> Option<Ticket> {
        if instant - self.clock.now() < JOIN_MARGIN {
            return None;
        }
        let key = instant.timestamp_millis();
        let mut groups = self.groups.lock().ok()?;
        let group = match groups.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let (read, write) = nix::unistd::pipe().ok()?;
                let (released, _) = watch::channel(None);
                tokio::spawn(self.clone().release_at(instant));
                e.insert(Group { write: write.into(), read, members: 0, released })
            }
        };
        let stdin = group.read.try_clone().ok()?;
        group.members += 1;
        Some(Ticket { stdin, released: group.released.subscribe() })
    }

    async fn release_at(self, instant: DateTime<Utc>) {
        let wait = (instant - self.clock.now()).to_std().unwrap_or_default();
        tokio::time::sleep(wait).await;
        let group = self.groups.lock().ok().and_then(|mut g| g.remove(&instant.timestamp_millis()));
        let Some(mut group) = group else { return };
        let lines = vec![b'\n'; group.members];
        if let Err(e) = group.write.write_all(&lines) {
            warn!("releasing {} runs of {instant}: {e}", group.members);
        }
        let _ = group.released.send(Some(self.clock.now()));
    }

    /// How long before the instant runs must have been re-checked.
    pub fn margin() -> TimeDelta {
        JOIN_MARGIN / 2
    }
}
