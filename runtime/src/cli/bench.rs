//! `cronrun bench`: measurements on this machine (written up in docs/BENCHMARKS.md).
use anyhow::Result;
use clap::Args;

use super::Ctx;

#[derive(Args)]
pub struct BenchArgs {}

pub async fn run(_ctx: &Ctx, _a: BenchArgs) -> Result<()> {
    anyhow::bail!("bench: not built yet")
}
