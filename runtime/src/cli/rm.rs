//! `cronrun rm NAME`

use anyhow::Result;
use clap::Args;
use serde_json::json;

use super::Ctx;

#[derive(Args)]
pub struct RmArgs {
    pub name: String,
}

pub async fn run(ctx: &Ctx, a: RmArgs) -> Result<()> {
    let store = ctx.store().await?;
    store.delete_job(&a.name).await?;
    ctx.print(&json!({ "removed": a.name }), || format!("removed {}", a.name))
}
