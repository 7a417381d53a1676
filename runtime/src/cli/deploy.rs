//! `cronrun deploy PLUGIN.wasm`: checks a Wasm job, stores it by digest and points the job
//! spec at it. Every check comes before any write: a component of the `job` world (it
//! links against this host), its `cronrun-manifest` (none needed with `--schedule`), the
//! spec built from the manifest and the flags. Then the plugin is stored (if new) and the spec written in one KV write, so
//! a new version switches atomically; runs in flight finish on the version they started.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Map, Value, json};

use super::{Ctx, fmt_time};
use crate::spec::JobSpec;
use crate::store::{MAX_PLUGIN_BYTES, plugin_digest};

#[derive(Args)]
pub struct DeployArgs {
    /// The component, e.g. target/wasm32-wasip2/release/hello.wasm
    pub plugin: PathBuf,
    /// Job name [default: the file name without .wasm]
    #[arg(long)]
    pub name: Option<String>,
    /// Overrides the manifest's schedule (or gives one to a component without a manifest)
    #[arg(long)]
    pub schedule: Option<String>,
    /// Overrides the manifest's time zone (IANA)
    #[arg(long)]
    pub tz: Option<String>,
    /// Overrides the manifest's timeout, e.g. 30s
    #[arg(long)]
    pub timeout: Option<String>,
    /// Overrides the manifest's runner pool
    #[arg(long)]
    pub pool: Option<String>,
    /// A wasm.config entry, KEY=VALUE (repeatable)
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub config: Vec<String>,
    /// A wasm.config entry whose value is secret NAME (`cronrun secret set NAME`), read
    /// by the runner at each run: KEY=NAME (repeatable)
    #[arg(long = "config-secret", value_name = "KEY=NAME")]
    pub config_secret: Vec<String>,
    /// A subject the job may publish to, NATS wildcards allowed (repeatable)
    #[arg(long = "allow-publish", value_name = "SUBJECT")]
    pub allow_publish: Vec<String>,
    /// What the job may reach over HTTP: scheme://host[:port] or scheme://*.domain[:port],
    /// matched exactly; a name must resolve to public addresses (repeatable)
    #[arg(long = "allow-http", value_name = "URL")]
    pub allow_http: Vec<String>,
    /// Let the job use its private KV store
    #[arg(long)]
    pub allow_kv: bool,
    /// Clear the job's triggers (`on`, `after`) the component does not carry; without it
    /// they are kept, as `apply` set them
    #[arg(long)]
    pub drop_triggers: bool,
    /// Sign the job as it will run (name, pool, plugin digest, config, grants, and the
    /// signing time) with this nkey seed file (`cronrun auth keygen`), for runners that run
    /// only jobs signed by their [wasm] trusted_keys
    #[arg(long, value_name = "KEY_FILE")]
    pub sign: Option<PathBuf>,
}

/// Spec fields a manifest may not set: they belong to the deployment, not the plugin.
const NOT_FROM_MANIFEST: &[&str] = &["name", "shell", "wasm", "paused", "labels", "history", "output_lines"];

/// The seed of `--sign`, read (and its file's mode checked) before anything else.
fn signing_seed(a: &DeployArgs) -> Result<Option<String>> {
    match &a.sign {
        Some(key) => Ok(Some(crate::auth::read_seed(key).map_err(|e| anyhow::anyhow!("--sign: {e}"))?)),
        None => Ok(None),
    }
}

/// Signs what a runner will run of `spec` (see `cronrun_wasm::signing`): its name, pool,
/// plugin, config and grants, at `signed_at`, the moment of this deploy.
fn sign(a: &DeployArgs, seed: &str, spec: &mut JobSpec, signed_at: chrono::DateTime<chrono::Utc>) -> Result<()> {
    let key = a.sign.as_ref().map(|k| k.display().to_string()).unwrap_or_default();
    let at = signed_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let Some(wasm) = spec.wasm.as_mut() else { bail!("--sign {key}: job {} has no wasm part", spec.name) };
    wasm.signature = None;
    wasm.signed_at = None;
    let signature = crate::wasm::signing::sign(seed, &spec.name, &spec.pool, wasm, &at);
    wasm.signature = Some(signature.map_err(|e| anyhow::anyhow!("--sign {key}: {e}"))?);
    wasm.signed_at = Some(at);
    Ok(())
}

fn spec_from(a: &DeployArgs, manifest: Map<String, Value>, digest: &str, file: &str) -> Result<JobSpec> {
    if let Some(key) = manifest.keys().find(|k| NOT_FROM_MANIFEST.contains(&k.as_str())) {
        bail!("{file}: its manifest sets {key:?}, which only the job spec may set");
    }
    let name = match &a.name {
        Some(n) => n.clone(),
        None => a.plugin.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    let mut config = Map::new();
    for kv in &a.config {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--config {kv:?} must be KEY=VALUE");
        };
        config.insert(k.into(), json!(v));
    }
    for kv in &a.config_secret {
        let Some((k, name)) = kv.split_once('=') else {
            bail!("--config-secret {kv:?} must be KEY=NAME, NAME a secret of `cronrun secret ls`");
        };
        config.insert(k.into(), json!({ "secret": name }));
    }
    let mut spec = manifest;
    spec.insert("name".into(), json!(name));
    let overrides = [
        ("schedule", a.schedule.clone()),
        ("timezone", a.tz.clone()),
        ("timeout", a.timeout.clone()),
        ("pool", a.pool.clone()),
    ];
    for (key, value) in overrides {
        if let Some(v) = value {
            spec.insert(key.into(), json!(v));
        }
    }
    spec.insert(
        "wasm".into(),
        json!({
            "plugin": digest,
            "config": config,
            "allow_publish": a.allow_publish,
            "allow_http": a.allow_http,
            "allow_kv": a.allow_kv,
        }),
    );
    JobSpec::from_json(&serde_json::to_vec(&spec)?).with_context(|| format!("{file}: the job spec is refused"))
}

