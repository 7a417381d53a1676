//! Checks that serde cannot express. Each error names the field and says what is accepted.

use std::time::Duration;

use super::{JobSpec, codec};
use crate::error::Error;
use crate::names::validate_job_name;

const MAX_HISTORY: u32 = 1000;
const MAX_OUTPUT_LINES: u32 = 10_000;
const MAX_RETRIES: u32 = 100;
/// A spec is a KV value read by every agent on every change: 64 KiB holds any sane
/// command, env and labels, far below NATS's 1 MiB max payload.
pub const MAX_SPEC_BYTES: usize = 64 * 1024;

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// The largest value of each duration field. Beyond these a value is a typo or an attack:
/// bounding them keeps every instant the scheduler computes from them representable.
pub const DURATION_LIMITS: [(&str, Duration); 6] = [
    ("timeout", Duration::from_secs(30 * DAY)),
    ("starting_deadline", Duration::from_secs(30 * DAY)),
    ("catchup_window", Duration::from_secs(30 * DAY)),
    ("jitter", Duration::from_secs(DAY)),
    ("retries.backoff", Duration::from_secs(DAY)),
    ("run_ttl", Duration::from_secs(HOUR)),
];

fn token_ok(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl JobSpec {
    /// What a spec must pass to be written (`apply`, `add`, `validate`, `deploy` and the
    /// store's writes all call this): every field, and a schedule that still fires, as of
    /// the system clock. The logic is [`JobSpec::validate_at`], which takes the instant.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_at(chrono::Utc::now())
    }

    /// [`JobSpec::checked`], and the schedule must have a fire after `now`: one that can
    /// never fire (`0 0 0 29 FEB ? 2100`) or whose years are over is refused naming why.
    /// Reading a stored spec (`from_json`) does not ask this, so a spec stored before
    /// keeps loading. Exempt: jobs without a schedule (`after`, `on`) and `@at` instants
    /// in the past, a one-shot's normal end (a jobs file keeps applying after it fired).
    pub fn validate_at(&self, now: chrono::DateTime<chrono::Utc>) -> Result<(), Error> {
        let (schedule, tz) = self.checked()?;
        if !schedule.fires() || schedule.once().is_some() {
            return Ok(());
        }
        match schedule.first_fire_after(now, tz) {
            Ok(_) => Ok(()),
            Err(why) => Err(Error::invalid("schedule", format!("schedule {:?}: {why}", self.schedule))),
        }
    }

    /// `validate`, returning the schedule and zone it parsed, so that a reader needing
    /// them parses each once.
    pub fn checked(&self) -> Result<(std::sync::Arc<cronrun_time::Schedule>, chrono_tz::Tz), Error> {
        validate_job_name(&self.name)?;
        let parsed = self.parsed_schedule()?;
        super::after::validate(&self.name, &self.after)?;
        if let Some(on) = &self.on {
            on.validate()?;
            if on.concurrency > 1 && self.overlap != super::Overlap::Allow {
                return Err(invalid(
                    "on.concurrency",
                    "on.concurrency over 1 runs a job beside itself: set overlap = \"allow\" too",
                ));
            }
            if on.concurrency > 1 && self.lock.is_some() {
                return Err(invalid("on.concurrency", "on.concurrency over 1 with a lock would skip all runs but one"));
            }
            if self.history.succeeded == 0 || self.history.failed == 0 {
                return Err(invalid(
                    "history",
                    "history: a job with `on` keeps at least 1 run of each kind (a message's run is found by its record)",
                ));
            }
        }
        match (&self.shell, &self.wasm) {
            (Some(shell), None) => {
                match (&shell.command, &shell.argv) {
                    (Some(c), None) if !c.trim().is_empty() => {}
                    (None, Some(argv)) if argv.first().is_some_and(|a| !a.is_empty()) => {}
                    (Some(_), Some(_)) => {
                        return Err(invalid("shell", "set either shell.command or shell.argv, not both"));
                    }
                    _ => return Err(invalid("shell", "shell needs a non-empty command or argv")),
                }
                for key in shell.env.keys() {
                    if key.is_empty() || key.contains('=') || key.contains('\0') {
                        return Err(invalid(
                            "shell.env",
                            format!("environment name {key:?} must be non-empty without = or NUL"),
                        ));
                    }
                }
                // A process's arguments, environment and directory are C strings: a NUL
                // would be accepted here and then fail every run at its start. The value
                // is not told (an env value may be a secret).
                let texts = shell.command.iter().map(|c| ("shell.command".to_string(), c));
                let texts = texts.chain(shell.argv.iter().flatten().map(|a| ("shell.argv".to_string(), a)));
                let texts = texts.chain(shell.env.iter().map(|(k, v)| (format!("shell.env.{k}"), v)));
                let mut texts = texts.chain(shell.cwd.iter().map(|c| ("shell.cwd".to_string(), c)));
                if let Some((field, _)) = texts.find(|(_, t)| t.contains('\0')) {
                    return Err(invalid(&field, "holds a NUL byte, which no process can be given"));
                }
                if let Some(cwd) = &shell.cwd
                    && !cwd.starts_with('/')
                {
                    return Err(invalid("shell.cwd", format!("cwd {cwd:?} must be an absolute path")));
                }
                for (field, value) in [("shell.user", &shell.user), ("shell.group", &shell.group)] {
                    if let Some(name) = value
                        && !is_account_name(name)
                    {
                        return Err(invalid(
                            field,
                            format!("{name:?} must be a user or group name (a-z 0-9 _ - ., at most 32) or a number"),
                        ));
                    }
                }
            }
            (None, Some(wasm)) => {
                let hex = wasm.plugin.strip_prefix("sha256-").unwrap_or("");
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(invalid(
                        "wasm.plugin",
                        format!(
                            "plugin {:?} must be sha256-<64 hex digits>, as printed by cronrun deploy",
                            wasm.plugin
                        ),
                    ));
                }
                if let Some(signature) = &wasm.signature {
                    let shaped = signature.split_once(':').is_some_and(|(key, sig)| {
                        key.len() == 56
                            && key.bytes().all(|b| b.is_ascii_alphanumeric())
                            && (80..=90).contains(&sig.len())
                    });
                    if !shaped {
                        return Err(invalid(
                            "wasm.signature",
                            "the signature must be <public key>:<signature> as `cronrun deploy --sign` writes it",
                        ));
                    }
                }
                if let Some(at) = &wasm.signed_at
                    && chrono::DateTime::parse_from_rfc3339(at).is_err()
                {
                    return Err(invalid(
                        "wasm.signed_at",
                        format!("{at:?} must be an RFC 3339 instant as `cronrun deploy --sign` writes it"),
                    ));
                }
                if wasm.signed_at.is_some() && wasm.signature.is_none() {
                    return Err(invalid("wasm.signed_at", "signed_at goes with a signature (`cronrun deploy --sign`)"));
                }
                for entry in &wasm.allow_http {
                    super::http_grant::HttpGrant::parse(entry).map_err(|e| invalid("wasm.allow_http", e))?;
                }
            }
            (Some(_), Some(_)) => return Err(invalid("shell", "a job has either shell or wasm, not both")),
            (None, None) => return Err(invalid("shell", "a job needs shell (a command) or wasm (a plugin)")),
        }
        if self.timeout.is_some_and(|t| t < Duration::from_millis(1)) {
            return Err(invalid("timeout", "timeout must be positive, e.g. 30s"));
        }
        if self.run_ttl.is_some_and(|t| t < Duration::from_secs(1)) {
            return Err(invalid("run_ttl", "run_ttl must be at least 1s"));
        }
        self.check_durations()?;
        if let Some(lock) = &self.lock
            && lock != codec::lock::OWN_NAME
            && !token_ok(lock)
        {
            return Err(invalid("lock", format!("lock name {lock:?} must be 1 to 64 of A-Z a-z 0-9 _ -")));
        }
        if !token_ok(&self.pool) {
            return Err(invalid("pool", format!("pool {:?} must be 1 to 64 of A-Z a-z 0-9 _ -", self.pool)));
        }
        if self.retries.max > MAX_RETRIES {
            return Err(invalid("retries.max", format!("retries.max is at most {MAX_RETRIES}")));
        }
        if self.history.succeeded > MAX_HISTORY || self.history.failed > MAX_HISTORY {
            return Err(invalid("history", format!("history keeps at most {MAX_HISTORY} runs of each kind")));
        }
        for (i, rule) in self.notify.iter().enumerate() {
            rule.validate(&format!("notify[{i}]"))?;
            // Failures in a row are counted on the records kept: back to the last success,
            // which must be kept too.
            let counts = rule.after > 1 || rule.notices().any(|n| n == super::notify::Notice::Recovered);
            if counts && self.history.succeeded == 0 {
                return Err(invalid(
                    &format!("notify[{i}]"),
                    "counting failures in a row (after > 1, recovered) needs history.succeeded of at least 1",
                ));
            }
            if rule.after > self.history.failed.max(1) {
                return Err(invalid(
                    &format!("notify[{i}].after"),
                    format!(
                        "after = {} counts failures on kept records: at most history.failed ({})",
                        rule.after, self.history.failed
                    ),
                ));
            }
        }
        if self.output_lines > MAX_OUTPUT_LINES {
            return Err(invalid("output_lines", format!("output_lines is at most {MAX_OUTPUT_LINES}")));
        }
        if let Some(key) = self.labels.keys().find(|k| k.is_empty()) {
            return Err(invalid("labels", format!("label name {key:?} must not be empty")));
        }
        if self.input_schema.as_ref().is_some_and(|schema| !schema.is_object()) {
            return Err(invalid(
                "input_schema",
                "input_schema must be a JSON Schema object, e.g. { type = \"object\" }",
            ));
        }
        // Counted only when the bound does not settle it (see `size`).
        if self.encoded_len_bound().is_none_or(|bound| bound > MAX_SPEC_BYTES) {
            let size = self.encoded_len();
            if size > MAX_SPEC_BYTES {
                return Err(invalid(
                    "spec",
                    format!(
                        "the spec is {size} bytes as JSON, over the {MAX_SPEC_BYTES}-byte limit; keep long scripts in a file and run that"
                    ),
                ));
            }
        }
        Ok(parsed)
    }

    fn check_durations(&self) -> Result<(), Error> {
        let values = [
            self.timeout,
            self.starting_deadline,
            Some(self.catchup_window),
            Some(self.jitter),
            Some(self.retries.backoff),
            self.run_ttl,
        ];
        for ((field, max), value) in DURATION_LIMITS.iter().zip(values) {
            if let Some(value) = value.filter(|v| v > max) {
                return Err(invalid(
                    field,
                    format!(
                        "{field} {} is over the limit of {}",
                        codec::format_duration(&value),
                        codec::format_duration(max)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The lock this job takes, if any (`lock = true` means the job's own name).
    pub fn lock_name(&self) -> Option<&str> {
        match self.lock.as_deref() {
            Some(codec::lock::OWN_NAME) => Some(&self.name),
            other => other,
        }
    }
}

fn invalid(field: &str, reason: impl std::fmt::Display) -> Error {
    Error::invalid(field, format!("{field}: {reason}"))
}

/// A user or group name as `useradd` accepts it (a letter, digit or `_` first; at most 32
/// bytes), or a numeric id. Checked at apply so that a typo is refused there, not at the
/// first run; whether the account exists is the runner's to check.
fn is_account_name(name: &str) -> bool {
    let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let rest_ok = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    let number_ok = !name.bytes().all(|b| b.is_ascii_digit()) || name.parse::<u32>().is_ok();
    first_ok && rest_ok && name.len() <= 32 && number_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn field_of(json: &str) -> String {
        match JobSpec::from_json(json.as_bytes()).unwrap_err().kind() {
            ErrorKind::Invalid { field } => field.clone(),
            other => panic!("not an invalid-input error: {other:?}"),
        }
    }

    #[test]
    fn minimal_spec_gets_defaults() {
        let spec = JobSpec::from_json(br#"{"name":"a","schedule":"* * * * *","shell":"true"}"#).unwrap();
        assert_eq!(spec.timezone, "UTC");
        assert_eq!(spec.pool, "default");
        assert_eq!(spec.output_lines, 100);
        assert_eq!(spec.shell.unwrap().command.as_deref(), Some("true"));
    }

    #[test]
    fn round_trips_through_json() {
        let json = br#"{"name":"a","schedule":"*/5 * * * *","timezone":"Europe/Berlin",
            "shell":{"argv":["echo","hi"],"env":{"A":"1"},"cwd":"/tmp"},"timeout":"1m30s",
            "overlap":"queue","lock":"db","catchup":"latest","retries":{"max":2,"backoff":"5s"},
            "labels":{"team":"ops"}}"#;
        let spec = JobSpec::from_json(json).unwrap();
        let again = JobSpec::from_json(&spec.to_json()).unwrap();
        assert_eq!(spec, again);
        assert_eq!(spec.timeout, Some(Duration::from_secs(90)));
        assert_eq!(spec.lock_name(), Some("db"));
    }

    /// Stored, a spec holds what was set: each field at its default is left out, each set
    /// otherwise is kept, and reading fills the defaults in again. Shown (`Serialize`
    /// outside of `to_json`), it holds every field.
    #[test]
    fn a_stored_spec_leaves_out_each_field_at_its_default_and_reads_back_the_same() {
        let base = r#""name":"a","schedule":"* * * * *","shell":{"command":"true"}"#;
        let plain = JobSpec::from_json(format!("{{{base}}}").as_bytes()).unwrap();
        assert_eq!(&plain.to_json()[..], format!("{{{base}}}").as_bytes());
        let shown = serde_json::to_value(&plain).unwrap();
        let defaulted = [
            "timezone",
            "overlap",
            "lock",
            "catchup",
            "catchup_window",
            "retries",
            "jitter",
            "pool",
            "paused",
            "history",
            "output_lines",
        ];
        for field in defaulted {
            assert!(shown.get(field).is_some(), "{field} is not shown");
        }
        let set = [
            ("timezone", r#""Europe/Berlin""#),
            ("overlap", r#""queue""#),
            ("lock", r#""db""#),
            ("catchup", r#""latest""#),
            ("catchup_window", r#""2h""#),
            ("retries", r#"{"max":1,"backoff":"10s"}"#),
            ("retries", r#"{"max":0,"backoff":"1m"}"#),
            ("jitter", r#""5s""#),
            ("pool", r#""gpu""#),
            ("paused", "true"),
            ("history", r#"{"succeeded":10,"failed":3}"#),
            ("output_lines", "7"),
        ];
        for (field, value) in set {
            let spec = JobSpec::from_json(format!("{{{base},\"{field}\":{value}}}").as_bytes()).unwrap();
            let stored: serde_json::Value = serde_json::from_slice(&spec.to_json()).unwrap();
            assert_eq!(stored.get(field), Some(&serde_json::from_str(value).unwrap()), "{field} = {value}");
            assert_eq!(stored.as_object().unwrap().len(), 4, "{field} = {value}: {stored}");
            assert_eq!(JobSpec::from_json(&spec.to_json()).unwrap(), spec, "{field} = {value}");
        }
        let wasm = |grant: &str| {
            let json = format!(
                r#"{{"name":"w","schedule":"@hourly","wasm":{{"plugin":"sha256-{}"{grant}}}}}"#,
                "0".repeat(64)
            );
            JobSpec::from_json(json.as_bytes()).unwrap().to_json()
        };
        assert!(!String::from_utf8_lossy(&wasm("")).contains("allow_kv"));
        assert!(String::from_utf8_lossy(&wasm(r#","allow_kv":true"#)).contains(r#""allow_kv":true"#));
    }

    #[test]
    fn lock_true_means_own_name() {
        let spec = JobSpec::from_json(br#"{"name":"a","schedule":"@hourly","shell":"x","lock":true}"#).unwrap();
        assert_eq!(spec.lock_name(), Some("a"));
        assert!(spec.to_json().windows(11).any(|w| w == b"\"lock\":true"));
    }

    #[test]
    fn errors_name_the_field() {
        let base = r#""name":"a","schedule":"* * * * *","shell":"true""#;
        assert_eq!(field_of(&format!("{{{base},\"colour\":1}}")), "colour");
        assert_eq!(field_of(&format!("{{{base},\"timeout\":\"soon\"}}")), "timeout");
        assert_eq!(field_of(&format!("{{{base},\"overlap\":\"never\"}}")), "overlap");
        assert_eq!(field_of(&format!("{{{base},\"retries\":{{\"max\":1,\"x\":2}}}}")), "retries.x");
        assert_eq!(field_of(&format!("{{{base},\"retries\":{{\"max\":-1}}}}")), "retries.max");
        assert_eq!(field_of(&format!("{{{base},\"timezone\":\"Mars/Olympus\"}}")), "timezone");
        assert_eq!(field_of(&format!("{{{base},\"pool\":\"a.b\"}}")), "pool");
        assert_eq!(field_of(r#"{"name":"a b","schedule":"* * * * *","shell":"x"}"#), "name");
        assert_eq!(field_of(r#"{"name":"a","schedule":"61 * * * *","shell":"x"}"#), "schedule");
        assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *"}"#), "shell");
        assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"command":"x","argv":["y"]}}"#), "shell");
        assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"cmd":"x"}}"#), "shell.cmd");
        assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","wasm":{"plugin":"abc"}}"#), "wasm.plugin");
        assert_eq!(field_of("not json"), "spec");
        // NUL, which JSON carries as \u0000 and no process accepts.
        assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":"true\u0000"}"#), "shell.command");
        assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"argv":["a","b\u0000"]}}"#), "shell.argv");
        assert_eq!(
            field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"command":"x","env":{"A":"\u0000"}}}"#),
            "shell.env.A"
        );
        assert_eq!(
            field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"command":"x","cwd":"/t\u0000"}}"#),
            "shell.cwd"
        );
        let counting = r#""notify":[{"on":["recovered"],"webhook":"https://h/x"}]"#;
        assert_eq!(field_of(&format!("{{{base},{counting},\"history\":{{\"succeeded\":0}}}}")), "notify[0]");
        assert_eq!(
            field_of(&format!(
                "{{{base},\"notify\":[{{\"on\":[\"failed\"],\"webhook\":\"https://h/x\",\"after\":11}}]}}"
            )),
            "notify[0].after"
        );
        JobSpec::from_json(format!("{{{base},{counting}}}").as_bytes()).unwrap();
    }

    #[test]
    fn user_and_group_are_account_names_or_numbers() {
        let spec = |shell: &str| format!(r#"{{"name":"a","schedule":"* * * * *","shell":{shell}}}"#);
        for good in [r#"{"command":"x","user":"backup","group":"adm"}"#, r#"{"command":"x","user":"1000"}"#] {
            JobSpec::from_json(spec(good).as_bytes()).unwrap();
        }
        for (bad, field) in [
            (r#"{"command":"x","user":""}"#, "shell.user"),
            (r#"{"command":"x","user":"root;id"}"#, "shell.user"),
            (r#"{"command":"x","user":"-rf"}"#, "shell.user"),
            (r#"{"command":"x","user":"99999999999"}"#, "shell.user"),
            (r#"{"command":"x","user":"a*"}"#, "shell.user"),
            (r#"{"command":"x","group":"wheel>"}"#, "shell.group"),
        ] {
            assert_eq!(field_of(&spec(bad)), field, "{bad}");
        }
        let long = format!(r#"{{"command":"x","user":"{}"}}"#, "u".repeat(33));
        assert_eq!(field_of(&spec(&long)), "shell.user");
    }

    #[test]
    fn absurd_durations_and_sizes_are_refused_naming_the_field() {
        let base = r#""name":"a","schedule":"* * * * *","shell":"true""#;
        for (extra, field) in [
            (r#""jitter":"2000000years""#, "jitter"),
            (r#""jitter":"25h""#, "jitter"),
            (r#""starting_deadline":"31days""#, "starting_deadline"),
            (r#""catchup_window":"5000000years""#, "catchup_window"),
            (r#""retries":{"max":1,"backoff":"1000000years"}"#, "retries.backoff"),
            (r#""timeout":"1000000000years""#, "timeout"),
            (r#""run_ttl":"2h""#, "run_ttl"),
        ] {
            let json = format!("{{{base},{extra}}}");
            assert_eq!(field_of(&json), field, "{extra}");
            let message = JobSpec::from_json(json.as_bytes()).unwrap_err().to_string();
            assert!(message.contains("over the limit of"), "{message}");
        }
        // The limits themselves are accepted.
        let at_limits = format!(
            r#"{{{base},"jitter":"1day","timeout":"30days","starting_deadline":"30days","catchup_window":"30days","retries":{{"max":1,"backoff":"1day"}}}}"#
        );
        JobSpec::from_json(at_limits.as_bytes()).unwrap();
        // A spec too large to keep: one line, naming the size.
        let huge = format!(r#"{{"name":"a","schedule":"* * * * *","shell":"{}"}}"#, "x".repeat(MAX_SPEC_BYTES));
        assert_eq!(field_of(&huge), "spec");
        // Characters JSON escapes (quotes, control characters) count at their escaped size.
        let escaped =
            format!(r#"{{"name":"a","schedule":"* * * * *","shell":"{}"}}"#, "\\u0001".repeat(MAX_SPEC_BYTES / 5));
        assert_eq!(field_of(&escaped), "spec");
    }

    #[test]
    fn a_stored_spec_read_once_is_judged_as_from_json_judges_it() {
        // Read once: the same spec as `from_json`, and the schedule its validation parsed.
        let json = r#"{"name":"a","schedule":"*/5 * * * *","timezone":"Europe/Berlin","shell":"true"}"#;
        let (spec, (schedule, tz)) = JobSpec::from_json_checked(json.as_bytes()).unwrap();
        assert_eq!(spec, JobSpec::from_json(json.as_bytes()).unwrap());
        assert_eq!((schedule.expr(), tz), ("*/5 * * * *", chrono_tz::Europe::Berlin));
        assert_eq!(spec.encoded_len(), serde_json::to_vec(&spec).unwrap().len());
        // A refusal still names the field, from the decoder that tracks the path.
        let bad =
            JobSpec::from_json_checked(br#"{"name":"a","schedule":"* * * * *","shell":"x","retries":{"max":"x"}}"#);
        assert!(matches!(bad.unwrap_err().kind(), ErrorKind::Invalid { field } if field == "retries.max"));
        // The size is the spec's as it encodes, whoever reads it: padding that encodes
        // away does not count, characters that encode long do.
        let padded = format!(r#"{{"name":"a","schedule":"* * * * *","shell":"true"{}}}"#, " ".repeat(MAX_SPEC_BYTES));
        assert!(JobSpec::from_json_checked(padded.as_bytes()).is_ok());
        let escaped =
            format!(r#"{{"name":"a","schedule":"* * * * *","shell":"{}"}}"#, "\\u0001".repeat(MAX_SPEC_BYTES / 5));
        let refused = JobSpec::from_json_checked(escaped.as_bytes()).unwrap_err();
        assert!(matches!(refused.kind(), ErrorKind::Invalid { field } if field == "spec"), "{refused}");
    }

    #[test]
    fn retry_delays_double_up_to_a_day() {
        let retries = super::super::Retries { max: 50, backoff: Duration::from_secs(10) };
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        for (attempt, delay) in [(1, 10), (2, 20), (3, 40), (14, 81_920), (15, 86_400), (50, 86_400)] {
            assert_eq!(retries.delay_after(attempt), Duration::from_secs(delay), "attempt {attempt}");
            assert_eq!(retries.retry_at(attempt, now), now + chrono::TimeDelta::seconds(delay as i64));
        }
    }

    /// Written specs need a schedule that still fires (as of the instant given); stored
    /// ones keep loading whatever their schedule, and one-shots and jobs without a
    /// schedule are exempt. Each refusal is one line naming the schedule and why.
    #[test]
    fn a_schedule_without_a_fire_after_now_is_refused_at_write_but_a_stored_one_still_loads() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-06T00:00:00Z").unwrap().to_utc();
        let spec = |schedule: &str| {
            let json = serde_json::json!({ "name": "a", "schedule": schedule, "shell": "true" }).to_string();
            JobSpec::from_json(json.as_bytes()).unwrap()
        };
        for (schedule, refusal) in [
            (
                "0 0 0 29 FEB ? 2100",
                Some(
                    r#"schedule "0 0 0 29 FEB ? 2100": never fires (29 February is only in leap years and 2100 is not one)"#,
                ),
            ),
            (
                "0 0 0 1 JAN ? 2020",
                Some(
                    r#"schedule "0 0 0 1 JAN ? 2020": has no fire after 2026-12-06T00:00:00Z (the last year it allows is 2020)"#,
                ),
            ),
            ("0 0 0 1 JAN ? 2090", None),
            ("0 0 0 29 FEB ? 2096", None),
            ("0 0 L 2 ?", None),
            ("0 22-22/4 * * *", None),
            // A one-shot whose instant is past is done, not wrong: a jobs file keeps applying.
            ("@at 2020-01-01T00:00:00Z", None),
            ("@every 1h", None),
        ] {
            let spec = spec(schedule);
            match (spec.validate_at(now), refusal) {
                (Ok(()), None) => {}
                (Err(e), Some(message)) => {
                    assert_eq!(e.to_string(), message);
                    assert!(matches!(e.kind(), ErrorKind::Invalid { field } if field == "schedule"), "{e}");
                }
                (got, want) => panic!("{schedule}: got {got:?}, want {want:?}"),
            }
        }
        // What is stored loads whatever its schedule's future: schedulers keep serving it.
        let stored = br#"{"name":"a","schedule":"0 0 0 29 FEB ? 2100","shell":"true"}"#;
        assert!(JobSpec::from_json(stored).is_ok() && JobSpec::from_json_checked(stored).is_ok());
        // `validate` (the writers' check) refuses it too, on the system clock.
        assert!(JobSpec::from_json(stored).unwrap().validate().is_err());
        // A job that runs only after another has no schedule to fire.
        let chained = br#"{"name":"b","after":[{"job":"a"}],"shell":"true"}"#;
        JobSpec::from_json(chained).unwrap().validate_at(now).unwrap();
        // A jobs file is checked as it would be written.
        let file = "[[job]]\nname = \"leap\"\nschedule = \"0 0 0 29 FEB ? 2100\"\nshell = \"true\"\n";
        let err = crate::spec::parse_jobs_file(file, "jobs.toml").unwrap_err().to_string();
        assert!(err.contains("jobs.toml: job 1 (\"leap\")") && err.contains("never fires"), "{err}");
    }

    #[test]
    fn unknown_field_message_lists_the_field() {
        let err = JobSpec::from_json(br#"{"name":"a","schedule":"* * * * *","shell":"x","colour":1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `colour`"), "{err}");
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        const FIELDS: [&str; 23] = [
            "name",
            "schedule",
            "timezone",
            "shell",
            "wasm",
            "timeout",
            "overlap",
            "lock",
            "catchup",
            "catchup_window",
            "starting_deadline",
            "retries",
            "jitter",
            "pool",
            "paused",
            "history",
            "output_lines",
            "description",
            "labels",
            "input_schema",
            "command",
            "argv",
            "colour",
        ];

        fn json_value() -> impl Strategy<Value = serde_json::Value> {
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>().prop_map(serde_json::Value::from),
                "\\PC{0,24}".prop_map(serde_json::Value::from),
                "[0-9]{1,20}(ms|s|m|h|d|days|years)".prop_map(serde_json::Value::from),
                prop::sample::select(vec!["* * * * *", "@every 1s", "skip", "all", "true", "sha256-00"])
                    .prop_map(serde_json::Value::from),
            ];
            leaf.prop_recursive(3, 24, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                    proptest::collection::btree_map(prop::sample::select(FIELDS.to_vec()), inner, 0..6).prop_map(|m| {
                        serde_json::Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                    }),
                ]
            })
        }

        proptest! {
            /// Whatever an operator puts into KV: parsing never panics, a refusal is one line
            /// naming a field, and what is accepted encodes within the size limit (and
            /// within its bound, which is what settles the limit for most), and is stored
            /// in no more bytes and read back the same.
            #[test]
            fn arbitrary_specs_never_panic_and_refusals_are_one_line(
                fields in proptest::collection::btree_map(prop::sample::select(FIELDS.to_vec()), json_value(), 0..12),
            ) {
                let json = serde_json::Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
                match JobSpec::from_json(json.to_string().as_bytes()) {
                    Ok(spec) => {
                        let stored = spec.to_json();
                        prop_assert!(stored.len() <= spec.encoded_len() && spec.encoded_len() <= MAX_SPEC_BYTES);
                        prop_assert_eq!(JobSpec::from_json(&stored).ok(), Some(spec.clone()), "stored as {:?}", stored);
                        prop_assert!(spec.encoded_len_bound().is_none_or(|bound| bound >= spec.encoded_len()));
                    }
                    Err(e) => {
                        prop_assert!(!e.to_string().contains('\n'), "{e}");
                        let invalid = matches!(e.kind(), ErrorKind::Invalid { .. });
                        prop_assert!(invalid, "{e}");
                    }
                }
            }

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                if let Err(e) = JobSpec::from_json(&bytes) {
                    prop_assert!(!e.to_string().contains('\n'), "{e}");
                }
            }
        }
    }
}
