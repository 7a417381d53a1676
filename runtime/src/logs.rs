//! A run's output read back from `CRONRUN_LOGS` (the runner writes it, see
//! `runner::logs`), for `cronrun logs` and the dashboard's live output.

use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, push};
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::error::Error;
use crate::output::{EOF_HEADER, STREAM_HEADER};
use crate::store::Store;

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
/// The lines come on the returned channel, which closes at the end, after an error if the
/// stream failed; dropping the receiver stops the reader within `QUIET`.
pub async fn read(
    store: &Store,
    job: &str,
    run_id: &str,
    follow: bool,
) -> Result<mpsc::Receiver<Result<OutputLine, Error>>, Error> {
    fn failed(e: impl std::fmt::Display) -> Error {
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
            if headers.and_then(|h| h.get(EOF_HEADER)).is_some() {
                return;
            }
            let line = OutputLine {
                text: String::from_utf8_lossy(&message.payload).into_owned(),
                stderr: headers.and_then(|h| h.get(STREAM_HEADER)).is_some(),
            };
            if tx.send(Ok(line)).await.is_err() {
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
