//! `notify`: telling people (or machines) about a job's runs. Each rule names the events it
//! reports, one target (a webhook or a NATS subject under `<namespace>.notify.`), a body
//! format, an optional signing secret (by name: the secret itself lives in the agents'
//! `[notify.secrets]`, never in the spec anyone with read access sees) and how many
//! failures in a row it waits for. A webhook's URL and its headers' values may be
//! `{ secret = "NAME" }` (a secret of the secrets bucket, see `secret`), resolved by the
//! scheduler at each delivery: a URL whose path is its credential (Slack's) stays out of
//! the spec too.
//!
//! What each event means here (`Notice`):
//! - `failed`, `timed_out`, `lost`: the run ended so, with no attempt left (an attempt
//!   followed by a retry is `retrying`, which a rule may ask for too);
//! - `recovered`: a run succeeded after failures in a row that the rule reported;
//! - `late`: a fire (scheduled or caught up) whose run has not succeeded `late` after the
//!   fire instant: told once, whatever the run does later;
//! - any other event kind of `CRONRUN_EVENTS` that ends or skips a run: as published.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use std::collections::{BTreeMap, BTreeSet};

use super::secret::{Value, validate_secret_name};
use crate::error::Error;
use crate::event::EventKind;

/// The most failures in a row a rule may wait for: the streak is counted on kept records.
pub const MAX_AFTER: u32 = 1000;
/// The longest `late`: the check rides on the fire's `dispatched` event, which the events
/// stream must still hold then.
pub const MAX_LATE: Duration = Duration::from_secs(24 * 3600);
/// The most headers a rule may add to its webhook's POST.
pub const MAX_HEADERS: usize = 16;
/// The longest header value a rule may give (a secret's value is checked when resolved).
pub const MAX_HEADER_VALUE: usize = 4096;
/// Headers the POST sets itself (lower-case); `cronrun-*` are cronrun's too.
const RESERVED_HEADERS: [&str; 5] = ["host", "content-type", "content-length", "transfer-encoding", "connection"];

/// A URL that is no webhook URL. Its text follows the URL (or "the URL") it is about;
/// it does not name the URL, which may be a secret's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be an http:// or https:// URL with a host")]
pub struct NotAWebhookUrl;

/// Why `url` is not a webhook URL, if it is not: `http://` or `https://`, a host, at most
/// 2 KiB. Checked at apply for a plain URL, and at delivery for one a secret holds.
pub fn check_webhook_url(url: &str) -> Result<(), NotAWebhookUrl> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    if !host.is_some_and(|h| !h.is_empty() && !h.contains(char::is_whitespace)) || url.len() > 2048 {
        return Err(NotAWebhookUrl);
    }
    Ok(())
}

/// A header name a rule may not add.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderNameError {
    #[error("{0:?} is not a header name (letters, digits and - _ . at most 64)")]
    NotAToken(String),
    #[error("{0:?} is set by cronrun itself: choose another header")]
    Reserved(String),
}

/// Whether `value` may be an HTTP header's value: at most `MAX_HEADER_VALUE` bytes of
/// printable ASCII, spaces and tabs (no line breaks: a value cannot add headers).
pub fn header_value_ok(value: &str) -> bool {
    value.len() <= MAX_HEADER_VALUE && value.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// Why `name` may not be a header a rule adds, if it may not: an HTTP token of at most 64
/// bytes, not one the POST sets itself.
fn check_header_name(name: &str) -> Result<(), HeaderNameError> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > 64 || !name.bytes().all(token) {
        return Err(HeaderNameError::NotAToken(name.to_string()));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("cronrun-") {
        return Err(HeaderNameError::Reserved(name.to_string()));
    }
    Ok(())
}

/// One notification rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// Events to report (see the module docs).
    pub on: Vec<String>,
    /// POST the notice to this `http://` or `https://` URL, or to the URL a secret holds
    /// (`{ secret = "NAME" }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Value>,
    /// Headers of the webhook's POST (`Authorization = { secret = "NAME" }`): at most
    /// `MAX_HEADERS`, none of those cronrun sets itself (`RESERVED_HEADERS`, `Cronrun-*`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Value>,
    /// Publish the notice on `<namespace>.notify.<subject>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// `json` (default) or `slack` (`{"text": ...}`, for Slack-compatible incoming webhooks).
    #[serde(default)]
    pub format: NotifyFormat,
    /// A name in the agents' `[notify.secrets]`: the body is signed with it, HMAC-SHA256 in
    /// header `Cronrun-Signature: sha256=<hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Report `failed`, `timed_out` and `lost` from the N-th failure in a row on (each
    /// one from there). Default 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub after: u32,
    /// With `on = ["late", ...]`: how long after its fire a run must have succeeded.
    #[serde(default, with = "crate::spec::codec::opt_duration", skip_serializing_if = "Option::is_none")]
    pub late: Option<Duration>,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    #[default]
    Json,
    Slack,
}

