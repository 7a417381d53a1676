//! An agent: the scheduler and/or runner of one host, sharing one catalog.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::catalog::Catalog;
use crate::clock::SharedClock;
use crate::config::{AgentConfig, Role};
use crate::error::Error;
use crate::names::Names;
use crate::runner::Runner;
use crate::scheduler::{Scheduler, SchedulerCtx};
use crate::store::Store;

/// Runs until `cancel`; then the scheduler releases its lease, the runner drains, and
/// the function returns.
pub async fn run(
    client: async_nats::Client,
    config: AgentConfig,
    clock: SharedClock,
    cancel: CancellationToken,
) -> Result<(), Error> {
    let names = Names::new(&config.namespace)?;
    let store = Store::open(client, names, &config.layout).await?;
    // The catalog outlives the runner's drain, which still reads specs.
    let catalog_cancel = CancellationToken::new();
    let schedules = config.roles.contains(&Role::Scheduler);
    let (events_tx, events_rx) = if schedules {
        let (tx, rx) = mpsc::unbounded_channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let catalog = Catalog::start(store.clone(), events_tx, catalog_cancel.clone());
    let instance = format!("{}/{:08x}", config.name, rand::random::<u32>());
    info!(agent = %instance, roles = ?config.roles, namespace = %config.namespace, "agent starting");

    let shards = match schedules {
        true => crate::scheduler::shard_count(&store, config.scheduler.shards).await?,
        false => 0,
    };
    let scheduler = events_rx.map(|events| {
        let ctx = SchedulerCtx {
            store: store.clone(),
            catalog: catalog.clone(),
            config: config.scheduler.clone(),
            clock: clock.clone(),
            holder: instance.clone(),
            shards,
        };
        let scheduler = Scheduler { ctx, events };
        tokio::spawn(scheduler.run(cancel.clone()))
    });
    let runner = config.roles.contains(&Role::Runner).then(|| {
        let runner = Runner::new(
            store.clone(),
            catalog.clone(),
            config.runner.clone(),
            config.wasm.clone(),
            clock.clone(),
            config.name.clone(),
        );
        tokio::spawn(runner.run(cancel.clone()))
    });

    if let Some(s) = scheduler {
        let _ = s.await;
    }
    let result = match runner {
        Some(r) => r.await.unwrap_or_else(|e| Err(Error::new(crate::ErrorKind::Other, format!("runner task: {e}")))),
        None => {
            cancel.cancelled().await;
            Ok(())
        }
    };
    catalog_cancel.cancel();
    if let Err(e) = store.client.flush().await {
        warn!("flushing NATS on shutdown: {e}");
    }
    info!("agent stopped");
    result
}
