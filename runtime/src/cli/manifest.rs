//! `cronrun manifest PLUGIN.wasm --schedule EXPR [--on SUBJECT] [--after JOB] [...]`: writes the `cronrun-manifest`
//! section into a component built without the Rust SDK (componentize-py), so that it
//! carries its own schedule as `#[cronrun_sdk::job]` components do. The fields are
//! checked as `deploy` would check them; the file is replaced in one rename (or written
//! to `--out`), never left half-written.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::spec::JobSpec;
use crate::store::{MAX_PLUGIN_BYTES, plugin_digest};

#[derive(Args)]
pub struct ManifestArgs {
    /// The component, e.g. hello.wasm from componentize-py
    pub plugin: PathBuf,
    /// The job's schedule, e.g. "*/10 * * * * *" (needed unless --on or --after is given)
    #[arg(long, required_unless_present_any = ["on", "after"])]
    pub schedule: Option<String>,
    /// A run per message on this subject (the spec's `on = { subject }`)
    #[arg(long, value_name = "SUBJECT")]
    pub on: Option<String>,
    /// A run after each run of JOB that ends so (`succeeded` by default; repeatable)
    #[arg(long, value_name = "JOB[:succeeded|failed|finished]")]
    pub after: Vec<String>,
    /// IANA time zone of the schedule [default: UTC]
    #[arg(long)]
    pub tz: Option<String>,
    /// How long a run may take, e.g. 30s
    #[arg(long)]
    pub timeout: Option<String>,
    /// The runner pool
    #[arg(long)]
    pub pool: Option<String>,
    /// Where to write the component with its manifest [default: PLUGIN itself]
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn run(ctx: &Ctx, a: ManifestArgs) -> Result<()> {
    let file = a.plugin.display().to_string();
    let bytes = super::deploy::read_plugin(&a.plugin)?;
    let mode = std::fs::metadata(&a.plugin).with_context(|| format!("cannot read {file}"))?.permissions();
    let mut manifest = Map::new();
    for (key, value) in [("schedule", &a.schedule), ("timezone", &a.tz), ("timeout", &a.timeout), ("pool", &a.pool)] {
        if let Some(v) = value {
            manifest.insert(key.into(), json!(v));
        }
    }
    if let Some(subject) = &a.on {
        manifest.insert("on".into(), json!({ "subject": subject }));
    }
    if !a.after.is_empty() {
        let after = a.after.iter().map(|entry| match entry.rsplit_once(':') {
            Some((job, on)) => json!({ "job": job, "on": on }),
            None => json!({ "job": entry }),
        });
        manifest.insert("after".into(), Value::Array(after.collect()));
    }
    check(&manifest, &plugin_digest(&bytes)).with_context(|| format!("{file}: the manifest is refused"))?;
    let with = crate::wasm::with_manifest(&bytes, &manifest).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    if with.len() > MAX_PLUGIN_BYTES {
        bail!("{file} with its manifest is {} bytes, over the limit of {MAX_PLUGIN_BYTES}", with.len());
    }
    let out = a.out.clone().unwrap_or_else(|| a.plugin.clone());
    write_whole(&out, &with, mode)?;
    let value = json!({ "file": out.display().to_string(), "manifest": manifest });
    ctx.print(&value, || format!("{}: manifest {}", out.display(), Value::Object(manifest.clone())))
}

/// The manifest as the job spec `deploy` would build from it.
fn check(manifest: &Map<String, Value>, digest: &str) -> Result<()> {
    let mut spec = manifest.clone();
    spec.insert("name".into(), json!("manifest-check"));
    spec.insert("wasm".into(), json!({ "plugin": digest }));
    let spec = JobSpec::from_json(&serde_json::to_vec(&spec)?)?;
    spec.parsed_schedule()?;
    Ok(())
}

/// Writes `bytes` to `path` (with `mode`) through a synced temporary file beside it and a
/// rename.
fn write_whole(path: &std::path::Path, bytes: &[u8], mode: std::fs::Permissions) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let cannot = |e: std::io::Error| anyhow::anyhow!("cannot write {}: {e}", path.display());
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(cannot)?;
    temp.write_all(bytes).map_err(cannot)?;
    temp.as_file().set_permissions(mode).map_err(cannot)?;
    temp.as_file().sync_all().map_err(cannot)?;
    temp.persist(path).map_err(|e| cannot(e.error))?;
    Ok(())
}