/// What a rule may report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Notice {
    Event(EventKind),
    Recovered,
    Late,
}

/// Event kinds a rule may name: those that end, skip or retry a run.
const REPORTABLE: [EventKind; 8] = [
    EventKind::Succeeded,
    EventKind::Failed,
    EventKind::TimedOut,
    EventKind::Cancelled,
    EventKind::Skipped,
    EventKind::Missed,
    EventKind::Lost,
    EventKind::Retrying,
];

impl Notify {
    /// The secrets its webhook URL and headers name.
    pub fn secret_names(&self) -> BTreeSet<&str> {
        self.webhook.iter().chain(self.headers.values()).filter_map(Value::secret).collect()
    }
}

impl Notice {
    pub fn parse(s: &str) -> Option<Notice> {
        match s {
            "recovered" => return Some(Notice::Recovered),
            "late" => return Some(Notice::Late),
            _ => {}
        }
        REPORTABLE.into_iter().find(|k| k.as_str() == s).map(Notice::Event)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Notice::Event(kind) => kind.as_str(),
            Notice::Recovered => "recovered",
            Notice::Late => "late",
        }
    }

    /// A failure that counts towards `after` and ends a streak only by a success.
    pub fn is_failure(kind: EventKind) -> bool {
        matches!(kind, EventKind::Failed | EventKind::TimedOut | EventKind::Lost)
    }
}

/// The event kinds some rule could need to see: what the notifier handles (a fire's
/// `dispatched` starts its `late` check); it acks the others unread.
pub fn watched_kinds() -> impl Iterator<Item = EventKind> {
    REPORTABLE.into_iter().chain([EventKind::Dispatched])
}

