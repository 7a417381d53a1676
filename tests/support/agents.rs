//! cronrun agents as real processes of the built binary (so tests can kill them with
//! SIGKILL), with timings fast enough to see failover and heartbeats in seconds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{BIN, Cluster, Nats, identity};

impl Nats {
    /// An agent process with test timings; `top_level` TOML keys go before its tables.
    pub fn agent(&self, name: &str, top_level: &str) -> Agent {
        self.agent_with_config(name, &format!("{top_level}\n{}", test_config(name)))
    }

    /// An agent with both roles and `tables` (TOML tables, e.g. `[notify]`) at the end of
    /// its configuration.
    pub fn agent_with_tables(&self, name: &str, tables: &str) -> Agent {
        self.agent_with_config(name, &format!("{}\n{tables}\n", test_config(name)))
    }

    /// A scheduler `s` and two runners `r1`, `r2`, all ready: runs can move between
    /// runners while scheduling goes on.
    pub async fn scheduler_and_two_runners(&self) -> (Agent, [Agent; 2]) {
        let scheduler = self.agent("s", "roles = [\"scheduler\"]");
        let runners = [self.agent("r1", "roles = [\"runner\"]"), self.agent("r2", "roles = [\"runner\"]")];
        for agent in runners.iter().chain([&scheduler]) {
            ready(agent).await;
        }
        (scheduler, runners)
    }

    /// A runner taking runs from `pools` (and its own name's pool).
    pub fn runner_in_pools(&self, name: &str, pools: &[&str]) -> Agent {
        self.runner_with(name, &format!("pools = {pools:?}"))
    }

    /// A runner with `lines` added to its `[runner]` settings (its last table: `lines` may
    /// go on with tables of their own, e.g. `[wasm]`).
    pub fn runner_with(&self, name: &str, lines: &str) -> Agent {
        let mut base = test_config(name);
        if lines.contains("allow_root") {
            base = base.replace("allow_root = true\n", "");
        }
        self.agent_with_config(name, &format!("roles = [\"runner\"]\n{base}{lines}\n"))
    }

    /// A scheduler with `lines` added to its `[scheduler]` settings.
    pub fn scheduler_with(&self, name: &str, lines: &str) -> Agent {
        let base = test_config(name).replace("[scheduler]\n", &format!("[scheduler]\n{lines}\n"));
        self.agent_with_config(name, &format!("roles = [\"scheduler\"]\n{base}"))
    }

    /// A scheduler that keeps snapshots of the schedules index whatever its size
    /// (`snapshots_from = 0`), with its HTTP listener on `port`.
    pub fn scheduler_snapshotting(&self, name: &str, port: u16) -> Agent {
        let config = test_config(name).replace("[scheduler]\n", "[scheduler]\nsnapshots_from = 0\n");
        let toml = format!("roles = [\"scheduler\"]\nhttp.listen = \"127.0.0.1:{port}\"\n{config}");
        self.agent_with_config(name, &toml)
    }

    fn agent_with_config(&self, name: &str, toml: &str) -> Agent {
        self.agent_with_env(name, toml, &[])
    }

    /// An agent with configuration `toml` and `env` added to its environment.
    pub fn agent_with_env(&self, name: &str, toml: &str, env: &[(&str, &str)]) -> Agent {
        let config = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        Agent::spawn(Path::new(BIN), &self.url, &config, self.dir.path(), name, env)
    }

    /// An agent with configuration `toml` connected to the server at `url` (another server
    /// of this one's deployment: a leaf node, another region), with `env` added.
    pub fn agent_via(&self, url: &str, name: &str, toml: &str, env: &[(&str, &str)]) -> Agent {
        let config = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        Agent::spawn(Path::new(BIN), url, &config, self.dir.path(), name, env)
    }

    /// A test-timed agent run from `binary` instead of the built one (a copy elsewhere).
    pub fn agent_from(&self, binary: &Path, name: &str) -> Agent {
        let config = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, test_config(name)).unwrap();
        Agent::spawn(binary, &self.url, &config, self.dir.path(), name, &[])
    }

    /// As `agent`, with the runner heartbeat given (its runs' leases live three of them).
    pub fn agent_with_heartbeat(&self, name: &str, top_level: &str, heartbeat: &str) -> Agent {
        self.agent_with_config(name, &format!("{top_level}\n{}", test_config_with_heartbeat(name, heartbeat)))
    }

    /// An agent as `cronrun up` runs one: its scheduler on a connection of its own as the
    /// identity in `creds` (`[scheduler] creds`), the rest of it as the runner identity.
    pub fn agent_with_scheduler_creds(&self, name: &str, heartbeat: &str, creds: &str) -> Agent {
        let config = test_config_with_heartbeat(name, heartbeat);
        assert!(config.contains("[scheduler]\n"), "{config}");
        let toml = config.replace("[scheduler]\n", &format!("[scheduler]\ncreds = \"{creds}\"\n"));
        self.agent_with_env(name, &toml, &[("CRONRUN_CREDS", &self.identity("runner"))])
    }
}

