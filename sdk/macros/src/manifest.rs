//! The job manifest: which keys `#[job(...)]` accepts and the JSON embedded in the
//! `cronrun-manifest` custom section. Pure functions, tested on the host.
//!
//! The values are not checked here: the manifest is completed into a job spec the way
//! `cronrun deploy` completes it (a name and a `wasm` plugin added) and validated by
//! `cronrun_model::spec::JobSpec::from_json`, the code the daemon runs at deploy. What is
//! left to this file is what belongs to the attribute itself: its key names, each given
//! once, a schedule present, `backoff` only beside `retries`, the kind of literal each key
//! takes, and the flat `retries`/`backoff` pair nested as the spec's `retries: {max, backoff}`.

use cronrun_model::ErrorKind;
use cronrun_model::spec::JobSpec;
use serde_json::json;

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

/// Every key, in the order the JSON lists them. Keys are the job spec's field names, and
/// they are all the fields `cronrun deploy` takes from a manifest: the others (`name`,
/// `wasm`, `paused`, `labels`, `history`, `output_lines`) belong to the deployment.
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

/// The name and plugin the manifest is completed with for validation; `cronrun deploy`
/// puts the job's real name and the component's digest there. Neither affects whether
/// the manifest's own fields are valid.
const PLACEHOLDER_NAME: &str = "job";
const PLACEHOLDER_PLUGIN: &str = "sha256-0000000000000000000000000000000000000000000000000000000000000000";

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
    for (key, value) in entries {
        check_literal(key, value)?;
    }

    // Rendered by hand to keep KEYS' order (serde_json's map sorts its keys).
    let mut fields = Vec::new();
    for key in KEYS.iter().copied().filter(|k| *k != "backoff") {
        let Some(value) = get(key) else { continue };
        let value = match (key, get("backoff")) {
            ("retries", Some(backoff)) => format!(r#"{{"max":{},"backoff":{}}}"#, to_json(value), to_json(backoff)),
            ("retries", None) => format!(r#"{{"max":{}}}"#, to_json(value)),
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
        (_, Value::Str(_)) => Ok(()),
        (_, _) => err(key, format!("{key} takes a string, e.g. {key} = \"...\"")),
    }
}

fn to_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Str(s) => json!(s),
        Value::Int(n) => json!(n),
        Value::Bool(b) => json!(b),
    }
}

/// Validates the manifest as `cronrun deploy` does: read as a JSON object, completed with
/// the job's name and its `wasm` plugin, then parsed and checked as a job spec.
fn check(manifest: &str) -> Result<(), Error> {
    let Ok(serde_json::Value::Object(mut spec)) = serde_json::from_str(manifest) else {
        return Err(Error { key: None, message: format!("the manifest is not a JSON object: {manifest}") });
    };
    spec.insert("name".into(), json!(PLACEHOLDER_NAME));
    spec.insert("wasm".into(), json!({ "plugin": PLACEHOLDER_PLUGIN }));
    JobSpec::from_json(serde_json::Value::Object(spec).to_string().as_bytes()).map(drop).map_err(|e| {
        let key = match e.kind() {
            ErrorKind::Invalid { field } => key_of(field),
            _ => None,
        };
        Error { key, message: e.to_string() }
    })
}

/// The `#[job]` key a spec field path comes from: `retries.max` from `retries`,
/// `retries.backoff` from `backoff`, a top-level field from the key of its name.
fn key_of(field: &str) -> Option<String> {
    let key = match field {
        "retries.backoff" => "backoff",
        _ => field.split('.').next().unwrap_or(field),
    };
    KEYS.contains(&key).then(|| key.to_string())
}
