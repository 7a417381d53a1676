//! Serde forms that users write by hand: durations as `30s` / `1h30m`, `lock` as a bool
//! or a name, `shell` as a bare command string, and `dst` by its name.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serializer};

use super::ShellSpec;

fn parse_duration<E: de::Error>(s: &str) -> Result<Duration, E> {
    humantime::parse_duration(s)
        .map_err(|_| E::custom(format!("invalid duration {s:?}: write it like 500ms, 30s, 5m or 1h30m")))
}

/// `1h30m`: the form users write, without spaces.
pub fn format_duration(d: &Duration) -> String {
    humantime::format_duration(*d).to_string().replace(' ', "")
}

pub mod duration {
    use super::*;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(d))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
    }
}

pub mod opt_duration {
    use super::*;
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format_duration(d)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| parse_duration(&s)).transpose()
    }
}

/// `lock = false | true | "name"`; stored as `false` or the lock name (`true` means the
/// job's own name and is resolved by validation).
pub mod lock {
    use super::*;

    pub const OWN_NAME: &str = "";

    pub fn serialize<S: Serializer>(lock: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        match lock {
            None => s.serialize_bool(false),
            Some(name) if name == OWN_NAME => s.serialize_bool(true),
            Some(name) => s.serialize_str(name),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        struct LockVisitor;
        impl Visitor<'_> for LockVisitor {
            type Value = Option<String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("false, true or a lock name")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(v.then(|| OWN_NAME.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                if v.is_empty() {
                    return Err(E::custom("a lock name must not be empty"));
                }
                Ok(Some(v.to_string()))
            }
        }
        d.deserialize_any(LockVisitor)
    }
}

/// `dst = "debian" | "skip" | "twice"`: the time crate's `Dst` by its name (that crate has
/// no serde). Anything else is refused in one line naming the field and the three choices.
pub mod dst {
    use super::*;
    use cronrun_time::Dst;

    pub fn serialize<S: Serializer>(dst: &Dst, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(dst.as_str())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Dst, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellTable {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    argv: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, super::secret::Value>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    inherit_env: bool,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    group: Option<String>,
}

impl<'de> Deserialize<'de> for ShellSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ShellVisitor;
        impl<'de> Visitor<'de> for ShellVisitor {
            type Value = ShellSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a command string or a table with command or argv, env, cwd, user, group")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShellSpec, E> {
                Ok(ShellSpec { command: Some(v.to_string()), ..ShellSpec::default() })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ShellSpec, A::Error> {
                let t = ShellTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ShellSpec {
                    command: t.command,
                    argv: t.argv,
                    env: t.env,
                    cwd: t.cwd,
                    inherit_env: t.inherit_env,
                    user: t.user,
                    group: t.group,
                })
            }
        }
        d.deserialize_any(ShellVisitor)
    }
}
