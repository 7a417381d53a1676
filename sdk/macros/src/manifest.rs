//! The job manifest: which keys `#[job(...)]` accepts and the JSON embedded in the
//! `cronrun-manifest` custom section. Pure functions, tested on the host.
//!
//! The values are not checked here: the manifest is completed into a job spec the way
//! `cronrun deploy` completes it (a name and a `wasm` plugin added) and validated by
//! `cronrun_model::spec::JobSpec::from_json`, the code the daemon runs at deploy. What is
//! left to this file is what belongs to the attribute itself: its key names, each given
//! once (but `after`), a schedule present unless a trigger is, `backoff` only beside
//! `retries`, the kind of literal each key takes, the flat `retries`/`backoff` pair nested
//! as the spec's `retries: {max, backoff}`, and the trigger shorthands: `on = "SUBJ"` for
//! `on: {subject}`, `after = "JOB"` for one `after: [{job}]` entry, each `after(...)` one
//! entry more.

use cronrun_model::ErrorKind;
use cronrun_model::spec::JobSpec;
use serde_json::json;

/// A literal value given to a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(u64),
    Bool(bool),
    /// `key(inner = literal, ...)`: `on(...)` and `after(...)`.
    Table(Vec<(String, Value)>),
}

/// Why the attribute is refused; `key` points the error at the offending key, if any, and
/// `nth` at which of its entries (`after` may be given more than once).
#[derive(Debug, PartialEq)]
pub struct Error {
    pub key: Option<String>,
    pub nth: usize,
    pub message: String,
}

fn err<T>(key: &str, message: String) -> Result<T, Error> {
    Err(Error { key: Some(key.to_string()), nth: 0, message })
}

/// Which entry of its key `entries[i]` is: 0 for the first `after`, 1 for the second.
fn nth(entries: &[(String, Value)], i: usize) -> usize {
    entries[..i].iter().filter(|(k, _)| *k == entries[i].0).count()
}

/// Every key, in the order the JSON lists them. Keys are the job spec's field names, and
/// they are all the fields `cronrun deploy` takes from a manifest: the others (`name`,
/// `wasm`, `paused`, `labels`, `history`, `output_lines`) belong to the deployment.
/// `after` may be given more than once, an upstream each.
pub const KEYS: &[&str] = &[
    "schedule",
    "timezone",
    "dst",
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
    "on",
    "after",
];

/// The keys of `on(...)` and of `after(...)`.
const ON_KEYS: &[&str] = &["subject", "concurrency", "redeliver"];
const AFTER_KEYS: &[&str] = &["job", "on"];

/// The name and plugin the manifest is completed with for validation; `cronrun deploy`
/// puts the job's real name and the component's digest there. Neither affects whether
/// the manifest's own fields are valid.
const PLACEHOLDER_NAME: &str = "cronrun-manifest-check";
const PLACEHOLDER_PLUGIN: &str = "sha256-0000000000000000000000000000000000000000000000000000000000000000";

