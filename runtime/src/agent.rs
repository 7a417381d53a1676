//! An agent: the scheduler and/or runner of one host, sharing one catalog.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::config::{AgentConfig, Role};
use crate::error::Error;
use crate::http::Health;
use crate::names::Names;
use crate::retry::{Patience, retried};
use crate::runner::Runner;
use crate::scheduler::loader::Loader;
use crate::scheduler::snapshot::Snapshots;
use crate::scheduler::{Scheduler, SchedulerCtx};
use crate::store::{Bucket, Store};
use crate::watchdog::{Watched, describe};

/// What an orderly stop may take beyond the runner's `drain_timeout`: releasing shard
/// leases, final record writes and events, with NATS slow or gone.
pub const STOP_MARGIN: Duration = Duration::from_secs(15);

/// Runs until `cancel`; then the scheduler releases its leases, the runner drains, and the
/// function returns. The stop is bounded: past `drain_timeout + kill_grace + 2 s +
/// STOP_MARGIN` (NATS gone,
/// say) it gives up with an error, and runs left are recorded `lost` by whichever
/// scheduler sees their leases expire.
pub async fn run(
    client: async_nats::Client,
    config: AgentConfig,
    clock: SharedClock,
    cancel: CancellationToken,
) -> Result<(), Error> {
    // The drain, then TERM's grace and the supervisors' own kill (2 s) for what still runs.
    let bound = config.runner.drain_timeout + config.runner.kill_grace + Duration::from_secs(2) + STOP_MARGIN;
    // Installed before anything is counted: what is recorded earlier is lost.
    crate::metrics::handle();
    crate::metrics::set_job_series_max(config.http.metrics_jobs.unwrap_or(crate::metrics::JOB_SERIES_DEFAULT));
    // Before any run is dispatched or claimed: their spans would not be made.
    let telemetry = crate::telemetry::start(&config.telemetry, &config.name).map_err(|e| {
        Error::new(crate::ErrorKind::Other, format!("starting telemetry: {}", crate::telemetry::error_chain(&e)))
    })?;
    // The agent's services beside its roles: stopped after the roles, watched meanwhile.
    let services_stop = CancellationToken::new();
    let mut services = Watched::default();
    services.spawn("the metrics upkeep", crate::metrics::upkeep(services_stop.clone()));
    let health = Arc::new(Health::new(client.clone(), config.roles.len()));
    // Served from the start, so that /livez answers while the layout is awaited.
    if let Some(addr) = &config.http.listen {
        let dashboard = crate::dashboard::DashboardConfig {
            nats: config.nats.clone(),
            names: config.names()?,
            viewer_creds: config.http.viewer_creds.clone(),
            admin_creds: config.http.admin_creds.clone(),
            token_file: config.http.token_file.clone(),
            clock: clock.clone(),
        };
        let http = config.http.bound.as_deref();
        let bound =
            crate::http::serve(addr, http, health.clone(), dashboard, &mut services, services_stop.clone()).await?;
        info!("serving the dashboard, /livez, /readyz and /metrics at http://{bound}");
    }
    let work = run_roles(client, config, clock, health, cancel.clone());
    let result = until_stopped(work, &mut services, cancel, bound).await;
    services_stop.cancel();
    // Bounded: the HTTP listener waits for open requests, live output streams among them.
    if tokio::time::timeout(Duration::from_secs(2), services.join_all()).await.is_err() {
        warn!("the HTTP listener still had requests open 2 s after the stop");
    }
    // Last: the spans of the runs that ended in the stop go too.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    result
}

