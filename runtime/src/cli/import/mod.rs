//! `cronrun import crontab|k8s-cronjob|cronken FILE`: jobs from another scheduler's
//! definitions. Prints what each entry became and what it could not map; writes nothing
//! when any entry is wrong, or with `--dry-run`; otherwise creates or updates the jobs as
//! `apply` does. Each format is read without I/O in a module of its own:
//!
//! - `crontab.rs`: crontab(5), a user's or the system's;
//! - `kubernetes.rs`: Kubernetes CronJobs (batch/v1), YAML;
//! - `cronken.rs`: Cronken's job definitions, JSON;
//! - `error.rs`: why a file is refused, where, and its cause.

mod cronken;
mod crontab;
mod error;
mod kubernetes;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use crate::events::EventKind;
use crate::spec::JobSpec;
pub use error::ImportError;

#[derive(Subcommand)]
pub enum ImportCommand {
    /// A crontab(5): a user's (`crontab -l > FILE`), or /etc/crontab and /etc/cron.d files with --system
    Crontab(CrontabArgs),
    /// Kubernetes CronJobs from a YAML file (`kubectl get cronjob -o yaml > FILE`): one or
    /// more documents, or a List
    K8sCronjob(ImportArgs),
    /// Cronken job definitions: a JSON object of job name to definition (its
    /// `{cronken}:jobs` hash)
    Cronken(ImportArgs),
}

#[derive(Args)]
pub struct CrontabArgs {
    /// Lines have a user column after the time fields (/etc/crontab, /etc/cron.d)
    #[arg(long)]
    pub system: bool,
    /// The user jobs run as (shell.user), for a user's crontab
    #[arg(long)]
    pub user: Option<String>,
    #[command(flatten)]
    pub common: ImportArgs,
}

