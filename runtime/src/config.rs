//! `cronrun.toml`: the agent's configuration. Every field has a default; unknown fields
//! are refused. Command-line flags override the file.

use std::path::Path;

use serde::Deserialize;

use crate::error::Error;
use crate::notify::NotifyConfig;
use crate::runner::RunnerConfig;
use crate::scheduler::SchedulerConfig;
use crate::store::LayoutOptions;
use crate::telemetry::TelemetryConfig;
use crate::wasm::WasmConfig;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// NATS server URL(s), comma-separated. Default `nats://127.0.0.1:4222`.
    pub nats: String,
    /// A NATS credentials file. Default: none.
    pub creds: Option<String>,
    /// Prefix of every NATS name. Default `cronrun`.
    pub namespace: String,
    /// The JetStream domain of the servers holding the layout, for an agent connected to
    /// a leaf node of them (its own server has no JetStream, or another domain): its
    /// requests then go to `$JS.<domain>.API.…`, which crosses the leaf link where
    /// `$JS.API.…` does not (docs/deploy.md, "Leaf nodes"). Default: none (the API of the
    /// servers it is connected to).
    pub jetstream_domain: Option<String>,
    /// This agent's name in leases, records and `status`. Default: the host name.
    pub name: String,
    /// `scheduler`, `runner` or both. Default both.
    pub roles: Vec<Role>,
    pub layout: LayoutOptions,
    pub scheduler: SchedulerConfig,
    pub runner: RunnerConfig,
    /// Sandbox limits and compile cache of Wasm jobs.
    pub wasm: WasmConfig,
    pub http: HttpConfig,
    /// Notification secrets and defaults (see `notify`).
    pub notify: NotifyConfig,
    /// A trace per run over OTLP/HTTP (see `telemetry`).
    pub telemetry: TelemetryConfig,
    /// What this agent publishes on `CRONRUN_EVENTS` besides each run's end.
    pub events: EventsConfig,
}

/// `[events]`: the events an agent publishes beyond those of every run (its end, retries,
/// losses, misses). A run's `dispatched` and `started` events are stored messages too
/// (one each per run), so they are opt-in: a run then stores at most 6 messages
/// (docs/nats.md, "What a run stores").
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// Publish each run's `dispatched` (by its scheduler) and `started` (by its runner)
    /// events. Default false: `dispatched` then goes out only for the fires of jobs whose
    /// notification rules ask for `late`, the check it starts.
    pub lifecycle: bool,
}

/// `[http]`: the agent's HTTP listener (see `http`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address for /livez, /readyz and /metrics, e.g. `127.0.0.1:8642`. Default: none
    /// (`cronrun up`: 127.0.0.1:8642).
    pub listen: Option<String>,
    /// A socket already bound to `listen` (`cronrun up` binds its own, falling back to a
    /// free port, so that two of them never race for one).
    #[serde(skip)]
    pub bound: Option<std::sync::Arc<std::net::TcpListener>>,
    /// A file holding the dashboard's login token (16 characters at least). Without one
    /// the dashboard is off. Default: none.
    pub token_file: Option<String>,
    /// The NATS identity the dashboard reads with (a viewer). Default: the agent's own.
    pub viewer_creds: Option<String>,
    /// The NATS identity the dashboard's pause, resume, trigger and kill act as (an
    /// admin); they need `token_file` too. Default: none (read-only).
    pub admin_creds: Option<String>,
    /// The most jobs with `/metrics` series of their own (`job` label): the first this
    /// agent sees; the runs of others count under `job="(other)"`. Default: 1,000.
    pub metrics_jobs: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Scheduler,
    Runner,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            nats: "nats://127.0.0.1:4222".into(),
            creds: None,
            namespace: crate::names::DEFAULT_NAMESPACE.into(),
            jetstream_domain: None,
            name: default_name(),
            roles: vec![Role::Scheduler, Role::Runner],
            layout: LayoutOptions::default(),
            scheduler: SchedulerConfig::default(),
            runner: RunnerConfig::default(),
            wasm: WasmConfig::default(),
            http: HttpConfig::default(),
            notify: NotifyConfig::default(),
            telemetry: TelemetryConfig::default(),
            events: EventsConfig::default(),
        }
    }
}

/// The host name, made safe for a KV key.
pub fn default_name() -> String {
    let host = hostname::get().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let clean: String =
        host.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect();
    if clean.is_empty() { "agent".into() } else { clean }
}