/// Runs the roles (`work`) to their end, bounded by `bound` once `cancel` is set. A service
/// that ends before (a panic, a failed listener) is a fault, as a role's would be: the
/// roles are told to stop, and the agent ends with the service's error.
async fn until_stopped(
    work: impl std::future::Future<Output = Result<(), Error>>,
    services: &mut Watched,
    cancel: CancellationToken,
    bound: Duration,
) -> Result<(), Error> {
    tokio::pin!(work);
    let over_time = async {
        cancel.cancelled().await;
        tokio::time::sleep(bound).await;
        error!("the agent did not stop within {bound:?} (is NATS reachable?); exiting with work unfinished");
        Err(Error::new(crate::ErrorKind::Other, format!("stop timed out after {bound:?}")))
    };
    tokio::pin!(over_time);
    let fault = tokio::select! {
        result = &mut work => return result,
        result = &mut over_time => return result,
        why = services.ended() => why,
    };
    error!("{fault}: stopping the agent");
    cancel.cancel();
    tokio::select! {
        _ = &mut work => {}
        result = &mut over_time => return result,
    }
    Err(Error::new(crate::ErrorKind::Other, fault))
}

/// Waits for a role's task. A role that ends before the agent is told to stop (an error,
/// a panic) stops the whole agent: a scheduler without a runner beside it, or the reverse,
/// would look alive to a service manager while doing half its work.
async fn watch_role(
    name: &str,
    task: Option<JoinHandle<Result<(), Error>>>,
    cancel: &CancellationToken,
) -> Result<(), Error> {
    let Some(task) = task else { return Ok(()) };
    let result = task.await.unwrap_or_else(|e| Err(Error::new(crate::ErrorKind::Other, describe(name, e))));
    if !cancel.is_cancelled() {
        match &result {
            Ok(()) => error!("the {name} stopped on its own: stopping the agent"),
            Err(e) => error!("the {name} failed: {e}: stopping the agent"),
        }
        cancel.cancel();
    }
    result
}

/// How long a runner waits at start for a scheduler (or an admin) to create the layout.
pub const LAYOUT_WAIT: Duration = Duration::from_secs(120);

/// The layout as a runner finds it: a runner's identity may not create streams, and on a
/// fresh deployment its scheduler may start a moment later. Waits at most `LAYOUT_WAIT`;
/// None if told to stop meanwhile.
async fn open_existing(
    client: async_nats::Client,
    names: Names,
    cancel: &CancellationToken,
) -> Result<Option<Store>, Error> {
    let mut said = false;
    let waiting = |e: &Error| {
        if !std::mem::replace(&mut said, true) {
            warn!("waiting for the layout: {e}");
        }
    };
    let patience = Patience { bound: LAYOUT_WAIT, pause: Duration::from_millis(500) };
    retried(patience, cancel, Error::is_not_found, waiting, || Store::open_existing(client.clone(), names.clone()))
        .await
}

/// Opens the schedules index (creating it if missing) and waits for it to hold every job.
/// After NATS trouble it tries again every second until `LAYOUT_WAIT` from the first try:
/// on a cluster, a stream another agent is creating at the same moment can be found by one
/// request and not by the next.
async fn open_index(store: &Store, shards: u32, cancel: &CancellationToken) -> Result<Bucket, Error> {
    let patience = Patience { bound: LAYOUT_WAIT, pause: Duration::from_secs(1) };
    let trouble = |e: &Error| *e.kind() == crate::ErrorKind::Nats;
    let said = |e: &Error| warn!("opening the schedules index: {e}; trying again");
    let opened = retried(patience, cancel, trouble, said, || async {
        let index = store.schedules_index(shards).await?;
        store.index_filled(&index, cancel).await.map(|()| index)
    });
    let index = opened
        .await?
        .ok_or_else(|| Error::new(crate::ErrorKind::Other, "stopped while opening the schedules index"))?;
    info!("the schedules index is ready");
    Ok(index)
}

/// How long a scheduler tries to open the index's snapshots before it goes without them.
const SNAPSHOTS_WAIT: Duration = Duration::from_secs(30);

