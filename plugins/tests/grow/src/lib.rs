//! `test-grow`: allocates 1 MiB blocks until the memory limit stops it. For the host's
//! sandbox tests.

use cronrun_sdk::{Context, log};
use std::hint::black_box;

#[cronrun_sdk::job(schedule = "@yearly")]
fn run(_ctx: &Context) -> Result<Option<String>, String> {
    log::info!("growing");
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        blocks.push(black_box(vec![1u8; 1 << 20]));
        if blocks.len() > 1 << 16 {
            return Ok(Some(format!("allocated {} MiB", blocks.len())));
        }
    }
}
