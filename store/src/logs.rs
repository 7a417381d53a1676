//! A run's output read back from `CRONRUN_LOGS` (the runner writes it, see
//! `runner::logs`), for `cronrun logs` and the dashboard's live output.

use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, push};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::error::Error;
use crate::output::{EOF_HEADER, STREAM_HEADER, log_lines};
use crate::store::Store;

/// What a run's log says, in order: its lines, then its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logged {
    Line(OutputLine),
    /// The run's code ended, with this status (its record may not say so yet).
    End(String),
}

/// One line of a run's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    pub text: String,
    /// Written to standard error (the run's stdout otherwise).
    pub stderr: bool,
}

/// How long a follower waits for a line before it asks whether the run is over: a run
/// whose runner died never sends its end marker.
const QUIET: Duration = Duration::from_secs(2);

/// The output of `job.run_id` so far, then (with `follow`) what it prints until it ends.
/// The lines come on the returned channel, then the end if the log has it; it closes
/// after the end, or after an error if the stream failed; dropping the receiver stops the reader within `QUIET`.
pub async fn read(
    store: &Store,
    job: &str,
    run_id: &str,
    follow: bool,
) -> Result<mpsc::Receiver<Result<Logged, Error>>, Error> {
    fn failed(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::nats("reading the logs stream", e)
    }
    let stream = store.js.get_stream(store.names.logs_stream()).await.map_err(failed)?;
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: store.client.new_inbox(),
            filter_subject: store.names.logs_subject(job, run_id),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(failed)?;
    let (tx, rx) = mpsc::channel(256);
    if consumer.cached_info().num_pending == 0 && !follow {
        return Ok(rx);
    }
    let mut messages = consumer.messages().await.map_err(failed)?;
    let (store, job, run_id) = (store.clone(), job.to_string(), run_id.to_string());
    tokio::spawn(async move {
        loop {
            let message = match tokio::time::timeout(QUIET, messages.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => {
                    let _ = tx.send(Err(failed(e))).await;
                    return;
                }
                Ok(None) => return,
                Err(_) if follow && !tx.is_closed() && !run_is_over(&store, &job, &run_id).await => continue,
                Err(_) => return,
            };
            let headers = message.headers.as_ref();
            let end = headers.and_then(|h| h.get(EOF_HEADER)).map(|status| status.to_string());
            let stderr = headers.and_then(|h| h.get(STREAM_HEADER)).is_some();
            for text in log_lines(&message.payload, end.is_some()) {
                if tx.send(Ok(Logged::Line(OutputLine { text, stderr }))).await.is_err() {
                    return;
                }
            }
            if let Some(status) = end {
                let _ = tx.send(Ok(Logged::End(status))).await;
                return;
            }
            let pending = message.info().map(|i| i.pending).unwrap_or(0);
            if pending == 0 && !follow {
                return;
            }
        }
    });
    Ok(rx)
}

async fn run_is_over(store: &Store, job: &str, run_id: &str) -> bool {
    store.get_run(job, run_id).await.map(|r| r.record.status.is_final()).unwrap_or(true)
}