#[derive(Args)]
pub struct ImportArgs {
    pub file: std::path::PathBuf,
    /// The zone of schedules that name none [default: this host's; UTC for k8s-cronjob]
    #[arg(long)]
    pub tz: Option<String>,
    /// Job names start with PREFIX- [crontab: the file's name, PREFIX-<line>; others: none]
    #[arg(long)]
    pub prefix: Option<String>,
    /// Show what would be imported, write nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// What a file became. Each entry is named by where it was (`line 4`, `CronJob backup`).
#[derive(Debug, Default)]
pub struct Imported {
    pub jobs: Vec<(String, JobSpec)>,
    /// Entries not imported, and why.
    pub skipped: Vec<(String, String)>,
    /// Things said on the way (settings with no equivalent, meanings that differ).
    pub notes: Vec<String>,
}

pub async fn run(ctx: &Ctx, command: ImportCommand) -> Result<()> {
    let common = match &command {
        ImportCommand::Crontab(a) => &a.common,
        ImportCommand::K8sCronjob(a) | ImportCommand::Cronken(a) => a,
    };
    check_options(common)?;
    let origin = common.file.display().to_string();
    let text = super::read_definitions(&common.file)?;
    let host_zone = || match &common.tz {
        Some(tz) => (tz.clone(), None),
        None => host_timezone(),
    };
    let imported = match &command {
        ImportCommand::Crontab(a) => {
            let (timezone, zone_note) = host_zone();
            let prefix = common.prefix.clone().unwrap_or_else(|| file_prefix(&common.file));
            let options = crontab::Options { prefix, timezone, system: a.system, user: a.user.clone() };
            let mut imported = crontab::parse(&text, &origin, &options).map_err(anyhow::Error::msg)?;
            imported.notes.extend(zone_note);
            imported
        }
        ImportCommand::K8sCronjob(_) => {
            let options = kubernetes::Options { prefix: common.prefix.clone(), timezone: common.tz.clone() };
            kubernetes::parse(&text, &origin, &options).map_err(anyhow::Error::msg)?
        }
        ImportCommand::Cronken(_) => {
            let (timezone, zone_note) = host_zone();
            let options = cronken::Options { prefix: common.prefix.clone(), timezone };
            let mut imported = cronken::parse(&text, &origin, &options).map_err(anyhow::Error::msg)?;
            imported.notes.extend(zone_note);
            imported
        }
    };
    write_and_report(ctx, &origin, &imported, common.dry_run).await
}

async fn write_and_report(ctx: &Ctx, origin: &str, imported: &Imported, dry_run: bool) -> Result<()> {
    let mut results = Vec::new();
    if !dry_run && !imported.jobs.is_empty() {
        let store = ctx.store().await?;
        // The checks `apply` makes against what is stored (a job after one imported here
        // that keeps no history), before anything is written.
        let specs: Vec<JobSpec> = imported.jobs.iter().map(|(_, spec)| spec.clone()).collect();
        super::apply::check_against_store(&store, &specs, origin).await?;
        super::apply::warn_unserved_pools(ctx, &store, &specs).await;
        for (_, spec) in &imported.jobs {
            let (revision, changed) = store.put_job(spec).await.with_context(|| {
                let (done, all) = (results.len(), imported.jobs.len());
                format!("writing job {} ({done} of {all} written before it: import the file again, jobs written already stay unchanged)", spec.name)
            })?;
            if changed {
                ctx.audit(
                    &store,
                    &spec.name,
                    EventKind::Changed,
                    format!("imported from {origin}, revision {revision}"),
                )
                .await;
            }
            results.push(json!({ "name": spec.name, "revision": revision, "changed": changed }));
        }
    }
    let value = json!({
        "jobs": imported.jobs.iter().map(|(from, spec)| json!({ "from": from, "spec": spec })).collect::<Vec<_>>(),
        "not_imported": imported.skipped.iter().map(|(from, why)| json!({ "from": from, "why": why })).collect::<Vec<_>>(),
        "notes": imported.notes,
        "written": results,
        "dry_run": dry_run,
    });
    ctx.print(&value, || {
        let mut lines: Vec<String> = imported
            .jobs
            .iter()
            .map(|(from, spec)| {
                let shell = spec.shell.as_ref();
                let command = shell
                    .and_then(|s| s.command.clone())
                    .or_else(|| shell.and_then(|s| s.argv.as_ref().map(|a| a.join(" "))));
                format!(
                    "{from}: {} `{}` ({}): {}",
                    spec.name,
                    spec.schedule,
                    spec.timezone,
                    command.unwrap_or_default()
                )
            })
            .collect();
        lines.extend(imported.skipped.iter().map(|(from, why)| format!("{from}: not imported: {why}")));
        lines.extend(imported.notes.iter().cloned());
        lines.push(match (dry_run, imported.jobs.len()) {
            (true, n) => format!("dry run: {n} job(s) would be imported, nothing written"),
            (false, n) => format!("imported {n} job(s)"),
        });
        lines.join("\n")
    })
}

/// `--tz` and `--prefix` checked before the file is read, so that a mistake in them is
/// told as theirs rather than as every entry's.
fn check_options(common: &ImportArgs) -> Result<()> {
    if let Some(tz) = &common.tz {
        crate::schedule::parse_timezone(tz).map_err(|e| anyhow::anyhow!("--tz {}", e.reason))?;
    }
    if let Some(prefix) = &common.prefix
        && (prefix.len() > PREFIX_MAX || crate::names::validate_job_name(prefix).is_err())
    {
        anyhow::bail!(
            "--prefix {prefix:?}: must be 1 to {PREFIX_MAX} characters of A-Z a-z 0-9 _ - (job names are <prefix>-<entry>)"
        );
    }
    Ok(())
}

/// The longest `--prefix`: a job name (at most 128) keeps room for the entry's part.
const PREFIX_MAX: usize = 100;

/// `name` made a job name: `prefix-` before it, what a job name cannot hold as `-`, at most
/// 128 characters. Two entries that come out the same are an error of the caller's.
fn job_name(prefix: Option<&str>, name: &str) -> String {
    let full = match prefix {
        Some(p) => format!("{p}-{name}"),
        None => name.to_string(),
    };
    full.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).take(128).collect()
}

/// An entry's name as told in a line: quoted and escaped if it holds a control
/// character, so that a newline or an escape sequence in a file cannot split the line or
/// reach the terminal.
fn shown(name: &str) -> String {
    if name.chars().any(char::is_control) { format!("{name:?}") } else { name.to_string() }
}

/// This host's zone, as cron reads schedules: `TZ`, else the zone `/etc/localtime` links
/// to, else UTC with a note saying so.
fn host_timezone() -> (String, Option<String>) {
    if let Ok(tz) = std::env::var("TZ") {
        let tz = tz.trim_start_matches(':');
        if crate::schedule::parse_timezone(tz).is_ok() {
            return (tz.to_string(), None);
        }
    }
    let linked = std::fs::read_link("/etc/localtime")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.split("zoneinfo/").nth(1)).map(String::from))
        .filter(|tz| crate::schedule::parse_timezone(tz).is_ok());
    match linked {
        Some(tz) => (tz, None),
        None => ("UTC".into(), Some("this host's time zone is unknown: entries are read as UTC (pass --tz)".into())),
    }
}

/// Job names from the file's name (`/etc/cron.d/backup` gives `backup-<line>`), so that
/// two files imported do not overwrite each other's jobs.
fn file_prefix(file: &std::path::Path) -> String {
    let stem = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let clean: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .take(64)
        .collect();
    if clean.is_empty() { "crontab".into() } else { clean }
}
