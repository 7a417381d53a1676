//! Reads of what a bucket holds now (`keys`, `scan`): a watch read until it has delivered
//! every entry there was when it began.
//!
//! Such a read ends on an entry the server says leaves nothing pending. A consumer made
//! for one (a prune reading a job's records in the runs bucket while they were written,
//! `bench throughput`, nats-server 2.14.6, async-nats 0.51) was seen delivering nothing
//! but its idle heartbeats, 1,304 entries pending, until the read gave up 30 s later;
//! the next prune of the same job read them. No flow-control stall was seen on the wire
//! meanwhile (async-nats does not answer one); the cause was not found. So a read that
//! stalls is made again with a new consumer.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, timeout, timeout_at};
use tracing::warn;

use super::watch::{Change, Watch};
use super::{Bucket, Versioned};
use crate::error::Error;

/// How long a read waits for its next entry before it starts again with a new consumer.
/// A live consumer delivers what is pending back to back.
const STALL: Duration = Duration::from_secs(5);
/// How long a read may go without getting further, stalls and their new consumers'
/// creation included, before it fails (the last wait may end up to `STALL` later): with
/// NATS away a watch waits for its return without a word, or for ever if the stream was
/// deleted. A consumer's creation may take long itself (`watch.rs`); after a stall it is
/// not waited for past this.
const STALLED_MAX: Duration = Duration::from_secs(30);

impl Bucket {
    /// The keys matching `filter` that hold a value now (their values are not read).
    pub async fn keys(&self, filter: &str) -> Result<Vec<String>, Error> {
        let what = format!("listing {filter} in {}", self.name());
        read_to_end(&what, || self.keys_watch(filter), |c| c.value.is_some().then_some(c.key)).await
    }

    /// The latest live value of every key matching `filter`.
    pub async fn scan(&self, filter: &str) -> Result<Vec<(String, Versioned)>, Error> {
        let what = format!("reading {filter} in {}", self.name());
        let keep = |c: Change| Some((c.key, Versioned { value: c.value?, revision: c.revision }));
        read_to_end(&what, || self.watch(filter), keep).await
    }
}

/// What a finite read needs of a watch (a trait, so that its stalls can be tested).
pub(super) trait Entries {
    /// There was nothing to read when it began.
    fn initially_empty(&self) -> bool;
    /// The next change; None when the watch ended.
    fn next(&mut self) -> impl Future<Output = Option<Result<Change, Error>>> + Send;
}

impl Entries for Watch {
    fn initially_empty(&self) -> bool {
        self.initially_empty
    }

    fn next(&mut self) -> impl Future<Output = Option<Result<Change, Error>>> + Send {
        Watch::next(self)
    }
}

/// Reads a watch made by `open` to the end of what it began with, keeping what `keep`
/// returns of each change. A watch that delivers nothing for `STALL` is made again and
/// read from the start, until `STALLED_MAX` has passed without getting further.
pub(super) async fn read_to_end<W, T, Open, Opened>(
    what: &str,
    mut open: Open,
    keep: impl Fn(Change) -> Option<T>,
) -> Result<Vec<T>, Error>
where
    W: Entries,
    Open: FnMut() -> Opened,
    Opened: Future<Output = Result<W, Error>>,
{
    // Set at a stall, cleared by an entry no attempt had reached: a long read may pause
    // more than once, but one that stalls at the same place again gives up.
    let (mut give_up, mut furthest): (Option<Instant>, usize) = (None, 0);
    loop {
        let mut w = match give_up {
            None => open().await?,
            Some(at) => timeout_at(at, open()).await.map_err(|_| stalled(what))??,
        };
        let mut out = Vec::new();
        if w.initially_empty() {
            return Ok(out);
        }
        let mut delivered = 0;
        loop {
            match timeout(STALL, w.next()).await {
                Ok(Some(change)) => {
                    let change = change?;
                    delivered += 1;
                    if delivered > furthest {
                        (furthest, give_up) = (delivered, None);
                    }
                    let caught_up = change.caught_up;
                    out.extend(keep(change));
                    if caught_up {
                        return Ok(out);
                    }
                }
                Ok(None) => return Ok(out),
                Err(_) => break,
            }
        }
        let at = *give_up.get_or_insert(Instant::now() - STALL + STALLED_MAX);
        if Instant::now() >= at {
            return Err(stalled(what));
        }
        warn!("{what}: nothing delivered for {STALL:?} with entries still pending; reading again");
    }
}

