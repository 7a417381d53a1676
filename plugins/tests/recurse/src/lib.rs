//! `test-recurse`: recurses without end, so the guest's wasm call stack overflows (small
//! frames kept in registers, so the engine's stack limit is hit before the Rust shadow
//! stack in linear memory). For the host's sandbox tests.

use cronrun_sdk::{Context, log};
use std::hint::black_box;

fn deep(n: u64) -> u64 {
    if n == u64::MAX {
        return 0;
    }
    black_box(deep(n + 1)) ^ n
}

#[cronrun_sdk::job(schedule = "@yearly")]
fn run(_ctx: &Context) -> Result<Option<String>, String> {
    log::info!("recursing");
    Ok(Some(deep(0).to_string()))
}
