//! `cronrun export [--selector K=V,...] [-o FILE]`: the stored jobs as a jobs file, such
//! that applying it changes nothing and `diff -f` of it prints nothing. Each job is written
//! as stored (fields at their defaults left out, labels and so its owner kept), and the
//! text is read back before it is written out: a job that would not come back the same is
//! refused, naming it, rather than exported slightly wrong. Wasm jobs are exported with
//! their plugin digest: the component itself stays in the plugins store.

use std::path::Path;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::json;

use super::Ctx;
use super::plan::Selector;
use crate::spec::{JobSpec, parse_jobs_file};

#[derive(Args)]
pub struct ExportArgs {
    /// Only the jobs that have these labels, e.g. cronrun.io/owner=prod (an owner's jobs)
    #[arg(short = 'l', long, value_name = "K=V,...")]
    pub selector: Option<String>,
    /// Write to FILE (replaced whole, or not at all) instead of standard output
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

pub async fn run(ctx: &Ctx, a: ExportArgs) -> Result<()> {
    let selector = Selector::parse(a.selector.as_deref())?;
    let store = ctx.store().await?;
    let specs = stored_specs(&store, &selector).await?;
    if specs.is_empty() {
        eprintln!("warning: no job to export: the file holds none, and `apply` refuses a file without jobs");
    }
    let text = render(&specs, a.selector.as_deref())?;
    let Some(path) = &a.out else {
        super::out(text.trim_end())?;
        return Ok(());
    };
    write_whole(path, &text)?;
    let file = path.display().to_string();
    ctx.print(&json!({ "file": file, "jobs": specs.len() }), || format!("exported {} jobs to {file}", specs.len()))
}

/// The stored specs that `selector` selects, by name. A stored spec that is refused cannot
/// be exported as it is: it is an error rather than a job left out, since a file missing
/// it, applied with `--prune`, would remove it.
async fn stored_specs(store: &crate::store::Store, selector: &Selector) -> Result<Vec<JobSpec>> {
    let mut specs = Vec::new();
    for job in store.list_jobs().await.context("reading the stored jobs")? {
        match job.spec {
            Ok(spec) if selector.matches(&spec) => specs.push(spec),
            Ok(_) => {}
            Err(e) => bail!(
                "job {:?} (revision {}) is stored but invalid, so it cannot be exported: {e}; fix it with \
                 `cronrun apply` or remove it",
                job.name,
                job.revision
            ),
        }
    }
    Ok(specs)
}

/// The jobs file: a header, then a `[[job]]` table per spec, checked to read back to the
/// same specs.
fn render(specs: &[JobSpec], selector: Option<&str>) -> Result<String> {
    let which = selector.map(|s| format!(" with labels {s}")).unwrap_or_default();
    let mut text =
        format!("# cronrun export: {} jobs{which}. `cronrun apply -f FILE` of it changes nothing.\n", specs.len());
    for spec in specs {
        text.push('\n');
        text.push_str(&spec.to_jobs_toml()?);
    }
    if !specs.is_empty() {
        check_reads_back(&text, specs)?;
    }
    Ok(text)
}

/// Refuses `text` unless it parses (as `apply` parses it) to exactly `specs`.
fn check_reads_back(text: &str, specs: &[JobSpec]) -> Result<()> {
    let again = parse_jobs_file(text, "the exported file").context("the exported file would be refused by apply")?;
    for (spec, read) in specs.iter().zip(&again) {
        if spec != read {
            let fields: Vec<String> = super::plan::fields(spec, read)?.into_iter().map(|f| f.path).collect();
            bail!("job {:?} cannot be exported: read back from TOML its {} would differ", spec.name, fields.join(", "));
        }
    }
    if again.len() != specs.len() {
        bail!("the exported file reads back as {} jobs, not {}", again.len(), specs.len());
    }
    Ok(())
}

/// Writes `text` to `path` through a temporary file renamed over it, so that `path` is
/// never left half-written (an interrupted export, a full disk).
fn write_whole(path: &Path, text: &str) -> Result<()> {
    let name = path.file_name().with_context(|| format!("-o {}: not a file name", path.display()))?;
    let mut temporary = name.to_os_string();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary);
    std::fs::write(&temporary, text)
        .and_then(|()| std::fs::rename(&temporary, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&temporary);
        })
        .with_context(|| format!("cannot write {}", path.display()))
}
