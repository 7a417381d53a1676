//! How full the layout's streams are, against their limits, from one `STREAM.INFO` each:
//! what `cronrun status` shows, and what an agent's `/readyz` warns of and `/metrics`
//! reports as `cronrun_stream_use_ratio`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Store;

/// At or past this share of a byte or message limit, a stream is nearly full: its oldest
/// output or events go soon, or (the dispatch queue) new dispatches are refused.
pub const NEARLY_FULL: f64 = 0.9;

/// The longest a reading of every stream may take; a stream not answered within is left out.
const READ_WITHIN: Duration = Duration::from_secs(5);

/// One stream's use and limits. A limit of None: none set (KV buckets: nothing dropped).
#[derive(Debug, Clone, Serialize)]
pub struct StreamUse {
    pub stream: String,
    pub bytes: u64,
    pub max_bytes: Option<i64>,
    pub messages: u64,
    pub max_messages: Option<i64>,
}

impl StreamUse {
    /// The larger share of the byte and message limits in use; 0 without limits.
    pub fn ratio(&self) -> f64 {
        let share = |used: u64, max: Option<i64>| max.map_or(0.0, |max| used as f64 / max as f64);
        share(self.bytes, self.max_bytes).max(share(self.messages, self.max_messages))
    }

    /// The warning for a stream at or past `NEARLY_FULL`, saying what goes first.
    pub fn warning(&self, names: &crate::names::Names) -> Option<String> {
        if self.ratio() < NEARLY_FULL {
            return None;
        }
        let consequence = if self.stream == names.dispatch_stream() {
            "new dispatches are refused once full (queued runs are kept)"
        } else if self.stream == names.logs_stream() {
            "its oldest output lines are dropped first"
        } else {
            "its oldest messages are dropped first"
        };
        Some(format!(
            "stream {} is {:.0}% full ({} of {}, {} of {} messages): {consequence}",
            self.stream,
            self.ratio() * 100.0,
            fmt_bytes(self.bytes as i64),
            fmt_bytes(self.max_bytes.unwrap_or(-1)),
            self.messages,
            self.max_messages.map_or("unlimited".to_string(), |m| m.to_string()),
        ))
    }
}

impl Store {
    /// The use of every stream of the layout that exists and answers within `READ_WITHIN`,
    /// in the layout's order.
    pub async fn stream_use(&self) -> Vec<StreamUse> {
        let reads = self.names.layout_streams().into_iter().map(|name| async move {
            let stream = self.js.get_stream(&name).await.ok()?;
            let info = stream.cached_info();
            let limit = |max: i64| (max > 0).then_some(max);
            Some(StreamUse {
                stream: name,
                bytes: info.state.bytes,
                max_bytes: limit(info.config.max_bytes),
                messages: info.state.messages,
                max_messages: limit(info.config.max_messages),
            })
        });
        let read = futures::future::join_all(reads);
        tokio::time::timeout(READ_WITHIN, read).await.unwrap_or_default().into_iter().flatten().collect()
    }
}

/// A reading of `Store::stream_use` served for `FRESH_FOR` and renewed in the background:
/// `/readyz` and `/metrics` may be asked every second and must answer at once, NATS slow or
/// not; the streams are read at most twice a minute, and only while someone asks.
pub struct StreamUseCache {
    store: Store,
    last: Arc<Mutex<Reading>>,
}

#[derive(Default)]
struct Reading {
    at: Option<Instant>,
    streams: Vec<StreamUse>,
    renewing: bool,
}

/// How long a reading of the streams' use is served before it is read again.
pub const FRESH_FOR: Duration = Duration::from_secs(30);

impl StreamUseCache {
    pub fn new(store: Store) -> Self {
        Self { store, last: Arc::default() }
    }

    /// The last reading (none before the first); a stale one starts a new reading, which
    /// sets the `cronrun_stream_use_ratio` gauges.
    pub fn get(&self) -> Vec<StreamUse> {
        let mut last = lock(&self.last);
        let stale = last.at.is_none_or(|at| at.elapsed() >= FRESH_FOR);
        if stale && !last.renewing {
            last.renewing = true;
            let (store, cell) = (self.store.clone(), self.last.clone());
            // Bounded by `READ_WITHIN`.
            tokio::spawn(async move {
                let streams = store.stream_use().await;
                for stream in &streams {
                    crate::metrics::stream_use_ratio(&stream.stream, stream.ratio());
                }
                *lock(&cell) = Reading { at: Some(Instant::now()), streams, renewing: false };
            });
        }
        last.streams.clone()
    }

    /// The warnings of the last reading (see `get`).
    pub fn warnings(&self) -> Vec<String> {
        self.get().iter().filter_map(|s| s.warning(&self.store.names)).collect()
    }
}

fn lock(reading: &Mutex<Reading>) -> std::sync::MutexGuard<'_, Reading> {
    reading.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `bytes` as people read them: `256 MiB`, `1.5 GiB`, `900 B`; `unlimited` for -1.
pub fn fmt_bytes(bytes: i64) -> String {
    if bytes < 0 {
        return "unlimited".into();
    }
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value} {}", units[unit])
    } else {
        format!("{value:.1} {}", units[unit])
    }
}
