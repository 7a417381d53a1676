//! The state of one run's wasmtime `Store` and the host side of `wit/job.wit`: `log`
//! (lines to the run's output), `config` (the spec's map), `kv` and `nats` (checked
//! against the grants, then done in NATS). Denials are error strings, never traps: the
//! WIT's `result<_, string>`, so the typed errors (`Denied`, `HostCallError`) end here as
//! their text.
//! Also the WASI views (no preopens, env or network) and the memory/table limiter.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::Level;
use super::bindings::cronrun::job::{config, input, kv, log, nats, types};
use super::grants::Grants;
use super::http::HttpGrants;
use super::nats::NatsAccess;
use crate::output::{Line, Source, cut_line};

/// Everything a run's host calls need; the `T` of its `wasmtime::Store`.
pub struct HostState {
    pub wasi: WasiCtx,
    pub http: WasiHttpCtx,
    pub hooks: HttpGrants,
    pub table: ResourceTable,
    pub limits: Limits,
    pub job: String,
    /// The run's input (`input::get`).
    pub input: Option<String>,
    pub config: BTreeMap<String, String>,
    pub grants: Grants,
    pub nats: Arc<NatsAccess>,
    pub output: mpsc::Sender<Line>,
    pub max_line_bytes: usize,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    async fn write(&mut self, level: Level, message: String) {
        let (prefix, source) = match level {
            Level::Debug => ("[debug] ", Source::Stdout),
            Level::Info => ("", Source::Stdout),
            Level::Warn => ("[warn] ", Source::Stderr),
            Level::Error => ("[error] ", Source::Stderr),
        };
        for line in message.lines() {
            let text = cut_line(&format!("{prefix}{line}"), self.max_line_bytes);
            // A closed receiver means the runner stopped listening; the run goes on.
            let _ = self.output.send(Line { source, text }).await;
        }
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> Option<String> {
        self.config.get(&key).cloned()
    }
}

impl input::Host for HostState {
    async fn get(&mut self) -> Option<String> {
        self.input.clone()
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, String> {
        self.grants.check_kv(&key).map_err(|e| e.to_string())?;
        self.nats.kv_get(&self.job, &key).await.map_err(|e| e.to_string())
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), String> {
        self.grants.check_kv(&key).map_err(|e| e.to_string())?;
        self.nats.kv_set(&self.job, &key, value).await.map_err(|e| e.to_string())
    }

    async fn delete(&mut self, key: String) -> Result<(), String> {
        self.grants.check_kv(&key).map_err(|e| e.to_string())?;
        self.nats.kv_delete(&self.job, &key).await.map_err(|e| e.to_string())
    }
}

impl nats::Host for HostState {
    async fn publish(
        &mut self,
        subject: String,
        payload: Vec<u8>,
        headers: Vec<(String, String)>,
    ) -> Result<(), String> {
        self.grants.check_publish(&subject).map_err(|e| e.to_string())?;
        self.nats.publish(&subject, payload, headers).await.map_err(|e| e.to_string())
    }
}

/// Memory and table limits of one run. Growing past them traps with a message that
/// names the limit (rather than failing the guest's allocation obscurely).
pub struct Limits {
    pub memory_bytes: usize,
    pub table_elements: usize,
}

impl wasmtime::ResourceLimiter for Limits {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            return Err(wasmtime::format_err!(
                "memory limit exceeded: the job tried to grow its memory to {} bytes, the limit is {} (wasm.memory_limit)",
                desired,
                human_bytes(self.memory_bytes)
            ));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return Err(wasmtime::format_err!(
                "table limit exceeded: the job tried to grow a table to {desired} elements, the limit is {} (wasm.max_table_elements)",
                self.table_elements
            ));
        }
        Ok(true)
    }
}

pub fn human_bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_names_the_unit() {
        for (n, text) in [(64 << 20, "64 MiB"), (1 << 30, "1 GiB"), (3 << 10, "3 KiB"), (1500, "1500 bytes")] {
            assert_eq!(human_bytes(n), text);
        }
    }
}
