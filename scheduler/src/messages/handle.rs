//! One message of a job with `on`: its run dispatched (or found), followed to its end, and
//! the message acked or published as a dead letter (see the parent module).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{AckKind, Message};
use base64::Engine;
use chrono::DateTime;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Ctx, MessageTriggers, PROGRESS_EVERY};
use crate::dispatch::{publish_queued, queue_retry};
use crate::error::{Error, ErrorKind};
use crate::events::publish_event;
use crate::names::lease_keys;
use crate::record::{MAX_INPUT_BYTES, RunRecord, Status, message_run_id, run_key};
use crate::spec::on::OnMessage;
use crate::store::{MESSAGES_MAX_AGE, Store, StoredRun};
use crate::trigger::Trigger as _;

/// The longest wait before a message's run is run again.
const MAX_RUN_AGAIN_WAIT: Duration = Duration::from_secs(60);

/// What the end (or not) of a message's run means for the message.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// The run is queued or running.
    Wait,
    /// It succeeded: the message is done with.
    Ack,
    /// It did not run (lost, skipped) and may have another attempt.
    RunAgain,
    /// It ended for good without success: the message goes to the dead-letter subject.
    DeadLetter(String),
}

fn decide(record: &RunRecord, on: &OnMessage) -> Next {
    match record.status {
        Status::Queued | Status::Running => Next::Wait,
        Status::Succeeded => Next::Ack,
        Status::Lost | Status::Skipped if record.attempt <= on.redeliver => Next::RunAgain,
        status => {
            let why = record.error.as_deref().unwrap_or(status.as_str());
            Next::DeadLetter(format!("{} after {} attempts: {why}", status.as_str(), record.attempt))
        }
    }
}

pub(super) async fn handle(ctx: &Ctx, job: &str, on: &OnMessage, msg: Message, stop: &CancellationToken) {
    let outcome = tokio::select! {
        // Not acked: the message goes to an agent that follows the job after `ACK_WAIT`.
        _ = stop.cancelled() => return,
        outcome = start_and_follow(ctx, job, on, &msg) => outcome,
    };
    // Acks the server confirms: one lost would have the message looked at again, and its
    // run's record may be pruned by then.
    let ack = match outcome {
        Ok(None) => msg.double_ack().await,
        Ok(Some((why, run))) => match dead_letter(&ctx.store, job, &msg, &why, &run).await {
            Ok(()) => msg.double_ack().await,
            Err(e) => {
                warn!(job, run, "messages: dead letter not published: {e}; trying again");
                msg.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await
            }
        },
        Err(e) => {
            warn!(job, "messages: {e}; trying again");
            msg.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await
        }
    };
    if let Err(e) = ack {
        debug!(job, "messages: ack: {e}");
    }
}

