//! The library's error type: a kind callers can match, with the job or run it concerns.

use std::fmt;
use std::sync::Arc;

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

/// The error an [`Error`] was caused by, shared so that the error stays `Clone`.
pub type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A cronrun error: its kind and a one-line message that says what to do, and the error
/// that caused it, if any ([`std::error::Error::source`]). The message already says the
/// cause in words (it is what is shown); the source keeps the cause itself, for callers
/// that look into it.
#[derive(Debug, Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Source>,
}

/// Errors are equal when their kind and message are (a cause is not comparable).
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for Error {}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), source: None }
    }
    /// The error with `err` as its cause. The message is unchanged: say the cause in it.
    pub fn with_source(mut self, err: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(err));
        self
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
    /// NATS failed `context`: the message is `context: err`, and `err` is the source.
    pub fn nats<E: std::error::Error + Send + Sync + 'static>(context: &str, err: E) -> Self {
        Self::new(ErrorKind::Nats, format!("{context}: {err}")).with_source(err)
    }
    /// `nats`, for an error that comes boxed (`async_nats::Error`).
    pub fn nats_boxed(context: &str, err: Box<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        let mut e = Self::new(ErrorKind::Nats, format!("{context}: {err}"));
        e.source = Some(Arc::from(err));
        e
    }
    /// NATS failed `context`, for a reason that is no error value (a watch that ended, an
    /// answer that came too late): the message is `context: text`, without a source.
    pub fn nats_msg(context: &str, text: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Nats, format!("{context}: {text}"))
    }
    /// Anything else failed `context` (encoding, I/O): the message is `context: err`, and
    /// `err` is the source.
    pub fn other<E: std::error::Error + Send + Sync + 'static>(context: &str, err: E) -> Self {
        Self::new(ErrorKind::Other, format!("{context}: {err}")).with_source(err)
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

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// An error with a cause of its own, as async-nats nests them.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "request failed: {}", self.0)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_nats_error_keeps_its_cause_and_the_chain_is_walkable() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer");
        let e = Error::nats("reading job a", Outer(io));
        // The message is unchanged: one line that says the cause.
        assert_eq!(e.to_string(), "reading job a: request failed: no answer");
        assert_eq!(*e.kind(), ErrorKind::Nats);
        let source = e.source().unwrap();
        assert!(source.downcast_ref::<Outer>().is_some(), "the source is the error given");
        let mut chain = vec![e.to_string()];
        let mut cause = e.source();
        while let Some(c) = cause {
            chain.push(c.to_string());
            cause = c.source();
        }
        assert_eq!(chain, ["reading job a: request failed: no answer", "request failed: no answer", "no answer"]);
        let root = chain_root(&e);
        assert_eq!(root.downcast_ref::<std::io::Error>().map(std::io::Error::kind), Some(std::io::ErrorKind::TimedOut));
        // A clone shares the cause.
        assert!(e.clone().source().is_some());
    }

    fn chain_root<'a>(e: &'a (dyn std::error::Error + 'static)) -> &'a (dyn std::error::Error + 'static) {
        let mut e = e;
        while let Some(next) = e.source() {
            e = next;
        }
        e
    }

    #[test]
    fn errors_compare_by_kind_and_message_and_a_text_has_no_source() {
        let io = || std::io::Error::other("boom");
        assert_eq!(Error::nats("x", io()), Error::nats_msg("x", "boom"));
        assert_eq!(Error::new(ErrorKind::Other, "m").with_source(io()), Error::new(ErrorKind::Other, "m"));
        assert_ne!(Error::nats_msg("x", "boom"), Error::new(ErrorKind::Other, "x: boom"));
        assert!(Error::nats_msg("watch", "ended").source().is_none());
        assert!(Error::invalid("name", "bad").source().is_none());
    }
}
