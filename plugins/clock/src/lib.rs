//! `clock`: prints when its own code started, in nanoseconds since the epoch, before
//! anything else. `cronrun bench lateness --wasm clock.wasm` reads that line: lateness as
//! the job feels it, from the fire to the first statement of the job's own code. With
//! config `subject` it then publishes one event there, as `emit-event` does (header
//! `Nats-Msg-Id: <job>-<fire unix seconds>`): the job's effect, which `bench lateness
//! --emit` times as its stream stores it.
//!
//! Spec config: `subject` (optional). Grants: `allow_publish` covering `subject`, if set.

use std::time::{SystemTime, UNIX_EPOCH};

use cronrun_sdk::{Context, config, log, nats};

#[cronrun_sdk::job(
    schedule = "* * * * * *",
    timezone = "UTC",
    timeout = "5s",
    overlap = "allow",
    description = "Prints the instant its code started, every second"
)]
fn run(ctx: &Context) -> Result<Option<String>, String> {
    let started = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
    log::info!("{}", started.as_nanos());
    if let Some(subject) = config::get("subject") {
        let fire = ctx.scheduled_unix_seconds().ok_or("the run has no fire instant")?;
        let body = format!("{{\"job\":\"{}\",\"fire\":{fire}}}", ctx.job());
        nats::publish(&subject, body.as_bytes(), &[("Nats-Msg-Id", &format!("{}-{fire}", ctx.job()))])?;
    }
    Ok(None)
}
