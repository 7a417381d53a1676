//! What the lease holder does: keep the fire queue, dispatch due fires ahead of their
//! instant, renew the lease and move the watermark.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::catchup;
use super::in_flight::fire;
use super::keeping::{Keeping, Mark};
use super::leading::{Followed, Lead, Ports, lead_loop};
use super::plan::{Action, Planner, Record};
use super::queue::{Due, FireQueue};
use crate::catalog::CatalogJob;
use crate::error::Error;
use crate::names::lease_keys;
use crate::scheduler::SchedulerCtx;
use crate::scheduler::loading::index::{PublishedTriggers, ShardChange, ShardJobs};
use crate::scheduler::loading::loader::Loaded;
use crate::scheduler::loading::refresh::{Keeper, Written};
use crate::store::Store;
use crate::store::lease::Lease;

/// Where the watermark was read or last written: (instant, revision; 0 = absent).
struct Watermark {
    at: DateTime<Utc>,
    revision: u64,
}

/// The jobs a led shard adds to `cronrun_schedules_led`, taken back when it stops.
struct Counted(usize);

impl Counted {
    fn set(&mut self, jobs: usize) {
        if jobs != self.0 {
            crate::metrics::schedules_led(jobs as f64 - self.0 as f64);
            self.0 = jobs;
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// The shard being led.
pub(super) struct LedShard<'a> {
    pub n: u32,
    pub ctx: &'a SchedulerCtx,
}

/// The shard's watermark, moved by the lease keeping after each renewal.
struct ShardMark<'s, 'c> {
    s: &'s LedShard<'c>,
    watermark: Watermark,
}

impl Mark for ShardMark<'_, '_> {
    fn write(&mut self, low: DateTime<Utc>) -> impl Future<Output = Result<(), Error>> + Send {
        write_watermark(self.s, &mut self.watermark, low)
    }
}

/// Leads until cancelled (Ok) or until the lease is lost (Err).
pub(super) async fn lead(s: &LedShard<'_>, mut lease: Lease, cancel: &CancellationToken) -> Result<(), Error> {
    let mut watermark = read_watermark(s).await?;
    let now = s.ctx.clock.now();
    // Resume after the last dispatched fire. A shard never led before starts now, and
    // says so at once: a successor after a crash before the first renewal resumes here.
    let first_lead = watermark.revision == 0;
    if first_lead {
        write_watermark(s, &mut watermark, now).await?;
    }
    let from = watermark.at;
    let resume =
        Resume { from, led_before: (!first_lead).then_some((&s.ctx.store, now, s.ctx.config.default_deadline)) };
    let (queue, mut triggers, jobs, keeper) = match load(s, &mut lease, cancel, resume).await {
        Ok(Some(loaded)) => loaded,
        // Given up at once, so that another (or this one again) takes the shard now.
        outcome => {
            if let Err(e) = lease.release().await {
                warn!("releasing scheduler lease: {e}");
            }
            return outcome.map(|_| ());
        }
    };
    debug!(jobs = queue.len(), from = %from, watermark_revision = watermark.revision, "leading: fire queue built");
    publish_triggers(s, &mut triggers).await;
    let ports = LivePorts { s, triggers, jobs, keeper, publish_at: None, counted: Counted(0) };
    // Renewed beside the other arms (see `keeping.rs`): nothing is dispatched while the
    // lease may have run out, and a lease lost or renewed too late ends leading.
    let keeping = Keeping::new(lease, ShardMark { s, watermark });
    let (config, clock) = (&s.ctx.config, s.ctx.clock.clone());
    let planner = Planner::new(config.lead, s.ctx.shards, config.default_deadline);
    lead_loop(ports, queue, keeping, Lead { planner, max_in_flight: config.max_in_flight, clock }, cancel).await
}

/// The ports of a led shard: fires dispatched through NATS, its jobs followed in the
/// schedules index, its snapshot kept and its triggers published.
struct LivePorts<'s, 'c> {
    s: &'s LedShard<'c>,
    triggers: PublishedTriggers,
    jobs: ShardJobs,
    keeper: Keeper,
    /// When changed triggers are published next.
    publish_at: Option<Instant>,
    counted: Counted,
}

/// The upkeep of `LivePorts`.
enum LiveUpkeep {
    Written(Result<Written, tokio::task::JoinError>),
    PublishTriggers,
}

impl Ports for LivePorts<'_, '_> {
    type Upkeep = LiveUpkeep;

    fn act(&self, action: Action, now: DateTime<Utc>) -> impl Future<Output = ()> + Send + 'static {
        let (store, deadline) = (self.s.ctx.store.clone(), self.s.ctx.config.default_deadline);
        async move {
            match action {
                Action::Run(due, trigger) => fire(store, deadline, due, trigger, now).await,
                Action::Missed(due, why, record) => missed(store, due, why, record, now).await,
            }
        }
    }

    async fn next(&mut self) -> Followed<LiveUpkeep> {
        tokio::select! {
            change = self.jobs.next() => {
                match &change {
                    Ok(ShardChange::Put(job, value)) => {
                        self.keeper.note(job.name.clone(), job.revision, Some(value));
                        self.triggers.set(job);
                    }
                    Ok(ShardChange::Removed(name)) => {
                        self.keeper.note(name.as_str().into(), 0, None);
                        self.triggers.remove(name);
                    }
                    Err(_) => {}
                }
                // Changed triggers go out a moment later, many edits (an `apply`) in one write.
                self.publish_at = self.publish_at.or_else(|| self.triggers.dirty().then(|| Instant::now() + TRIGGERS_DELAY));
                Followed::Change(change)
            }
            ended = self.keeper.written(), if self.keeper.is_writing() => Followed::Upkeep(LiveUpkeep::Written(ended)),
            _ = tokio::time::sleep_until(self.publish_at.unwrap_or_else(Instant::now)), if self.publish_at.is_some() => {
                Followed::Upkeep(LiveUpkeep::PublishTriggers)
            }
        }
    }

    async fn upkeep(&mut self, due: LiveUpkeep) {
        match due {
            LiveUpkeep::Written(ended) => self.keeper.settle(ended),
            LiveUpkeep::PublishTriggers => {
                self.publish_at = None;
                publish_triggers(self.s, &mut self.triggers).await;
            }
        }
    }

    fn turn(&mut self, queue: &FireQueue) {
        self.counted.set(queue.len());
        self.keeper.write_if_due(self.jobs.last());
    }

    async fn renewal_due(&mut self, queue: &FireQueue) {
        self.s.ctx.next_fires.set(self.s.n, queue.next_fires(crate::metrics::NEXT_FIRE_SERIES_PER_SHARD));
        publish_triggers(self.s, &mut self.triggers).await;
    }

    async fn finish(self, until: Instant) {
        self.keeper.finish(self.jobs.last(), until).await;
    }
}

/// The shard's fire queue (each job as `resume` says), its triggers, the watch of its
/// jobs' changes and its snapshot's keeping; None when cancelled meanwhile. The lease is
/// renewed while they are read and queued: a pass over a large index takes seconds, and
/// so does queueing what it read (four agents on 10M schedules: once queued outside this,
/// and each in one go, every shard's lease ran out while its queue was built, and every
/// shard was read again).
async fn load(
    s: &LedShard<'_>,
    lease: &mut Lease,
    cancel: &CancellationToken,
    resume: Resume<'_>,
) -> Result<Option<(FireQueue, PublishedTriggers, ShardJobs, Keeper)>, Error> {
    let loading = async {
        let Loaded { jobs, after, kept } = s.ctx.loader.load(s.n).await?;
        let changes = ShardJobs::follow_after(&s.ctx.index, s.n, s.ctx.shards, after).await?;
        let keeper = Keeper::new(s.ctx.loader.snapshots(), s.n, kept);
        let (queue, triggers) = queued(s.n, jobs, &resume).await;
        // What reading and queueing freed (messages, decoded specs, grown buffers) goes
        // back to the system now, not whenever the allocator is next busy.
        crate::memory::give_back();
        Ok::<_, Error>((queue, triggers, changes, keeper))
    };
    tokio::pin!(loading);
    let mut renew = tokio::time::interval(s.ctx.config.lease_ttl / 3);
    renew.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            loaded = &mut loading => return loaded.map(Some),
            _ = renew.tick() => lease.renew().await?,
        }
    }
}

