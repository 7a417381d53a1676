//! `cronrun add NAME --schedule EXPR [opts] -- CMD...`: one argument after `--` is a
//! command for `/bin/sh -c`; several are an argv run directly.

use anyhow::{Result, bail};
use clap::Args;
use serde_json::{Map, Value, json};

use super::{Ctx, fmt_time};
use crate::events::EventKind;
use crate::spec::JobSpec;

#[derive(Args)]
pub struct AddArgs {
    pub name: String,
    /// Cron expression (5, 6 or 7 fields), @daily..., @every 30s or @at <RFC 3339>
    #[arg(long)]
    pub schedule: String,
    /// IANA time zone of the schedule [default: UTC]
    #[arg(long)]
    pub tz: Option<String>,
    /// Longest a run may take, e.g. 30s or 1h
    #[arg(long)]
    pub timeout: Option<String>,
    /// Runner pool [default: default]
    #[arg(long)]
    pub pool: Option<String>,
    /// skip | allow | queue | replace [default: skip]
    #[arg(long)]
    pub overlap: Option<String>,
    /// Environment variable for the command, KEY=VALUE (repeatable)
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Working directory (absolute)
    #[arg(long)]
    pub cwd: Option<String>,
    /// Retries after a failed attempt
    #[arg(long)]
    pub retries: Option<u32>,
    #[arg(long)]
    pub description: Option<String>,
    /// Add the job paused
    #[arg(long)]
    pub paused: bool,
    /// Replace a job of the same name instead of refusing
    #[arg(long)]
    pub replace: bool,
    /// The command: one argument runs under /bin/sh -c, several run as an argv
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Builds the spec through its JSON form, so flags get the same checks and messages
/// as stored specs.
fn spec_from(a: &AddArgs) -> Result<JobSpec> {
    let mut shell = Map::new();
    if a.command.len() == 1 {
        shell.insert("command".into(), json!(a.command[0]));
    } else {
        shell.insert("argv".into(), json!(a.command));
    }
    let mut env = Map::new();
    for kv in &a.env {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--env {kv:?} must be KEY=VALUE");
        };
        env.insert(k.into(), json!(v));
    }
    if !env.is_empty() {
        shell.insert("env".into(), Value::Object(env));
    }
    if let Some(cwd) = &a.cwd {
        shell.insert("cwd".into(), json!(cwd));
    }
    let mut spec = Map::new();
    spec.insert("name".into(), json!(a.name));
    spec.insert("schedule".into(), json!(a.schedule));
    spec.insert("shell".into(), Value::Object(shell));
    let optional = [
        ("timezone", a.tz.clone().map(Value::from)),
        ("timeout", a.timeout.clone().map(Value::from)),
        ("pool", a.pool.clone().map(Value::from)),
        ("overlap", a.overlap.clone().map(Value::from)),
        ("description", a.description.clone().map(Value::from)),
        ("retries", a.retries.map(|n| json!({ "max": n }))),
        ("paused", a.paused.then_some(Value::Bool(true))),
    ];
    for (key, value) in optional {
        if let Some(v) = value {
            spec.insert(key.into(), v);
        }
    }
    Ok(JobSpec::from_json(&serde_json::to_vec(&spec)?)?)
}

pub async fn run(ctx: &Ctx, a: AddArgs) -> Result<()> {
    let spec = spec_from(&a)?;
    let store = ctx.store().await?;
    let revision = if a.replace { store.put_job(&spec).await?.0 } else { store.create_job(&spec).await? };
    ctx.audit(&store, &spec.name, EventKind::Changed, format!("added, revision {revision}")).await;
    ctx.warn_if_unserved(&store, &spec.pool).await;
    let (schedule, tz) = spec.parsed_schedule()?;
    let next = schedule.next_after(ctx.now(), tz);
    ctx.print(&json!({ "name": spec.name, "revision": revision, "next": next.map(|t| fmt_time(&t)) }), || {
        let next = next.map(|t| fmt_time(&t)).unwrap_or_else(|| "never".into());
        format!("added {} (revision {revision}); next fire {next}", spec.name)
    })
}
