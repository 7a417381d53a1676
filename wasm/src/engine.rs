//! The one wasmtime `Engine` of a runtime and its `Linker`: component model, async calls,
//! epoch interruption driven by a ticker thread, the pooling allocator sized from
//! `[wasm]`, and every interface a job may import (the `job` world, WASI 0.2, wasi:http).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::Job;
use super::config::WasmConfig;
use super::host::HostState;
use crate::error::{Error, ErrorKind};

fn other(context: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Other, format!("{context}: {e}"))
}

/// Bytes of a linear memory, and of a table, that stay resident in an idle pool slot.
/// Without PAGEMAP_SCAN (older kernels) this much is zeroed with memset on every reset,
/// written or not, so it stays small; typical short jobs write well under it.
const MEMORY_KEEP_RESIDENT: usize = 256 << 10;
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// The engine for `config`. Every setting that changes compiled code is here, so the
/// engine's fingerprint (`Engine::precompile_compatibility_hash`) keys the disk cache.
pub fn engine(config: &WasmConfig) -> Result<Engine, Error> {
    let instances = config.max_instances;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(16))
        .total_memories(instances.saturating_mul(2))
        .total_tables(instances.saturating_mul(4))
        .total_stacks(instances)
        .max_core_instances_per_component(16)
        .max_memories_per_component(2)
        .max_tables_per_component(4)
        .max_memory_size(usize::try_from(config.memory_limit).unwrap_or(usize::MAX))
        .table_elements(config.max_table_elements as usize)
        // A slot is reset for its next run by zeroing only the pages the last run wrote
        // (found with PAGEMAP_SCAN, Linux 6.7+), up to these sizes, instead of madvise:
        // no syscall that flushes every core's TLB, and no page faults to map the pages
        // in again. Memory past the sizes is still given back. Most of the cost of a
        // short run was here.
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
        .table_keep_resident(TABLE_KEEP_RESIDENT);
    let mut c = Config::new();
    c.wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(usize::try_from(config.max_stack).unwrap_or(usize::MAX))
        // Host calls run on the fiber stack too: room for them above the guest's.
        .async_stack_size(usize::try_from(config.max_stack).unwrap_or(usize::MAX) + (1 << 20))
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&c).map_err(|e| other("creating the wasm engine", e))
}

/// A linker with the `job` world, WASI 0.2 (its context grants nothing) and wasi:http
/// (whose hooks deny hosts not granted).
pub fn linker(engine: &Engine) -> Result<Linker<HostState>, Error> {
    let mut linker = Linker::new(engine);
    Job::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
        .map_err(|e| other("linking the job interfaces", e))?;
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| other("linking WASI", e))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(|e| other("linking wasi:http", e))?;
    Ok(linker)
}

/// Advances the engine's epoch every `tick` until dropped; deadlines count in ticks.
pub struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Ticker {
    pub fn start(engine: Engine, tick: Duration) -> Result<Self, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| other("starting the wasm epoch thread", e))?;
        Ok(Self { stop })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
