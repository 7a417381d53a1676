//! `hello`: the smallest useful job. Logs who and when it runs, greeting with the
//! config value `greeting` (default "hello"), and its input when triggered with one.
//!
//! Spec config: `greeting` (optional). Grants: none.

use cronrun_sdk::{Context, config, log};

#[cronrun_sdk::job(
    schedule = "*/10 * * * * *",
    timezone = "UTC",
    timeout = "5s",
    overlap = "skip",
    description = "Logs a greeting every 10 seconds"
)]
fn run(ctx: &Context) -> Result<Option<String>, String> {
    let greeting = config::get("greeting").unwrap_or_else(|| "hello".to_string());
    log::info!("{greeting} from {}", ctx.job());
    log::info!(
        "run {} (attempt {}, trigger {}) scheduled at {}",
        ctx.run_id(),
        ctx.attempt(),
        ctx.trigger(),
        ctx.scheduled_at()
    );
    // Where the run exports traces: the job's own spans would be children of this.
    if let Some(traceparent) = ctx.traceparent() {
        log::info!("traceparent {traceparent}");
    }
    if let Some(input) = ctx.input() {
        log::info!("input: {input}");
    }
    let keys: Vec<&str> = ctx.config_entries().iter().map(|(k, _)| k.as_str()).collect();
    log::debug!("config keys: {}", keys.join(", "));
    Ok(Some(format!("{greeting}, world")))
}
