//! How many times each run's code ran, counted from what the code itself printed: every
//! execution publishes its output lines live on `cronrun.logs.<job>.<run-id>`, whichever
//! runner it ran on, and a record cannot show a second execution (the fencing refuses a
//! stale runner's writes, not its process's output).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::consumer::{DeliverPolicy, push};
use chrono::{DateTime, Utc};
use futures::StreamExt;

use cronrun::output::{EOF_HEADER, STREAM_HEADER, log_lines};
use cronrun::store::Store;

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
    /// When the server stored each run's first output (its first message with a
    /// standard-output line): the job's effect, as a follower sees it.
    pub first_stored: HashMap<String, DateTime<Utc>>,
}

/// Counts the standard-output lines of each of `subjects` (logs subjects of runs) in the
/// logs stream, in one pass over it.
pub(super) async fn count(store: &Store, subjects: &HashSet<String>) -> Result<Executions> {
    let stream = store.js.get_stream(store.names.logs_stream()).await.context("opening the logs stream")?;
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: store.client.new_inbox(),
            filter_subject: store.names.wildcard("logs"),
            deliver_policy: DeliverPolicy::All,
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
            let end = headers.is_some_and(|h| h.get(EOF_HEADER).is_some());
            let stdout = headers.is_none_or(|h| h.get(STREAM_HEADER).is_none());
            let lines = if stdout { log_lines(&message.payload, end).len() } else { 0 };
            let stored = message.info().ok().and_then(|info| {
                DateTime::from_timestamp_nanos(info.published.unix_timestamp_nanos().try_into().ok()?).into()
            });
            tally.add(message.subject.as_str(), lines, stored);
            if message.info().map(|i| i.pending).unwrap_or(0) == 0 {
                break;
            }
        }
    }
    Ok(tally.executions())
}

/// Standard-output lines by run, and when the first of them was stored.
struct Tally<'a> {
    subjects: &'a HashSet<String>,
    lines: HashMap<&'a str, u32>,
    first_stored: HashMap<String, DateTime<Utc>>,
}

impl<'a> Tally<'a> {
    fn new(subjects: &'a HashSet<String>) -> Self {
        Self { subjects, lines: HashMap::with_capacity(subjects.len()), first_stored: HashMap::new() }
    }

    /// A message of the logs stream holding `stdout_lines` standard-output lines, stored
    /// at `stored`.
    fn add(&mut self, subject: &str, stdout_lines: usize, stored: Option<DateTime<Utc>>) {
        if let Some(subject) = self.subjects.get(subject).filter(|_| stdout_lines > 0) {
            *self.lines.entry(subject.as_str()).or_default() += stdout_lines as u32;
            if let Some(at) = stored {
                self.first_stored.entry(subject.clone()).or_insert(at);
            }
        }
    }

    fn executions(self) -> Executions {
        let doubled = self.lines.values().filter(|n| **n > 1).count();
        Executions { doubled, unseen: self.subjects.len() - self.lines.len(), first_stored: self.first_stored }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_doubled_by_a_second_stdout_line_and_unseen_without_one() {
        let runs: HashSet<String> = ["l.a.1", "l.a.2", "l.b.1"].map(String::from).into();
        /// Messages of the stream: (subject, its standard-output lines).
        type Messages<'a> = &'a [(&'a str, usize)];
        // (messages, doubled, unseen)
        let cases: [(Messages, usize, usize); 6] = [
            (&[("l.a.1", 1), ("l.a.2", 1), ("l.b.1", 1)], 0, 0),
            (&[("l.a.1", 1), ("l.a.1", 0), ("l.a.2", 1), ("l.b.1", 1), ("l.b.1", 0)], 0, 0),
            (&[("l.a.1", 1), ("l.a.1", 1), ("l.a.2", 1), ("l.b.1", 1)], 1, 0),
            // Two executions' lines in one batch (the end of a run).
            (&[("l.a.1", 2), ("l.a.2", 1), ("l.b.1", 1)], 1, 0),
            (&[("l.a.1", 1), ("l.a.9", 1), ("l.a.9", 1)], 0, 2),
            (&[], 0, 3),
        ];
        for (messages, doubled, unseen) in cases {
            let mut tally = Tally::new(&runs);
            for (subject, stdout_lines) in messages {
                tally.add(subject, *stdout_lines, None);
            }
            let e = tally.executions();
            assert_eq!((e.doubled, e.unseen), (doubled, unseen), "{messages:?}");
        }
    }

    #[test]
    fn a_runs_first_output_is_when_its_first_stdout_line_was_stored() {
        let runs: HashSet<String> = ["l.a.1"].map(String::from).into();
        let at = |s| DateTime::from_timestamp(s, 0);
        let mut tally = Tally::new(&runs);
        tally.add("l.a.1", 0, at(1));
        tally.add("l.a.1", 1, at(2));
        tally.add("l.a.1", 1, at(3));
        tally.add("l.b.1", 1, at(0));
        assert_eq!(tally.executions().first_stored, HashMap::from([("l.a.1".to_string(), at(2).unwrap())]));
    }
}
