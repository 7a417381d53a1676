//! Log lines: they land in the run's output like a shell job's stdout (live in
//! `cronrun.logs.<job>.<run-id>`, the last lines kept in the run record).
//!
//! Each level exists as a function taking a `&str` and as a `format!`-style macro of the
//! same name: `log::info("done")`, `log::info!("{n} rows")`.

use crate::__private::bindings::cronrun::job::log::write;
use crate::__private::bindings::cronrun::job::types::Level;

/// Writes a debug line.
pub fn debug(message: &str) {
    write(Level::Debug, message);
}

/// Writes an info line.
pub fn info(message: &str) {
    write(Level::Info, message);
}

/// Writes a warning line.
pub fn warn(message: &str) {
    write(Level::Warn, message);
}

/// Writes an error line (the run still succeeds unless the job returns `Err`).
pub fn error(message: &str) {
    write(Level::Error, message);
}

// `#[macro_export]` puts macros at the crate root; hidden there, they are re-exported
// below under the level names so that `log::info!` sits next to `log::info`.

#[doc(hidden)]
#[macro_export]
macro_rules! __cronrun_log_debug {
    ($($arg:tt)*) => { $crate::log::debug(&::std::format!($($arg)*)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __cronrun_log_info {
    ($($arg:tt)*) => { $crate::log::info(&::std::format!($($arg)*)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __cronrun_log_warn {
    ($($arg:tt)*) => { $crate::log::warn(&::std::format!($($arg)*)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __cronrun_log_error {
    ($($arg:tt)*) => { $crate::log::error(&::std::format!($($arg)*)) };
}

/// `format!`-style [`debug()`]: `log::debug!("{} items", n)`.
#[doc(inline)]
pub use crate::__cronrun_log_debug as debug;
/// `format!`-style [`error()`]: `log::error!("{} items", n)`.
#[doc(inline)]
pub use crate::__cronrun_log_error as error;
/// `format!`-style [`info()`]: `log::info!("{} items", n)`.
#[doc(inline)]
pub use crate::__cronrun_log_info as info;
/// `format!`-style [`warn()`]: `log::warn!("{} items", n)`.
#[doc(inline)]
pub use crate::__cronrun_log_warn as warn;