/// The index's snapshots (created if missing), or None after `SNAPSHOTS_WAIT`: they only
/// spare the server passes over the index, and a scheduler given the permissions of a
/// version without them (its requests go unanswered) still schedules.
async fn open_snapshots(store: &Store, index: &Bucket, cancel: &CancellationToken) -> Option<Snapshots> {
    let patience = Patience { bound: SNAPSHOTS_WAIT, pause: Duration::from_secs(1) };
    let trouble = |e: &Error| *e.kind() == crate::ErrorKind::Nats;
    let said = |e: &Error| warn!("opening the schedules index's snapshots: {e}; trying again");
    match retried(patience, cancel, trouble, said, || store.snapshots_bucket(index)).await {
        Ok(bucket) => bucket.map(|b| Snapshots::new(b, store.client.server_info().max_payload)),
        Err(e) => {
            warn!(
                "no snapshots of the schedules index ({e}): shards are read from the whole index; if this \
                 identity lacks the rights, give nats-server this version's authorization (`cronrun auth init`)"
            );
            None
        }
    }
}

async fn run_roles(
    client: async_nats::Client,
    config: AgentConfig,
    clock: SharedClock,
    health: Arc<Health>,
    cancel: CancellationToken,
) -> Result<(), Error> {
    let names = config.names()?;
    let schedules = config.roles.contains(&Role::Scheduler);
    let lifecycle = crate::store::Lifecycle {
        every_run: config.events.lifecycle,
        late_by_default: config.notify.default.iter().any(|rule| rule.late.is_some()),
    };
    let server_time = crate::server_time::ServerTime::new(config.scheduler.max_clock_offset);
    let _ = health.server_time.set(server_time.clone());
    // The scheduler's store: on a connection of its own when it has an identity of its
    // own (see `SchedulerConfig::creds`); it creates the layout, which the agent's
    // connection, a runner's then, may not.
    let own = match (schedules, &config.scheduler.creds) {
        (true, Some(creds)) => {
            let name = format!("cronrun-agent {} (scheduler)", config.name);
            let client = crate::connect::connect(&config.nats, Some(creds), &name).await?;
            let _ = health.scheduler_connection.set(client.clone());
            Some(Store::open(client, names.clone(), &config.layout).await?.with_lifecycle(lifecycle))
        }
        _ => None,
    };
    let store = match (schedules, &own) {
        (true, None) => Store::open(client, names, &config.layout).await?,
        // The scheduler's store has just found or made the layout.
        (true, Some(_)) => Store::open_existing(client, names).await?,
        (false, _) => match open_existing(client, names, &cancel).await? {
            Some(store) => store,
            // Told to stop while waiting: an orderly stop.
            None => return Ok(()),
        },
    }
    .with_lifecycle(lifecycle);
    health.layout_ready(&store);
    let instance = format!("{}/{:08x}", config.name, rand::random::<u32>());
    info!(agent = %instance, roles = ?config.roles, namespace = %config.namespace, "agent starting");
    // What the scheduler reads, through its own store.
    let scheduling = match schedules.then(|| own.clone().unwrap_or_else(|| store.clone())) {
        Some(store) => {
            let shards = crate::scheduler::shard_count(&store, config.scheduler.shards).await?;
            info!(shards, "opening the schedules index");
            let index = match open_index(&store, shards, &cancel).await {
                // Told to stop while starting: an orderly stop.
                Err(_) if cancel.is_cancelled() => return Ok(()),
                index => index?,
            };
            let snapshots = open_snapshots(&store, &index, &cancel).await;
            Some((store, shards, index, snapshots))
        }
        None => None,
    };
    // The catalog outlives the runner's drain, which still reads specs.
    let catalog_cancel = CancellationToken::new();
    let catalog = Catalog::start(store.clone(), scheduling.as_ref().map(|s| s.1), catalog_cancel.clone());
    let _ = health.catalog.set(catalog.clone());
    let scheduler = scheduling.map(|(store, shards, index, snapshots)| {
        let ctx = SchedulerCtx {
            store,
            catalog: catalog.clone(),
            loader: Loader::new(index.clone(), shards, snapshots.map(|s| (s, config.scheduler.snapshots_from))),
            index,
            config: config.scheduler.clone(),
            clock: clock.clone(),
            holder: instance.clone(),
            shards,
            next_fires: health.next_fires.clone(),
            server_time: server_time.clone(),
        };
        let scheduler = Scheduler { ctx, notify: config.notify.clone() };
        health.role_started();
        tokio::spawn(scheduler.run(cancel.clone()))
    });
    let runner = config.roles.contains(&Role::Runner).then(|| {
        let runner = Runner::new(
            store.clone(),
            catalog.clone(),
            config.runner.clone(),
            config.wasm.clone(),
            (clock.clone(), server_time.clone()),
            config.name.clone(),
        );
        let _ = health.slots.set(runner.slots());
        health.role_started();
        tokio::spawn(runner.run(cancel.clone()))
    });

    let systemd = tokio::spawn(tell_systemd(catalog.clone(), cancel.clone()));
    let (scheduled, ran) =
        tokio::join!(watch_role("scheduler", scheduler, &cancel), watch_role("runner", runner, &cancel));
    systemd.abort();
    let result = scheduled.and(ran);
    catalog_cancel.cancel();
    for client in std::iter::once(&store.client).chain(own.as_ref().map(|own| &own.client)) {
        match tokio::time::timeout(Duration::from_secs(2), client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!("flushing NATS on shutdown: {e}"),
            Err(_) => warn!("flushing NATS on shutdown: no answer within 2s"),
        }
    }
    info!("agent stopped");
    result
}

