//! `cronrun agent`: the production daemon for one host.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::Ctx;
use crate::config::{AgentConfig, Role};

#[derive(Args, Clone, Default)]
pub struct AgentArgs {
    /// cronrun.toml to read (flags override it)
    #[arg(long, short = 'c', env = "CRONRUN_CONFIG")]
    pub config: Option<PathBuf>,
    /// This agent's name [default: the host name]
    #[arg(long)]
    pub name: Option<String>,
    /// Pool to take runs from (repeatable) [default: default]
    #[arg(long = "pool")]
    pub pools: Vec<String>,
    /// Role to play (repeatable) [default: scheduler and runner]
    #[arg(long = "role", value_enum)]
    pub roles: Vec<Role>,
    /// Runs held at once
    #[arg(long)]
    pub slots: Option<usize>,
    /// Serve /livez, /readyz and /metrics here, e.g. 127.0.0.1:8642
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
}

impl AgentArgs {
    /// The config file (or defaults) with the command line laid over it.
    pub fn config(&self, ctx: &Ctx) -> Result<AgentConfig> {
        let mut config = match &self.config {
            Some(path) => AgentConfig::load(path)?,
            None => AgentConfig::default(),
        };
        if let Some(nats) = &ctx.global.nats {
            config.nats = nats.clone();
        }
        if ctx.global.creds.is_some() {
            config.creds = ctx.global.creds.clone();
        }
        if ctx.global.namespace != crate::names::DEFAULT_NAMESPACE {
            config.namespace = ctx.global.namespace.clone();
        }
        if let Some(domain) = &ctx.global.jetstream_domain {
            config.jetstream_domain = Some(domain.clone());
        }
        if let Some(name) = &self.name {
            config.name = name.clone();
        }
        if let Some(addr) = &self.http {
            config.http.listen = Some(addr.clone());
        }
        if !self.pools.is_empty() {
            config.runner.pools = self.pools.clone();
        }
        if !self.roles.is_empty() {
            config.roles = self.roles.clone();
        }
        if let Some(slots) = self.slots {
            config.runner.slots = slots;
        }
        config.validate()?;
        Ok(config)
    }
}

pub async fn run(ctx: &Ctx, a: AgentArgs) -> Result<()> {
    let config = a.config(ctx)?;
    let cancel = CancellationToken::new();
    crate::shutdown::cancel_on_signals(cancel.clone(), || {}).context("installing signal handlers")?;
    let client =
        crate::connect::connect(&config.nats, config.creds.as_deref(), &format!("cronrun-agent {}", config.name))
            .await?;
    crate::agent::run(client, config, ctx.clock.clone(), cancel).await?;
    Ok(())
}
