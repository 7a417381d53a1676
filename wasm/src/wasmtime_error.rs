//! wasmtime's error as a standard error: wasmtime's own type is no `std::error::Error`
//! (as anyhow's is not), so the typed errors of this crate hold it in [`WasmtimeError`]
//! to keep it as their source. Shared (`Arc`) so that a link failure kept in the cache
//! stays `Clone`.

use std::fmt;
use std::sync::Arc;

/// A wasmtime error; shown with its causes on one line (`{:#}`), as this crate always
/// showed them.
#[derive(Debug, Clone)]
pub struct WasmtimeError(Arc<wasmtime::Error>);

impl From<wasmtime::Error> for WasmtimeError {
    fn from(e: wasmtime::Error) -> Self {
        Self(Arc::new(e))
    }
}

impl fmt::Display for WasmtimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for WasmtimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let inner: &(dyn std::error::Error + Send + Sync + 'static) = &**self.0;
        inner.source()
    }
}