/// Where a leader starts each job's fires: from `from`, the watermark; or, when the shard
/// was led before (the store, now, the default deadline), as `catchup::resume_from` says.
struct Resume<'a> {
    from: DateTime<Utc>,
    led_before: Option<(&'a Store, DateTime<Utc>, Duration)>,
}

impl Resume<'_> {
    async fn start(&self, job: &CatalogJob) -> DateTime<Utc> {
        match (&job.summary, self.led_before) {
            (Ok(summary), Some((store, now, deadline))) => {
                catchup::resume_from(store, &job.name, summary, self.from, now, deadline).await
            }
            _ => self.from,
        }
    }
}

/// Shard `n`'s fire queue and triggers of `jobs`, each from where `resume` says. A shard
/// holds up to hundreds of thousands of jobs, and an agent queues its shards side by side:
/// the worker is given back to the runtime between jobs (tokio's budget), so that the
/// agent's other tasks, its leases' renewals among them, run meanwhile.
async fn queued(n: u32, jobs: Vec<Arc<CatalogJob>>, resume: &Resume<'_>) -> (FireQueue, PublishedTriggers) {
    let (mut queue, mut triggers) = (FireQueue::with_capacity(jobs.len()), PublishedTriggers::new(n));
    for job in super::queue::prefetching(jobs) {
        tokio::task::consume_budget().await;
        triggers.set(&job);
        let start = resume.start(&job).await;
        queue.upsert(job, start);
    }
    (queue, triggers)
}

