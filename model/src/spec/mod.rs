//! The job spec: what a job is, as stored in KV (JSON) and written in files (TOML).
//!
//! - `mod.rs`: the structs and their documented defaults.
//! - `codec.rs`: serde helpers for durations, `lock` and the `shell` shorthand.
//! - `validate.rs`: checks serde cannot express; every error names its field.
//! - `size.rs`: a spec's size as JSON, counted or bounded.
//! - `file.rs`: `jobs.toml` as used by `cronrun apply`.
//! - `notify.rs`: notification rules; `http_grant.rs`: a Wasm job's `allow_http` entries.
//! - `after.rs`: chains, a job started by the end of another's run; `on.rs`: message
//!   triggers, a run per message on a subject.
//! - `secret.rs`: values written as `{ secret = "NAME" }` (env, config, webhooks), the
//!   names and values of secrets.

pub mod after;
pub mod calendar;
pub mod codec;
mod file;
pub mod http_grant;
pub mod notify;
pub mod on;
pub mod secret;
mod size;
mod validate;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Error;
pub use file::parse_jobs_file;
pub use file::toml_error;

/// One job. Unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// 1 to 128 of `A-Z a-z 0-9 _ -`; also the KV key.
    pub name: String,
    /// A cron expression, macro, `@every` or `@at` (see `schedule`). May be left out
    /// (empty) by a job that has `after` or `on`: it then runs only when started.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub schedule: String,
    /// IANA zone the schedule is read in. Default `UTC`.
    #[serde(default = "defaults::timezone", skip_serializing_if = "defaults::stored_timezone")]
    pub timezone: String,
    /// What a fixed time (`30 2 * * *`) that daylight saving time skips or repeats does:
    /// `debian` (default: Debian cron's rule as cronsim implements it), `skip` or `twice`
    /// (see `cronrun_time::Dst`). Other schedules follow the wall clock whatever it says.
    #[serde(default, with = "codec::dst", skip_serializing_if = "defaults::stored_default")]
    pub dst: cronrun_time::Dst,
    /// Calendars (`cronrun calendar set`) whose days this job's fires skip: a fire whose
    /// local date is in one of them does not run. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// A shell job: exactly one of `shell` and `wasm` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellSpec>,
    /// A WebAssembly job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<WasmSpec>,
    /// Longest a run may take before TERM, grace, KILL. Default: none.
    #[serde(default, with = "codec::opt_duration", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// What to do when a fire comes while the previous run still runs. Default `skip`.
    #[serde(default, skip_serializing_if = "defaults::stored_default")]
    pub overlap: Overlap,
    /// `false`, `true` (a lock named after the job) or a lock name shared by jobs.
    #[serde(default, with = "codec::lock", skip_serializing_if = "defaults::stored_default")]
    pub lock: Option<String>,
    /// Which fires missed while no scheduler ran are run late. Default `none`.
    #[serde(default, skip_serializing_if = "defaults::stored_default")]
    pub catchup: Catchup,
    /// How far back catch-up looks. Default 1h.
    #[serde(
        default = "defaults::catchup_window",
        with = "codec::duration",
        skip_serializing_if = "defaults::stored_catchup_window"
    )]
    pub catchup_window: Duration,
    /// A run not started this long after its fire is recorded as missed. Default: none.
    #[serde(default, with = "codec::opt_duration", skip_serializing_if = "Option::is_none")]
    pub starting_deadline: Option<Duration>,
    /// How long a run outlives its runner's silence (a NATS outage, a stall) before it is
    /// stopped and recorded `lost`: its lease TTL. Default and minimum: the runner's three
    /// heartbeats. Longer rides out longer outages, and detects a dead runner later.
    #[serde(default, with = "codec::opt_duration", skip_serializing_if = "Option::is_none")]
    pub run_ttl: Option<Duration>,
    /// Retry policy for failed runs. Default: no retries.
    #[serde(default, skip_serializing_if = "defaults::stored_default")]
    pub retries: Retries,
    /// Random delay up to this much added to each fire. Default 0.
    #[serde(default, with = "codec::duration", skip_serializing_if = "defaults::stored_default")]
    pub jitter: Duration,
    /// Which runners may take the job. Default `default`.
    #[serde(default = "defaults::pool", skip_serializing_if = "defaults::stored_pool")]
    pub pool: String,
    /// A paused job does not fire; `trigger` still runs it.
    #[serde(default, skip_serializing_if = "defaults::stored_default")]
    pub paused: bool,
    /// How many finished runs are kept in `cronrun_runs`.
    #[serde(default, skip_serializing_if = "defaults::stored_default")]
    pub history: History,
    /// Output lines kept in the run record (the last N). Default 100.
    #[serde(default = "defaults::output_lines", skip_serializing_if = "defaults::stored_output_lines")]
    pub output_lines: u32,
    /// Who is told of which runs (see `notify`). Default: the agents' `[notify] default`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<notify::Notify>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// A JSON Schema (an object) that `cronrun trigger --input` must match. Default: any
    /// input, or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<serde_json::Value>,
    /// Jobs whose runs start this one when they end (see `after`). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<after::After>,
    /// A run per message on a subject (see `on`). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on: Option<on::OnMessage>,
}

