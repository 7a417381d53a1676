//! Glue between the generated `run` export and the user's job function.

use crate::__private::JobContext;
use crate::Context;
use std::fmt::Display;

/// What a job function may return on success: nothing, or a short result text that
/// the host appends as the run's last output line.
pub trait IntoOutput {
    /// The text for the host, if any.
    fn into_output(self) -> Option<String>;
}

impl IntoOutput for () {
    fn into_output(self) -> Option<String> {
        None
    }
}

impl IntoOutput for String {
    fn into_output(self) -> Option<String> {
        Some(self)
    }
}

impl IntoOutput for &str {
    fn into_output(self) -> Option<String> {
        Some(self.to_string())
    }
}

impl IntoOutput for Option<String> {
    fn into_output(self) -> Option<String> {
        self
    }
}

/// Runs `job` with the host's context and turns its result into the WIT result.
pub fn call<T, E, F>(ctx: JobContext, job: F) -> Result<Option<String>, String>
where
    T: IntoOutput,
    E: Display,
    F: FnOnce(&Context) -> Result<T, E>,
{
    let ctx = Context::from(ctx);
    job(&ctx).map(IntoOutput::into_output).map_err(|e| e.to_string())
}
