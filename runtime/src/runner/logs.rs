//! A run's live log on `cronrun.logs.<job>.<run-id>`: every output line as it comes
//! (stderr lines marked with a header), then one empty message whose header carries the
//! final status, so that followers know it ended.

use bytes::Bytes;

use super::RunnerCtx;
use crate::output::{EOF_HEADER, Line, STREAM_HEADER, Source, Tail};
use crate::record::Status;

/// The live log of one run, and the last lines kept for its record.
pub(super) struct RunLog<'a> {
    ctx: &'a RunnerCtx,
    subject: String,
    tail: Tail,
}

impl<'a> RunLog<'a> {
    pub(super) fn new(ctx: &'a RunnerCtx, job: &str, run_id: &str, keep: usize) -> Self {
        Self { ctx, subject: ctx.store.names.logs_subject(job, run_id), tail: Tail::new(keep) }
    }

    /// Publishes `line` live and keeps it in the tail. A line not published (NATS away)
    /// is still kept: the record has it.
    pub(super) async fn line(&mut self, line: Line) {
        let client = &self.ctx.store.client;
        let payload = Bytes::from(line.text.clone().into_bytes());
        let sent = match line.source {
            Source::Stdout => client.publish(self.subject.clone(), payload).await,
            Source::Stderr => {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(STREAM_HEADER, "stderr");
                client.publish_with_headers(self.subject.clone(), headers, payload).await
            }
        };
        if let Err(e) = sent {
            tracing::debug!("output line not published: {e}");
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
    let _ = ctx.store.client.publish_with_headers(subject, headers, Bytes::new()).await;
}
