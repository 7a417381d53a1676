//! `[wasm]` in `cronrun.toml`: the sandbox limits and the compile cache of Wasm jobs.
//! Every field has a documented default; unknown fields are refused. Sizes are bytes,
//! written as a number or as text such as `"64MiB"`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::error::Error;

/// Limits and caches of the Wasm host; one per agent.
#[derive(Deserialize, Clone, Debug)]
#[serde(deny_unknown_fields, default)]
pub struct WasmConfig {
    /// Linear memory one run may use, in bytes. Default 64 MiB.
    #[serde(deserialize_with = "bytes")]
    pub memory_limit: u64,
    /// Elements of one table (function references). Default 10,000.
    pub max_table_elements: u32,
    /// Wasm runs that may exist at once on this agent (slots of the pooling allocator).
    /// A run beyond this waits for one to end, within its own timeout. Default 1,000,
    /// wasmtime's own pool size: with 100, the 500 guests an agent starts when 1,000 jobs
    /// share an instant queued for slots, and the last started 46 ms late instead of 18.
    /// A slot reserves address space, not memory (4 GiB per linear memory, two per slot:
    /// about 8 TiB at 1,000, so a `ulimit -v` must allow it), and once used keeps what its
    /// last run wrote, up to 256 KiB per memory and 64 KiB per table, resident for the
    /// next (320 KiB for the usual one memory and one table).
    pub max_instances: u32,
    /// Guest stack (recursion depth) of one run, in bytes. Default 512 KiB.
    #[serde(deserialize_with = "bytes")]
    pub max_stack: u64,
    /// Compiled components are kept here, by digest and engine fingerprint. Default
    /// `$XDG_CACHE_HOME/cronrun/wasm`, else `~/.cache/cronrun/wasm`.
    pub cache_dir: Option<PathBuf>,
    /// Keep compiled components on disk (else only in memory). Default true.
    pub disk_cache: bool,
    /// Compiled components kept in memory, most recently used first. Default 64.
    pub cached_components: usize,
    /// How often the epoch advances: the granularity of timeouts and cancellation.
    /// Default 10ms.
    #[serde(with = "crate::spec::codec::duration")]
    pub epoch_tick: Duration,
    /// An output line longer than this many bytes is cut. Default 8192.
    pub max_line_bytes: usize,
    /// The timeout of a Wasm job whose spec sets none: a stuck guest holds one of the
    /// `max_instances` slots only this long. Default 10m.
    #[serde(with = "crate::spec::codec::duration")]
    pub default_timeout: Duration,
    /// Keys one job may hold in its KV store. Default 1,000.
    pub kv_max_keys: usize,
    /// Largest value a job may store under one key. Default 64 KiB: with `kv_max_keys`,
    /// at most 64 MiB per job.
    #[serde(deserialize_with = "bytes")]
    pub kv_max_value_bytes: u64,
    /// nkey public keys whose signatures this runner trusts: when any are listed, it runs
    /// only plugins signed by one of them (`cronrun deploy --sign`). Default: none, and
    /// signatures are not required.
    pub trusted_keys: Vec<String>,
    /// Outgoing HTTP requests (`allow_http`) one run may have in flight at once; one more
    /// fails with `connection-limit-reached`. Default 16.
    pub http_max_concurrent: usize,
    /// Outgoing HTTP requests one run may make in all; one more fails with
    /// `connection-limit-reached`. 0: none, whatever the grants. Default 1,000.
    pub http_max_requests: u32,
}

impl Default for WasmConfig {
    fn default() -> Self {
        Self {
            memory_limit: 64 << 20,
            max_table_elements: 10_000,
            max_instances: 1000,
            max_stack: 512 << 10,
            cache_dir: None,
            disk_cache: true,
            cached_components: 64,
            epoch_tick: Duration::from_millis(10),
            max_line_bytes: 8192,
            default_timeout: Duration::from_secs(600),
            kv_max_keys: 1_000,
            kv_max_value_bytes: 64 << 10,
            trusted_keys: Vec::new(),
            http_max_concurrent: 16,
            http_max_requests: 1_000,
        }
    }
}