impl Notify {
    /// The notices this rule asks for.
    pub fn notices(&self) -> impl Iterator<Item = Notice> + '_ {
        self.on.iter().filter_map(|s| Notice::parse(s))
    }

    pub fn validate(&self, field: &str) -> Result<(), Error> {
        let invalid = |what: &str, why: String| {
            let field = format!("{field}.{what}");
            Err(Error::invalid(field.clone(), format!("{field}: {why}")))
        };
        if self.on.is_empty() {
            return invalid("on", "name at least one event, e.g. on = [\"failed\"]".into());
        }
        for name in &self.on {
            if Notice::parse(name).is_none() {
                let known: Vec<&str> = REPORTABLE.iter().map(|k| k.as_str()).chain(["recovered", "late"]).collect();
                return invalid("on", format!("{name:?} is not an event to notify; one of {}", known.join(", ")));
            }
        }
        match (&self.webhook, &self.subject) {
            (Some(Value::Plain(url)), None) => {
                if let Err(why) = check_webhook_url(url) {
                    return invalid("webhook", format!("{url:?} {why}"));
                }
            }
            (Some(Value::Secret(name)), None) => {
                if let Err(e) = validate_secret_name(name) {
                    return invalid("webhook", e.to_string());
                }
            }
            (None, Some(subject)) => {
                let tokens_ok = subject
                    .split('.')
                    .all(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
                if !tokens_ok || subject.len() > 128 {
                    return invalid(
                        "subject",
                        format!("{subject:?} must be dot-separated tokens of A-Z a-z 0-9 _ - (no wildcards)"),
                    );
                }
                if !self.headers.is_empty() {
                    return invalid("headers", "headers go with a webhook: a notice on a subject carries none".into());
                }
            }
            _ => return invalid("webhook", "set exactly one of webhook and subject".into()),
        }
        self.check_headers(field)?;
        if let Some(secret) = &self.secret
            && !(1..=64).contains(&secret.len())
        {
            return invalid("secret", format!("{secret:?} must name a secret of [notify.secrets] (1 to 64 bytes)"));
        }
        if !(1..=MAX_AFTER).contains(&self.after) {
            return invalid("after", format!("after = {} must be 1 to {MAX_AFTER}", self.after));
        }
        match (self.notices().any(|n| n == Notice::Late), self.late) {
            (true, None) => return invalid("late", "on = [\"late\"] needs late = \"DURATION\", e.g. \"15m\"".into()),
            (false, Some(_)) => return invalid("late", "late is for on = [\"late\"]: add \"late\" to on".into()),
            (true, Some(d)) if d < Duration::from_secs(1) || d > MAX_LATE => {
                return invalid("late", "late must be 1s to 24h".into());
            }
            _ => {}
        }
        Ok(())
    }

    /// The headers: how many, their names, and their values (a plain one must be a valid
    /// header value; a secret's is checked when it is resolved).
    fn check_headers(&self, field: &str) -> Result<(), Error> {
        let invalid = |what: String, why: String| Err(Error::invalid(what.clone(), format!("{what}: {why}")));
        if self.headers.len() > MAX_HEADERS {
            return invalid(format!("{field}.headers"), format!("at most {MAX_HEADERS} headers"));
        }
        for (name, value) in &self.headers {
            let at = format!("{field}.headers.{name}");
            check_header_name(name)
                .map_err(|why| Error::invalid(at.clone(), format!("{at}: {why}")).with_source(why))?;
            match value {
                Value::Plain(text) if !header_value_ok(text) => {
                    return invalid(
                        at,
                        format!(
                            "the value must be at most {MAX_HEADER_VALUE} bytes of printable ASCII (no line breaks)"
                        ),
                    );
                }
                Value::Plain(_) => {}
                Value::Secret(secret) => {
                    validate_secret_name(secret).map_err(|e| Error::invalid(at.clone(), format!("{at}: {e}")))?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rule parsed and validated; either error, as the test reads them.
    fn rule(toml_text: &str) -> Result<(), Box<dyn std::error::Error>> {
        let rule: Notify = toml::from_str(toml_text)?;
        Ok(rule.validate("notify[0]")?)
    }

    #[test]
    fn rules_are_checked_naming_the_field() {
        let cases = [
            ("on = [\"failed\", \"recovered\"]\nwebhook = \"https://hooks.example/x\"", Ok(())),
            ("on = [\"lost\"]\nsubject = \"ops.alerts\"\nafter = 3\nformat = \"slack\"", Ok(())),
            ("on = []\nwebhook = \"https://h\"", Err("notify[0].on")),
            ("on = [\"late\"]\nwebhook = \"https://h\"\nlate = \"15m\"", Ok(())),
            ("on = [\"late\"]\nwebhook = \"https://h\"", Err("needs late = ")),
            ("on = [\"failed\"]\nwebhook = \"https://h\"\nlate = \"1m\"", Err("add \"late\" to on")),
            ("on = [\"late\"]\nwebhook = \"https://h\"\nlate = \"2d\"", Err("notify[0].late")),
            ("on = [\"late\"]\nwebhook = \"https://h\"\nlate = \"5000000000y\"", Err("late")),
            ("on = [\"started\"]\nwebhook = \"https://h\"", Err("is not an event to notify")),
            ("on = [\"failed\"]", Err("exactly one of webhook and subject")),
            ("on = [\"failed\"]\nwebhook = \"https://h\"\nsubject = \"s\"", Err("exactly one")),
            ("on = [\"failed\"]\nwebhook = \"ftp://h/x\"", Err("notify[0].webhook")),
            ("on = [\"failed\"]\nwebhook = \"https:///path\"", Err("with a host")),
            ("on = [\"failed\"]\nsubject = \"ops.>\"", Err("no wildcards")),
            ("on = [\"failed\"]\nsubject = \"ops..x\"", Err("notify[0].subject")),
            ("on = [\"failed\"]\nwebhook = \"https://h\"\nafter = 0", Err("after = 0")),
            ("on = [\"failed\"]\nwebhook = \"https://h\"\nafter = 99999", Err("notify[0].after")),
            ("on = [\"failed\"]\nwebhook = \"https://h\"\nformat = \"xml\"", Err("unknown variant")),
            ("on = [\"failed\"]\nwebhook = \"https://h\"\nsecret = \"\"", Err("notify[0].secret")),
            // Secrets: the URL and header values may name one; names and headers checked.
            ("on = [\"failed\"]\nwebhook = { secret = \"hook-url\" }", Ok(())),
            ("on = [\"failed\"]\nwebhook = { secret = \"a.b\" }", Err("notify[0].webhook: secret name \"a.b\"")),
            ("on = [\"failed\"]\nwebhook = { secret = \"\" }", Err("notify[0].webhook: secret name")),
            ("on = [\"failed\"]\nwebhook = { url = \"x\" }", Err("a secret reference is")),
            (
                "on = [\"failed\"]\nwebhook = \"https://h\"\nheaders = { Authorization = { secret = \"tok\" }, X-Team = \"ops\" }",
                Ok(()),
            ),
            (
                "on = [\"failed\"]\nwebhook = \"https://h\"\nheaders = { Authorization = { secret = \"t*\" } }",
                Err("notify[0].headers.Authorization: secret name"),
            ),
            (
                "on = [\"failed\"]\nwebhook = \"https://h\"\nheaders = { \"Bad Name\" = \"x\" }",
                Err("is not a header name"),
            ),
            ("on = [\"failed\"]\nwebhook = \"https://h\"\nheaders = { Content-Type = \"x\" }", Err("set by cronrun")),
            (
                "on = [\"failed\"]\nwebhook = \"https://h\"\nheaders = { Cronrun-Signature = \"x\" }",
                Err("set by cronrun"),
            ),
            (
                "on = [\"failed\"]\nwebhook = \"https://h\"\nheaders = { X-A = \"a\\r\\nX-B: b\" }",
                Err("no line breaks"),
            ),
            ("on = [\"failed\"]\nsubject = \"ops\"\nheaders = { X-A = \"a\" }", Err("headers go with a webhook")),
        ];
        for (text, expected) in cases {
            match (rule(text), expected) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(needle)) => assert!(e.to_string().contains(needle), "{text}: {e}"),
                (got, _) => panic!("{text}: {got:?}, expected {expected:?}"),
            }
        }
        let many: Vec<String> = (0..=MAX_HEADERS).map(|i| format!("X-{i} = \"v\"")).collect();
        let too_many = format!("on = [\"failed\"]\nwebhook = \"https://h\"\nheaders = {{ {} }}", many.join(", "));
        assert!(rule(&too_many).unwrap_err().to_string().contains("at most 16 headers"));
    }

    #[test]
    fn a_rule_names_the_secrets_of_its_url_and_headers() {
        let rule: Notify = toml::from_str(
            "on = [\"failed\"]\nwebhook = { secret = \"url\" }\nheaders = { A = { secret = \"tok\" }, B = \"plain\" }",
        )
        .unwrap();
        assert_eq!(rule.secret_names().into_iter().collect::<Vec<_>>(), ["tok", "url"]);
    }
}
