//! NATS topologies beyond one cluster, as real nats-server processes started from the very
//! configs of `deploy/` (`leaf/`, `supercluster/`) with the test's ports and paths put in:
//! a hub and a leaf node linked through a proxy that can be cut; two regions joined by a
//! gateway. Each server has the identities of `secure` (its `cronrun/auth.conf`); the leaf
//! site's, with the forms of the hub's JetStream domain (`secure_in_domain`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{Nats, Proxy, free_port, identity, secure, secure_in_domain, test_dir};

/// The text of `deploy/<path>`.
pub fn deploy_file(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// `text` with each `(from, to)` replaced; each `from` must be there (a deploy file that
/// changed fails here, not as a server that listens elsewhere).
pub fn substitute(text: &str, pairs: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (from, to) in pairs {
        assert!(out.contains(from), "{from:?} not in the config:\n{out}");
        out = out.replace(from, to);
    }
    out
}

/// A nats-server started on a config file (killed on drop).
pub struct ConfServer {
    child: Child,
    pub url: String,
    pub dir: PathBuf,
}

impl ConfServer {
    /// Starts nats-server on `config` in `<root>/<name>`, with `auth` beside it as
    /// `cronrun/auth.conf` (from `secure` or `secure_in_domain` of `root`) and `env` added
    /// to its environment.
    pub fn spawn(root: &Path, name: &str, port: u16, config: &str, auth: &str, env: &[(&str, String)]) -> ConfServer {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("cronrun")).unwrap();
        std::fs::write(dir.join("cronrun/auth.conf"), auth).unwrap();
        let conf = dir.join("nats-server.conf");
        std::fs::write(&conf, config).unwrap();
        let log = std::fs::File::options().create(true).append(true).open(dir.join("nats-server.log")).unwrap();
        let child = Command::new(cronrun::embedded::find_binary().unwrap())
            .arg("-c")
            .arg(&conf)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        ConfServer { child, url: format!("nats://127.0.0.1:{port}"), dir }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("nats-server.log")).unwrap_or_default()
    }

    /// Waits until JetStream answers a client of this server through `domain` (for a
    /// leaf: the hub's JetStream, across the link); fails with the server's log after
    /// `within`.
    pub async fn serving_jetstream(&mut self, root: &Path, domain: Option<&str>, within: Duration) {
        let test = identity(root, "test");
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("nats-server in {} exited ({status}):\n{}", self.dir.display(), self.log());
            }
            if jetstream_answers(&self.url, &test, domain).await {
                return;
            }
            assert!(start.elapsed() < within, "no JetStream at {} within {within:?}:\n{}", self.url, self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ConfServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a client of `url` holding `creds` gets an answer from JetStream (of `domain`,
/// if given) within 2 s.
pub async fn jetstream_answers(url: &str, creds: &str, domain: Option<&str>) -> bool {
    let answer = async {
        let client = cronrun::connect::connect(url, Some(creds), "test-probe").await.ok()?;
        let api = cronrun::model::jsapi::JsApi::new(domain).ok()?;
        cronrun::store::js_context(client, &api).query_account().await.ok()
    };
    tokio::time::timeout(Duration::from_secs(2), answer).await.ok().flatten().is_some()
}

/// A hub (JetStream in domain `hub`, `deploy/leaf/hub.conf`) and a leaf node without
/// JetStream (`deploy/leaf/leaf.conf`) whose link to the hub goes through `link`, a proxy
/// to cut. `nats` is the hub as the other tests know a server: its CLI, store and agents.
/// Both servers have the authorization of `cronrun auth init --jetstream-domain hub`.
pub struct LeafSite {
    pub hub: ConfServer,
    pub leaf: ConfServer,
    pub link: Proxy,
    /// Last: its directory goes after the servers.
    pub nats: Nats,
    /// The leaf node's client URL: where the edge's agents connect.
    pub leaf_url: String,
}

/// The leaf link's password in the tests (hub.conf and leaf.conf read it from the environment).
const LEAF_PASSWORD: &str = "leaf-link-test-password";

/// The hub's JetStream domain in `deploy/leaf/hub.conf`: what the edge's clients address.
pub const HUB_DOMAIN: &str = "hub";

impl LeafSite {
    pub async fn start() -> LeafSite {
        let dir = test_dir();
        let root = dir.path().to_path_buf();
        let (hub_port, hub_leaf_port, leaf_port) = (free_port(), free_port(), free_port());
        let link = Proxy::start(&format!("127.0.0.1:{hub_leaf_port}")).await;
        let hub_config = substitute(
            &deploy_file("leaf/hub.conf"),
            &[
                ("listen: 0.0.0.0:4222", format!("listen: 127.0.0.1:{hub_port}")),
                ("http: 127.0.0.1:8222", String::new()),
                ("store_dir: /var/lib/nats/jetstream", format!("store_dir: {:?}", root.join("hub/jetstream"))),
                // The link runs through `link`, which stands for the network between the
                // sites: the hub gives its leaves the link's address as its own (its INFO's
                // `leafnode_urls`, which a leaf reconnects to), else the leaf would reconnect
                // around the cut, straight to the hub's port on loopback.
                (
                    "listen: 0.0.0.0:7422",
                    format!("listen: 127.0.0.1:{hub_leaf_port}\n  advertise: \"{}\"", link.addr()),
                ),
            ],
        );
        assert!(hub_config.contains(&format!("domain: {HUB_DOMAIN}")), "the hub's JetStream has its domain");
        let auth = secure_in_domain(&root, Some(HUB_DOMAIN)).0;
        let mut hub = ConfServer::spawn(
            &root,
            "hub",
            hub_port,
            &hub_config,
            &auth,
            &[("CRONRUN_LEAF_PASSWORD", LEAF_PASSWORD.to_string())],
        );
        hub.serving_jetstream(&root, None, Duration::from_secs(30)).await;
        let leaf_config = substitute(
            &deploy_file("leaf/leaf.conf"),
            &[
                ("listen: 0.0.0.0:4222", format!("listen: 127.0.0.1:{leaf_port}")),
                ("http: 127.0.0.1:8222", String::new()),
            ],
        );
        assert!(!leaf_config.contains("jetstream {"), "the leaf runs without JetStream");
        let leaf_url = format!("nats-leaf://cronrun-leaf:{LEAF_PASSWORD}@{}", link.addr());
        let mut leaf =
            ConfServer::spawn(&root, "leaf", leaf_port, &leaf_config, &auth, &[("CRONRUN_LEAF_URL", leaf_url)]);
        // The leaf has no JetStream: an answer comes from the hub's, across the link.
        leaf.serving_jetstream(&root, Some(HUB_DOMAIN), Duration::from_secs(30)).await;
        let nats = Nats { server: None, url: hub.url.clone(), dir };
        let leaf_url = leaf.url.clone();
        LeafSite { hub, leaf, link, nats, leaf_url }
    }

    /// Whether a client of the leaf reaches the hub's JetStream now.
    pub async fn linked(&self) -> bool {
        jetstream_answers(&self.leaf_url, &self.nats.identity("test"), Some(HUB_DOMAIN)).await
    }
}

/// Two regions, `east` and `west`, each a single-node cluster with JetStream started from
/// `deploy/supercluster/<region>.conf`, joined by a gateway. `nats` is east as the other
/// tests know a server.
pub struct Supercluster {
    pub east: ConfServer,
    pub west: ConfServer,
    /// Last: its directory goes after the servers.
    pub nats: Nats,
}

const GATEWAY_PASSWORD: &str = "gateway-test-password";

impl Supercluster {
    pub async fn start() -> Supercluster {
        let dir = test_dir();
        let root = dir.path().to_path_buf();
        let ports: Vec<(u16, u16, u16)> = (0..2).map(|_| (free_port(), free_port(), free_port())).collect();
        let gateway_url = |p: u16| format!("nats://cronrun-gateway:{GATEWAY_PASSWORD}@127.0.0.1:{p}");
        let env = [
            ("CRONRUN_GATEWAY_PASSWORD", GATEWAY_PASSWORD.to_string()),
            ("CRONRUN_GATEWAY_EAST_URL", gateway_url(ports[0].2)),
            ("CRONRUN_GATEWAY_WEST_URL", gateway_url(ports[1].2)),
        ];
        let mut servers = ["east", "west"].into_iter().zip(&ports).map(|(region, &(client, route, gateway))| {
            let config = substitute(
                &deploy_file(&format!("supercluster/{region}.conf")),
                &[
                    ("listen: 0.0.0.0:4222", format!("listen: 127.0.0.1:{client}")),
                    ("http: 127.0.0.1:8222", String::new()),
                    (
                        "store_dir: /var/lib/nats/jetstream",
                        format!("store_dir: {:?}", root.join(region).join("jetstream")),
                    ),
                    ("127.0.0.1:6222", format!("127.0.0.1:{route}")),
                    ("listen: 0.0.0.0:7222", format!("listen: 127.0.0.1:{gateway}")),
                ],
            );
            ConfServer::spawn(&root, region, client, &config, &secure(&root).0, &env)
        });
        let (mut east, mut west) = (servers.next().unwrap(), servers.next().unwrap());
        // JetStream answers once both regions elected a meta leader (it needs both).
        east.serving_jetstream(&root, None, Duration::from_secs(45)).await;
        west.serving_jetstream(&root, None, Duration::from_secs(45)).await;
        let nats = Nats { server: None, url: east.url.clone(), dir };
        Supercluster { east, west, nats }
    }
}
