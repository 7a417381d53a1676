//! The Wasm job host: runs components of the `job` world (`wit/job.wit`) with wasmtime.
//! The daemon (`runtime/`) runs them as one of its executors (`runner::exec::wasm`).
//!
//! One [`WasmRuntime`] per agent holds one engine, one linker, the compile cache and an
//! epoch ticker. [`WasmRuntime::prepare`] turns a spec's plugin digest into a
//! [`PreparedWasm`] (fetched through [`Plugins`], compiled, linked: done ahead of the fire
//! instant); its [`PreparedWasm::run`] instantiates it in a fresh sandbox and calls `run`.
//! What guests reach in NATS (their KV, publish) goes through [`HostNats`], the agent's
//! connection, within their grants.
//!
//! - `config.rs`: `[wasm]` of `cronrun.toml`. `engine.rs`: engine, linker, ticker.
//! - `bindings.rs`: the one `bindgen!`. `host.rs`: host interfaces, limits.
//! - `grants.rs`: capability checks. `http.rs`: wasi:http hooks. `nats.rs`: kv, publish.
//! - `cache.rs`: compiled components in memory and on disk. `run.rs`: one run.
//! - `signing.rs`: plugin signatures (`deploy --sign`, `[wasm] trusted_keys`).
//! - `stdio.rs`: guest stdout/stderr as lines into the run's output.
//! - `inspect.rs`: what `cronrun deploy` checks before storing a plugin.
//! - `wasmtime_error.rs`: wasmtime's error as the source of this crate's typed errors.

mod bindings;
mod cache;
mod config;
mod engine;
mod grants;
mod host;
mod http;
mod inspect;
mod nats;
mod run;
pub mod signing;
mod stdio;
mod wasmtime_error;

use std::sync::Arc;

use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

// The model's modules, as `crate::spec` and so on inside this crate.
use cronrun_model::{error, output, record, spec};

pub use config::{WasmConfig, parse_bytes};
/// The output line type of [`PreparedWasm::run`], nameable outside the crate.
pub use cronrun_model::output::{Line, Source};
pub use inspect::{InspectError, Inspected, MANIFEST_SECTION, inspect, inspect_or_none, with_manifest};
pub use run::{JobContext, WasmOutcome};
pub use wasmtime_error::WasmtimeError;

/// Why a compiled component does not link against this host. `Clone`: kept in the
/// cache, so that a component deployed for another host version is not linked again for
/// every run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LinkError {
    /// An import the host does not provide, or not with that type.
    #[error(transparent)]
    Imports(WasmtimeError),
    #[error("it does not export `run` of the cronrun:job world: {0}")]
    NoRun(#[source] WasmtimeError),
}

/// Why `bytes` is not a component this host can run as a job (`check_job_component`).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The engine or linker of the check could not be made.
    #[error(transparent)]
    Host(Error),
    #[error("it does not compile: {0}")]
    Compile(#[source] WasmtimeError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("checking the component: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Links `component` against the host: every import must be provided and `run`
/// exported with the world's type.
fn link(linker: &Linker<HostState>, component: &Component) -> Result<JobPre<HostState>, LinkError> {
    let pre = linker.instantiate_pre(component).map_err(|e| LinkError::Imports(e.into()))?;
    JobPre::new(pre).map_err(|e| LinkError::NoRun(e.into()))
}

fn cannot_run(digest: &str, why: LinkError) -> Error {
    Error::invalid("wasm.plugin", format!("plugin {digest} cannot run here: {why}")).with_source(why)
}

/// Whether `bytes` is a component this host can run as a job: it compiles, every import
/// links (the `job` world, WASI 0.2, wasi:http) and `run` has the world's type. Used by
/// `cronrun deploy` before it stores anything; needs no NATS.
pub async fn check_job_component(bytes: Vec<u8>) -> Result<(), CheckError> {
    tokio::task::spawn_blocking(move || {
        let config = WasmConfig { max_instances: 1, ..WasmConfig::default() };
        let engine = engine::engine(&config).map_err(CheckError::Host)?;
        let linker = engine::linker(&engine).map_err(CheckError::Host)?;
        let component = Component::new(&engine, &bytes).map_err(|e| CheckError::Compile(e.into()))?;
        Ok(link(&linker, &component).map(|_| ())?)
    })
    .await
    .map_err(CheckError::Task)?
}

use crate::error::Error;
use crate::spec::WasmSpec;
use bindings::JobPre;
use host::HostState;
pub use nats::{HostNats, KvQuota};

/// Where the host gets a plugin's bytes by digest (the agent's object store); the bytes
/// must be checked against the digest before they are returned.
#[async_trait::async_trait]
pub trait Plugins: Send + Sync + 'static {
    async fn fetch(&self, digest: &str) -> Result<Vec<u8>, Error>;
}

/// The Wasm host of one agent; cheap to clone.
#[derive(Clone)]
pub struct WasmRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    /// Components linked: linking checks every import's type, and is worth doing once.
    cache: cache::ComponentCache<Linked>,
    nats: Arc<nats::NatsAccess>,
    plugins: Arc<dyn Plugins>,
    config: WasmConfig,
    /// One permit per slot of the pooling allocator: a run waits here for an instance
    /// (within its timeout) rather than failing to instantiate when all are taken.
    instances: Arc<tokio::sync::Semaphore>,
    /// The load in progress per digest: runs of a component not compiled yet share one
    /// compile instead of each starting their own (an 18 MB Python component takes
    /// seconds of every core).
    loading: std::sync::Mutex<std::collections::HashMap<String, Arc<Loading>>>,
    _ticker: engine::Ticker,
}

