//! What a job spec grants a Wasm job, and the checks of each host call against it: NATS
//! subjects against `allow_publish` patterns (`*` one token, `>` the rest), HTTP requests
//! against `allow_http` entries (scheme, host and port), KV keys against the WIT rules.
//! Pure functions, unit-tested here; the address check of HTTP is in `http.rs`.

use crate::spec::WasmSpec;
use crate::spec::http_grant::{HttpGrant, Scheme};

/// Why a host call was refused; the guest gets its text (`result<_, string>` of the WIT).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("publish to {subject:?} denied: not a valid subject (dot-separated tokens, no wildcards or spaces)")]
    InvalidSubject { subject: String },
    #[error("publish to {subject} denied: not granted (add it to the job's wasm.allow_publish)")]
    PublishNotGranted { subject: String },
    #[error("kv denied: not granted (set wasm.allow_kv = true in the job spec)")]
    KvNotGranted,
    #[error("kv key {key:?} is invalid: use 1 to 256 of A-Z a-z 0-9 _ - / = . not starting or ending with .")]
    InvalidKvKey { key: String },
}

/// The grants of one run, from its spec.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    pub allow_publish: Vec<String>,
    pub allow_http: Vec<HttpGrant>,
    pub allow_kv: bool,
}

impl Grants {
    pub fn from_spec(spec: &WasmSpec) -> Self {
        Self {
            allow_publish: spec.allow_publish.clone(),
            // Validated with the spec; an entry that no longer parses grants nothing.
            allow_http: spec.allow_http.iter().filter_map(|h| HttpGrant::parse(h).ok()).collect(),
            allow_kv: spec.allow_kv,
        }
    }

    /// Why a publish to `subject` is refused, if it is.
    pub fn check_publish(&self, subject: &str) -> Result<(), Denied> {
        if !valid_subject(subject) {
            return Err(Denied::InvalidSubject { subject: subject.to_string() });
        }
        if self.allow_publish.iter().any(|p| subject_matches(p, subject)) {
            return Ok(());
        }
        Err(Denied::PublishNotGranted { subject: subject.to_string() })
    }

    /// The entry that allows a request to `scheme://host:port`, if one does.
    pub fn http_grant(&self, scheme: Scheme, host: &str, port: u16) -> Option<&HttpGrant> {
        self.allow_http.iter().find(|g| g.allows(scheme, host, port))
    }

    /// Why the job may not use its KV store, if it may not.
    pub fn check_kv(&self, key: &str) -> Result<(), Denied> {
        if !self.allow_kv {
            return Err(Denied::KvNotGranted);
        }
        valid_kv_key(key)
    }
}

/// A subject to publish to: non-empty tokens of printable ASCII without `*`, `>` or space.
pub fn valid_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.len() <= 1024
        && subject
            .split('.')
            .all(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic() && b != b'*' && b != b'>'))
}

/// Whether `subject` matches `pattern` under NATS rules.
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut subject_tokens = subject.split('.');
    let mut pattern_tokens = pattern.split('.').peekable();
    while let Some(p) = pattern_tokens.next() {
        if p == ">" {
            // `>` must be last and match at least one token.
            return pattern_tokens.peek().is_none() && subject_tokens.next().is_some();
        }
        match subject_tokens.next() {
            Some(s) if p == "*" || p == s => {}
            _ => return false,
        }
    }
    subject_tokens.next().is_none()
}

/// KV keys: 1 to 256 of `A-Z a-z 0-9 _ - / = .`, not starting or ending with `.`.
pub fn valid_kv_key(key: &str) -> Result<(), Denied> {
    let ok = (1..=256).contains(&key.len())
        && !key.starts_with('.')
        && !key.ends_with('.')
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-/=.".contains(&b));
    if ok { Ok(()) } else { Err(Denied::InvalidKvKey { key: key.to_string() }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_match_like_nats() {
        assert!(subject_matches("orders.new", "orders.new"));
        assert!(subject_matches("orders.*", "orders.new"));
        assert!(!subject_matches("orders.*", "orders.new.eu"));
        assert!(subject_matches("orders.>", "orders.new.eu"));
        assert!(!subject_matches("orders.>", "orders"));
        assert!(subject_matches(">", "a"));
        assert!(!subject_matches("orders.new", "orders.new.x"));
        assert!(!subject_matches("a.>.b", "a.x.b"));
        assert!(subject_matches("*.b.*", "a.b.c"));
    }

    #[test]
    fn publish_needs_a_grant_and_a_valid_subject() {
        let g = Grants { allow_publish: vec!["events.*".into()], ..Grants::default() };
        assert!(g.check_publish("events.tick").is_ok());
        let err = g.check_publish("orders.new").unwrap_err().to_string();
        assert!(err.starts_with("publish to orders.new denied: not granted"), "{err}");
        assert!(g.check_publish("events.*").unwrap_err().to_string().contains("not a valid subject"));
        assert!(g.check_publish("events..x").unwrap_err().to_string().contains("not a valid subject"));
        assert!(g.check_publish("events.a b").unwrap_err().to_string().contains("not a valid subject"));
    }

    #[test]
    fn http_requests_need_an_entry_for_scheme_host_and_port() {
        let spec = WasmSpec {
            allow_http: vec!["https://api.example.com".into(), "http://127.0.0.1:8080".into(), "bad entry".into()],
            ..WasmSpec::default()
        };
        let g = Grants::from_spec(&spec);
        assert_eq!(g.allow_http.len(), 2, "the bad entry grants nothing");
        assert!(g.http_grant(Scheme::Https, "api.example.com", 443).is_some());
        assert!(g.http_grant(Scheme::Http, "api.example.com", 80).is_none());
        assert!(g.http_grant(Scheme::Http, "127.0.0.1", 8080).is_some());
        assert!(g.http_grant(Scheme::Http, "127.0.0.1", 8081).is_none());
    }

    #[test]
    fn kv_needs_grant_and_valid_key() {
        let denied = Grants::default().check_kv("a").unwrap_err().to_string();
        assert!(denied.starts_with("kv denied: not granted"), "{denied}");
        let g = Grants { allow_kv: true, ..Grants::default() };
        assert!(g.check_kv("last-status").is_ok());
        assert!(g.check_kv("a/b=c.d").is_ok());
        assert!(g.check_kv(".a").is_err());
        assert!(g.check_kv("a b").is_err());
        assert!(g.check_kv("").is_err());
    }
}
