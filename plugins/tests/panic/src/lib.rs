//! `test-panic`: writes a line to stdout and one to stderr, then panics with a known
//! message. For the host's sandbox tests.

use cronrun_sdk::{Context, log};

#[cronrun_sdk::job(schedule = "@yearly")]
fn run(ctx: &Context) -> Result<Option<String>, String> {
    log::info!("about to panic");
    println!("plain stdout from {}", ctx.job());
    eprintln!("plain stderr from {}", ctx.job());
    if ctx.attempt() > 0 {
        panic!("deliberate panic in {}", ctx.job());
    }
    Ok(None)
}
