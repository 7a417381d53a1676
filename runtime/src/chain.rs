//! Chains (`spec::after`): the end of a run starts one run of each job chained after its
//! job.
//!
//! The runs bucket is the truth of how runs end, so chains follow it, not the events
//! (which are published without acknowledgement). Agents with the scheduler role share one
//! durable consumer, `chains`, of the bucket's stream: every write of a run record passes
//! by one agent, whichever are up. A record in a final state whose job has downstream jobs
//! (the catalog's `after` index) dispatches one run of each downstream whose `on` matches,
//! under a run id derived from the upstream run (`record::chain_run_id`). Dispatch is
//! create-if-absent with `Nats-Msg-Id`, as for fires, so a redelivery, or an agent that
//! dies between the dispatch and the ack, starts nothing twice. A write whose dispatches
//! fail is handed back and tried again a second later, for as long as it takes.
//!
//! The consumer exists only while some job has `after`: created for new writes when the
//! first such job appears, deleted when the last goes. A deployment without chains pays
//! nothing, and a consumer left behind cannot replay old runs into a chain added later.
//! A chain added (or removed) applies to the runs that end after the agents have seen it.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::dispatch::{DispatchMsg, Outcome, dispatch_with_input};
use crate::error::Error;
use crate::model::roles::CHAIN_CONSUMER;
use crate::record::{RunRecord, Trigger, chain_run_id};
use crate::store::Store;
use crate::store::pull::{PullLimits, pull_into_slots};

/// Record writes handled at once by one agent.
const CONCURRENCY: usize = 64;
/// How often the catalog is looked at for the first or last `after`.
const LOOK_EVERY: Duration = Duration::from_secs(1);

struct Chainer {
    store: Store,
    catalog: Catalog,
    clock: SharedClock,
}

