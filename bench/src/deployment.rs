//! A deployment as users run one, for the benchmarks that measure what users feel: a
//! nats-server with authentication (as `cronrun up` starts it) and `cronrun agent`
//! processes, each with its own config file, the runner identity and the scheduler's on a
//! connection of its own (as `cronrun up` runs its agent), jobs added through the CLI. The
//! server has one more user, `bench`, unrestricted: it measures the anchors (NATS's own
//! work). Everything lives in a temporary directory, kept (and named on stderr) when the
//! benchmark fails, so that the agents' and the server's logs can be read.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

use super::servers::Servers;
use cronrun::auth::Identities;
use cronrun::embedded::ServerOptions;
use cronrun::names::Names;
use cronrun::store::{LayoutOptions, Store};

/// How long an agent has to load its catalog, and to stop when told.
const AGENT_START: Duration = Duration::from_secs(30);
const AGENT_STOP: Duration = Duration::from_secs(60);
/// The agents' cronrun.toml beyond name, namespace, server and identities: production
/// defaults, except that shell jobs may run as the benchmark's own user, root included (a
/// runner running as root refuses that unless told, see `runner::account`).
const AGENT_TOML: &str = "[runner]\nallow_root = true\n";

pub(super) struct Deployment {
    /// None once stopped cleanly; dropped while Some, the directory is kept.
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    namespace: String,
    ids: Identities,
    /// None once stopped.
    servers: Option<Servers>,
    /// The layout's replicas: one on each node.
    layout: LayoutOptions,
    bench_password: String,
    pub url: String,
    pub agents: Vec<AgentProcess>,
    /// Lines added to every agent's `[runner]` table.
    runner_toml: String,
}

pub(super) struct AgentProcess {
    pub name: String,
    child: Child,
    log: PathBuf,
    /// Its `/metrics`.
    metrics_url: String,
}

impl Deployment {
    /// Starts nats-server (`nodes` of them: 1, or 3 for a cluster with the layout at three
    /// replicas) and `agents` agents named a0, a1, ... and waits until each has loaded its
    /// job catalog.
    /// `runner_toml`: lines added to the agents' `[runner]` table (a setting the workload
    /// needs beyond the defaults), or "".
    pub async fn start(namespace: &str, (agents, nodes): (usize, usize), runner_toml: &str) -> Result<Self> {
        Self::with_guest_subjects(namespace, (agents, nodes), runner_toml, &[]).await
    }

