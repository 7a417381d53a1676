//! A key-value store private to the job and kept across runs (needs `allow_kv = true`
//! in the job spec). Keys: 1 to 256 of `A-Z a-z 0-9 _ - / = .`, not starting or ending
//! with `.`. Errors are readable strings from the host.

use crate::__private::bindings::cronrun::job::kv as host;

/// The value stored under `key`, or none.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, String> {
    host::get(key)
}

/// Stores `value` under `key`, replacing any previous value.
pub fn set(key: &str, value: &[u8]) -> Result<(), String> {
    host::set(key, value)
}

/// Removes `key`; removing a missing key is not an error.
pub fn delete(key: &str) -> Result<(), String> {
    host::delete(key)
}
