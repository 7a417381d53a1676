//! The nats-server a benchmark runs on: one, or (`--cluster 3`) a local cluster of three
//! with the layout at three replicas, the shape production runs. Each node stores under a
//! directory of its own; their routes authenticate as `cronrun auth init --routes` writes
//! them.

use std::path::Path;

use anyhow::{Result, bail};

use cronrun::embedded::{EmbeddedNats, ServerOptions};
use cronrun::store::LayoutOptions;

pub(super) struct Servers {
    nodes: Vec<EmbeddedNats>,
    /// How each node was started, to start it again on its store.
    options: Vec<ServerOptions>,
    dirs: Vec<std::path::PathBuf>,
    /// Every node's client URL, comma-separated, as `--nats` takes them.
    pub url: String,
}

impl Servers {
    /// `nodes` servers (1, or 3 for a cluster) under `dir`, each with `base`'s options.
    pub async fn start(dir: &Path, nodes: usize, base: &ServerOptions) -> Result<Self> {
        let (options, dirs) = match nodes {
            1 => (vec![base.clone()], vec![dir.to_path_buf()]),
            3 => (cluster_options(base)?, (0..3).map(|i| dir.join(format!("n{i}"))).collect()),
            _ => bail!("--cluster {nodes}: give 1 (one server) or 3 (a cluster of three, R3)"),
        };
        // All at once: a node of a new cluster answers once the others elected a leader.
        let starts = options.iter().zip(&dirs).map(|(opts, dir)| EmbeddedNats::start(dir, opts));
        let nodes: Vec<EmbeddedNats> = futures::future::try_join_all(starts).await?;
        let url = nodes.iter().map(|n| n.url.clone()).collect::<Vec<_>>().join(",");
        // A node's port once chosen: a restart comes back on it.
        let options = options.into_iter().zip(&nodes).map(|(o, n)| ServerOptions { port: n.port, ..o }).collect();
        Ok(Self { nodes, options, dirs, url })
    }

    /// The layout's replicas on these servers: one on each node.
    pub fn layout(&self) -> LayoutOptions {
        LayoutOptions { replicas: self.nodes.len(), ..LayoutOptions::default() }
    }

    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(EmbeddedNats::pid).collect()
    }

    /// Kills every node with SIGKILL, as a crash would, and starts each again on its store
    /// and port.
    pub async fn crash_and_restart(&mut self) -> Result<()> {
        for node in self.nodes.drain(..) {
            node.kill().await;
        }
        let starts = self.options.iter().zip(&self.dirs).map(|(opts, dir)| EmbeddedNats::start(dir, opts));
        self.nodes = futures::future::try_join_all(starts).await?;
        Ok(())
    }

    pub async fn stop(self) {
        for node in self.nodes {
            node.stop().await;
        }
    }
}

/// Three nodes' options: `base` and a `cluster { }` block routing to the two others.
fn cluster_options(base: &ServerOptions) -> Result<Vec<ServerOptions>> {
    let route_ports = (0..3).map(|_| free_port()).collect::<Result<Vec<u16>>>()?;
    let routes: Vec<String> = route_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let route_auth = cronrun::auth::route_authorization(&cronrun::auth::route_password(), &routes);
    let options = route_ports.iter().enumerate().map(|(i, port)| ServerOptions {
        server_name: Some(format!("n{i}")),
        extra_config: format!(
            "{}\ncluster {{\nname: cronrun-bench\nlisten: 127.0.0.1:{port}\n{route_auth}}}\n",
            base.extra_config
        ),
        ..base.clone()
    });
    Ok(options.collect())
}

/// A port free now (taken back an instant before the node binds it).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