/// Under systemd (`Type=notify`; no-ops elsewhere): READY=1 once the roles are started and
/// the job catalog is loaded, WATCHDOG=1 at half the unit's `WatchdogSec` for as long as
/// the async runtime answers, STOPPING=1 when the stop begins.
async fn tell_systemd(catalog: Catalog, cancel: CancellationToken) {
    use sd_notify::NotifyState;
    tokio::select! {
        _ = cancel.cancelled() => return,
        _ = catalog.wait_loaded() => {}
    }
    if let Err(e) = sd_notify::notify(false, &[NotifyState::Ready]) {
        warn!("telling systemd the agent is ready: {e}");
    }
    let mut ping = watchdog_interval().map(tokio::time::interval);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = async { match ping.as_mut() { Some(p) => { p.tick().await; } None => std::future::pending().await } } => {
                let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
            }
        }
    }
    let _ = sd_notify::notify(false, &[NotifyState::Stopping]);
}

/// Half of `WATCHDOG_USEC`, when systemd asks this process for watchdog pings: as
/// libsystemd's `sd_watchdog_enabled`, `WATCHDOG_PID`, when set, must be ours.
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Roles that run until told to stop, then end cleanly.
    async fn roles(cancel: CancellationToken) -> Result<(), Error> {
        cancel.cancelled().await;
        Ok(())
    }

    #[tokio::test]
    async fn a_service_that_dies_stops_the_roles_and_the_agent_with_its_cause() {
        let cancel = CancellationToken::new();
        let mut services = Watched::default();
        services.spawn("the HTTP listener", async { panic!("no more sockets") });
        services.spawn("the metrics upkeep", std::future::pending());
        let ended = until_stopped(roles(cancel.clone()), &mut services, cancel.clone(), Duration::from_secs(60)).await;
        assert!(cancel.is_cancelled(), "the roles were told to stop");
        assert_eq!(ended.unwrap_err().to_string(), "the HTTP listener panicked: no more sockets");
    }

    #[tokio::test(start_paused = true)]
    async fn the_agent_ends_as_its_roles_do_or_at_the_bound_once_stopped() {
        let cancel = CancellationToken::new();
        let mut services = Watched::default();
        services.spawn("the metrics upkeep", std::future::pending());
        cancel.cancel();
        let ended = until_stopped(roles(cancel.clone()), &mut services, cancel.clone(), Duration::from_secs(60)).await;
        assert!(ended.is_ok());

        let mut services = Watched::default();
        services.spawn("the metrics upkeep", std::future::pending());
        let stuck = std::future::pending::<Result<(), Error>>();
        let stopped = tokio::time::Instant::now();
        let ended = until_stopped(stuck, &mut services, cancel.clone(), Duration::from_secs(60)).await;
        assert_eq!(ended.unwrap_err().to_string(), "stop timed out after 60s");
        assert!((Duration::from_secs(60)..Duration::from_secs(61)).contains(&stopped.elapsed()));
    }
}
