//! `test-spin`: loops forever without host calls, so only epoch interruption (the
//! job's timeout) can end it. For the host's sandbox tests.

use cronrun_sdk::{Context, log};
use std::hint::black_box;

#[cronrun_sdk::job(schedule = "@yearly", timeout = "1s")]
fn run(_ctx: &Context) -> Result<Option<String>, String> {
    log::info!("spinning");
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}