/// How long changed triggers wait to be published with the changes that follow.
const TRIGGERS_DELAY: Duration = Duration::from_millis(50);

/// How long publishing the triggers may hold up dispatching (an election of the leases
/// bucket); given up, it is made again at the next renewal.
const TRIGGERS_MAX: Duration = Duration::from_millis(500);

/// Publishes the shard's triggers if they need it; a failure is tried again at the next
/// renewal.
async fn publish_triggers(s: &LedShard<'_>, triggers: &mut PublishedTriggers) {
    match tokio::time::timeout(TRIGGERS_MAX, triggers.publish(&s.ctx.store.leases, s.ctx.store.record_budget)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!("publishing the shard's triggers: {e}"),
        Err(_) => warn!("publishing the shard's triggers took over {TRIGGERS_MAX:?}: tried again at the next renewal"),
    }
}

/// Gives every shard never led a watermark at `now`, when the first scheduler starts: a
/// shard whose first leader comes late (agents starting together, a lease held by a task
/// that stopped) then resumes from here, and the fires of the gap are dispatched late or
/// recorded missed, never silently dropped. Existing watermarks are left as they are.
pub(in crate::scheduler) async fn seed_watermarks(store: &Store, shards: u32, now: DateTime<Utc>) -> Result<(), Error> {
    let body: bytes::Bytes =
        serde_json::to_vec(&now).map_err(|e| Error::other("encoding the first watermarks", e))?.into();
    let creates = (0..shards).map(|n| {
        let body = body.clone();
        async move {
            match store.leases.create(&lease_keys::watermark(n), body, None).await {
                Ok(_) => Ok(()),
                Err(e) if *e.kind() == crate::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e),
            }
        }
    });
    let results: Vec<Result<(), Error>> = futures::stream::iter(creates).buffer_unordered(64).collect().await;
    results.into_iter().collect()
}

async fn read_watermark(s: &LedShard<'_>) -> Result<Watermark, Error> {
    let key = lease_keys::watermark(s.n);
    Ok(match s.ctx.store.leases.get(&key).await? {
        Some(v) => Watermark {
            at: serde_json::from_slice(&v.value).unwrap_or_else(|_| s.ctx.clock.now()),
            revision: v.revision,
        },
        None => Watermark { at: s.ctx.clock.now(), revision: 0 },
    })
}

/// Moves the watermark forward by compare-and-set: a conflict means another scheduler
/// holds the shard now.
async fn write_watermark(s: &LedShard<'_>, w: &mut Watermark, at: DateTime<Utc>) -> Result<(), Error> {
    if at <= w.at && w.revision != 0 {
        return Ok(());
    }
    let key = lease_keys::watermark(s.n);
    let body = serde_json::to_vec(&at).map_err(|e| Error::other(&format!("encoding {key}"), e))?.into();
    w.revision = s.ctx.store.leases.update(&key, body, w.revision, None).await?;
    w.at = at;
    Ok(())
}

/// Records one missed fire as `record` says.
async fn missed(store: Store, due: Due, why: String, record: Record, now: DateTime<Utc>) {
    let (name, at) = (&due.job.name, due.fire);
    warn!(job = %name, fire = %at, "fire missed: {why}");
    let Some(summary) = due.summary() else { return };
    match record {
        Record::One => catchup::record_missed(&store, name, (due.job.revision, &summary.history), at, &why, now).await,
        Record::Summary => catchup::too_many_missed(&store, name, at, now).await,
        Record::Counted => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::spec::{JobSpec, ShellSpec};

    #[tokio::test]
    async fn queueing_a_shard_gives_way_to_the_agents_other_tasks() {
        // One thread: the task beside runs only when the queueing gives way.
        let queueing = Arc::new(AtomicBool::new(true));
        let beside = tokio::spawn({
            let queueing = queueing.clone();
            async move { queueing.load(Ordering::SeqCst) }
        });
        let shell = ShellSpec { command: Some("true".into()), ..Default::default() };
        let job =
            |i| Arc::new(CatalogJob::from_spec(&JobSpec::shell(&format!("job-{i}"), "*/5 * * * *", shell.clone()), 1));
        let from = DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
        let (queue, _) = queued(0, (0..2_000).map(job).collect(), &Resume { from, led_before: None }).await;
        queueing.store(false, Ordering::SeqCst);
        assert_eq!(queue.len(), 2_000);
        assert!(beside.await.unwrap(), "the task beside ran only once the queue was built");
    }
}
