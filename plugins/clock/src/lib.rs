//! `clock`: prints when its own code started, in nanoseconds since the epoch, before
//! anything else. `cronrun bench lateness --wasm clock.wasm` reads that line: lateness as
//! the job feels it, from the fire to the first statement of the job's own code.
//!
//! Spec config: none. Grants: none.

use std::time::{SystemTime, UNIX_EPOCH};

use cronrun_sdk::{Context, log};

#[cronrun_sdk::job(
    schedule = "* * * * * *",
    timezone = "UTC",
    timeout = "5s",
    overlap = "allow",
    description = "Prints the instant its code started, every second"
)]
fn run(_ctx: &Context) -> Result<Option<String>, String> {
    let started = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
    log::info!("{}", started.as_nanos());
    Ok(None)
}