/// Starts chained runs until `cancel`.
pub async fn run(store: Store, catalog: Catalog, clock: SharedClock, cancel: CancellationToken) {
    let chainer = Arc::new(Chainer { store, catalog, clock });
    let slots = Arc::new(Semaphore::new(CONCURRENCY));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = until(|| chainer.catalog.has_chains()) => {}
        }
        match consumer(&chainer.store).await {
            Ok(consumer) => {
                info!("chains: following run records");
                let pulled = tokio::select! {
                    _ = cancel.cancelled() => return,
                    pulled = chainer.clone().pull(consumer, slots.clone(), &cancel) => pulled,
                    _ = until(|| !chainer.catalog.has_chains()) => {
                        chainer.delete_consumer().await;
                        Ok(())
                    }
                };
                if let Err(e) = pulled {
                    warn!("chains: pulling run records: {e}");
                }
            }
            Err(e) => warn!("chains: {e}; trying again"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// Returns once `holds` is true, looking every `LOOK_EVERY`.
async fn until(holds: impl Fn() -> bool) {
    while !holds() {
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

fn runs_stream(store: &Store) -> String {
    format!("KV_{}", store.names.runs_bucket())
}

/// The shared consumer of every run record write from its creation on.
async fn consumer(store: &Store) -> Result<PullConsumer, Error> {
    let stream =
        store.js.get_stream(runs_stream(store)).await.map_err(|e| Error::nats("opening the runs stream", e))?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(CHAIN_CONSUMER.into()),
            description: Some("cronrun chains".into()),
            filter_subject: format!("$KV.{}.>", store.names.runs_bucket()),
            deliver_policy: DeliverPolicy::New,
            ack_policy: AckPolicy::Explicit,
            // A write takes a few KV operations; one held by an agent that died is
            // handed to another after this.
            ack_wait: Duration::from_secs(10),
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .map_err(|e| Error::nats("opening the chains consumer", e))
}

impl Chainer {
    async fn pull(
        self: Arc<Self>,
        consumer: PullConsumer,
        slots: Arc<Semaphore>,
        cancel: &CancellationToken,
    ) -> Result<(), async_nats::jetstream::consumer::pull::BatchError> {
        let limits = PullLimits { max_batch: usize::MAX, expires: Duration::from_secs(5) };
        pull_into_slots(&consumer, &slots, &limits, cancel, |msg, permit| {
            let chainer = self.clone();
            tokio::spawn(async move {
                chainer.handle(msg).await;
                drop(permit);
            });
        })
        .await
    }

    async fn delete_consumer(&self) {
        let deleted = match self.store.js.get_stream(runs_stream(&self.store)).await {
            Ok(stream) => stream.delete_consumer(CHAIN_CONSUMER).await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match deleted {
            Ok(()) => info!("chains: no job has `after` any more; consumer deleted"),
            Err(e) => debug!("chains: deleting the consumer: {e}"),
        }
    }

    async fn handle(&self, msg: async_nats::jetstream::Message) {
        // Deletes and purges (history pruning) carry a KV-Operation header and no record.
        let removal = msg.headers.as_ref().is_some_and(|h| h.get("KV-Operation").is_some());
        let record = match RunRecord::from_json(&msg.payload) {
            Ok(record) if !removal => record,
            _ => return ack(&msg, AckKind::Ack).await,
        };
        let kind = match self.start_downstream(&record).await {
            Ok(()) => AckKind::Ack,
            Err(e) => {
                warn!(job = %record.job, run = %record.run_id, "chains: starting the runs after this one: {e}; trying again");
                AckKind::Nak(Some(Duration::from_secs(1)))
            }
        };
        ack(&msg, kind).await;
    }

    /// Dispatches the runs that `record`'s end starts, if it is an end.
    async fn start_downstream(&self, record: &RunRecord) -> Result<(), Error> {
        if !record.status.is_final() {
            return Ok(());
        }
        for (downstream, on) in self.catalog.downstream_of(&record.job) {
            if on.matches(record.status) {
                self.start(record, &downstream).await?;
            }
        }
        Ok(())
    }

    async fn start(&self, upstream: &RunRecord, job: &str) -> Result<(), Error> {
        let Some(entry) = self.catalog.get(job) else { return Ok(()) };
        let Ok(summary) = &entry.summary else {
            warn!(job, upstream = %upstream.job, "chains: the job's spec is invalid; no run started");
            return Ok(());
        };
        let now = self.clock.now();
        let msg = chained_run(upstream, job, entry.revision, now);
        let outcome = dispatch_with_input(&self.store, &summary.pool, &msg, Some(input_of(upstream)), now).await?;
        if outcome == Outcome::Dispatched {
            info!(job, run = %msg.run_id, upstream = %upstream.job, upstream_run = %upstream.run_id, "chained run dispatched");
        }
        Ok(())
    }
}

/// The run of `job` that the end of `upstream` starts: its id fixed by the upstream run,
/// due at once (`scheduled_at` is the upstream's end, so its lateness counts the hop).
fn chained_run(upstream: &RunRecord, job: &str, revision: u64, now: DateTime<Utc>) -> DispatchMsg {
    let fire = upstream.scheduled_at.unwrap_or(now);
    DispatchMsg {
        job: job.to_string(),
        run_id: chain_run_id(fire, &upstream.job, &upstream.run_id),
        attempt: 1,
        trigger: Trigger::Chain,
        scheduled_at: upstream.finished_at.unwrap_or(now),
        spec_revision: revision,
        queued: None,
    }
}

/// What a chained run is given (its `input`): the upstream run and how it ended.
fn input_of(upstream: &RunRecord) -> serde_json::Value {
    json!({ "after": {
        "job": upstream.job,
        "run_id": upstream.run_id,
        "status": upstream.status.as_str(),
        "exit_code": upstream.exit_code,
        "error": upstream.error,
        "finished_at": upstream.finished_at,
    }})
}

async fn ack(msg: &async_nats::jetstream::Message, kind: AckKind) {
    if let Err(e) = msg.ack_with(kind).await {
        debug!("chains: ack: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Status;
    use chrono::TimeZone;

    #[test]
    fn a_chained_run_is_fixed_by_its_upstream_run_and_carries_how_it_ended() {
        let fire = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
        let mut upstream = RunRecord::queued("extract", "20261123T080000Z", Trigger::Schedule, fire, 3);
        (upstream.status, upstream.exit_code, upstream.error) = (Status::Failed, Some(2), Some("exit status 2".into()));
        upstream.finished_at = Some(fire + chrono::TimeDelta::seconds(5));
        let (t1, t2) = (fire + chrono::TimeDelta::seconds(6), fire + chrono::TimeDelta::seconds(90));
        let (first, again) = (chained_run(&upstream, "load", 7, t1), chained_run(&upstream, "load", 7, t2));
        assert_eq!(first, again, "a redelivery an hour later is the same run");
        assert_eq!((first.trigger, first.attempt, first.spec_revision), (Trigger::Chain, 1, 7));
        assert_eq!(first.scheduled_at, fire + chrono::TimeDelta::seconds(5));
        assert_eq!(first.run_id, chain_run_id(fire, "extract", "20261123T080000Z"));
        let other = RunRecord { run_id: "20261123T080000Z-m0001".into(), ..upstream.clone() };
        assert_ne!(chained_run(&other, "load", 7, t1).run_id, first.run_id);
        let input = input_of(&upstream);
        assert_eq!(input["after"]["status"], "failed");
        assert_eq!(input["after"]["exit_code"], 2);
        assert_eq!(input["after"]["run_id"], "20261123T080000Z");
    }
}
