//! Secrets a spec names. A shell job's `env` value, a Wasm job's `config` value and a
//! webhook's URL or header value may be written as `{ secret = "NAME" }` instead of a
//! string: the spec then holds the name only, and the value lives in the `<ns>_secrets`
//! bucket (`cronrun secret set NAME`), which runners read when a run starts and schedulers
//! when they deliver a notice, and which viewers cannot read at all (docs/security.md).
//! Whatever shows a spec (`cronrun get`, the dashboard, a job's history) therefore shows
//! the reference, never the value.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{ShellSpec, WasmSpec};
use crate::error::Error;

/// The longest secret name: a KV key of the secrets bucket.
pub const MAX_SECRET_NAME: usize = 64;
/// The largest secret value: it travels in a run's environment or a guest's config, and
/// every run resolving it fetches it; larger data belongs in a file the job reads.
pub const MAX_SECRET_BYTES: usize = 64 * 1024;

/// Secret values by name, as resolved for one run or one delivery.
pub type SecretValues = BTreeMap<String, String>;

/// Checks a secret name: 1 to 64 of `A-Z a-z 0-9 _ -`. No dots (a KV key's dots are
/// tokens of its subject), wildcards or spaces, so that a name is one subject token and
/// cannot reach another key.
pub fn validate_secret_name(name: &str) -> Result<(), Error> {
    let ok_len = (1..=MAX_SECRET_NAME).contains(&name.len());
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok_len && ok_chars {
        return Ok(());
    }
    Err(Error::invalid(
        "secret",
        format!(
            "secret name {name:?} must be 1 to {MAX_SECRET_NAME} characters of A-Z a-z 0-9 _ - \
             (no dots, spaces or wildcards): choose a name like \"db-password\""
        ),
    ))
}

/// Checks a secret's value as `cronrun secret set` takes it: 1 byte to 64 KiB of UTF-8
/// text without NUL. The value reaches a process's environment (a C string), a guest's
/// config (a string) or an HTTP header, none of which can carry NUL or arbitrary bytes;
/// binary data is stored encoded (base64) and decoded by the job.
pub fn check_secret_value(name: &str, bytes: Vec<u8>) -> Result<String, Error> {
    let refused = |why: String| Err(Error::invalid("secret", format!("secret {name}: {why}")));
    if bytes.is_empty() {
        return refused("the value is empty: give it on stdin or with --file".into());
    }
    if bytes.len() > MAX_SECRET_BYTES {
        return refused(format!(
            "the value is {} bytes, over the limit of {MAX_SECRET_BYTES}: keep large data in a file the job reads",
            bytes.len()
        ));
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            return refused(format!("the value is not UTF-8 text (byte {at}): store binary data base64-encoded"));
        }
    };
    if text.contains('\0') {
        return refused("the value holds a NUL byte, which no environment, config or header can carry".into());
    }
    Ok(text)
}

/// A value of a spec that may come from a secret: a plain string, or `{ secret = "NAME" }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Plain(String),
    /// The name of a secret, resolved when a run starts (or a notice is delivered).
    Secret(String),
}

impl Value {
    /// The secret this value names, if it names one.
    pub fn secret(&self) -> Option<&str> {
        match self {
            Value::Secret(name) => Some(name),
            Value::Plain(_) => None,
        }
    }

    /// The plain text, if it is not a secret.
    pub fn plain(&self) -> Option<&str> {
        match self {
            Value::Plain(text) => Some(text),
            Value::Secret(_) => None,
        }
    }

    /// The text to use: the plain one, or the secret's value from `values`. A secret not
    /// in `values` is an error naming it (the caller resolved too little).
    pub fn resolve<'a>(&'a self, values: &'a SecretValues) -> Result<&'a str, Error> {
        match self {
            Value::Plain(text) => Ok(text),
            Value::Secret(name) => values.get(name).map(String::as_str).ok_or_else(|| {
                Error::not_found(format!("secret {name} does not exist: set it with `cronrun secret set {name}`"))
            }),
        }
    }

    /// What may be shown of the value: the plain text, or `[secret NAME]`.
    pub fn shown(&self) -> String {
        match self {
            Value::Plain(text) => text.clone(),
            Value::Secret(name) => format!("[secret {name}]"),
        }
    }
}

impl From<String> for Value {
    fn from(text: String) -> Self {
        Value::Plain(text)
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Self {
        Value::Plain(text.to_string())
    }
}

/// The one key of a secret reference.
const SECRET_KEY: &str = "secret";

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Plain(text) => s.serialize_str(text),
            Value::Secret(name) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(SECRET_KEY, name)?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ValueVisitor;
        impl<'de> Visitor<'de> for ValueVisitor {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or { secret = \"NAME\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
                Ok(Value::Plain(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
                Ok(Value::Plain(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
                let mut name = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != SECRET_KEY || name.is_some() {
                        return Err(de::Error::custom(format!(
                            "unknown key {key:?}: a secret reference is {{ secret = \"NAME\" }} and nothing else"
                        )));
                    }
                    name = Some(map.next_value::<String>()?);
                }
                name.map(Value::Secret).ok_or_else(|| de::Error::custom("a secret reference needs secret = \"NAME\""))
            }
        }
        d.deserialize_any(ValueVisitor)
    }
}

/// Checks every secret a map of values names (`field` is the map's, e.g. `shell.env`),
/// naming the entry at fault.
pub(super) fn check_references<'a>(
    field: &str,
    entries: impl IntoIterator<Item = (&'a String, &'a Value)>,
) -> Result<(), Error> {
    for (key, value) in entries {
        if let Some(name) = value.secret() {
            let at = format!("{field}.{key}");
            validate_secret_name(name).map_err(|e| Error::invalid(at.clone(), format!("{at}: {e}")))?;
        }
    }
    Ok(())
}

/// Resolves every value of `map` with `values`.
fn resolved_map(map: &BTreeMap<String, Value>, values: &SecretValues) -> Result<BTreeMap<String, String>, Error> {
    map.iter().map(|(key, value)| Ok((key.clone(), value.resolve(values)?.to_string()))).collect()
}

impl ShellSpec {
    /// The secrets its `env` names.
    pub fn secret_names(&self) -> BTreeSet<&str> {
        self.env.values().filter_map(Value::secret).collect()
    }

