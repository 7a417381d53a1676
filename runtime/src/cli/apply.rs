//! `cronrun apply -f jobs.toml`: every job is checked before any is written.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use clap::Args;
use futures::StreamExt;
use serde_json::json;

use super::Ctx;
use crate::events::EventKind;
use crate::spec::{JobSpec, parse_jobs_file};

/// Jobs written at once.
const WRITES_IN_FLIGHT: usize = 32;

#[derive(Args)]
pub struct ApplyArgs {
    /// A TOML file of [[job]] tables
    #[arg(short = 'f', long = "file")]
    pub file: std::path::PathBuf,
}

/// What `apply`, `import` and `deploy` check of `specs` against what is stored, before writing
/// them: grants reaching reserved subjects, chains (cycles refused, unknown upstreams
/// warned about); then the messages stream made to capture their `on` subjects.
pub(super) async fn check_against_store(store: &crate::store::Store, specs: &[JobSpec], origin: &str) -> Result<()> {
    for spec in specs {
        store.names.check_grants(spec)?;
    }
    for upstream in store.check_chains(specs).await.with_context(|| origin.to_string())? {
        eprintln!("warning: no job {upstream:?} exists yet: the jobs after it start once it is added and runs");
    }
    store.ensure_message_subjects(specs).await.with_context(|| origin.to_string())?;
    Ok(())
}

/// Warns once for each pool of `specs` that no live runner serves.
pub(super) async fn warn_unserved_pools(ctx: &Ctx, store: &crate::store::Store, specs: &[JobSpec]) {
    let pools: std::collections::BTreeSet<&str> = specs.iter().map(|j| j.pool.as_str()).collect();
    for pool in pools {
        ctx.warn_if_unserved(store, pool).await;
    }
}

pub async fn run(ctx: &Ctx, a: ApplyArgs) -> Result<()> {
    let origin = a.file.display().to_string();
    let text = super::read_definitions(&a.file)?;
    let jobs = parse_jobs_file(&text, &origin)?;
    for spec in &jobs {
        crate::input::check_schema(spec).with_context(|| origin.clone())?;
    }
    let store = ctx.store().await?;
    // Every job is checked before any is written.
    check_against_store(&store, &jobs, &origin).await?;
    warn_unserved_pools(ctx, &store, &jobs).await;
    let store = &store;
    let failed = &AtomicBool::new(false);
    let write = |spec| async move {
        let spec: &JobSpec = spec;
        let name = &spec.name;
        // After a failure (NATS gone, most likely) the rest are not tried: each would wait
        // out its own timeout.
        if failed.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let (revision, changed) = store
            .put_job(spec)
            .await
            .with_context(|| format!("writing job {name}"))
            .inspect_err(|_| failed.store(true, Ordering::Relaxed))?;
        if changed {
            ctx.audit(store, name, EventKind::Changed, format!("applied, revision {revision}")).await;
        }
        Ok::<_, anyhow::Error>(Some(json!({ "name": name, "revision": revision, "changed": changed })))
    };
    // Several at once, reported in the file's order: one at a time, 100,000 jobs took
    // minutes of round trips. Every write under way ends (with its audit event) before a
    // failure is reported; applying again is safe (jobs written already are unchanged).
    let written: Vec<Result<_>> = futures::stream::iter(&jobs).map(write).buffered(WRITES_IN_FLIGHT).collect().await;
    let done = written.iter().filter(|w| matches!(w, Ok(Some(_)))).count();
    let mut results = Vec::with_capacity(done);
    for w in written {
        match w {
            Ok(Some(result)) => results.push(result),
            Ok(None) => {}
            Err(e) => {
                return Err(e.context(format!(
                    "{origin}: {done} of {} jobs written before the failure: apply the file again (jobs written already stay unchanged)",
                    jobs.len()
                )));
            }
        }
    }
    ctx.print(&results, || {
        results
            .iter()
            .map(|r| {
                let what = if r["changed"] == true { "applied" } else { "unchanged" };
                format!("{what} {} (revision {})", r["name"].as_str().unwrap_or(""), r["revision"])
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}
