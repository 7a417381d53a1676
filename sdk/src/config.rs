//! The job's configuration: the `wasm.config` map of its spec.

use crate::__private::bindings::cronrun::job::config as host;

/// The value of `key`, or none when the spec does not set it.
///
/// The same values are in [`Context::config`](crate::Context::config); this asks the host.
pub fn get(key: &str) -> Option<String> {
    host::get(key)
}

/// The value of `key`, or an error naming the missing key, for use with `?`.
pub fn require(key: &str) -> Result<String, String> {
    get(key).ok_or_else(|| format!("config key `{key}` is not set: add it to the job spec's wasm.config"))
}