    /// `start`, the runners' identity allowed to publish to `guest_publish` for the Wasm
    /// jobs they run (`cronrun auth init --guest-publish`).
    pub async fn with_guest_subjects(
        namespace: &str,
        (agents, nodes): (usize, usize),
        runner_toml: &str,
        guest_publish: &[String],
    ) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("cronrun-bench-").tempdir().context("creating a temp dir")?;
        let path = dir.path().to_path_buf();
        let ids = Identities::ensure(&path.join("identities"))?;
        let names = Names::new(namespace)?;
        let bench_password = cronrun::auth::route_password();
        let bench_user = serde_json::json!({ "user": "bench", "password": bench_password });
        let server_options = ServerOptions {
            extra_config: ids.authorization(&names, guest_publish, &[], &[bench_user])?,
            probe_creds: Some(path_str(&ids.path("admin"))),
            ..Default::default()
        };
        let servers = Servers::start(&path.join("nats"), nodes, &server_options).await?;
        let mut deployment = Deployment {
            dir: Some(dir),
            path,
            namespace: namespace.into(),
            ids,
            url: servers.url.clone(),
            layout: servers.layout(),
            servers: Some(servers),
            bench_password,
            agents: Vec::new(),
            runner_toml: runner_toml.into(),
        };
        // The layout exists before the agents start, as after `cronrun up` or an apply.
        deployment.store().await?;
        deployment.add_agents(agents).await?;
        Ok(deployment)
    }

    /// Starts `n` more agents at once and waits until each has loaded its job catalog.
    pub async fn add_agents(&mut self, n: usize) -> Result<()> {
        let first = self.agents.len();
        for i in first..first + n {
            let agent = self.spawn_agent(&format!("a{i}"))?;
            self.agents.push(agent);
        }
        for agent in &self.agents[first..] {
            agent.wait_ready().await?;
        }
        Ok(())
    }

    /// Stops agent `index` with SIGTERM (it leaves the deployment) and forgets it.
    pub async fn remove_agent(&mut self, index: usize) -> Result<()> {
        self.agents.remove(index).stop().await
    }

    /// The deployment's directory, for files the jobs write.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A store acting as the admin identity.
    pub async fn store(&self) -> Result<Store> {
        let admin = path_str(&self.ids.path("admin"));
        let client = cronrun::connect::connect(&self.url, Some(&admin), "cronrun-bench").await?;
        Ok(Store::open(client, Names::new(&self.namespace)?, &self.layout).await?)
    }

    /// A store as the unrestricted `bench` user: it may make what only agents make (the
    /// schedules index).
    pub async fn bench_store(&self) -> Result<Store> {
        Ok(Store::open(self.bench_client().await?, Names::new(&self.namespace)?, &self.layout).await?)
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The unrestricted `bench` user's password (see `bench_client`).
    pub fn bench_password(&self) -> &str {
        &self.bench_password
    }

    /// A client as the unrestricted `bench` user.
    pub async fn bench_client(&self) -> Result<async_nats::Client> {
        let options = async_nats::ConnectOptions::with_user_and_password("bench".into(), self.bench_password.clone());
        let servers = self.url.split(',').map(str::parse).collect::<Result<Vec<async_nats::ServerAddr>, _>>()?;
        options.connect(servers.as_slice()).await.context("connecting as the bench user")
    }

    /// Runs `cronrun ARGS` as the admin; fails with its stderr when it does.
    pub async fn cli(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(crate::binaries::cronrun()?)
            .args(["--nats", &self.url, "--namespace", &self.namespace, "--creds"])
            .arg(self.ids.path("admin"))
            .args(args)
            .output()
            .await
            .context("running cronrun")?;
        if !out.status.success() {
            bail!("cronrun {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Adds the jobs of a jobs file (TOML, `[[job]]` tables) with `cronrun apply`.
    pub async fn apply(&self, jobs_toml: &str) -> Result<()> {
        let path = self.path.join("jobs.toml");
        std::fs::write(&path, jobs_toml).context("writing jobs.toml")?;
        self.cli(&["apply", "-f", &path_str(&path)]).await.map(drop)
    }

    /// An agent process; its log (`<name>.log`) is appended to across restarts.
    fn spawn_agent(&self, name: &str) -> Result<AgentProcess> {
        let config = self.path.join(format!("{name}.toml"));
        // A free port for its /metrics (taken back an instant before the agent binds it).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port")?
            .port();
        let toml = format!(
            "name = \"{name}\"\nnamespace = \"{}\"\nnats = \"{}\"\ncreds = \"{}\"\n[layout]\nreplicas = {}\n\
             [scheduler]\ncreds = \"{}\"\n{AGENT_TOML}{}\n[http]\nlisten = \"127.0.0.1:{port}\"\n",
            self.namespace,
            self.url,
            path_str(&self.ids.path("runner")),
            self.layout.replicas,
            path_str(&self.ids.path("scheduler")),
            self.runner_toml,
        );
        std::fs::write(&config, toml).with_context(|| format!("writing {}", config.display()))?;
        let log = self.path.join(format!("{name}.log"));
        let file = std::fs::File::options().create(true).append(true).open(&log);
        let child = Command::new(crate::binaries::cronrun()?)
            .arg("agent")
            .arg("--config")
            .arg(&config)
            // The config file names the server and identity, not the environment.
            .env_remove("CRONRUN_NATS")
            .env_remove("CRONRUN_CREDS")
            .env_remove("CRONRUN_NAMESPACE")
            .env_remove("CRONRUN_CONFIG")
            // Their info lines say when they are ready: read here, whatever the bench logs.
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file.with_context(|| format!("opening {}", log.display()))?)
            .kill_on_drop(true)
            .spawn()
            .context("starting cronrun agent")?;
        Ok(AgentProcess { name: name.into(), child, log, metrics_url: format!("http://127.0.0.1:{port}/metrics") })
    }

    /// Stops agent `index` with SIGTERM (a deploy's restart) and starts it again.
    pub async fn restart_agent(&mut self, index: usize) -> Result<()> {
        let name = self.agents[index].name.clone();
        self.agents[index].stop().await?;
        let agent = self.spawn_agent(&name)?;
        agent.wait_ready().await?;
        self.agents[index] = agent;
        Ok(())
    }

    /// Kills nats-server (every node) with SIGKILL, as a crash would, and starts it again
    /// on its store and port.
    pub async fn crash_and_restart_server(&mut self) -> Result<()> {
        match self.servers.as_mut() {
            Some(servers) => servers.crash_and_restart().await,
            None => bail!("the deployment was stopped"),
        }
    }

    fn server_pids(&self) -> Vec<u32> {
        self.servers.as_ref().map(Servers::pids).unwrap_or_default()
    }

    pub fn server_rss_kib(&self) -> u64 {
        self.server_pids().into_iter().map(rss_kib).sum()
    }

    /// CPU used so far by nats-server, and by the agents together: their own (with the
    /// Wasm guests they run) and their children's (a shell run's supervisor and what it
    /// ran, once ended).
    pub fn cpu(&self) -> (Cpu, Cpu) {
        let server = self.server_pids().into_iter().map(Cpu::of).fold(Cpu::default(), Cpu::add);
        (server, self.agents.iter().filter_map(|a| a.child.id()).map(Cpu::of).fold(Cpu::default(), Cpu::add))
    }

    /// Stops the agents (SIGTERM, each waited for); the server stays. An agent that did not
    /// stop cleanly is an error.
    pub async fn stop_agents(&mut self) -> Result<()> {
        let mut failed = Vec::new();
        for mut agent in self.agents.drain(..) {
            if let Err(e) = agent.stop().await {
                failed.push(cronrun::cli::error_line(&e));
            }
        }
        if !failed.is_empty() {
            bail!("{}", failed.join("; "));
        }
        Ok(())
    }

    /// Stops the agents, then the server, and removes the directory, unless `KEEP_ENV` is
    /// set: the agents' logs of a run that passed are worth reading too (how long each
    /// step took, what stepped down).
    pub async fn stop(mut self) -> Result<()> {
        self.stop_agents().await?;
        if let Some(servers) = self.servers.take() {
            servers.stop().await;
        }
        if !keep(std::env::var_os(KEEP_ENV).as_deref()) {
            self.dir.take();
        }
        Ok(())
    }
}

/// Set (to anything but "" or "0"), a benchmark keeps its deployment's directory.
const KEEP_ENV: &str = "CRONRUN_BENCH_KEEP";

fn keep(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

impl Drop for Deployment {
    /// Not stopped cleanly (or kept, see `KEEP_ENV`): the processes die with their
    /// handles, the logs stay.
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            eprintln!("bench: the deployment's logs are kept in {}", dir.keep().display());
        }
    }
}

impl AgentProcess {
    /// Resident memory in KiB; an error when the agent has exited.
    pub fn rss_kib(&mut self) -> Result<u64> {
        match (self.child.try_wait(), self.child.id()) {
            (Ok(None), Some(pid)) => Ok(rss_kib(pid)),
            _ => bail!("agent {} has exited: see {}", self.name, self.log.display()),
        }
    }

    /// The values of gauges `names` (series without labels) at one reading of its
    /// `/metrics`.
    pub async fn gauges<const N: usize>(&self, http: &reqwest::Client, names: [&str; N]) -> Result<[f64; N]> {
        let text = http.get(&self.metrics_url).send().await?.error_for_status()?.text().await?;
        let value =
            |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok());
        // A gauge never set is not rendered yet.
        Ok(names.map(|name| value(name).unwrap_or(0.0)))
    }

    /// Open file descriptors: the fewest of ten readings 100 ms apart, over a second.
    pub async fn open_fds(&self) -> usize {
        let mut fewest = usize::MAX;
        for _ in 0..10 {
            let count = self.child.id().and_then(|pid| std::fs::read_dir(format!("/proc/{pid}/fd")).ok());
            fewest = fewest.min(count.map_or(0, Iterator::count));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        fewest
    }

    async fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + AGENT_START;
        while Instant::now() < deadline {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            // The log is appended to across restarts: this start's line is the last one.
            if log.matches("job catalog loaded").count() > log.matches("agent stopped").count() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("agent {} did not load its catalog within {AGENT_START:?}: see {}", self.name, self.log.display())
    }

    async fn stop(&mut self) -> Result<()> {
        let Some(pid) = self.child.id() else {
            bail!("agent {} had exited before its stop: see {}", self.name, self.log.display());
        };
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
        match tokio::time::timeout(AGENT_STOP, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => bail!("agent {} stopped with {status}: see {}", self.name, self.log.display()),
            Ok(Err(e)) => bail!("waiting for agent {}: {e}", self.name),
            Err(_) => {
                let _ = self.child.kill().await;
                bail!("agent {} did not stop within {AGENT_STOP:?}: killed", self.name)
            }
        }
    }
}

/// Resident memory of process `pid` in KiB (0 when it is gone).
pub(super) fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds (user and system) a process has used (0 when it is gone), its own and
/// its children's that it has waited for: `utime`, `stime`, `cutime` and `cstime` of
/// `/proc/<pid>/stat`, fields 14 to 17, counted after the command's name (in parentheses,
/// which may hold spaces).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cpu {
    pub own: f64,
    pub children: f64,
}

