//! `test-fill`: stores a value over the size limit, then adds keys until the host refuses
//! one, then overwrites a key it holds. Reports what happened, for the host's quota tests.

use cronrun_sdk::{Context, kv};

/// Far more keys than any quota the tests set.
const MOST: usize = 10_000;

#[cronrun_sdk::job(schedule = "@yearly")]
fn run(_ctx: &Context) -> Result<Option<String>, String> {
    let too_big = kv::set("big", &vec![0u8; 100 << 10]).err().unwrap_or_else(|| "accepted".into());
    let mut added = 0;
    let refused = loop {
        if added == MOST {
            break "never refused".to_string();
        }
        match kv::set(&format!("k{added}"), b"v") {
            Ok(()) => added += 1,
            Err(e) => break e,
        }
    };
    // A key it already holds is no new key: overwriting it stays within the quota.
    kv::set("k0", b"again")?;
    Ok(Some(format!("added {added}; refused: {refused}; too big: {too_big}")))
}
