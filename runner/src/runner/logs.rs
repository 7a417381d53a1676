//! A run's live log on `cronrun.logs.<job>.<run-id>`: its output lines in batches (the
//! lines of one stream printed within [`BATCH_WINDOW`], stderr's marked with a header),
//! then one message whose header carries the final status, with the lines not yet
//! published, so that followers know it ended. A short run's output and end are one
//! stored message (`cronrun_model::output::log_lines` reads them back).

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::RunnerCtx;
use crate::output::{EOF_HEADER, Line, STREAM_HEADER, Source, Tail, push_log_line};
use crate::record::Status;

/// The longest a line waits for the lines printed after it, to go out in one message.
pub(super) const BATCH_WINDOW: Duration = Duration::from_millis(20);
/// A batch goes out once it holds this much (a line longer than that goes alone).
const BATCH_MAX_BYTES: usize = 64 * 1024;
/// The longest a batch waits to be handed to the client. While NATS is away, the client
/// stops taking messages once its buffer is full; a run's supervision (its timeout, kills,
/// heartbeats) waits on its output, so a line must not wait for NATS to come back.
const PUBLISH_BOUND: Duration = Duration::from_millis(100);
/// After a batch not handed over in time, lines are only kept, not published, for this long.
const OFFLINE_FOR: Duration = Duration::from_secs(5);
/// The longest the end of a run's log waits to be handed to the client: longer than a
/// batch, as followers wait for it, but bounded (the record says the same).
const END_PUBLISH_BOUND: Duration = Duration::from_secs(5);

/// Lines waiting to go out together.
struct Batch {
    source: Source,
    payload: String,
    /// When its first line came.
    since: Instant,
}

/// The live log of one run, and the last lines kept for its record.
pub(super) struct RunLog<'a> {
    ctx: &'a RunnerCtx,
    subject: String,
    tail: Tail,
    batch: Option<Batch>,
    /// Lines are not published before this (the client did not take the last in time).
    offline_until: Option<Instant>,
}

impl<'a> RunLog<'a> {
    pub(super) fn new(ctx: &'a RunnerCtx, job: &str, run_id: &str, keep: usize) -> Self {
        let subject = ctx.store.names.logs_subject(job, run_id);
        Self { ctx, subject, tail: Tail::new(keep), batch: None, offline_until: None }
    }

    /// Adds `line` to the live log's batch and keeps it in the tail; the batch goes out
    /// when its window is over, when it is full, or before a line of the other stream. A
    /// line not published (NATS away) is still kept: the record has it.
    pub(super) async fn line(&mut self, line: Line) {
        let fits = |b: &Batch| b.source == line.source && b.payload.len() + line.text.len() < BATCH_MAX_BYTES;
        if self.batch.as_ref().is_some_and(|b| !fits(b)) {
            self.flush().await;
        }
        let batch = self.batch.get_or_insert_with(|| Batch {
            source: line.source,
            payload: String::new(),
            since: Instant::now(),
        });
        push_log_line(&mut batch.payload, &line.text);
        self.tail.push(line.text);
        if self.due().is_some_and(|due| Instant::now() >= due) {
            self.flush().await;
        }
    }

    /// When the batch waiting must go out, if there is one.
    pub(super) fn due(&self) -> Option<Instant> {
        self.batch.as_ref().map(|b| b.since + BATCH_WINDOW)
    }

    /// Publishes the batch waiting, if any, unless NATS was found away lately.
    pub(super) async fn flush(&mut self) {
        let Some(batch) = self.batch.take() else { return };
        if self.offline_until.is_some_and(|until| Instant::now() < until) {
            return;
        }
        self.offline_until = None;
        let (client, subject, payload) = (&self.ctx.store.client, self.subject.clone(), Bytes::from(batch.payload));
        let publish = async {
            match batch.source {
                Source::Stdout => client.publish(subject, payload).await,
                Source::Stderr => client.publish_with_headers(subject, stream_headers(batch.source), payload).await,
            }
        };
        match tokio::time::timeout(PUBLISH_BOUND, publish).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("output not published: {e}"),
            Err(_) => {
                tracing::debug!("output not published within {PUBLISH_BOUND:?}: live output paused");
                self.offline_until = Some(Instant::now() + OFFLINE_FOR);
            }
        }
    }

    /// The end of the live log, with `status`: one message holding the batch still
    /// waiting, if any (its stream's header too).
    pub(super) async fn end(&mut self, status: Status) {
        let offline = self.offline_until.is_some_and(|until| Instant::now() < until);
        let batch = self.batch.take().filter(|_| !offline);
        let (mut headers, payload) = match batch {
            Some(b) => (stream_headers(b.source), Bytes::from(b.payload)),
            None => (async_nats::HeaderMap::new(), Bytes::new()),
        };
        headers.insert(EOF_HEADER, status.as_str());
        let publish = self.ctx.store.client.publish_with_headers(self.subject.clone(), headers, payload);
        let _ = tokio::time::timeout(END_PUBLISH_BOUND, publish).await;
    }

    /// Keeps `text` in the tail as the last line, without publishing it.
    pub(super) fn keep(&mut self, text: String) {
        self.tail.push(text);
    }

    pub(super) fn tail(&self) -> &Tail {
        &self.tail
    }

    pub(super) fn into_tail(self) -> Vec<String> {
        self.tail.to_vec()
    }
}

fn stream_headers(source: Source) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    if source == Source::Stderr {
        headers.insert(STREAM_HEADER, "stderr");
    }
    headers
}

/// The end of the log of a run that never started: its status alone.
pub(super) async fn publish_end(ctx: &RunnerCtx, job: &str, run_id: &str, status: Status) {
    RunLog::new(ctx, job, run_id, 0).end(status).await;
}