/// Checks the entries and renders the manifest JSON, e.g.
/// `{"schedule":"0 */5 * * * *","timezone":"UTC","retries":{"max":3,"backoff":"10s"}}`.
pub fn build(entries: &[(String, Value)]) -> Result<String, Error> {
    for (i, (key, _)) in entries.iter().enumerate() {
        if !KEYS.contains(&key.as_str()) {
            return err(key, format!("unknown key `{key}` in #[job(...)]: expected one of {}", KEYS.join(", ")));
        }
        if key != "after" && entries[..i].iter().any(|(k, _)| k == key) {
            let message = format!("key `{key}` is given twice");
            return Err(Error { key: Some(key.clone()), nth: 1, message });
        }
    }
    let get = |key: &str| entries.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    if get("schedule").is_none() && get("on").is_none() && get("after").is_none() {
        return Err(Error {
            key: None,
            nth: 0,
            message: "#[job(...)] needs a schedule, e.g. #[cronrun_sdk::job(schedule = \"0 */5 * * * *\")], \
                      or a trigger: on = \"SUBJECT\" or after = \"JOB\""
                .to_string(),
        });
    }
    if get("backoff").is_some() && get("retries").is_none() {
        return err("backoff", "`backoff` needs `retries = N` too".to_string());
    }
    for (i, (key, value)) in entries.iter().enumerate() {
        check_literal(key, value).map_err(|e| Error { nth: nth(entries, i), ..e })?;
    }

    // Rendered by hand to keep KEYS' order (serde_json's map sorts its keys).
    let mut fields = Vec::new();
    for key in KEYS.iter().copied().filter(|k| *k != "backoff") {
        let Some(value) = get(key) else { continue };
        let value = match (key, get("backoff")) {
            ("retries", Some(backoff)) => format!(r#"{{"max":{},"backoff":{}}}"#, to_json(value), to_json(backoff)),
            ("retries", None) => format!(r#"{{"max":{}}}"#, to_json(value)),
            ("on", _) => trigger(value, "subject").to_string(),
            ("after", _) => {
                let upstreams = entries.iter().filter(|(k, _)| k == "after").map(|(_, v)| trigger(v, "job"));
                serde_json::Value::Array(upstreams.collect()).to_string()
            }
            _ => to_json(value).to_string(),
        };
        fields.push(format!("{}:{value}", json!(key)));
    }
    let manifest = format!("{{{}}}", fields.join(","));
    check(&manifest)?;
    Ok(manifest)
}

/// The kind of literal a key takes, said in the attribute's terms: the spec would say
/// `retries.max: invalid type` for `retries = "3"` and `overlap: expected value` for
/// `overlap = 1`. Values themselves are the spec's to check.
fn check_literal(key: &str, value: &Value) -> Result<(), Error> {
    match (key, value) {
        ("retries", Value::Int(_)) | ("lock", Value::Bool(_) | Value::Str(_)) => Ok(()),
        ("retries", _) => err(key, "retries takes a number, e.g. retries = 3".to_string()),
        ("lock", _) => err(key, "lock takes true, false or a lock name, e.g. lock = \"db\"".to_string()),
        ("on" | "after", Value::Str(_)) => Ok(()),
        ("on", Value::Table(inner)) => check_table(key, inner, ON_KEYS),
        ("after", Value::Table(inner)) => check_table(key, inner, AFTER_KEYS),
        ("on", _) => err(
            key,
            r#"on takes a subject or a table, e.g. on = "orders.*" or on(subject = "orders.*", redeliver = 5)"#
                .to_string(),
        ),
        ("after", _) => err(
            key,
            r#"after takes a job name or a table, e.g. after = "extract" or after(job = "extract", on = "failed")"#
                .to_string(),
        ),
        (_, Value::Str(_)) => Ok(()),
        (_, _) => err(key, format!("{key} takes a string, e.g. {key} = \"...\"")),
    }
}

/// The keys inside `on(...)` or `after(...)`: known, each once, literals (the spec checks
/// the values).
fn check_table(key: &str, inner: &[(String, Value)], known: &[&str]) -> Result<(), Error> {
    for (i, (name, value)) in inner.iter().enumerate() {
        if !known.contains(&name.as_str()) {
            return err(key, format!("unknown key `{name}` in {key}(...): expected one of {}", known.join(", ")));
        }
        if inner[..i].iter().any(|(k, _)| k == name) {
            return err(key, format!("key `{name}` is given twice in {key}(...)"));
        }
        if let Value::Table(_) = value {
            return err(key, format!("{key}(...) takes literals: {name} = \"...\" or a number"));
        }
    }
    Ok(())
}

/// A trigger as the spec writes it: a table as an object, a lone string as the object
/// holding it under `main` (`on = "a.b"` is `{"subject": "a.b"}`).
fn trigger(value: &Value, main: &str) -> serde_json::Value {
    match value {
        Value::Str(s) => json!({ main: s }),
        other => to_json(other),
    }
}

fn to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Str(s) => json!(s),
        Value::Int(n) => json!(n),
        Value::Bool(b) => json!(b),
        Value::Table(inner) => serde_json::Value::Object(inner.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}

/// Validates the manifest as `cronrun deploy` does: read as a JSON object, completed with
/// the job's name and its `wasm` plugin, then parsed and checked as a job spec.
fn check(manifest: &str) -> Result<(), Error> {
    let Ok(serde_json::Value::Object(mut spec)) = serde_json::from_str(manifest) else {
        return Err(Error { key: None, nth: 0, message: format!("the manifest is not a JSON object: {manifest}") });
    };
    spec.insert("name".into(), json!(PLACEHOLDER_NAME));
    spec.insert("wasm".into(), json!({ "plugin": PLACEHOLDER_PLUGIN }));
    JobSpec::from_json(serde_json::Value::Object(spec).to_string().as_bytes()).map(drop).map_err(|e| {
        let (key, nth) = match e.kind() {
            ErrorKind::Invalid { field } => key_of(field),
            _ => (None, 0),
        };
        Error { key, nth, message: e.to_string() }
    })
}

/// The `#[job]` key a spec field path comes from: `retries.max` from `retries`,
/// `retries.backoff` from `backoff`, `after[1].on` from the second `after`, a top-level
/// field from the key of its name.
fn key_of(field: &str) -> (Option<String>, usize) {
    let (key, nth) = match field {
        "retries.backoff" => ("backoff", 0),
        f if f.starts_with("after") => {
            let index = f.strip_prefix("after[").and_then(|rest| rest.split(']').next()?.parse().ok());
            ("after", index.unwrap_or(0))
        }
        _ => (field.split('.').next().unwrap_or(field), 0),
    };
    (KEYS.contains(&key).then(|| key.to_string()), nth)
}
