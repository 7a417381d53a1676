//! Message triggers (`spec::on`): one run per message on a job's subject.
//!
//! Messages are kept by the `<NS>_MESSAGES` stream (`store::messages`). Each job with `on`
//! has a durable consumer, `on-<job>`, filtered on its subject and shared by the agents
//! with the scheduler role: the server hands each message to one of them, and holds at
//! most `on.concurrency` unacknowledged (`max_ack_pending`): the job's concurrency across
//! all runners.
//!
//! The agent that got a message holds it (progress acks) until its run ends:
//! - the run's id is fixed by the message (`record::message_run_id`), created if absent
//!   and dispatched with `Nats-Msg-Id` as fires are, so a redelivered message finds its
//!   run instead of starting another;
//! - succeeded: the message is acked;
//! - lost (its runner died): run again as the next attempt by the reaper
//!   (`scheduler::recovery::expiry`), while the run has had at most `on.redeliver` attempts; skipped
//!   (a held lock, the previous run still ending): the same, after 2 s, 4 s, ... a minute;
//! - otherwise (failed or timed out with its `retries` spent, cancelled, run again too
//!   often, or too big to be an input): published to `<ns>.dead.<job>` with headers saying
//!   why, then acked.
//!
//! An agent that dies holding a message: the server hands it to another after `ACK_WAIT`,
//! which finds the run and goes on from where it is. A paused job's consumer is not pulled
//! from (its messages wait in the stream); a job that loses its `on` or is removed has its
//! consumer deleted. Which jobs are followed is looked at again when the catalog signals a
//! change (`Catalog::trigger_changes`: a job gained, changed or lost its `on`, or one with
//! `on` was paused, resumed or removed), so such a change applies at once.
//!
//! - `mod.rs`: which jobs are followed, their consumers, pulling into `concurrency` slots;
//! - `handle.rs`: one message, from its run's dispatch to its ack or dead letter.

mod handle;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::spec::on::OnMessage;
use crate::store::Store;
use crate::store::pull::{EXPIRES, PullLimits, consumer_missing, pull_into_slots, until_gone};

/// How long a message held by an agent that stopped answering waits for another.
const ACK_WAIT: Duration = Duration::from_secs(30);
/// How often a held message is said to be in progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// How long after a failure (the catalog or NATS not answering) it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest wait for a change: a bound only, since every change the followed jobs
/// depend on is signalled (and a following task that ends wakes the wait too).
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(60);
/// How often a job's consumer is checked to still exist.
const CHECK_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Ctx {
    store: Store,
    catalog: Catalog,
    clock: SharedClock,
}

/// One job followed: its trigger and the task pulling its messages.
struct Following {
    on: OnMessage,
    task: JoinHandle<()>,
}

/// Message triggers as a trigger (see `trigger`): the scheduler runs them as one of its
/// tasks.
pub struct MessageTriggers {
    pub store: Store,
    pub catalog: Catalog,
    pub clock: SharedClock,
}

impl crate::trigger::Trigger for MessageTriggers {
    const KIND: crate::record::Trigger = crate::record::Trigger::Message;
}

impl crate::trigger::Follows for MessageTriggers {
    const TASK: &'static str = "the message triggers";
    fn run(self, cancel: CancellationToken) -> impl std::future::Future<Output = ()> + Send + 'static {
        run(self.store, self.catalog, self.clock, cancel)
    }
}

