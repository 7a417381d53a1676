//! `cronrun diff -f FILE [--owner NAME [--prune]]`: what `apply` with the same options
//! would create (`+ job NAME`), change (`~ job NAME: FIELD OLD -> NEW`, a line per field)
//! and remove (`- job NAME`). Exits as `diff(1)` and `kubectl diff` do, so that a script
//! or CI job can tell the three apart: 0 when nothing differs (and nothing is printed), 1
//! when something does, 2 when the file or the store could not be compared.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::Ctx;
use super::plan::{Plan, Selector, SourceArgs};

#[derive(Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub source: SourceArgs,
}

pub async fn run(ctx: &Ctx, a: DiffArgs) -> Result<ExitCode> {
    match differs(ctx, &a).await {
        Ok(false) => Ok(ExitCode::SUCCESS),
        Ok(true) => Ok(ExitCode::from(1)),
        Err(e) => {
            report(&e);
            Ok(ExitCode::from(2))
        }
    }
}

/// Prints the differences; whether there are any.
async fn differs(ctx: &Ctx, a: &DiffArgs) -> Result<bool> {
    let selector = Selector::parse(a.source.selector.as_deref())?;
    let source = super::plan::read(&a.source)?;
    let store = ctx.store().await?;
    // What `apply` would refuse is an error here too, not a difference.
    super::apply::check_specs(&store, &source.jobs, &source.origin).await?;
    let plan = Plan::make(&store, &source, &a.source, &selector).await?;
    ctx.print(&plan.to_json(), || plan.lines().join("\n"))?;
    Ok(!plan.is_empty())
}

/// The error line `main` prints for any command; written here because exit code 1 means
/// "differs" for this one.
fn report(e: &anyhow::Error) {
    let e = super::error_line(e).replace('\n', " ");
    match crate::connect::last_denial() {
        Some(denial) => eprintln!(
            "error: NATS refused it: {denial}; connect as an identity whose role allows it (--creds, docs/security.md) [{e}]"
        ),
        None => eprintln!("error: {e}"),
    }
}