    /// Its `env` with each secret's value from `values`.
    pub fn resolved_env(&self, values: &SecretValues) -> Result<BTreeMap<String, String>, Error> {
        resolved_map(&self.env, values)
    }
}

impl WasmSpec {
    /// The secrets its `config` names.
    pub fn secret_names(&self) -> BTreeSet<&str> {
        self.config.values().filter_map(Value::secret).collect()
    }

    /// Its `config` with each secret's value from `values`: what the guest is given.
    pub fn resolved_config(&self, values: &SecretValues) -> Result<BTreeMap<String, String>, Error> {
        resolved_map(&self.config, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, accepted): names are one subject token of `A-Z a-z 0-9 _ -`, 1 to 64 long.
    #[test]
    fn secret_names_are_one_token_of_safe_characters() {
        let long = "a".repeat(64);
        let too_long = "a".repeat(65);
        let cases = [
            ("tok", true),
            ("DB_password-2", true),
            (long.as_str(), true),
            ("", false),
            (too_long.as_str(), false),
            ("a.b", false),
            ("a*", false),
            (">", false),
            ("a b", false),
            ("ä", false),
            ("a/b", false),
        ];
        for (name, accepted) in cases {
            let got = validate_secret_name(name);
            assert_eq!(got.is_ok(), accepted, "{name:?}: {got:?}");
            if let Err(e) = got {
                assert!(e.to_string().contains("A-Z a-z 0-9 _ -") && !e.to_string().contains('\n'), "{e}");
            }
        }
    }

    /// (value, the refusal's words, if refused): values are 1 byte to 64 KiB of UTF-8
    /// without NUL.
    #[test]
    fn secret_values_are_bounded_utf8_text_without_nul() {
        let cases: [(Vec<u8>, Option<&str>); 6] = [
            (b"hunter2".to_vec(), None),
            (vec![b'x'; MAX_SECRET_BYTES], None),
            (vec![b'x'; MAX_SECRET_BYTES + 1], Some("over the limit of 65536")),
            (Vec::new(), Some("the value is empty")),
            (vec![0xff, 0xfe], Some("not UTF-8")),
            (b"a\0b".to_vec(), Some("NUL")),
        ];
        for (bytes, refusal) in cases {
            let len = bytes.len();
            match (check_secret_value("s", bytes), refusal) {
                (Ok(text), None) => assert_eq!(text.len(), len),
                (Err(e), Some(words)) => {
                    let e = e.to_string();
                    assert!(e.starts_with("secret s: ") && e.contains(words) && !e.contains('\n'), "{e}");
                }
                (got, _) => panic!("{len} bytes: {got:?}, expected a refusal with {refusal:?}"),
            }
        }
    }

    /// (TOML of `v`, what it reads as, or the words of its refusal).
    #[test]
    fn a_value_is_a_string_or_a_secret_reference_and_nothing_else() {
        #[derive(Deserialize, Serialize)]
        struct Holder {
            v: Value,
        }
        let cases = [
            ("v = \"plain\"", Ok(Value::Plain("plain".into()))),
            ("v = { secret = \"tok\" }", Ok(Value::Secret("tok".into()))),
            ("v = { secret = \"tok\", other = 1 }", Err("nothing else")),
            ("v = { name = \"tok\" }", Err("unknown key \"name\"")),
            ("v = {}", Err("needs secret = ")),
            ("v = 3", Err("a string or { secret = \"NAME\" }")),
        ];
        for (text, expected) in cases {
            match (toml::from_str::<Holder>(text), expected.clone()) {
                (Ok(h), Ok(value)) => {
                    assert_eq!(h.v, value, "{text}");
                    let json = serde_json::to_string(&h).unwrap();
                    let again: Holder = serde_json::from_str(&json).unwrap();
                    assert_eq!(again.v, value, "{text} round trip through {json}");
                }
                (Err(e), Err(words)) => assert!(e.to_string().contains(words), "{text}: {e}"),
                (got, _) => panic!("{text}: {:?}, expected {expected:?}", got.map(|h| h.v)),
            }
        }
        let shown = serde_json::to_string(&Value::Secret("tok".into())).unwrap();
        assert_eq!(shown, r#"{"secret":"tok"}"#);
    }

    #[test]
    fn resolving_takes_the_secrets_value_and_names_a_missing_one() {
        let values = SecretValues::from([("tok".to_string(), "s3cr3t".to_string())]);
        assert_eq!(Value::Plain("x".into()).resolve(&values).unwrap(), "x");
        assert_eq!(Value::Secret("tok".into()).resolve(&values).unwrap(), "s3cr3t");
        let missing = Value::Secret("gone".into()).resolve(&values).unwrap_err();
        assert!(missing.is_not_found() && missing.to_string().contains("cronrun secret set gone"), "{missing}");
        assert_eq!(Value::Secret("tok".into()).shown(), "[secret tok]");
    }
}
