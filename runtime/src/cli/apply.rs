//! `cronrun apply -f jobs.toml`: every job is checked before any is written. `--owner`
//! records whose file a job comes from, so that `--prune` removes only that file's jobs
//! once it no longer names them; `--dry-run` prints what would be done (as `diff`).

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use clap::Args;
use futures::StreamExt;
use serde_json::json;

use super::Ctx;
use super::plan::{Plan, Selector, SourceArgs};
use crate::events::EventKind;
use crate::spec::JobSpec;

/// Jobs written at once.
const WRITES_IN_FLIGHT: usize = 32;

#[derive(Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print what would be created, changed and removed (as `diff`), write nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// What `apply`, `import` and `deploy` check of `specs` against what is stored, before writing
/// them: grants reaching reserved subjects, chains (cycles refused, unknown upstreams
/// warned about); then the messages stream made to capture their `on` subjects.
pub(super) async fn check_against_store(store: &crate::store::Store, specs: &[JobSpec], origin: &str) -> Result<()> {
    check_specs(store, specs, origin).await?;
    super::secret::check_named(store, specs).await.with_context(|| origin.to_string())?;
    store.ensure_message_subjects(specs).await.with_context(|| origin.to_string())?;
    Ok(())
}

/// The checks of `check_against_store` that write nothing, for `diff` and `--dry-run`: what
/// they would refuse, `apply` would refuse.
pub(super) async fn check_specs(store: &crate::store::Store, specs: &[JobSpec], origin: &str) -> Result<()> {
    for spec in specs {
        spec.check_grants(&store.names)?;
    }
    super::calendar::check_named(store, specs).await.with_context(|| origin.to_string())?;
    for upstream in store.check_chains(specs).await.with_context(|| origin.to_string())? {
        eprintln!("warning: no job {upstream:?} exists yet: the jobs after it start once it is added and runs");
    }
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
    let selector = Selector::parse(a.source.selector.as_deref())?;
    let source = super::plan::read(&a.source)?;
    let (origin, jobs) = (&source.origin, &source.jobs);
    let store = ctx.store().await?;
    // Every job is checked before any is written.
    check_specs(&store, jobs, origin).await?;
    // The secrets the jobs name exist (an admin may read them; `diff`, a viewer's too, does not look).
    super::secret::check_named(&store, jobs).await.with_context(|| origin.to_string())?;
    // Read before anything is written: the jobs to prune are those stored before.
    let plan = match a.dry_run || a.source.prune {
        true => Some(Plan::make(&store, &source, &a.source, &selector).await?),
        false => None,
    };
    if let (true, Some(plan)) = (a.dry_run, &plan) {
        return dry_run(ctx, plan);
    }
    store.ensure_message_subjects(jobs).await.with_context(|| origin.to_string())?;
    warn_unserved_pools(ctx, &store, jobs).await;
    let mut results = write(ctx, &store, jobs, origin).await?;
    let mut lines: Vec<String> = results.iter().map(written_line).collect();
    if let Some(plan) = &plan {
        for removed in prune(ctx, &store, plan, a.source.owner.as_deref().unwrap_or_default()).await? {
            lines.push(removed.to_string());
            results.push(serde_json::to_value(&removed)?);
        }
    }
    ctx.print(&results, || lines.join("\n"))
}

/// A job written (`{name, revision, changed}`), as text.
fn written_line(r: &serde_json::Value) -> String {
    let what = if r["changed"] == true { "applied" } else { "unchanged" };
    format!("{what} {} (revision {})", r["name"].as_str().unwrap_or_default(), r["revision"])
}

/// `--dry-run`: the plan's lines and a summary; nothing is written.
fn dry_run(ctx: &Ctx, plan: &Plan) -> Result<()> {
    ctx.print(&plan.to_json(), || {
        let mut lines = plan.lines();
        lines.push(format!(
            "dry run: {} to create, {} to change, {} to remove, {} unchanged; nothing written",
            plan.create.len(),
            plan.change.len(),
            plan.remove.len(),
            plan.unchanged
        ));
        lines.join("\n")
    })
}

/// Removes the jobs `plan` prunes, each as `cronrun rm` would, after the file's jobs are
/// written (a failed write stops `apply` before anything is removed).
async fn prune(ctx: &Ctx, store: &crate::store::Store, plan: &Plan, owner: &str) -> Result<Vec<super::rm::Removed>> {
    let mut removed = Vec::with_capacity(plan.remove.len());
    for (name, revision) in &plan.remove {
        let detail = format!("removed by apply --prune: owner {owner:?}'s file no longer names it");
        removed.push(super::rm::remove(ctx, store, name, Some(*revision), false, detail).await?);
    }
    Ok(removed)
}

/// Writes `jobs` (put_job: unchanged specs are not rewritten), each changed one audited.
async fn write(
    ctx: &Ctx,
    store: &crate::store::Store,
    jobs: &[JobSpec],
    origin: &str,
) -> Result<Vec<serde_json::Value>> {
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
    let written: Vec<Result<_>> = futures::stream::iter(jobs).map(write).buffered(WRITES_IN_FLIGHT).collect().await;
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
    Ok(results)
}
