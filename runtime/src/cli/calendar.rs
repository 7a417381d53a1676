//! `cronrun calendar set NAME FILE | ls | get NAME | rm NAME [--force]`: named calendars
//! of days that the jobs naming them in `exclude` do not fire (see `spec::calendar`).

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;

use super::Ctx;
use crate::spec::JobSpec;
use crate::spec::calendar::{Calendar, validate_calendar_name};
use crate::store::Store;

#[derive(Subcommand)]
pub enum CalendarCommand {
    /// Store calendar NAME from FILE: a date (2026-12-25) or range (2026-12-24..2026-12-26)
    /// per line, or an iCalendar file of all-day events; `-` reads standard input
    Set(SetArgs),
    /// List calendars: name, days, first and last
    Ls,
    /// Print a calendar's days as ranges
    Get(NameArgs),
    /// Remove a calendar; refused while a job names it, unless --force
    Rm(RmArgs),
}

#[derive(Args)]
pub struct SetArgs {
    pub name: String,
    pub file: std::path::PathBuf,
}

#[derive(Args)]
pub struct NameArgs {
    pub name: String,
}

#[derive(Args)]
pub struct RmArgs {
    pub name: String,
    /// Remove it though jobs name it: they then exclude nothing for it
    #[arg(long)]
    pub force: bool,
}

/// The most a calendar file may hold.
const MAX_FILE_BYTES: u64 = 1 << 20;

pub async fn run(ctx: &Ctx, command: CalendarCommand) -> Result<()> {
    match command {
        CalendarCommand::Set(a) => set(ctx, a).await,
        CalendarCommand::Ls => ls(ctx).await,
        CalendarCommand::Get(a) => get(ctx, a).await,
        CalendarCommand::Rm(a) => rm(ctx, a).await,
    }
}

async fn set(ctx: &Ctx, a: SetArgs) -> Result<()> {
    validate_calendar_name(&a.name)?;
    let origin = a.file.display().to_string();
    let calendar = Calendar::parse(&a.name, &read(&a.file)?, &origin)?;
    let store = ctx.store().await?;
    let replicas = store.jobs.kv.stream.cached_info().config.num_replicas.max(1);
    store.calendars.set(&calendar, replicas).await?;
    let (days, ranges) = (calendar.days(), calendar.dates.len());
    ctx.print(&json!({ "calendar": a.name, "days": days, "ranges": ranges }), || {
        format!(
            "calendar {} set: {days} days in {ranges} ranges; jobs naming it skip them from their next fire",
            a.name
        )
    })
}

/// The text of `path` (`-`: standard input), refused past `MAX_FILE_BYTES`.
fn read(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let shown = path.display();
    let mut bytes = Vec::new();
    let read = match path.as_os_str() == "-" {
        true => std::io::stdin().take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes),
        false => std::fs::File::open(path).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)),
    };
    read.with_context(|| format!("{shown}: cannot read it"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        bail!("{shown}: over 1 MiB; a calendar holds dates, split it");
    }
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{shown}: not UTF-8 text"))
}

async fn ls(ctx: &Ctx) -> Result<()> {
    let calendars = ctx.store().await?.calendars.list().await?;
    let rows: Vec<_> = calendars
        .iter()
        .map(|c| {
            json!({ "name": c.name, "days": c.days(), "first": c.dates.first().map(|d| d.0),
            "last": c.dates.last().map(|d| d.1) })
        })
        .collect();
    ctx.print(&rows, || {
        let mut text = String::from("NAME  DAYS  FIRST  LAST\n");
        for c in &calendars {
            let (first, last) = (c.dates.first().map(|d| d.0), c.dates.last().map(|d| d.1));
            let show = |d: Option<chrono::NaiveDate>| d.map_or("-".to_string(), |d| d.to_string());
            text.push_str(&format!("{}  {}  {}  {}\n", c.name, c.days(), show(first), show(last)));
        }
        text.trim_end().to_string()
    })
}

async fn get(ctx: &Ctx, a: NameArgs) -> Result<()> {
    let store = ctx.store().await?;
    let Some(calendar) = store.calendars.get(&a.name).await? else {
        bail!("calendar {} does not exist; `cronrun calendar ls` lists them", a.name);
    };
    ctx.print(&calendar, || {
        let ranges = calendar.dates.iter().map(|(from, to)| match from == to {
            true => from.to_string(),
            false => format!("{from}..{to}"),
        });
        ranges.collect::<Vec<_>>().join("\n")
    })
}

async fn rm(ctx: &Ctx, a: RmArgs) -> Result<()> {
    validate_calendar_name(&a.name)?;
    let store = ctx.store().await?;
    let naming = jobs_naming(&store, &a.name).await?;
    if !naming.is_empty() && !a.force {
        bail!(
            "calendar {} is named by {}: remove it from their exclude first, or give --force (they then exclude nothing for it)",
            a.name,
            naming.join(", ")
        );
    }
    if !store.calendars.remove(&a.name).await? {
        bail!("calendar {} does not exist; `cronrun calendar ls` lists them", a.name);
    }
    ctx.print(&json!({ "removed": a.name }), || format!("removed calendar {}", a.name))
}

/// The jobs whose `exclude` names calendar `name`.
async fn jobs_naming(store: &Store, name: &str) -> Result<Vec<String>> {
    let jobs = store.list_jobs().await?;
    let naming = jobs.into_iter().filter(|j| j.spec.as_ref().is_ok_and(|s| s.exclude.iter().any(|c| c == name)));
    Ok(naming.map(|j| j.name).collect())
}

/// Refuses `specs` when one excludes a calendar that does not exist, in one line naming
/// the job, the calendar and how to set it.
pub(super) async fn check_named(store: &Store, specs: &[JobSpec]) -> Result<()> {
    let named: BTreeSet<String> = specs.iter().flat_map(|s| s.exclude.iter().cloned()).collect();
    if named.is_empty() {
        return Ok(());
    }
    let named: Vec<String> = named.into_iter().collect();
    let missing = store.calendars.missing(&named).await.context("checking the calendars the jobs exclude")?;
    let Some(first) = missing.first() else { return Ok(()) };
    let job = specs.iter().find(|s| s.exclude.contains(first)).map_or("", |s| s.name.as_str());
    bail!(
        "job {job} excludes calendar {first}, which does not exist: set it first with `cronrun calendar set {first} FILE`"
    )
}