/// A command for `/bin/sh -c`, or an argv run directly. In files `shell = "cmd"` is short
/// for `shell = { command = "cmd" }`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ShellSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// Variables for the command: a value, or `{ secret = "NAME" }` resolved at each run.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, secret::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Run with the agent's whole environment (its NATS URL and credentials path, any
    /// secret its unit sets) instead of the clean one. Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inherit_env: bool,
    /// The user the command runs as (a name or a numeric uid); needs a runner running as
    /// root. Default: the runner's `[runner] default_user`, else the runner's own user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The command's group (a name or a numeric gid). Default: the user's primary group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// A Wasm component by digest, its config and what it is allowed to reach.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WasmSpec {
    /// `sha256-<hex>`, a key of the plugins object store.
    pub plugin: String,
    /// What the guest reads with `config::get`: a value, or `{ secret = "NAME" }`
    /// resolved at each run (a signature covers the reference, not the value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, secret::Value>,
    /// Subjects the job may publish to (NATS wildcards allowed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_publish: Vec<String>,
    /// Hosts the job may reach over HTTP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_http: Vec<String>,
    /// Whether the job may use its own KV store.
    #[serde(default, skip_serializing_if = "defaults::stored_default")]
    pub allow_kv: bool,
    /// `<public key>:<signature>`: an nkey's ed25519 signature of this Wasm part of the
    /// spec as the runner runs it (job name, pool, plugin, config, grants, `signed_at`; see
    /// `cronrun_wasm::signing`), written by `cronrun deploy --sign`. Runners that list
    /// trusted keys run only jobs signed by one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// When `signature` was made (RFC 3339 UTC, milliseconds), covered by it: a runner with
    /// trusted keys refuses a job signed before the newest signing it has seen for the job.
    /// Absent from signatures of cronrun before it (which covered the digest only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_at: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    #[default]
    Skip,
    Allow,
    Queue,
    Replace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Catchup {
    #[default]
    None,
    Latest,
    All,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retries {
    /// Retries after the first attempt. Default 0.
    #[serde(default)]
    pub max: u32,
    /// Delay before the first retry, doubled each time. Default 10s.
    #[serde(default = "defaults::backoff", with = "codec::duration")]
    pub backoff: Duration,
}

/// The longest wait between two attempts, however many doublings came before.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(24 * 3600);

impl Retries {
    /// Whether a run whose attempt `attempt` ended badly gets another.
    pub fn allow_after(&self, attempt: u32) -> bool {
        attempt <= self.max
    }

    /// The delay before attempt `attempt + 1`: backoff, doubled for each retry so far, and
    /// never more than a day (`MAX_RETRY_DELAY`).
    pub fn delay_after(&self, attempt: u32) -> Duration {
        self.backoff.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(MAX_RETRY_DELAY.max(self.backoff))
    }

    /// When attempt `attempt + 1` starts if the attempt `attempt` ended at `now`. Checked:
    /// an instant past chrono's range (unreachable with validated specs) means now.
    pub fn retry_at(&self, attempt: u32, now: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
        chrono::TimeDelta::from_std(self.delay_after(attempt))
            .ok()
            .and_then(|delay| now.checked_add_signed(delay))
            .unwrap_or(now)
    }
}

impl Default for Retries {
    fn default() -> Self {
        Self { max: 0, backoff: defaults::backoff() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    /// Succeeded runs kept. Default 10.
    #[serde(default = "defaults::history")]
    pub succeeded: u32,
    /// Runs that did not succeed kept. Default 10.
    #[serde(default = "defaults::history")]
    pub failed: u32,
}

impl Default for History {
    fn default() -> Self {
        Self { succeeded: defaults::history(), failed: defaults::history() }
    }
}

/// The defaults, and which fields `JobSpec::to_json` leaves out for being at theirs.
mod defaults {
    use std::cell::Cell;
    use std::time::Duration;

    thread_local! {
        /// Set while `to_json` encodes a spec to be stored.
        static STORING: Cell<bool> = const { Cell::new(false) };
    }

    /// The encoding of a spec to be stored, while it lives.
    pub struct Storing;

    impl Storing {
        pub fn begin() -> Self {
            STORING.set(true);
            Self
        }
    }

    impl Drop for Storing {
        fn drop(&mut self) {
            STORING.set(false);
        }
    }

    /// A field left out of a stored spec: it is at its default.
    pub fn stored_default<T: Default + PartialEq>(v: &T) -> bool {
        STORING.get() && *v == T::default()
    }
    pub fn stored_timezone(v: &str) -> bool {
        STORING.get() && v == timezone()
    }
    pub fn stored_pool(v: &str) -> bool {
        STORING.get() && v == pool()
    }
    pub fn stored_catchup_window(v: &Duration) -> bool {
        STORING.get() && *v == catchup_window()
    }
    pub fn stored_output_lines(v: &u32) -> bool {
        STORING.get() && *v == output_lines()
    }

    pub fn timezone() -> String {
        "UTC".into()
    }
    pub fn pool() -> String {
        "default".into()
    }
    pub fn catchup_window() -> Duration {
        Duration::from_secs(3600)
    }
    pub fn backoff() -> Duration {
        Duration::from_secs(10)
    }
    pub fn history() -> u32 {
        10
    }
    pub fn output_lines() -> u32 {
        100
    }
}

impl JobSpec {
    /// A shell job with every default, as `cronrun add` starts from.
    pub fn shell(name: &str, schedule: &str, shell: ShellSpec) -> Self {
        Self {
            name: name.into(),
            schedule: schedule.into(),
            timezone: defaults::timezone(),
            dst: cronrun_time::Dst::default(),
            exclude: Vec::new(),
            shell: Some(shell),
            wasm: None,
            timeout: None,
            overlap: Overlap::default(),
            lock: None,
            catchup: Catchup::default(),
            catchup_window: defaults::catchup_window(),
            starting_deadline: None,
            run_ttl: None,
            retries: Retries::default(),
            jitter: Duration::ZERO,
            pool: defaults::pool(),
            paused: false,
            history: History::default(),
            output_lines: defaults::output_lines(),
            description: String::new(),
            labels: BTreeMap::new(),
            input_schema: None,
            notify: Vec::new(),
            after: Vec::new(),
            on: None,
        }
    }

    /// Parses and validates a spec as stored in KV.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        Self::from_json_checked(bytes).map(|(spec, _)| spec)
    }

    /// `from_json`, with the schedule and zone its validation parsed: a scheduler loading
    /// millions parses each once.
    pub fn from_json_checked(bytes: &[u8]) -> Result<(Self, (Arc<cronrun_time::Schedule>, chrono_tz::Tz)), Error> {
        let spec = Self::decode(bytes)?;
        let parsed = spec.validated_schedule()?;
        Ok((spec, parsed))
    }

    fn decode(bytes: &[u8]) -> Result<Self, Error> {
        // The plain decoder first: tracking the path costs a tenth of a scheduler's load,
        // and only a refused spec needs it, to name the field.
        serde_json::from_slice(bytes).or_else(|_| Self::from_json_explained(bytes))
    }

    /// Decodes with the path of the field at fault in the error.
    fn from_json_explained(bytes: &[u8]) -> Result<Self, Error> {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "spec".to_string() } else { path };
            // serde_json appends "at line 1 column 79": noise for a field-named message.
            let inner = e.inner().to_string();
            let reason = inner.split(" at line ").next().unwrap_or(&inner);
            Error::invalid(field.clone(), format!("{field}: {reason}"))
        })
    }

    /// The spec as stored in KV: the fields at their defaults are left out, a third of the
    /// bytes of an ordinary spec for the server to store and deliver and for a scheduler to
    /// decode, millions at a start (a pass took a quarter less of its CPU). Reading fills
    /// them in again; `cronrun get` and the dashboard show every field (the spec's
    /// `Serialize` outside of this).
    pub fn to_json(&self) -> Result<bytes::Bytes, Error> {
        let _storing = defaults::Storing::begin();
        let json = serde_json::to_vec(self).map_err(|e| Error::other(&format!("encoding job {}", self.name), e))?;
        Ok(json.into())
    }

    /// The parsed schedule and zone; `validate` has checked both. A job with `after` or
    /// `on` and no schedule gets one that never fires; `H` items resolve by the job's name,
    /// and fixed times in a skipped or repeated hour fire as the job's `dst` says. Every
    /// fire computed for a job (the scheduler, catch-up, `ls`, the dashboard) comes from here.
    pub fn parsed_schedule(&self) -> Result<(Arc<cronrun_time::Schedule>, chrono_tz::Tz), Error> {
        let schedule = match self.schedule.trim() {
            "" if !self.after.is_empty() || self.on.is_some() => Arc::new(cronrun_time::Schedule::never()),
            "" => {
                return Err(Error::invalid(
                    "schedule",
                    "schedule is missing: give a cron expression like \"*/5 * * * *\", or `after` or `on` \
                     for a job that runs when another's run ends or per message",
                ));
            }
            _ => crate::shared::schedule(&self.schedule, &self.name, self.dst)
                .map_err(|e| Error::invalid("schedule", format!("schedule: {e}")))?,
        };
        let tz = cronrun_time::parse_timezone(&self.timezone)
            .map_err(|e| Error::invalid("timezone", format!("timezone: {e}")))?;
        Ok((schedule, tz))
    }

    /// Every secret the spec names: in its shell `env`, its Wasm `config` and its
    /// notification rules.
    pub fn secret_names(&self) -> BTreeSet<&str> {
        let shell = self.shell.iter().flat_map(ShellSpec::secret_names);
        let wasm = self.wasm.iter().flat_map(WasmSpec::secret_names);
        let notify = self.notify.iter().flat_map(notify::Notify::secret_names);
        shell.chain(wasm).chain(notify).collect()
    }

    /// The secrets a run of the job resolves when it starts: its `env` or `config` (the
    /// notification rules' are the schedulers' to resolve, at delivery).
    pub fn run_secret_names(&self) -> BTreeSet<&str> {
        let shell = self.shell.iter().flat_map(ShellSpec::secret_names);
        shell.chain(self.wasm.iter().flat_map(WasmSpec::secret_names)).collect()
    }
}
