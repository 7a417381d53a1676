//! `cronrun trigger NAME [--input JSON | --input-file FILE] [--wait]`: a manual run now,
//! through the same dispatch path as a scheduled one, given the input if any (checked
//! against the job's `input_schema`, see `crate::input`). `--wait` follows the record and
//! exits non-zero unless it succeeded.

use anyhow::{Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;
use crate::record::RunRecord;
use crate::store::Store;

#[derive(Args)]
pub struct TriggerArgs {
    pub name: String,
    /// Wait for the run to end; exit non-zero unless it succeeded
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up waiting after this long (the run goes on), e.g. 10m
    #[arg(long, requires = "wait", value_parser = humantime::parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// The run's input, JSON (at most 64 KiB): a shell job's standard input, a Wasm job's
    /// `ctx.input()`; checked against the job's input_schema
    #[arg(long, value_name = "JSON", conflicts_with = "input_file")]
    pub input: Option<String>,
    /// The run's input from a file (`-`: standard input)
    #[arg(long, value_name = "FILE")]
    pub input_file: Option<std::path::PathBuf>,
}

pub async fn run(ctx: &Ctx, a: TriggerArgs) -> Result<()> {
    let input = match (&a.input, &a.input_file) {
        (Some(text), _) => Some(crate::input::parse(text, "--input")?),
        (None, Some(path)) => {
            Some(crate::input::parse(&read_input_file(path)?, &format!("--input-file {}", path.display()))?)
        }
        (None, None) => None,
    };
    let store = ctx.store().await?;
    let (key, pool) = crate::actions::trigger(&store, &ctx.clock, &a.name, input).await?;
    ctx.warn_if_unserved(&store, &pool).await;
    if !a.wait {
        return ctx.print(&json!({ "run": key }), || format!("triggered {key}"));
    }
    let record = match a.timeout {
        None => wait_final(&store, &key).await?,
        Some(limit) => match tokio::time::timeout(limit, wait_final(&store, &key)).await {
            Ok(record) => record?,
            Err(_) => bail!(
                "run {key} did not end within {}; it goes on: follow it with `cronrun logs -f {key}`",
                crate::spec::codec::format_duration(&limit)
            ),
        },
    };
    let status = record.status.as_str();
    ctx.print(&record, || {
        // A run that did not succeed shows what it printed last.
        let shown = if record.status == crate::record::Status::Succeeded { 0 } else { FAILED_OUTPUT_LINES };
        let tail = &record.output[record.output.len().saturating_sub(shown)..];
        std::iter::once(format!("{key} {status}"))
            .chain(tail.iter().map(|l| format!("  {l}")))
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    if record.status != crate::record::Status::Succeeded {
        bail!("run {key} {status}: {}", record.error.unwrap_or_default());
    }
    Ok(())
}

/// The text of `--input-file` (`-`: standard input), refused early when far too big.
fn read_input_file(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let limit = (crate::record::MAX_INPUT_BYTES * 4 + 1) as u64;
    let mut bytes = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut bytes))
    };
    read.map_err(|e| anyhow::anyhow!("--input-file {}: cannot read it: {e}", path.display()))?;
    // Past the limit the text is refused as too big (`input::parse`), whatever it holds.
    if bytes.len() as u64 == limit {
        return Ok(" ".repeat(bytes.len()));
    }
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("--input-file {}: not UTF-8 text", path.display()))
}

/// Output lines `trigger --wait` prints of a run that did not succeed.
const FAILED_OUTPUT_LINES: usize = 10;

/// Follows a run record until it reaches a final status.
pub async fn wait_final(store: &Store, key: &str) -> Result<RunRecord> {
    let mut watch = store.runs.watch(key).await?;
    while let Some(change) = watch.next().await {
        if let Some(value) = change?.value {
            let record = RunRecord::from_json(&value)?;
            if record.status.is_final() {
                return Ok(record);
            }
        }
    }
    bail!("lost the watch on run {key}")
}