/// A compiled component linked, or why it cannot be: a component that compiles but does
/// not link (deployed for another host version) is not compiled again for every run.
type Linked = Result<JobPre<HostState>, LinkError>;

/// One load of a component, its result shared by every run that waited for it.
type Loading = tokio::sync::OnceCell<Result<JobPre<HostState>, Error>>;

/// A component fetched, compiled and linked for one spec, ready to instantiate. Runs in
/// flight hold theirs, so a redeploy never changes a run that has started.
pub struct PreparedWasm {
    inner: Arc<Inner>,
    pre: JobPre<HostState>,
    spec: WasmSpec,
}

impl WasmRuntime {
    /// Guests reach NATS through `nats`; plugins are fetched from `plugins`.
    pub fn new(nats: HostNats, plugins: Arc<dyn Plugins>, config: WasmConfig) -> Result<Self, Error> {
        config.validate()?;
        let engine = engine::engine(&config)?;
        let linker = engine::linker(&engine)?;
        let cache = cache::ComponentCache::new(&engine, config.cache_path(), config.cached_components);
        let ticker = engine::Ticker::start(engine.clone(), config.epoch_tick)?;
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                cache,
                nats: Arc::new(nats::NatsAccess::new(nats, config.kv_quota())),
                plugins,
                instances: Arc::new(tokio::sync::Semaphore::new(config.max_instances as usize)),
                loading: std::sync::Mutex::new(std::collections::HashMap::new()),
                config,
                _ticker: ticker,
            }),
        })
    }

    /// Fetches the component by digest (object store, cached in memory and compiled on
    /// disk), links it and returns it ready to instantiate: done ahead of the fire instant.
    /// With `[wasm] trusted_keys`, only a spec signed by one of them for job `job` in pool
    /// `pool` (see `signing`) is fetched: anything else is refused first.
    pub async fn prepare(&self, job: &str, pool: &str, spec: &WasmSpec) -> Result<PreparedWasm, Error> {
        let digest = spec.plugin.clone();
        self.verify(job, pool, spec)?;
        let pre = self.linked(&digest).await?;
        Ok(PreparedWasm { inner: self.inner.clone(), pre, spec: spec.clone() })
    }

    /// Ok when this runner needs no signatures, or `spec` is signed by one of its trusted
    /// keys for job `job` in pool `pool`; else the refusal, in one line.
    pub fn verify(&self, job: &str, pool: &str, spec: &WasmSpec) -> Result<(), Error> {
        signing::verify(job, pool, spec, &self.inner.config.trusted_keys)
            .map_err(|e| Error::invalid("wasm.signature", e.to_string()).with_source(e))
    }

    /// The component of `digest`, linked: from memory, else loaded and linked once.
    async fn linked(&self, digest: &str) -> Result<JobPre<HostState>, Error> {
        if let Some(linked) = self.inner.cache.get(digest) {
            return linked.map_err(|e| cannot_run(digest, e));
        }
        let once = {
            let mut loading = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
            loading.entry(digest.to_string()).or_default().clone()
        };
        // Every run waiting shares the one load's result, a failure included.
        let loaded = once.get_or_init(|| self.load(digest)).await.clone();
        let mut loading = self.inner.loading.lock().unwrap_or_else(|e| e.into_inner());
        // The map's and ours: no one else waits; the next load (after a failure) starts over.
        if Arc::strong_count(&once) == 2 {
            loading.remove(digest);
        }
        drop(once);
        loaded
    }

    /// From the disk cache, else fetched and compiled; then linked and kept in memory.
    async fn load(&self, digest: &str) -> Result<JobPre<HostState>, Error> {
        let component = self.compiled(digest).await?;
        let linked = link(&self.inner.linker, &component);
        self.inner.cache.remember(digest, &linked);
        linked.map_err(|e| cannot_run(digest, e))
    }

    async fn compiled(&self, digest: &str) -> Result<Component, Error> {
        let inner = &self.inner;
        let rt = self.clone();
        let d = digest.to_string();
        let from_disk = tokio::task::spawn_blocking(move || rt.inner.cache.load_from_disk(&rt.inner.engine, &d))
            .await
            .map_err(|e| Error::other(&format!("loading plugin {digest}"), e))?;
        if let Some(component) = from_disk {
            return Ok(component);
        }
        let bytes = inner.plugins.fetch(digest).await?;
        let rt = self.clone();
        let d = digest.to_string();
        tokio::task::spawn_blocking(move || rt.inner.cache.compile(&rt.inner.engine, &d, &bytes))
            .await
            .map_err(|e| Error::other(&format!("compiling plugin {digest}"), e))?
            .map_err(|e| {
                Error::invalid("wasm.plugin", format!("plugin {digest} is not a loadable component: {e}"))
                    .with_source(e)
            })
    }

    pub fn config(&self) -> &WasmConfig {
        &self.inner.config
    }
}

// The runner clones the runtime into tasks and spawns runs.
const _: () = {
    const fn shareable<T: Send + Sync + Clone + 'static>() {}
    const fn sendable<T: Send + 'static>() {}
    shareable::<WasmRuntime>();
    sendable::<PreparedWasm>();
};