impl Cpu {
    pub fn of(pid: u32) -> Self {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after_name: Vec<&str> =
            stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let ticks = |i: usize| after_name.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100).max(1);
        let seconds = |t: u64| t as f64 / per_second as f64;
        Self { own: seconds(ticks(11) + ticks(12)), children: seconds(ticks(13) + ticks(14)) }
    }

    /// This process's.
    pub fn of_self() -> Self {
        Self::of(std::process::id())
    }

    /// What was used from `earlier` to this.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu { own: self.own - earlier.own, children: self.children - earlier.children }
    }

    fn add(self, other: Cpu) -> Cpu {
        Cpu { own: self.own + other.own, children: self.children + other.children }
    }
}

/// The CPU a benchmark's own process and nats-server (when the benchmark started it) use
/// over a timed window, per run: what `throughput` and `nats` report beside their rate.
pub(super) struct CpuWindow {
    own: Cpu,
    /// The nats-server nodes' pids and their CPU at the start (none with `--nats`).
    servers: Vec<(u32, Cpu)>,
}

impl CpuWindow {
    pub fn start(server_pids: &[u32]) -> Self {
        Self { own: Cpu::of_self(), servers: server_pids.iter().map(|pid| (*pid, Cpu::of(*pid))).collect() }
    }

    /// Microseconds of CPU per run since the start, this process's and nats-server's, as
    /// JSON and as the end of a line of text.
    pub fn report(&self, runs: usize, process: &str) -> (serde_json::Value, String) {
        let per_run = |cpu: Cpu| 1e6 * cpu.own / runs.max(1) as f64;
        let own = per_run(Cpu::of_self().since(self.own));
        let servers = self.servers.iter().map(|(pid, from)| Cpu::of(*pid).since(*from)).reduce(Cpu::add);
        let server = servers.map(per_run);
        let text = match server {
            Some(server) => format!("; CPU per run: {process} {own:.0} us, nats-server {server:.0} us"),
            None => format!("; CPU per run: {process} {own:.0} us"),
        };
        (serde_json::json!({ "process_us": own, "nats_server_us": server }), text)
    }
}