impl AgentConfig {
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::invalid("config", format!("{}: cannot read: {e}", path.display())))?;
        let config: Self = toml::from_str(&text)
            .map_err(|e| Error::invalid("config", crate::spec::toml_error(&text, &path.display().to_string(), &e)))?;
        config.validate()?;
        Ok(config)
    }

    /// The names of this agent's deployment, addressing JetStream through its domain.
    pub fn names(&self) -> Result<crate::names::Names, Error> {
        let api = crate::model::jsapi::JsApi::new(self.jetstream_domain.as_deref())?;
        Ok(crate::names::Names::new(&self.namespace)?.with_js_api(api))
    }

    pub fn validate(&self) -> Result<(), Error> {
        self.names()?;
        crate::names::validate_job_name(&self.name).map_err(|_| {
            Error::invalid("name", format!("agent name {:?} must be 1 to 128 of A-Z a-z 0-9 _ -", self.name))
        })?;
        if self.roles.is_empty() {
            return Err(Error::invalid("roles", "roles must name scheduler, runner or both"));
        }
        if self.runner.pools.is_empty() && self.roles.contains(&Role::Runner) {
            return Err(Error::invalid("runner.pools", "a runner needs at least one pool"));
        }
        self.wasm.validate()?;
        self.notify.validate()?;
        self.telemetry.traces_url()?;
        if let Some(user) = &self.runner.default_user
            && self.roles.contains(&Role::Runner)
        {
            use crate::runner::account::{Accounts, HostAccounts};
            let known = match user.parse::<u32>() {
                Ok(_) => true, // a uid needs no passwd entry
                Err(_) => HostAccounts.user_by_name(user).is_some(),
            };
            if !known {
                return Err(Error::invalid(
                    "runner.default_user",
                    format!("runner.default_user {user:?} is no user on this host: create it or name another"),
                ));
            }
        }
        if let Some(n) = self.scheduler.shards
            && !(1..=crate::scheduler::MAX_SHARDS).contains(&n)
        {
            return Err(Error::invalid(
                "scheduler.shards",
                format!("scheduler.shards must be 1 to {}", crate::scheduler::MAX_SHARDS),
            ));
        }
        self.check_bounds()
    }

    /// Every duration and count of the file within a documented range (deploy/cronrun.toml):
    /// beyond them a value is a typo, and instants computed from it could overflow.
    fn check_bounds(&self) -> Result<(), Error> {
        use std::time::Duration as D;
        let (s, r) = (&self.scheduler, &self.runner);
        let durations = [
            ("scheduler.lease_ttl", s.lease_ttl, D::from_secs(2), D::from_secs(600)),
            ("scheduler.lead", s.lead, D::ZERO, D::from_secs(60)),
            ("scheduler.default_deadline", s.default_deadline, D::from_secs(1), D::from_secs(30 * 86_400)),
            ("scheduler.reconcile_every", s.reconcile_every, D::from_secs(1), D::from_secs(86_400)),
            ("scheduler.max_clock_offset", s.max_clock_offset, D::from_millis(100), D::from_secs(3600)),
            ("runner.heartbeat", r.heartbeat, D::from_millis(100), D::from_secs(300)),
            ("runner.kill_grace", r.kill_grace, D::ZERO, D::from_secs(3600)),
            ("runner.drain_timeout", r.drain_timeout, D::ZERO, D::from_secs(86_400)),
        ];
        for (field, value, min, max) in durations {
            if value < min || value > max {
                let show = |d: D| crate::spec::codec::format_duration(&d);
                return Err(Error::invalid(
                    field,
                    format!("{field} is {}; it must be from {} to {}", show(value), show(min), show(max)),
                ));
            }
        }
        let counts = [
            ("scheduler.max_in_flight", s.max_in_flight, 1, 100_000),
            ("runner.slots", r.slots, 1, 1_000_000),
            ("runner.max_line_bytes", r.max_line_bytes, 256, 64 * 1024),
        ];
        for (field, value, min, max) in counts {
            if !(min..=max).contains(&value) {
                return Err(Error::invalid(field, format!("{field} is {value}; it must be from {min} to {max}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_counts_out_of_range_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cronrun.toml");
        for (text, key) in [
            ("[scheduler]\nlease_ttl = \"1s\"\n", "scheduler.lease_ttl"),
            ("[scheduler]\nlease_ttl = \"100000years\"\n", "scheduler.lease_ttl"),
            ("[scheduler]\nlead = \"1000000years\"\n", "scheduler.lead"),
            ("[scheduler]\ndefault_deadline = \"5000000years\"\n", "scheduler.default_deadline"),
            ("[scheduler]\nreconcile_every = \"10ms\"\n", "scheduler.reconcile_every"),
            ("[scheduler]\nreconcile_every = \"9999days\"\n", "scheduler.reconcile_every"),
            ("[runner]\nheartbeat = \"1ms\"\n", "runner.heartbeat"),
            ("[runner]\ndrain_timeout = \"100years\"\n", "runner.drain_timeout"),
            ("[runner]\nslots = 0\n", "runner.slots"),
            ("[runner]\nmax_line_bytes = 100000000\n", "runner.max_line_bytes"),
            ("[scheduler]\nmax_in_flight = 0\n", "scheduler.max_in_flight"),
            ("[runner]\ndefault_user = \"no-such-user-here\"\n", "runner.default_user"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = AgentConfig::load(&path).unwrap_err();
            assert_eq!(err.kind(), &crate::ErrorKind::Invalid { field: key.into() }, "{text}");
            assert!(err.to_string().starts_with(key) && !err.to_string().contains('\n'), "{err}");
        }
    }

    #[test]
    fn example_config_parses_and_unknown_fields_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cronrun.toml");
        let example = include_str!("../../deploy/cronrun.toml");
        std::fs::write(&path, example).unwrap();
        let cfg = AgentConfig::load(&path).unwrap();
        assert_eq!(cfg.runner.pools, ["default"]);

        std::fs::write(&path, "namespace = \"x\"\n[runner]\nslotz = 3\n").unwrap();
        let err = AgentConfig::load(&path).unwrap_err().to_string();
        assert!(err.contains("cronrun.toml:3") && err.contains("slotz"), "{err}");
    }
}
