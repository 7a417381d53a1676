//! `notify`: telling people (or machines) about a job's runs. Each rule names the events it
//! reports, one target (a webhook or a NATS subject under `<namespace>.notify.`), a body
//! format, an optional signing secret (by name: the secret itself lives in the agents'
//! `[notify.secrets]`, never in the spec anyone with read access sees) and how many
//! failures in a row it waits for.
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

use crate::error::Error;
use crate::event::EventKind;

/// The most failures in a row a rule may wait for: the streak is counted on kept records.
pub const MAX_AFTER: u32 = 1000;
/// The longest `late`: the check rides on the fire's `dispatched` event, which the events
/// stream must still hold then.
pub const MAX_LATE: Duration = Duration::from_secs(24 * 3600);

/// One notification rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// Events to report (see the module docs).
    pub on: Vec<String>,
    /// POST the notice to this `http://` or `https://` URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
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
            (Some(url), None) => {
                let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
                let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
                if !host.is_some_and(|h| !h.is_empty() && !h.contains(char::is_whitespace)) || url.len() > 2048 {
                    return invalid("webhook", format!("{url:?} must be an http:// or https:// URL with a host"));
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
            }
            _ => return invalid("webhook", "set exactly one of webhook and subject".into()),
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(toml_text: &str) -> Result<(), String> {
        let rule: Notify = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        rule.validate("notify[0]").map_err(|e| e.to_string())
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
        ];
        for (text, expected) in cases {
            match (rule(text), expected) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(needle)) => assert!(e.contains(needle), "{text}: {e}"),
                (got, _) => panic!("{text}: {got:?}, expected {expected:?}"),
            }
        }
    }
}