/// What the layout's streams (records, leases, dispatch, logs, events) stored over a
/// window, per run: their last sequences at its start and end. The agents' own writes
/// (presence, shard leases) count too; over thousands of runs they are a few.
pub(super) struct StoredWindow {
    from: Vec<(String, u64)>,
}

impl StoredWindow {
    fn streams(store: &Store) -> [String; 5] {
        let names = &store.names;
        [
            format!("KV_{}", names.runs_bucket()),
            format!("KV_{}", names.leases_bucket()),
            names.dispatch_stream(),
            names.logs_stream(),
            names.events_stream(),
        ]
    }

    async fn last_sequences(store: &Store) -> Result<Vec<(String, u64)>> {
        let mut sequences = Vec::new();
        for name in Self::streams(store) {
            let mut stream = store.js.get_stream(&name).await.with_context(|| format!("opening {name}"))?;
            let last = stream.info().await.with_context(|| format!("reading {name}"))?.state.last_sequence;
            sequences.push((name, last));
        }
        Ok(sequences)
    }

    pub async fn start(store: &Store) -> Result<Self> {
        Ok(Self { from: Self::last_sequences(store).await? })
    }

    /// Stored messages per run since the start, in all and by stream, as JSON and as the
    /// end of a line of text.
    pub async fn report(&self, store: &Store, runs: usize) -> Result<(serde_json::Value, String)> {
        let to = Self::last_sequences(store).await?;
        let per_run = |n: u64| n as f64 / runs.max(1) as f64;
        let by_stream: serde_json::Map<String, serde_json::Value> = self
            .from
            .iter()
            .zip(&to)
            .map(|((name, from), (_, to))| (name.clone(), per_run(to.saturating_sub(*from)).into()))
            .collect();
        let total: u64 = self.from.iter().zip(&to).map(|((_, from), (_, to))| to.saturating_sub(*from)).sum();
        let text = format!("; stored messages per run: {:.2}", per_run(total));
        Ok((serde_json::json!({ "total": per_run(total), "by_stream": by_stream }), text))
    }
}

fn path_str(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_deployment_that_passed_is_kept_only_when_asked() {
        let cases = [(None, false), (Some(""), false), (Some("0"), false), (Some("1"), true), (Some("yes"), true)];
        for (value, kept) in cases {
            assert_eq!(super::keep(value.map(std::ffi::OsStr::new)), kept, "{value:?}");
        }
    }
}
