//! `cronrun secret set|ls|rm NAME`: the secrets jobs name as `{ secret = "NAME" }` (a shell
//! job's `env`, a Wasm job's `config`, a webhook's URL or headers), kept in the
//! `<ns>_secrets` bucket, which admins write, runners and schedulers read by name, and
//! viewers cannot read (docs/security.md). No command prints a value.
//!
//! `set` reads the value from stdin, without one trailing newline (what `echo` and a
//! terminal add), or from `--file`, byte for byte (a PEM key keeps its last newline).

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;

use super::{Ctx, fmt_time, table};
use crate::output::MIN_MASKED_BYTES;
use crate::spec::JobSpec;
use crate::spec::secret::{MAX_SECRET_BYTES, check_secret_value, validate_secret_name};
use crate::store::Store;

#[derive(Subcommand)]
pub enum SecretCommand {
    /// Set a secret: its value from stdin (one trailing newline dropped) or --file (as it is)
    Set(SetArgs),
    /// List the secrets: names, when each was set and by whom; never a value
    Ls,
    /// Remove a secret (jobs naming it fail their runs until it is set again)
    Rm(NameArgs),
}

#[derive(Args)]
pub struct SetArgs {
    /// 1 to 64 of A-Z a-z 0-9 _ -
    pub name: String,
    /// Read the value from this file, byte for byte, instead of stdin
    #[arg(long)]
    pub file: Option<PathBuf>,
}

#[derive(Args)]
pub struct NameArgs {
    pub name: String,
}

pub async fn run(ctx: &Ctx, command: SecretCommand) -> Result<()> {
    match command {
        SecretCommand::Set(a) => set(ctx, a).await,
        SecretCommand::Ls => ls(ctx).await,
        SecretCommand::Rm(a) => rm(ctx, a).await,
    }
}

/// Checks the name and the value before connecting: a refused one writes nothing.
async fn set(ctx: &Ctx, a: SetArgs) -> Result<()> {
    validate_secret_name(&a.name)?;
    let bytes = match &a.file {
        Some(path) => read_file(&a.name, path)?,
        None => read_stdin(&a.name)?,
    };
    let value = check_secret_value(&a.name, bytes)?;
    let store = ctx.store().await?;
    let revision = store.secrets.set(&a.name, &value, replicas(&store)).await?;
    if value.len() < MIN_MASKED_BYTES {
        eprintln!(
            "warning: secret {} is shorter than {MIN_MASKED_BYTES} bytes: runs' output does not mask it \
             (a short value would mask every match of it)",
            a.name
        );
    }
    ctx.print(&json!({ "name": a.name, "revision": revision }), || {
        format!("set secret {} (revision {revision}); runs starting from now read it", a.name)
    })
}

/// As many replicas as the jobs bucket has: the secrets bucket is made by an admin, who
/// has no `[layout]`, and must survive what the jobs do.
fn replicas(store: &Store) -> usize {
    store.jobs.kv.stream.cached_info().config.num_replicas.max(1)
}

/// The file's bytes, refused past `MAX_SECRET_BYTES` without reading further.
fn read_file(name: &str, path: &Path) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path).with_context(|| format!("secret {name}: cannot read {}", path.display()))?;
    bounded(name, file).with_context(|| format!("secret {name}: cannot read {}", path.display()))?
}

/// Stdin, without one trailing newline. At a terminal the value is typed, and echoed:
/// say so, and how to end it.
fn read_stdin(name: &str) -> Result<Vec<u8>> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("type the value of secret {name} (it is echoed; --file or a pipe is not), then Ctrl-D:");
    }
    let mut bytes = bounded(name, stdin.lock()).context("reading stdin")??;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    Ok(bytes)
}

/// At most `MAX_SECRET_BYTES` (and a trailing newline) of `reader`; the outer error is
/// the read's, the inner one the refusal of a larger value.
fn bounded(name: &str, reader: impl Read) -> std::io::Result<Result<Vec<u8>>> {
    let mut bytes = Vec::new();
    // One more for a trailing newline stdin may drop, one more to see what is too much.
    reader.take(MAX_SECRET_BYTES as u64 + 2).read_to_end(&mut bytes)?;
    let trailing_newline = usize::from(bytes.last() == Some(&b'\n'));
    if bytes.len() - trailing_newline > MAX_SECRET_BYTES {
        return Ok(Err(anyhow::anyhow!(
            "secret {name}: the value is over the limit of {MAX_SECRET_BYTES} bytes: keep large data in a file the job reads"
        )));
    }
    Ok(Ok(bytes))
}

async fn ls(ctx: &Ctx) -> Result<()> {
    let store = ctx.store().await?;
    let secrets = store.secrets.list().await?;
    ctx.print(&secrets, || {
        if secrets.is_empty() {
            return "no secrets (set one with `cronrun secret set NAME`)".into();
        }
        let rows: Vec<Vec<String>> = secrets
            .iter()
            .map(|s| vec![s.name.clone(), fmt_time(&s.updated), s.by.clone().unwrap_or_else(|| "-".into())])
            .collect();
        table(&["NAME", "UPDATED", "BY"], &rows)
    })
}

async fn rm(ctx: &Ctx, a: NameArgs) -> Result<()> {
    validate_secret_name(&a.name)?;
    let store = ctx.store().await?;
    if !store.secrets.remove(&a.name).await? {
        bail!("no secret {} to remove: `cronrun secret ls` lists the secrets", a.name);
    }
    let naming = jobs_naming(&store, &a.name).await;
    if !naming.is_empty() {
        eprintln!(
            "warning: {} still name secret {}: their runs (or notices) fail until it is set again",
            naming.join(", "),
            a.name
        );
    }
    ctx.print(&json!({ "removed": a.name }), || format!("removed secret {}", a.name))
}

/// The jobs whose spec names secret `name` (none if they cannot be listed).
async fn jobs_naming(store: &Store, name: &str) -> Vec<String> {
    let jobs = store.list_jobs().await.unwrap_or_default();
    let names = jobs.into_iter().filter(|j| j.spec.as_ref().is_ok_and(|s| s.secret_names().contains(name)));
    names.map(|j| j.name).collect()
}

/// Refuses `specs` when one names a secret that does not exist, with one line naming the
/// job, the secret and how to set it: what `apply`, `import` and `deploy` check before
/// writing, so that a typo in a name fails there and not at every run.
pub(super) async fn check_named(store: &Store, specs: &[JobSpec]) -> Result<()> {
    let named: std::collections::BTreeSet<&str> = specs.iter().flat_map(JobSpec::secret_names).collect();
    if named.is_empty() {
        return Ok(());
    }
    let missing = store.secrets.missing(named).await.context("checking the secrets the jobs name")?;
    let Some(first) = missing.first() else { return Ok(()) };
    let job = specs.iter().find(|s| s.secret_names().contains(first.as_str())).map_or("", |s| s.name.as_str());
    let more = match missing.len() {
        1 => String::new(),
        n => format!(" ({} more missing: {})", n - 1, missing[1..].join(", ")),
    };
    bail!("job {job} names secret {first}, which does not exist: set it first with `cronrun secret set {first}`{more}")
}
