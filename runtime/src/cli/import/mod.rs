//! `cronrun import crontab FILE`: jobs from another scheduler's definitions. Prints what
//! each line became and what it could not map; writes nothing when any line is wrong, or
//! with `--dry-run`; otherwise creates or updates the jobs as `apply` does.

mod crontab;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use crate::events::EventKind;

#[derive(Subcommand)]
pub enum ImportCommand {
    /// A crontab(5): a user's (`crontab -l > FILE`), or /etc/crontab and /etc/cron.d files with --system
    Crontab(CrontabArgs),
}

#[derive(Args)]
pub struct CrontabArgs {
    pub file: std::path::PathBuf,
    /// Lines have a user column after the time fields (/etc/crontab, /etc/cron.d)
    #[arg(long)]
    pub system: bool,
    /// The user jobs run as (shell.user), for a user's crontab
    #[arg(long)]
    pub user: Option<String>,
    /// The zone of entries before any CRON_TZ line [default: this host's]
    #[arg(long)]
    pub tz: Option<String>,
    /// Job names are PREFIX-<line number> [default: the file's name]
    #[arg(long)]
    pub prefix: Option<String>,
    /// Show what would be imported, write nothing
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run(ctx: &Ctx, command: ImportCommand) -> Result<()> {
    let ImportCommand::Crontab(a) = command;
    let origin = a.file.display().to_string();
    let text = std::fs::read_to_string(&a.file).with_context(|| format!("cannot read {origin}"))?;
    let (timezone, zone_note) = match &a.tz {
        Some(tz) => (tz.clone(), None),
        None => host_timezone(),
    };
    let prefix = a.prefix.clone().unwrap_or_else(|| file_prefix(&a.file));
    let options = crontab::Options { prefix, timezone, system: a.system, user: a.user.clone() };
    let mut imported = crontab::parse(&text, &origin, &options).map_err(anyhow::Error::msg)?;
    imported.notes.extend(zone_note);
    let mut results = Vec::new();
    if !a.dry_run && !imported.jobs.is_empty() {
        let store = ctx.store().await?;
        for (_, spec) in &imported.jobs {
            let (revision, changed) =
                store.put_job(spec).await.with_context(|| format!("writing job {}", spec.name))?;
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
        "jobs": imported.jobs.iter().map(|(n, spec)| json!({ "line": n, "spec": spec })).collect::<Vec<_>>(),
        "not_imported": imported.skipped.iter().map(|(n, why)| json!({ "line": n, "why": why })).collect::<Vec<_>>(),
        "notes": imported.notes,
        "written": results,
        "dry_run": a.dry_run,
    });
    ctx.print(&value, || {
        let mut lines: Vec<String> = imported
            .jobs
            .iter()
            .map(|(n, spec)| {
                let shell = spec.shell.as_ref();
                let command = shell
                    .and_then(|s| s.command.clone())
                    .or_else(|| shell.and_then(|s| s.argv.as_ref().map(|a| a.join(" "))));
                format!(
                    "line {n}: {} `{}` ({}): {}",
                    spec.name,
                    spec.schedule,
                    spec.timezone,
                    command.unwrap_or_default()
                )
            })
            .collect();
        lines.extend(imported.skipped.iter().map(|(n, why)| format!("line {n}: not imported: {why}")));
        lines.extend(imported.notes.iter().cloned());
        lines.push(match (a.dry_run, imported.jobs.len()) {
            (true, n) => format!("dry run: {n} job(s) would be imported, nothing written"),
            (false, n) => format!("imported {n} job(s)"),
        });
        lines.join("\n")
    })
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