/// Follows every job with `on` until `cancel`.
pub async fn run(store: Store, catalog: Catalog, clock: SharedClock, cancel: CancellationToken) {
    tokio::select! {
        _ = cancel.cancelled() => return,
        _ = catalog.wait_loaded() => {}
    }
    let mut changes = catalog.trigger_changes();
    let ctx = Ctx { store, catalog, clock };
    let mut following: HashMap<String, Following> = HashMap::new();
    // Consumers whose job may have lost its `on`: at start, every one there is.
    let mut to_check: Vec<String> = existing_consumers(&ctx.store).await;
    loop {
        // Before reading the catalog: a change made while it is read wakes the wait below.
        changes.seen();
        let now = ctx.catalog.listeners();
        // Whether each listening job is paused; None when it is gone or invalid. A spec
        // that cannot be read now (NATS away) leaves the job as it is: followed or not.
        let mut paused_now = HashMap::new();
        let mut unread = false;
        for job in now.keys() {
            let paused = match ctx.catalog.get(job).await {
                Ok(found) => found.and_then(|j| j.summary.as_ref().ok().map(|s| s.paused)),
                Err(_) => {
                    unread = true;
                    Some(!following.contains_key(job))
                }
            };
            paused_now.insert(job.clone(), paused);
        }
        let paused = |job: &str| paused_now.get(job).copied().flatten();
        following.retain(|job, f| {
            let keep = now.get(job) == Some(&f.on) && paused(job) == Some(false) && !f.task.is_finished();
            if f.task.is_finished() && !cancel.is_cancelled() {
                warn!(job, "messages: the task following the job ended; starting it again");
            }
            if !keep {
                // Aborted, not only told: a consumer creation in flight must not land
                // after a deletion or a newer one. Messages in hand are seen through.
                f.task.abort();
                // Gone or unreadable too: the catalog's feed may show a job removed before
                // its shard's leader drops its `on` from the index (checked below, so an
                // unreadable one keeps its consumer).
                if !now.contains_key(job) || paused(job).is_none() {
                    to_check.push(job.clone());
                }
            }
            keep
        });
        // A job gone, or whose valid spec has no `on`, loses its consumer; one whose spec
        // is unreadable (a newer version's?) keeps it, and its messages.
        let mut still = Vec::new();
        for job in to_check.drain(..) {
            let unheard = match ctx.catalog.get(&job).await {
                Ok(None) => true,
                Ok(Some(entry)) => entry.summary.as_ref().is_ok_and(|s| s.on().is_none()),
                // Looked at again next time.
                Err(_) => {
                    still.push(job);
                    continue;
                }
            };
            if unheard && !delete_consumer(&ctx.store, &job).await {
                still.push(job);
            }
        }
        to_check = still;
        for (job, on) in &now {
            if !following.contains_key(job) && paused(job) == Some(false) {
                let task = tokio::spawn(follow(ctx.clone(), job.clone(), on.clone(), cancel.clone()));
                following.insert(job.clone(), Following { on: on.clone(), task });
            }
        }
        // Something not done for want of an answer is tried again soon; otherwise nothing
        // changes until the catalog says so (or a following task ends).
        let wait = if unread || !to_check.is_empty() { RETRY_AFTER } else { LOOK_AT_LEAST_EVERY };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = changes.changed() => {}
            _ = any_ended(&mut following) => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
    // Each hands back what its pull still brings (see `store::pull`) before the agent exits.
    let tasks = following.into_values().map(|f| f.task);
    let _ = tokio::time::timeout(Duration::from_secs(2), futures::future::join_all(tasks)).await;
}

/// Returns when one of the tasks following a job ends (never while there is none); the
/// loop then starts it again.
async fn any_ended(following: &mut HashMap<String, Following>) {
    if following.is_empty() {
        return std::future::pending().await;
    }
    // How it ended does not matter (the loop says so); each task is taken out of
    // `following` once it has ended, so none is polled after.
    let _ = futures::future::select_all(following.values_mut().map(|f| &mut f.task)).await;
}

/// The jobs that have a consumer on the messages stream now.
async fn existing_consumers(store: &Store) -> Vec<String> {
    let Ok(stream) = store.js.get_stream(store.names.messages_stream()).await else { return Vec::new() };
    let names: Vec<String> = stream.consumer_names().filter_map(|n| async move { n.ok() }).collect().await;
    names.iter().filter_map(|n| n.strip_prefix("on-").map(str::to_string)).collect()
}

/// True once the job's consumer is gone (deleted now, or not there).
async fn delete_consumer(store: &Store, job: &str) -> bool {
    let name = store.names.message_consumer(job);
    let stream = match store.js.get_stream(store.names.messages_stream()).await {
        Ok(stream) => stream,
        Err(e) => {
            debug!(job, "messages: no stream to delete {name} from: {e}");
            return true;
        }
    };
    match stream.delete_consumer(&name).await {
        Ok(_) => {
            info!(job, "messages: the job no longer has `on`; its consumer is deleted");
            true
        }
        Err(e) if consumer_missing(&e) => true,
        Err(e) => {
            warn!(job, "messages: deleting consumer {name}: {e}; trying again");
            false
        }
    }
}

/// Pulls the messages of `job` into its concurrency's slots until aborted or `stop`. Each
/// message in hand is seen through to its run's end, unless the agent stops (`stop`).
async fn follow(ctx: Ctx, job: String, on: OnMessage, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(on.concurrency as usize));
    let limits = PullLimits { max_batch: on.concurrency as usize, expires: EXPIRES };
    loop {
        match consumer(&ctx.store, &job, &on).await {
            Ok(consumer) => {
                info!(job, subject = %on.subject, "messages: following the job's subject");
                let pulled = pull_into_slots(&consumer, &slots, &limits, &stop, |msg, permit| {
                    let (ctx, job, on, stop) = (ctx.clone(), job.clone(), on.clone(), stop.clone());
                    tokio::spawn(async move {
                        handle::handle(&ctx, &job, &on, msg, &stop).await;
                        drop(permit);
                    });
                });
                tokio::select! {
                    pulled = pulled => if let Err(e) = pulled {
                        warn!(job, "messages: pulling: {e}");
                    },
                    _ = until_gone(&consumer, CHECK_EVERY) => warn!(job, "messages: the consumer was deleted; making it again"),
                }
            }
            Err(e) => warn!(job, "messages: {e}; trying again"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RETRY_AFTER) => {}
        }
    }
}

/// The job's consumer, created for messages from now on, its settings brought up to `on`.
async fn consumer(store: &Store, job: &str, on: &OnMessage) -> Result<PullConsumer, Error> {
    let stream = store
        .js
        .get_stream(store.names.messages_stream())
        .await
        .map_err(|e| Error::nats("opening the messages stream (made by `cronrun apply`)", e))?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(store.names.message_consumer(job)),
            description: Some(format!("cronrun: runs of {job} per message")),
            filter_subject: on.subject.clone(),
            deliver_policy: DeliverPolicy::New,
            ack_policy: AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            max_ack_pending: i64::from(on.concurrency),
            ..Default::default()
        })
        .await
        .map_err(|e| Error::nats("opening the job's message consumer", e))
}