/// Starts the message's run if it has none, and follows it to its end. Ok(None): ack;
/// Ok(Some((why, run key))): to the dead-letter subject.
async fn start_and_follow(
    ctx: &Ctx,
    job: &str,
    on: &OnMessage,
    msg: &Message,
) -> Result<Option<(String, String)>, Error> {
    let info = msg.info().map_err(|e| Error::nats_boxed("reading a message's metadata", e))?;
    let published = DateTime::from_timestamp_millis((info.published.unix_timestamp_nanos() / 1_000_000) as i64)
        .ok_or_else(|| Error::nats_msg("reading a message's metadata", "publish time out of range"))?;
    let run_id = message_run_id(published, info.stream_sequence);
    let key = run_key(job, &run_id);
    let Some(entry) = ctx.catalog.get(job).await? else { return Ok(Some(("the job was removed".into(), key))) };
    let Ok(summary) = &entry.summary else { return Ok(Some(("the job's spec is invalid".into(), key))) };
    let marker = lease_keys::message(job, &run_id);
    let mut stored = match ctx.store.get_run(job, &run_id).await {
        Ok(stored) => stored,
        // Dispatched once, and its record since pruned: it ended.
        Err(e) if e.is_not_found() && ctx.store.leases.get(&marker).await?.is_some() => return Ok(None),
        Err(e) if e.is_not_found() => {
            let input = match message_input(msg, ctx.store.record_budget) {
                Ok(input) => input,
                Err(too_big) => return Ok(Some((too_big.to_string(), key))),
            };
            let d = MessageTriggers::first(job, run_id.clone(), published, entry.revision);
            MessageTriggers::start(&ctx.store, &summary.pool, &d, Some(input), ctx.clock.now()).await?;
            match ctx.store.leases.create(&marker, "".into(), Some(MESSAGES_MAX_AGE)).await {
                Err(e) if !e.is_conflict() && *e.kind() != ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
            match ctx.store.get_run(job, &run_id).await {
                Ok(stored) => stored,
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    let mut progress = tokio::time::interval(PROGRESS_EVERY);
    loop {
        match decide(&stored.record, on) {
            Next::Ack => return Ok(None),
            Next::DeadLetter(why) => return Ok(Some((why, key))),
            Next::RunAgain => {
                let now = ctx.clock.now();
                // After a pause: what skipped it (a run still ending, a lock) needs time.
                let wait = Duration::from_secs(1 << stored.record.attempt.min(6)).min(MAX_RUN_AGAIN_WAIT);
                info!(job, run = %run_id, status = stored.record.status.as_str(), ?wait, "messages: running the message again");
                let current = ctx.catalog.get(job).await.ok().flatten();
                let pool = match current.as_deref().map(|e| &e.summary) {
                    Some(Ok(now)) => now.pool.clone(),
                    _ => summary.pool.clone(),
                };
                let (queued, retrying) = queue_retry(&ctx.store, stored.record, stored.revision, now).await?;
                stored = StoredRun { record: queued.record.clone(), revision: queued.revision };
                let start_at = now + chrono::TimeDelta::from_std(wait).unwrap_or_default();
                publish_event(&ctx.store, &retrying).await;
                publish_queued(&ctx.store, &pool, queued, start_at).await?;
            }
            Next::Wait => match changed(ctx, job, &run_id, stored, msg, &mut progress).await? {
                Some(next) => stored = next,
                // Pruned: only a final record is.
                None => return Ok(None),
            },
        }
    }
}

/// The run's record once it differs from `stored`, the message said in progress meanwhile;
/// None once it is removed (pruned, so it had ended).
async fn changed(
    ctx: &Ctx,
    job: &str,
    run_id: &str,
    stored: StoredRun,
    msg: &Message,
    progress: &mut tokio::time::Interval,
) -> Result<Option<StoredRun>, Error> {
    let mut watch = ctx.store.runs.watch(&run_key(job, run_id)).await?;
    loop {
        tokio::select! {
            _ = progress.tick() => {
                if let Err(e) = msg.ack_with(AckKind::Progress).await {
                    debug!(job, "messages: progress: {e}");
                }
            }
            change = watch.next() => {
                let change = change.ok_or_else(|| Error::nats_msg("watching a run record", "ended"))??;
                let Some(value) = change.value else { return Ok(None) };
                if change.revision > stored.revision {
                    return Ok(Some(StoredRun { record: RunRecord::from_json(&value)?, revision: change.revision }));
                }
            }
        }
    }
}

/// A message too big to be a run's input: the dead letter says so.
#[derive(Debug, thiserror::Error)]
#[error("the message is {size} bytes as a run's input, over the limit of {limit}")]
struct InputTooBig {
    size: usize,
    limit: usize,
}

/// The input of a message's run: its subject, headers and payload (text, or base64 when
/// the payload is not UTF-8).
fn message_input(msg: &Message, record_budget: usize) -> Result<Value, InputTooBig> {
    let headers: serde_json::Map<String, Value> = msg
        .headers
        .iter()
        .flat_map(HeaderMap::iter)
        .map(|(name, values)| (name.to_string(), json!(values.iter().map(|v| v.as_str()).collect::<Vec<_>>())))
        .collect();
    let mut input = json!({ "subject": msg.subject.as_str(), "headers": headers });
    match std::str::from_utf8(&msg.payload) {
        Ok(text) => input["payload"] = json!(text),
        Err(_) => input["payload_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&msg.payload)),
    }
    let size = input.to_string().len();
    let limit = MAX_INPUT_BYTES.min(record_budget / 2);
    if size > limit {
        return Err(InputTooBig { size, limit });
    }
    Ok(input)
}

/// The longest a dead letter waits to be sent.
const DEAD_LETTER_SEND: Duration = Duration::from_secs(5);

/// Publishes the message to `<ns>.dead.<job>`: its payload and headers, and `Cronrun-*`
/// headers naming its subject, run and why.
async fn dead_letter(store: &Store, job: &str, msg: &Message, why: &str, run: &str) -> Result<(), Error> {
    let one_line = |s: &str| s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(512).collect::<String>();
    // The server's own headers (`Nats-Msg-Id`, `Nats-Expected-*`, `Nats-Rollup`, ...) would
    // act again on a stream that keeps dead letters: they are left out.
    let mut headers = HeaderMap::new();
    for (name, values) in msg.headers.iter().flat_map(HeaderMap::iter) {
        let name_text: &str = name.as_ref();
        if !name_text.to_ascii_lowercase().starts_with("nats-") {
            for value in values {
                headers.append(name.clone(), value.clone());
            }
        }
    }
    headers.insert("Cronrun-Subject", msg.subject.as_str());
    headers.insert("Cronrun-Run", run);
    headers.insert("Cronrun-Error", one_line(why).as_str());
    let subject = store.names.dead_letter_subject(job);
    warn!(job, run, "messages: to {subject}: {why}");
    // Bounded: with NATS away the client stops taking messages once its buffer is full,
    // and a flush waits for NATS to return, holding the message's handler. Not sent in
    // time, the message is redelivered and dead-lettered again.
    let send = async {
        let publish = store.client.publish_with_headers(subject, headers, msg.payload.clone());
        publish.await.map_err(|e| Error::nats("publishing a dead letter", e))?;
        store.client.flush().await.map_err(|e| Error::nats("publishing a dead letter", e))
    };
    match tokio::time::timeout(DEAD_LETTER_SEND, send).await {
        Ok(sent) => sent,
        Err(_) => Err(Error::nats_msg("publishing a dead letter", format!("not sent within {DEAD_LETTER_SEND:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_message_is_acked_run_again_or_dead_lettered_by_how_its_run_ended() {
        let t = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
        let on = OnMessage { subject: "orders.created".into(), concurrency: 1, redeliver: 2 };
        let record = |status: Status, attempt: u32| {
            let mut r = RunRecord::queued("orders", &message_run_id(t, 7), crate::record::Trigger::Message, t, 1);
            (r.status, r.attempt) = (status, attempt);
            r
        };
        let cases = [
            (Status::Queued, 1, Next::Wait),
            (Status::Running, 3, Next::Wait),
            (Status::Succeeded, 3, Next::Ack),
            (Status::Lost, 1, Next::RunAgain),
            (Status::Skipped, 2, Next::RunAgain),
            (Status::Lost, 3, Next::DeadLetter("lost after 3 attempts: lost".into())),
            (Status::Failed, 1, Next::DeadLetter("failed after 1 attempts: failed".into())),
            (Status::TimedOut, 1, Next::DeadLetter("timed_out after 1 attempts: timed_out".into())),
            (Status::Cancelled, 1, Next::DeadLetter("cancelled after 1 attempts: cancelled".into())),
        ];
        for (status, attempt, next) in cases {
            assert_eq!(decide(&record(status, attempt), &on), next, "{status:?} attempt {attempt}");
        }
    }
}
