//! A bound on the quiet between the items of a long stream, with one timer for them all.
//!
//! `tokio::time::timeout` around each item makes a timer per item: a scheduler's pass over
//! millions of index entries spent about 3 % of its CPU on them. `Silence` keeps one, and
//! pushes it back only when it fires after an item came: the stream is given up after
//! between `max` and twice `max` without one.

use std::pin::{Pin, pin};
use std::time::Duration;

use tokio::time::{Instant, Sleep, sleep};

pub struct Silence {
    max: Duration,
    timer: Pin<Box<Sleep>>,
    /// An item came since the timer was last set.
    heard: bool,
}

impl Silence {
    pub fn new(max: Duration) -> Self {
        Self { max, timer: Box::pin(sleep(max)), heard: false }
    }

    /// `next`'s output, or None once nothing has come for `max` to twice `max`.
    pub async fn bound<T>(&mut self, next: impl Future<Output = T>) -> Option<T> {
        let mut next = pin!(next);
        loop {
            tokio::select! {
                biased;
                item = &mut next => {
                    self.heard = true;
                    return Some(item);
                }
                () = self.timer.as_mut() => {
                    if !std::mem::take(&mut self.heard) {
                        return None;
                    }
                    self.timer.as_mut().reset(Instant::now() + self.max);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(30);

    /// Items `gaps` apart, then one after `last`: whether that one is given up on.
    #[tokio::test(start_paused = true)]
    async fn a_stream_is_given_up_only_after_max_to_twice_max_of_quiet() {
        let s = Duration::from_secs;
        let cases: [(&[Duration], Duration, bool); 6] = [
            (&[], s(29), false),
            (&[], s(31), true),
            // Steady items well apart never trip it, however long the stream lasts.
            (&[s(20); 50], s(20), false),
            (&[s(29); 50], s(29), false),
            // After items, a quiet of up to `max` never does; of twice `max`, always.
            (&[s(20), s(20)], s(30), false),
            (&[s(20), s(20)], s(60), true),
        ];
        for (gaps, last, given_up) in cases {
            let mut silence = Silence::new(MAX);
            for gap in gaps {
                assert_eq!(silence.bound(sleep(*gap)).await, Some(()), "gaps {gaps:?}");
            }
            let started = Instant::now();
            assert_eq!(silence.bound(sleep(last)).await.is_none(), given_up, "gaps {gaps:?}, then {last:?}");
            if given_up {
                assert!(started.elapsed() <= 2 * MAX, "given up after {:?}", started.elapsed());
            }
        }
    }
}
