//! Pulling from a JetStream consumer only into free slots: as many messages as there are
//! permits, so that none waits in a buffer while its ack wait runs out (it would be
//! redelivered to another agent meanwhile). The runner pulls runs this way, the notifier
//! events.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::consumer::pull::{Batch, BatchError};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::jetstream::stream::{ConsumerError, ConsumerErrorKind};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// The pause after a pull that failed.
const ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Returns once `consumer` no longer exists (deleted by someone), looking every
/// `every`: a shared consumer's followers then create it again.
pub async fn until_gone(consumer: &PullConsumer, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = consumer.get_info().await
            && matches!(e.kind(), ConsumerInfoErrorKind::NotFound | ConsumerInfoErrorKind::StreamNotFound)
        {
            return;
        }
    }
}

/// Whether a consumer deletion failed because there was no such consumer (it is gone
/// either way).
pub fn consumer_missing(e: &ConsumerError) -> bool {
    matches!(e.kind(), ConsumerErrorKind::JetStream(j) if j.error_code() == ErrorCode::CONSUMER_NOT_FOUND)
}

/// How long a pull waits for messages. A pull open at the stop holds what it still brings
/// until it expires (see `hand_back_rest`), so this bounds how late that is handed on and
/// how much longer a stop takes (a second; two if the server's word that the pull ended is
/// lost). A second is under the scheduler's lead, so fires dispatched ahead still start on
/// time. An idle consumer asks again every second: a small cost.
pub const EXPIRES: Duration = Duration::from_secs(1);

/// How much one pull asks for, and how long it waits for it.
pub struct PullLimits {
    pub max_batch: usize,
    pub expires: Duration,
}

/// Hands each message pulled to `start` with the slot it holds, until `cancel` or the
/// slots are closed (`Ok`), or a pull cannot be made (`Err`: the caller decides when to
/// try again). A message that arrives without a free slot is left to its redelivery; one
/// that arrives after `cancel` is handed back when the pull ends (see `hand_back_rest`).
pub async fn pull_into_slots(
    consumer: &PullConsumer,
    slots: &Arc<Semaphore>,
    limits: &PullLimits,
    cancel: &CancellationToken,
    mut start: impl FnMut(Message, OwnedSemaphorePermit),
) -> Result<(), BatchError> {
    loop {
        let first = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => return Ok(()) },
        };
        let mut permits = vec![first];
        while permits.len() < limits.max_batch {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        // Raced against the stop: with NATS away the request waits for the connection.
        let mut batch = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            batch = consumer.batch().max_messages(permits.len()).expires(limits.expires).messages() => batch?,
        };
        loop {
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    hand_back_rest(&mut batch, limits.expires).await;
                    return Ok(());
                }
                next = batch.next() => next,
            };
            let msg = match next {
                Some(Ok(msg)) => msg,
                // The batch ends; the next pull asks again, after a pause: an error that
                // repeats (the consumer deleted) must not spin.
                Some(Err(e)) => {
                    debug!("pulling from {}: {e}", consumer.cached_info().name);
                    tokio::time::sleep(ERROR_PAUSE).await;
                    break;
                }
                None => break,
            };
            let Some(permit) = permits.pop() else { break };
            start(msg, permit);
        }
    }
}

/// Hands back what a pull cut short by the stop still brings. The request stays open at
/// the server until it expires, and a message it delivers to an inbox no longer read would
/// wait out the consumer's whole ack wait before anyone else could have it. So the rest is
/// read until the pull ends (bounded by `expires` and a second) and then nak'ed, each
/// message once: nak'ed at once, it would come straight back to this same open request.
async fn hand_back_rest(batch: &mut Batch, expires: Duration) {
    let mut rest = Vec::new();
    let read = async {
        while let Some(next) = batch.next().await {
            rest.extend(next.ok());
        }
    };
    let _ = tokio::time::timeout(expires + Duration::from_secs(1), read).await;
    for msg in rest {
        let _ = msg.ack_with(AckKind::Nak(None)).await;
    }
}