/// The plugin file's bytes, refused before reading when over `MAX_PLUGIN_BYTES`.
pub(super) fn read_plugin(path: &std::path::Path) -> Result<Vec<u8>> {
    let file = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {file}"))?;
    if meta.len() > MAX_PLUGIN_BYTES as u64 {
        bail!("{file} is {} bytes, over the limit of {MAX_PLUGIN_BYTES}", meta.len());
    }
    std::fs::read(path).with_context(|| format!("cannot read {file}"))
}

pub async fn run(ctx: &Ctx, a: DeployArgs) -> Result<()> {
    let file = a.plugin.display().to_string();
    let seed = signing_seed(&a)?;
    let bytes = read_plugin(&a.plugin)?;
    // A component without a manifest (built without the Rust SDK) takes its schedule from
    // --schedule.
    let manifest = match crate::wasm::inspect_or_none(&bytes) {
        Ok(Some(inspected)) => inspected.manifest,
        Ok(None) if a.schedule.is_some() => Map::new(),
        Ok(None) | Err(_) => crate::wasm::inspect(&bytes).map_err(|e| anyhow::anyhow!("{file}: {e}"))?.manifest,
    };
    crate::wasm::check_job_component(bytes.clone())
        .await
        .map_err(|e| anyhow::anyhow!("{file} is not a cronrun job: {e}"))?;
    let digest = plugin_digest(&bytes);
    let (sets_on, sets_after) = (manifest.contains_key("on"), manifest.contains_key("after"));
    let mut spec = spec_from(&a, manifest, &digest, &file)?;

    let store = ctx.store().await?;
    if let Some(current) = store.jobs.get(&spec.name).await? {
        match JobSpec::from_json(&current.value) {
            Ok(old) if old.shell.is_some() => bail!(
                "job {:?} exists and is a shell job: deploy under another --name, or `cronrun rm {}` first",
                spec.name,
                spec.name
            ),
            // What belongs to the deployment, not the plugin, is kept; so are the
            // triggers (`on`, `after`) the component does not carry, which `apply` may
            // have set.
            Ok(old) => {
                spec.paused = old.paused;
                spec.labels = old.labels;
                spec.history = old.history;
                spec.output_lines = old.output_lines;
                if !sets_on && !a.drop_triggers && old.on.is_some() {
                    eprintln!("warning: {} keeps its `on` (give --drop-triggers to clear it)", spec.name);
                    spec.on = old.on;
                }
                if !sets_after && !a.drop_triggers && !old.after.is_empty() {
                    eprintln!("warning: {} keeps its `after` (give --drop-triggers to clear it)", spec.name);
                    spec.after = old.after;
                }
                // Re-checked with the kept fields: a stored history of 0 with a carried `on`.
                spec.validate().with_context(|| format!("{file}: the job spec is refused"))?;
            }
            Err(_) => {}
        }
    }
    // Signed last, over the spec as it is written (the pool it keeps included).
    if let Some(seed) = &seed {
        sign(&a, seed, &mut spec, ctx.now())?;
        spec.validate().with_context(|| format!("{file}: the job spec is refused"))?;
    }
    // As `apply` does: grants, chains without cycles, the messages stream capturing `on`.
    crate::input::check_schema(&spec).with_context(|| file.clone())?;
    super::apply::check_against_store(&store, std::slice::from_ref(&spec), &file).await?;
    let (_, stored) = store.put_plugin(&bytes).await?;
    let (revision, changed) = store.put_job(&spec).await.with_context(|| format!("writing job {}", spec.name))?;
    if changed {
        let detail = format!("deployed {digest}, revision {revision}");
        ctx.audit(&store, &spec.name, crate::events::EventKind::Changed, detail).await;
    }
    ctx.warn_if_unserved(&store, &spec.pool).await;
    let (schedule, tz) = spec.parsed_schedule()?;
    let next = schedule.next_after(ctx.now(), tz).map(|t| fmt_time(&t));
    let value = json!({
        "name": spec.name,
        "plugin": digest,
        "plugin_stored": stored,
        "revision": revision,
        "changed": changed,
        "schedule": spec.schedule,
        "next": next,
    });
    ctx.print(&value, || {
        let next = next.clone().unwrap_or_else(|| "never".into());
        if changed {
            format!("deployed {} (plugin {digest}, revision {revision}); next fire {next}", spec.name)
        } else {
            format!("unchanged {} (plugin {digest}, revision {revision})", spec.name)
        }
    })
}