impl WasmConfig {
    /// Checks the ranges the engine needs.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid =
            |field: &str, reason: &str| Err(Error::invalid(format!("wasm.{field}"), format!("wasm.{field}: {reason}")));
        if !(64 << 10..=4 << 30).contains(&self.memory_limit) {
            return invalid("memory_limit", "must be between 64KiB and 4GiB");
        }
        if self.max_instances == 0 || self.max_instances > 10_000 {
            return invalid("max_instances", "must be between 1 and 10000");
        }
        if !(64 << 10..=64 << 20).contains(&self.max_stack) {
            return invalid("max_stack", "must be between 64KiB and 64MiB");
        }
        if self.epoch_tick < Duration::from_millis(1) || self.epoch_tick > Duration::from_secs(1) {
            return invalid("epoch_tick", "must be between 1ms and 1s");
        }
        if self.default_timeout < Duration::from_secs(1) || self.default_timeout > Duration::from_secs(30 * 86_400) {
            return invalid("default_timeout", "must be between 1s and 30d");
        }
        if self.max_line_bytes < 80 {
            return invalid("max_line_bytes", "must be at least 80");
        }
        if !(1..=1_000_000).contains(&self.kv_max_keys) {
            return invalid("kv_max_keys", "must be between 1 and 1000000");
        }
        if !(1..=1 << 20).contains(&self.kv_max_value_bytes) {
            return invalid("kv_max_value_bytes", "must be between 1 and 1MiB (NATS's default max payload)");
        }
        if !(1..=1024).contains(&self.http_max_concurrent) {
            return invalid("http_max_concurrent", "must be between 1 and 1024");
        }
        if self.http_max_requests > 1_000_000 {
            return invalid("http_max_requests", "must be between 0 and 1000000");
        }
        super::signing::check_trusted(&self.trusted_keys)
            .map_err(|e| Error::invalid("wasm.trusted_keys", format!("wasm.trusted_keys: {e}")).with_source(e))
    }

    /// What one job may keep in its KV store.
    pub fn kv_quota(&self) -> super::nats::KvQuota {
        super::nats::KvQuota { max_keys: self.kv_max_keys, max_value_bytes: self.kv_max_value_bytes as usize }
    }

    /// Where compiled components go, if anywhere.
    pub fn cache_path(&self) -> Option<PathBuf> {
        if !self.disk_cache {
            return None;
        }
        if let Some(dir) = &self.cache_dir {
            return Some(dir.clone());
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("cronrun").join("wasm"))
    }
}

/// Parses `65536`, `"64KiB"`, `"64MiB"`, `"1GiB"` (also KB/MB/GB as powers of 1000).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Number(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Number(n) => Ok(n),
        Size::Text(t) => parse_bytes(&t).ok_or_else(|| {
            serde::de::Error::custom(format!("invalid size {t:?}: write it like 65536, \"512KiB\" or \"64MiB\""))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("64MiB"), Some(64 << 20));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("1 GiB"), Some(1 << 30));
        assert_eq!(parse_bytes("2MB"), Some(2_000_000));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("5XB"), None);
    }

    #[test]
    fn toml_section_parses_with_defaults() {
        let c: WasmConfig = toml::from_str("memory_limit = \"32MiB\"\nepoch_tick = \"5ms\"").unwrap();
        assert_eq!(c.memory_limit, 32 << 20);
        assert_eq!(c.max_instances, 1000);
        assert_eq!(c.epoch_tick, Duration::from_millis(5));
        c.validate().unwrap();
        assert!(toml::from_str::<WasmConfig>("memory = 1").is_err());
        let bad: WasmConfig = toml::from_str("memory_limit = 10").unwrap();
        assert!(bad.validate().unwrap_err().to_string().contains("wasm.memory_limit"));
        assert_eq!((c.http_max_concurrent, c.http_max_requests), (16, 1_000));
        let off: WasmConfig = toml::from_str("http_max_requests = 0").unwrap();
        off.validate().unwrap();
        for (text, field) in [
            ("http_max_concurrent = 0", "wasm.http_max_concurrent"),
            ("http_max_requests = 2000000", "wasm.http_max_requests"),
        ] {
            let bad: WasmConfig = toml::from_str(text).unwrap();
            assert!(bad.validate().unwrap_err().to_string().contains(field), "{text}");
        }
    }
}
