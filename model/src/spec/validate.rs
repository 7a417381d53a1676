//! Checks that serde cannot express. Each error names the field and says what is accepted.

use std::time::Duration;

use super::{JobSpec, codec};
use crate::error::Error;
use crate::names::{Names, validate_job_name};

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
    /// Refuses a spec whose Wasm grants, or whose trigger subject, could reach a subject
    /// reserved in the deployment `names` (`Names::reserved_subjects`), naming it.
    pub fn check_grants(&self, names: &Names) -> Result<(), Error> {
        let grants = self.wasm.iter().flat_map(|w| &w.allow_publish);
        for grant in grants {
            if let Some(reserved) = names.grant_reaches_reserved(grant) {
                return Err(Error::invalid(
                    "wasm.allow_publish",
                    format!(
                        "wasm.allow_publish: job {}: grant {grant:?} could reach {reserved}, which no job may publish to; grant only the subjects it needs, e.g. \"orders.>\"",
                        self.name
                    ),
                ));
            }
        }
        if let Some(on) = &self.on
            && let Some(reserved) = names.grant_reaches_reserved(&on.subject)
        {
            return Err(Error::invalid(
                "on.subject",
                format!(
                    "on.subject: job {}: {:?} could take messages of {reserved}, which are cronrun's or the server's own; \
                     listen on your own subjects, e.g. \"orders.created\"",
                    self.name, on.subject
                ),
            ));
        }
        Ok(())
    }

    /// What a spec must pass to be written (`apply`, `add`, `validate`, `deploy` and the
    /// store's writes all call this): every field, and a schedule that still fires, as of
    /// the system clock. The logic is [`JobSpec::validate_at`], which takes the instant.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_at(chrono::Utc::now())
    }

    /// [`JobSpec::validated_schedule`], and the schedule must have a fire after `now`: one that can
    /// never fire (`0 0 0 29 FEB ? 2100`) or whose years are over is refused naming why.
    /// Reading a stored spec (`from_json`) does not ask this, so a spec stored before
    /// keeps loading. Exempt: jobs without a schedule (`after`, `on`) and `@at` instants
    /// in the past, a one-shot's normal end (a jobs file keeps applying after it fired).
    pub fn validate_at(&self, now: chrono::DateTime<chrono::Utc>) -> Result<(), Error> {
        let (schedule, tz) = self.validated_schedule()?;
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
    pub fn validated_schedule(&self) -> Result<(std::sync::Arc<cronrun_time::Schedule>, chrono_tz::Tz), Error> {
        validate_job_name(&self.name)?;
        let parsed = self.parsed_schedule()?;
        super::calendar::validate_exclude(&self.exclude)?;
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
                // is not told (an env value may be a secret). A secret's value is checked
                // for NUL when it is set (`secret::check_secret_value`).
                let texts = shell.command.iter().map(|c| ("shell.command".to_string(), c.as_str()));
                let texts = texts.chain(shell.argv.iter().flatten().map(|a| ("shell.argv".to_string(), a.as_str())));
                let env = shell.env.iter().filter_map(|(k, v)| Some((format!("shell.env.{k}"), v.plain()?)));
                let texts = texts.chain(env);
                let mut texts = texts.chain(shell.cwd.iter().map(|c| ("shell.cwd".to_string(), c.as_str())));
                if let Some((field, _)) = texts.find(|(_, t)| t.contains('\0')) {
                    return Err(invalid(&field, "holds a NUL byte, which no process can be given"));
                }
                super::secret::check_references("shell.env", &shell.env)?;
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
                super::secret::check_references("wasm.config", &wasm.config)?;
                for entry in &wasm.allow_http {
                    super::http_grant::HttpGrant::parse(entry)
                        .map_err(|e| invalid("wasm.allow_http", e.to_string()).with_source(e))?;
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
mod tests;
