//! The job manifest: which keys `#[job(...)]` accepts, their checks, and the JSON
//! embedded in the `cronrun-manifest` custom section. Pure functions, tested on the host.

use std::fmt::Write;

/// A literal value given to a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(u64),
    Bool(bool),
}

/// Why the attribute is refused; `key` points the error at the offending key, if any.
#[derive(Debug, PartialEq)]
pub struct Error {
    pub key: Option<String>,
    pub message: String,
}

fn err<T>(key: &str, message: String) -> Result<T, Error> {
    Err(Error { key: Some(key.to_string()), message })
}

/// Every key, in the order the JSON lists them. Keys are the job spec's field names.
pub const KEYS: &[&str] = &[
    "schedule",
    "timezone",
    "timeout",
    "overlap",
    "lock",
    "catchup",
    "catchup_window",
    "starting_deadline",
    "retries",
    "backoff",
    "jitter",
    "pool",
    "description",
];

const DURATION_KEYS: &[&str] = &["timeout", "catchup_window", "starting_deadline", "backoff", "jitter"];

/// Checks the entries and renders the manifest JSON, e.g.
/// `{"schedule":"0 */5 * * * *","timezone":"UTC","retries":{"max":3,"backoff":"10s"}}`.
pub fn build(entries: &[(String, Value)]) -> Result<String, Error> {
    for (i, (key, _)) in entries.iter().enumerate() {
        if !KEYS.contains(&key.as_str()) {
            return err(key, format!("unknown key `{key}` in #[job(...)]: expected one of {}", KEYS.join(", ")));
        }
        if entries[..i].iter().any(|(k, _)| k == key) {
            return err(key, format!("key `{key}` is given twice"));
        }
    }
    let get = |key: &str| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    if get("schedule").is_none() {
        return Err(Error {
            key: None,
            message: "#[job(...)] needs a schedule, e.g. #[cronrun_sdk::job(schedule = \"0 */5 * * * *\")]".to_string(),
        });
    }
    if get("backoff").is_some() && get("retries").is_none() {
        return err("backoff", "`backoff` needs `retries = N` too".to_string());
    }

    let mut json = String::from("{");
    for key in KEYS.iter().copied().filter(|k| *k != "backoff") {
        let Some(value) = get(key) else { continue };
        check(key, value)?;
        if json.len() > 1 {
            json.push(',');
        }
        let _ = write!(json, "{}:", quote(key));
        match (key, value) {
            ("retries", Value::Int(max)) => {
                let _ = write!(json, "{{\"max\":{max}");
                if let Some(backoff) = get("backoff") {
                    check("backoff", backoff)?;
                    let _ = write!(json, ",\"backoff\":{}", render(backoff));
                }
                json.push('}');
            }
            _ => json.push_str(&render(value)),
        }
    }
    json.push('}');
    Ok(json)
}

fn render(value: &Value) -> String {
    match value {
        Value::Str(s) => quote(s),
        Value::Int(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
    }
}

/// A JSON string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn check(key: &str, value: &Value) -> Result<(), Error> {
    let text = match (key, value) {
        ("retries", Value::Int(n)) if *n <= 1000 => return Ok(()),
        ("retries", Value::Int(n)) => return err(key, format!("retries = {n}: at most 1000")),
        ("retries", _) => return err(key, "retries takes a number, e.g. retries = 3".to_string()),
        ("lock", Value::Bool(_)) => return Ok(()),
        ("lock", Value::Str(name)) if is_name(name) => return Ok(()),
        ("lock", _) => {
            return err(key, "lock takes true, false or a lock name of A-Z a-z 0-9 _ - (1 to 128)".to_string());
        }
        (_, Value::Str(s)) => s.as_str(),
        (_, _) => return err(key, format!("{key} takes a string, e.g. {key} = \"...\"")),
    };
    match key {
        "schedule" => check_schedule(text).or_else(|m| err(key, m)),
        "timezone" if is_zone(text) => Ok(()),
        "timezone" => err(key, format!("timezone {text:?} is not an IANA zone name like \"UTC\" or \"Europe/Berlin\"")),
        "overlap" => one_of(key, text, &["skip", "allow", "queue", "replace"]),
        "catchup" => one_of(key, text, &["none", "latest", "all"]),
        "pool" if is_name(text) => Ok(()),
        "pool" => err(key, format!("pool {text:?}: use 1 to 128 of A-Z a-z 0-9 _ -")),
        k if DURATION_KEYS.contains(&k) => check_duration(text).or_else(|m| err(key, m)),
        _ => Ok(()),
    }
}

fn one_of(key: &str, text: &str, allowed: &[&str]) -> Result<(), Error> {
    if allowed.contains(&text) {
        return Ok(());
    }
    err(key, format!("{key} = {text:?}: expected one of {}", allowed.join(", ")))
}

fn check_duration(text: &str) -> Result<(), String> {
    humantime::parse_duration(text)
        .map(|_| ())
        .map_err(|_| format!("invalid duration {text:?}: write it like 500ms, 30s, 5m or 1h30m"))
}

fn is_name(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

fn is_zone(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || b"/_+-".contains(&c))
}

/// A shape check only; the host's schedule engine has the final word at deploy time.
fn check_schedule(text: &str) -> Result<(), String> {
    let text = text.trim();
    if let Some(word) = text.strip_prefix('@') {
        let (name, arg) = word.split_once(char::is_whitespace).unwrap_or((word, ""));
        return match (name, arg.trim()) {
            ("yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly", "") => Ok(()),
            ("every", d) => match humantime::parse_duration(d) {
                Ok(d) if d.as_millis() >= 1000 => Ok(()),
                _ => Err(format!("schedule {text:?}: @every takes a duration of at least 1s, e.g. \"@every 90s\"")),
            },
            ("at", t) if !t.is_empty() => Ok(()),
            _ => Err(format!(
                "schedule {text:?}: unknown @ form; use @yearly, @monthly, @weekly, @daily, @hourly, @every <duration> or @at <RFC 3339 time>"
            )),
        };
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    if !(5..=7).contains(&fields.len()) {
        return Err(format!(
            "schedule {text:?} has {} fields: use 5 (minute first), 6 (second first) or 7 (with year), or an @ form",
            fields.len()
        ));
    }
    let bad = |c: char| !(c.is_ascii_alphanumeric() || "*,-/?#".contains(c));
    if let Some(field) = fields.iter().find(|f| f.contains(bad)) {
        return Err(format!("schedule {text:?}: field {field:?} has characters a cron field cannot have"));
    }
    Ok(())
}