impl Cluster {
    /// A test-timed agent on this cluster (heartbeat 3 s: its runs' leases outlast an
    /// election); `top_level` as for `Nats::agent`.
    pub fn agent(&self, name: &str, top_level: &str) -> Agent {
        let config = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, format!("{top_level}\n{}", test_config_with_heartbeat(name, "3s"))).unwrap();
        Agent::spawn(Path::new(BIN), &self.urls(), &config, self.dir.path(), name, &[])
    }
}

/// Fast timings so tests see failover and heartbeats in seconds.
pub fn test_config(name: &str) -> String {
    test_config_with_heartbeat(name, "1s")
}

/// `config` (from `test_config`) publishing the events a deployment has by default: no
/// `dispatched` and `started` for every run.
pub fn default_events(config: &str) -> String {
    let lifecycle = "[events]\nlifecycle = true\n";
    assert!(config.contains(lifecycle), "{config}");
    config.replace(lifecycle, "")
}

/// Shards of test deployments: few, so that every agent of a test owns some.
pub const TEST_SHARDS: u32 = 8;

/// The run lease TTL is three heartbeats: on a cluster it must outlast a leader election.
/// Shell jobs may run as root (CI runs as root); `security` tests the refusal. Every run's
/// `started` event is published: the tests count them to see a second start (`events`
/// tests the default, without them).
fn test_config_with_heartbeat(name: &str, heartbeat: &str) -> String {
    format!(
        "name = \"{name}\"\n[events]\nlifecycle = true\n[scheduler]\nshards = {TEST_SHARDS}\nlease_ttl = \"2s\"\nlead = \"500ms\"\n\
         [runner]\nheartbeat = \"{heartbeat}\"\nkill_grace = \"1s\"\ndrain_timeout = \"5s\"\nallow_root = true\n"
    )
}

pub struct Agent {
    pub child: Child,
    pub name: String,
    pub log: PathBuf,
}

impl Agent {
    /// Connects as the identity of its roles: `scheduler`, `runner`, or `agent` for both.
    fn spawn(binary: &Path, url: &str, config: &Path, dir: &Path, name: &str, env: &[(&str, &str)]) -> Agent {
        let log = dir.join(format!("{name}.log"));
        let toml = std::fs::read_to_string(config).unwrap();
        let who = ["scheduler", "runner"]
            .into_iter()
            .find(|role| toml.contains(&format!("roles = [\"{role}\"]")))
            .unwrap_or("agent");
        let child = Command::new(binary)
            .args(["agent", "--config"])
            .arg(config)
            .env("CRONRUN_NATS", url)
            .env("CRONRUN_CREDS", identity(dir, who))
            // `CRONRUN_TEST_LOG` (a `RUST_LOG` filter) asks the agents for more, to chase a flake.
            .env("RUST_LOG", std::env::var("CRONRUN_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Agent { child, name: name.into(), log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Peak resident memory of the agent in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Whether the process has ended (a zombie until the test reaps it): its state, the
    /// field after the command name in parentheses.
    pub fn exited(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
        !matches!(state, Some(s) if s != 'Z' && s != 'X')
    }

    /// File descriptors the agent has open.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map(|d| d.count()).unwrap_or(0)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// How long an agent may take to start: on a fresh 3-node cluster, while a whole test
/// suite runs on two cores, creating replicated streams has taken over 15 s.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Waits until the agent's scheduler and runner are both up (from its log).
/// Fails with the end of its log if it exits first or is not ready within `READY_WITHIN`.
pub async fn ready(agent: &Agent) {
    let start = Instant::now();
    while !agent.log().contains("job catalog loaded") {
        let exited = agent.exited();
        // Read again: it may have become ready just before it exited.
        if (exited || start.elapsed() > READY_WITHIN) && !agent.log().contains("job catalog loaded") {
            let log = agent.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            let what = if exited { "exited".to_string() } else { format!("was not ready within {READY_WITHIN:?}") };
            panic!("agent {} {what}; its log ends:\n{}", agent.name, tail.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
