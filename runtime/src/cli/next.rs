//! `cronrun next EXPR [--tz ZONE] [--from INSTANT] [-n N]`: fire times, computed offline.

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use clap::Args;

use super::{Ctx, fmt_time};
use crate::schedule::{Schedule, parse_timezone};

#[derive(Args)]
pub struct NextArgs {
    /// The schedule expression (quote it)
    pub expr: String,
    /// IANA time zone [default: UTC]
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// Start after this RFC 3339 instant [default: now]
    #[arg(long)]
    pub from: Option<String>,
    /// How many fire times
    #[arg(short = 'n', default_value_t = 5)]
    pub count: usize,
}

pub fn run(ctx: &Ctx, a: NextArgs) -> Result<()> {
    let schedule = Schedule::parse(&a.expr).map_err(|e| anyhow::anyhow!("schedule: {e}"))?;
    let tz = parse_timezone(&a.tz).map_err(|e| anyhow::anyhow!("--tz: {e}"))?;
    let mut at: DateTime<Utc> = match &a.from {
        Some(s) => DateTime::parse_from_rfc3339(s)
            .with_context(|| format!("--from {s:?} is not an RFC 3339 instant like 2026-03-29T00:00:00Z"))?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let mut fires = Vec::new();
    while fires.len() < a.count {
        let Some(next) = schedule.next_after(at, tz) else { break };
        fires.push(next);
        at = next;
    }
    let utc: Vec<String> = fires.iter().map(fmt_time).collect();
    ctx.print(&utc, || {
        fires
            .iter()
            .map(|t| format!("{}  {}", fmt_time(t), t.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S %Z")))
            .collect::<Vec<_>>()
            .join("\n")
    })
}
