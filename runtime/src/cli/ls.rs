//! `cronrun ls`: every job with its next fire; invalid stored specs show why.

use anyhow::Result;
use serde_json::json;

use super::{Ctx, fmt_time, table};

pub async fn run(ctx: &Ctx) -> Result<()> {
    let store = ctx.store().await?;
    let jobs = store.list_jobs().await?;
    let now = ctx.now();
    // The calendars jobs exclude, read once each.
    let mut excluded = std::collections::HashMap::new();
    for spec in jobs.iter().filter_map(|j| j.spec.as_ref().ok()).filter(|s| !s.exclude.is_empty()) {
        excluded.insert(spec.name.clone(), store.calendars.excluded(&spec.exclude).await?);
    }
    let none = crate::store::Excluded::default();
    let rows: Vec<serde_json::Value> = jobs
        .iter()
        .map(|job| match &job.spec {
            Ok(spec) => {
                let excluded = excluded.get(&spec.name).unwrap_or(&none);
                let next = spec
                    .parsed_schedule()
                    .ok()
                    .and_then(|(s, tz)| if spec.paused { None } else { excluded.next_after(&s, now, tz) });
                json!({
                    "name": job.name, "revision": job.revision, "schedule": spec.schedule,
                    "triggers": crate::spec::on::describe_triggers(&spec.after, spec.on.as_ref()),
                    "timezone": spec.timezone, "kind": if spec.wasm.is_some() { "wasm" } else { "shell" },
                    "pool": spec.pool, "paused": spec.paused, "next": next.map(|t| fmt_time(&t)),
                })
            }
            Err(e) => json!({ "name": job.name, "revision": job.revision, "error": e.to_string() }),
        })
        .collect();
    ctx.print(&rows, || {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
                match r.get("error") {
                    Some(e) => vec![s("name"), format!("INVALID: {}", e.as_str().unwrap_or(""))],
                    None => vec![
                        s("name"),
                        if s("schedule").is_empty() { s("triggers") } else { s("schedule") },
                        s("timezone"),
                        s("kind"),
                        s("pool"),
                        if r["paused"] == true { "paused".into() } else { "active".into() },
                        r["next"].as_str().unwrap_or("-").into(),
                    ],
                }
            })
            .collect();
        table(&["NAME", "SCHEDULE", "TZ", "KIND", "POOL", "STATE", "NEXT"], &cells)
    })
}