fn stalled(what: &str) -> Error {
    Error::nats_msg(what, format!("no further for {STALLED_MAX:?}, new consumers included"))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A watch delivering `entries`, then nothing (a stall) unless it is told to end.
    struct Scripted {
        entries: VecDeque<Change>,
        ends: bool,
    }

    impl Entries for Scripted {
        fn initially_empty(&self) -> bool {
            self.entries.is_empty() && self.ends
        }

        async fn next(&mut self) -> Option<Result<Change, Error>> {
            match self.entries.pop_front() {
                Some(change) => Some(Ok(change)),
                None if self.ends => None,
                None => std::future::pending().await,
            }
        }
    }

    fn change(key: &str, caught_up: bool) -> Change {
        Change { key: key.into(), value: Some("v".into()), revision: 1, caught_up, expired: false, sequence: 1 }
    }

    /// Each attempt's watch: its entries, the last of them leaving nothing pending or not.
    fn attempts(script: &[(&[&str], bool)]) -> VecDeque<Scripted> {
        let watch = |(keys, complete): &(&[&str], bool)| Scripted {
            entries: keys.iter().enumerate().map(|(i, k)| change(k, *complete && i + 1 == keys.len())).collect(),
            ends: false,
        };
        script.iter().map(watch).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_stalls_is_made_again_and_keeps_only_the_last_reading() {
        // (each attempt's watch, what the read returns or that it fails, how long it took)
        type Case = (&'static [(&'static [&'static str], bool)], Option<&'static [&'static str]>, Duration);
        let cases: [Case; 7] = [
            (&[(&["a", "b"], true)], Some(&["a", "b"]), Duration::ZERO),
            // Stalled before its last entry, then read whole by a new consumer.
            (&[(&["a"], false), (&["a", "b"], true)], Some(&["a", "b"]), STALL),
            // Nothing at all delivered, as seen with nats-server 2.14, twice.
            (&[(&[], false), (&[], false), (&["a"], true)], Some(&["a"]), STALL * 2),
            // Stalling on and on: given up once STALLED_MAX has passed without an entry.
            (&[(&[] as &[&str], false); 8], None, STALLED_MAX),
            // Stalling at the same place each time: given up as well.
            (&[(&["a"] as &[&str], false); 8], None, STALLED_MAX),
            // Getting further at each attempt: each gives the read STALLED_MAX again.
            (
                &[
                    (&["a"], false),
                    (&[], false),
                    (&[], false),
                    (&[], false),
                    (&[], false),
                    (&["a", "b"], false),
                    (&[], false),
                    (&[], false),
                    (&[], false),
                    (&[], false),
                    (&["a", "b", "c"], true),
                ],
                Some(&["a", "b", "c"]),
                STALL * 10,
            ),
            // A new consumer that is never made: given up at STALLED_MAX all the same.
            (&[(&[], false)], None, STALLED_MAX),
        ];
        for (script, expected, took) in cases {
            let mut watches = attempts(script);
            // Once the script runs out, a consumer's creation never answers.
            let open = || {
                let watch = watches.pop_front();
                async move {
                    match watch {
                        Some(watch) => Ok(watch),
                        None => std::future::pending().await,
                    }
                }
            };
            let started = Instant::now();
            let read = read_to_end("test", open, |c| Some(c.key)).await;
            match expected {
                Some(keys) => assert_eq!(read.unwrap(), keys, "{script:?}"),
                None => assert!(read.unwrap_err().to_string().contains("no further"), "{script:?}"),
            }
            assert_eq!(started.elapsed(), took, "{script:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_of_nothing_or_of_a_watch_that_ended_returns_what_it_has() {
        let mut empty = Some(Scripted { entries: VecDeque::new(), ends: true });
        let read = read_to_end("test", || std::future::ready(Ok(empty.take().unwrap())), |c| Some(c.key)).await;
        assert!(read.unwrap().is_empty());
        let mut ended = Some(Scripted { entries: [change("a", false)].into(), ends: true });
        let read = read_to_end("test", || std::future::ready(Ok(ended.take().unwrap())), |c| Some(c.key)).await;
        assert_eq!(read.unwrap(), ["a"]);
    }
}
