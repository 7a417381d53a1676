//! The library's error type: a kind callers can match, with the job or run it concerns.

use std::fmt;

/// What went wrong, for callers that react differently to each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// Input refused: a spec field, a schedule, a name. `field` names where.
    Invalid { field: String },
    /// The thing asked for does not exist.
    NotFound,
    /// A compare-and-set lost: someone else wrote first. The fencing signal.
    Conflict,
    /// A create-if-absent found the key already there.
    AlreadyExists,
    /// NATS failed or timed out.
    Nats,
    /// Anything else (I/O, a child process).
    Other,
}

/// A cronrun error: its kind and a one-line message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid { field: field.into() }, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }
    pub fn nats(context: &str, err: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Nats, format!("{context}: {err}"))
    }
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn is_conflict(&self) -> bool {
        self.kind == ErrorKind::Conflict
    }
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
