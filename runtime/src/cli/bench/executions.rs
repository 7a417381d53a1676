//! How many times each run's code ran, counted from what the code itself printed: every
//! execution publishes its output lines live on `cronrun.logs.<job>.<run-id>`, whichever
//! runner it ran on, and a record cannot show a second execution (the fencing refuses a
//! stale runner's writes, not its process's output).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::consumer::{DeliverPolicy, push};
use futures::StreamExt;

use crate::output::{EOF_HEADER, STREAM_HEADER};
use crate::store::Store;

/// A read of the logs stream that delivers nothing for this long has stalled.
const IDLE_MAX: Duration = Duration::from_secs(30);

/// What the logs say of the runs whose subjects were asked for, each printing one
/// standard-output line per execution.
#[derive(Debug, Default)]
pub(super) struct Executions {
    /// Runs whose line is there more than once: their code ran more than once.
    pub doubled: usize,
    /// Runs whose line is not there: a live line is published without an
    /// acknowledgement and may be dropped under load (the record still holds it), so this
    /// is not a lost run.
    pub unseen: usize,
}

/// Counts the standard-output lines of each of `subjects` (logs subjects of runs) in the
/// logs stream, in one pass over it (headers only).
pub(super) async fn count(store: &Store, subjects: &HashSet<String>) -> Result<Executions> {
    let stream = store.js.get_stream(store.names.logs_stream()).await.context("opening the logs stream")?;
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: store.client.new_inbox(),
            filter_subject: store.names.wildcard("logs"),
            deliver_policy: DeliverPolicy::All,
            headers_only: true,
            ..Default::default()
        })
        .await
        .context("reading the logs stream")?;
    let mut tally = Tally::new(subjects);
    if consumer.cached_info().num_pending > 0 {
        let mut messages = consumer.messages().await.context("reading the logs stream")?;
        loop {
            let message = tokio::time::timeout(IDLE_MAX, messages.next())
                .await
                .with_context(|| format!("the logs stream delivered nothing for {IDLE_MAX:?}"))?
                .context("the logs stream's read ended")?
                .context("reading the logs stream")?;
            let headers = message.headers.as_ref();
            let stdout_line = headers.is_none_or(|h| h.get(EOF_HEADER).is_none() && h.get(STREAM_HEADER).is_none());
            tally.add(message.subject.as_str(), stdout_line);
            if message.info().map(|i| i.pending).unwrap_or(0) == 0 {
                break;
            }
        }
    }
    Ok(tally.executions())
}

/// Standard-output lines by run.
struct Tally<'a> {
    subjects: &'a HashSet<String>,
    lines: HashMap<&'a str, u32>,
}

impl<'a> Tally<'a> {
    fn new(subjects: &'a HashSet<String>) -> Self {
        Self { subjects, lines: HashMap::with_capacity(subjects.len()) }
    }

    /// A message of the logs stream: a line (standard output or error) or a run's end.
    fn add(&mut self, subject: &str, stdout_line: bool) {
        if let Some(subject) = self.subjects.get(subject).filter(|_| stdout_line) {
            *self.lines.entry(subject.as_str()).or_default() += 1;
        }
    }

    fn executions(&self) -> Executions {
        let doubled = self.lines.values().filter(|n| **n > 1).count();
        Executions { doubled, unseen: self.subjects.len() - self.lines.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_doubled_by_a_second_stdout_line_and_unseen_without_one() {
        let runs: HashSet<String> = ["l.a.1", "l.a.2", "l.b.1"].map(String::from).into();
        /// Messages of the stream: (subject, is a standard-output line).
        type Messages<'a> = &'a [(&'a str, bool)];
        // (messages, doubled, unseen)
        let cases: [(Messages, usize, usize); 5] = [
            (&[("l.a.1", true), ("l.a.2", true), ("l.b.1", true)], 0, 0),
            (&[("l.a.1", true), ("l.a.1", false), ("l.a.2", true), ("l.b.1", true), ("l.b.1", false)], 0, 0),
            (&[("l.a.1", true), ("l.a.1", true), ("l.a.2", true), ("l.b.1", true)], 1, 0),
            (&[("l.a.1", true), ("l.a.9", true), ("l.a.9", true)], 0, 2),
            (&[], 0, 3),
        ];
        for (messages, doubled, unseen) in cases {
            let mut tally = Tally::new(&runs);
            for (subject, stdout_line) in messages {
                tally.add(subject, *stdout_line);
            }
            let e = tally.executions();
            assert_eq!((e.doubled, e.unseen), (doubled, unseen), "{messages:?}");
        }
    }
}
