//! A run's live log on `cronrun.logs.<job>.<run-id>`: every output line as it comes
//! (stderr lines marked with a header), then one empty message whose header carries the
//! final status, so that followers know it ended.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::RunnerCtx;
use crate::output::{EOF_HEADER, Line, STREAM_HEADER, Source, Tail};
use crate::record::Status;

/// The longest a line waits to be handed to the client. While NATS is away, the client
/// stops taking messages once its buffer is full; a run's supervision (its timeout, kills,
/// heartbeats) waits on its output, so a line must not wait for NATS to come back.
const PUBLISH_BOUND: Duration = Duration::from_millis(100);
/// After a line not handed over in time, lines are only kept, not published, for this long.
const OFFLINE_FOR: Duration = Duration::from_secs(5);
/// The longest the end of a run's log waits to be handed to the client: longer than a
/// line, as followers wait for it, but bounded (the record, written after, says the same).
const END_PUBLISH_BOUND: Duration = Duration::from_secs(5);

/// The live log of one run, and the last lines kept for its record.
pub(super) struct RunLog<'a> {
    ctx: &'a RunnerCtx,
    subject: String,
    tail: Tail,
    /// Lines are not published before this (the client did not take the last in time).
    offline_until: Option<Instant>,
}

impl<'a> RunLog<'a> {
    pub(super) fn new(ctx: &'a RunnerCtx, job: &str, run_id: &str, keep: usize) -> Self {
        Self { ctx, subject: ctx.store.names.logs_subject(job, run_id), tail: Tail::new(keep), offline_until: None }
    }

    /// Publishes `line` live and keeps it in the tail. A line not published (NATS away)
    /// is still kept: the record has it.
    pub(super) async fn line(&mut self, line: Line) {
        if self.offline_until.is_none_or(|until| Instant::now() >= until) {
            self.offline_until = None;
            let client = &self.ctx.store.client;
            let payload = Bytes::from(line.text.clone().into_bytes());
            let publish = async {
                match line.source {
                    Source::Stdout => client.publish(self.subject.clone(), payload).await,
                    Source::Stderr => {
                        let mut headers = async_nats::HeaderMap::new();
                        headers.insert(STREAM_HEADER, "stderr");
                        client.publish_with_headers(self.subject.clone(), headers, payload).await
                    }
                }
            };
            match tokio::time::timeout(PUBLISH_BOUND, publish).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!("output line not published: {e}"),
                Err(_) => {
                    tracing::debug!("output line not published within {PUBLISH_BOUND:?}: live output paused");
                    self.offline_until = Some(Instant::now() + OFFLINE_FOR);
                }
            }
        }
        self.tail.push(line.text);
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

/// The last message of a run's log: its status.
pub(super) async fn publish_end(ctx: &RunnerCtx, job: &str, run_id: &str, status: Status) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(EOF_HEADER, status.as_str());
    let subject = ctx.store.names.logs_subject(job, run_id);
    let publish = ctx.store.client.publish_with_headers(subject, headers, Bytes::new());
    let _ = tokio::time::timeout(END_PUBLISH_BOUND, publish).await;
}
