//! `cronrun up`: everything on one machine. Without --nats it starts a local nats-server
//! (JetStream in the data directory), then runs scheduler and runner in this process and,
//! on first start, adds the example jobs: two shell jobs and, when the plugins are built,
//! the `hello` Wasm job. Ctrl-C or SIGTERM stops it all cleanly.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::agent::AgentArgs;
use super::deploy::DeployArgs;
use super::{Ctx, Global, Output};
use crate::auth::Identities;
use crate::embedded::{EmbeddedNats, ServerOptions};
use crate::spec::parse_jobs_file;
use crate::store::Store;

/// The jobs a first start adds, so there is something to watch.
const EXAMPLE_JOBS: &str = include_str!("../../../deploy/examples/jobs.toml");

#[derive(Args)]
pub struct UpArgs {
    /// Where the local nats-server keeps its data [default: ~/.local/share/cronrun]
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Client port of the local nats-server
    #[arg(long, default_value_t = 4222)]
    pub port: u16,
    /// Do not add the example jobs on first start
    #[arg(long)]
    pub no_examples: bool,
    /// A subject Wasm jobs may publish to (repeatable), within their own grants: the
    /// local server's bound on guests [default: none]
    #[arg(long = "guest-publish")]
    pub guest_publish: Vec<String>,
    /// A subject the `publisher` identity (beside the others in the data directory) may
    /// publish to (repeatable), e.g. what jobs' `on` triggers listen to [default: none]
    #[arg(long = "publish", value_name = "SUBJECT")]
    pub publish: Vec<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub(super) fn default_data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("cronrun")
}

pub async fn run(ctx: &Ctx, a: UpArgs) -> Result<()> {
    let mut config = a.agent.config(ctx)?;
    let cancel = CancellationToken::new();
    // The server's pid, once started: a second signal stops it on the way out.
    let server_pid = std::sync::Arc::new(std::sync::OnceLock::new());
    let pid = server_pid.clone();
    let on_second = move || {
        if let Some(pid) = pid.get() {
            crate::embedded::terminate(*pid);
        }
    };
    crate::shutdown::cancel_on_signals(cancel.clone(), on_second).context("installing signal handlers")?;
    // With its own server, `up` is secure by default: identities in the data directory,
    // anonymous clients refused, the agent and the examples each with their own role.
    let mut admin_creds = ctx.global.creds.clone();
    let server = match &ctx.global.nats {
        Some(url) if !a.publish.is_empty() || !a.guest_publish.is_empty() => anyhow::bail!(
            "--publish and --guest-publish set up the local server's identities; the server at {url} has its own: give them to `cronrun auth init` there"
        ),
        Some(_) => None,
        None => {
            let dir = a.data_dir.clone().unwrap_or_else(default_data_dir);
            if std::net::TcpListener::bind(("127.0.0.1", a.port)).is_err() {
                anyhow::bail!(
                    "port {} is in use: pass --nats nats://127.0.0.1:{} to use the server there, or --port N",
                    a.port,
                    a.port
                );
            }
            let names = config.names()?;
            super::auth::check_publish_subjects(&names, "--guest-publish", &a.guest_publish)?;
            super::auth::check_publish_subjects(&names, "--publish", &a.publish)?;
            let ids = Identities::ensure(&crate::auth::up_identities_dir(&dir))?;
            let opts = ServerOptions {
                port: a.port,
                extra_config: ids.authorization(&names, &a.guest_publish, &a.publish, &[])?,
                probe_creds: Some(path_str(&ids.path("admin"))),
                ..Default::default()
            };
            let server = EmbeddedNats::start(&dir.join("nats"), &opts).await?;
            info!(url = %server.url, data = %dir.display(), identities = %ids.dir.display(), "local nats-server started");
            if let Some(pid) = server.pid() {
                let _ = server_pid.set(pid);
            }
            config.nats = server.url.clone();
            // The scheduler on a connection of its own (`SchedulerConfig::creds`).
            config.creds = Some(path_str(&ids.path("runner")));
            config.scheduler.creds = Some(path_str(&ids.path("scheduler")));
            admin_creds = Some(path_str(&ids.path("admin")));
            config.http.viewer_creds.get_or_insert_with(|| path_str(&ids.path("viewer")));
            Some(server)
        }
    };
    run_jobs_as_nobody_if_root(&mut config.runner);
    if config.http.listen.is_none() {
        let socket = bind_local_http().context("binding a local port for /metrics")?;
        config.http.listen = Some(socket.local_addr()?.to_string());
        config.http.bound = Some(std::sync::Arc::new(socket));
    }
    let http = config.http.listen.clone().unwrap_or_default();
    let dashboard =
        dashboard_login(&mut config.http, a.data_dir.clone().unwrap_or_else(default_data_dir), &admin_creds)?;
    let client = crate::connect::connect(&config.nats, config.creds.as_deref(), "cronrun-up").await?;
    if !a.no_examples {
        add_examples(&config, admin_creds.clone(), &ctx.clock).await?;
    }
    // The agent runs on whether or not anyone reads the banner.
    let nats_cli = match (&server, &admin_creds) {
        (Some(_), Some(admin)) => format!("nats --server {} --nkey {admin}", config.nats),
        _ => format!("nats --server {}", config.nats),
    };
    let _ = super::out(&format!(
        "cronrun is up: NATS at {}, the dashboard at http://{http}/{dashboard}, metrics at http://{http}/metrics. \
         Try `cronrun ls`, `cronrun runs hello`, `cronrun status`, `{nats_cli} kv ls {}_jobs`. Ctrl-C stops.",
        config.nats, config.namespace
    ));
    let result = crate::agent::run(client, config, ctx.clock.clone(), cancel).await;
    if let Some(server) = server {
        server.stop().await;
    }
    Ok(result?)
}

/// `up`'s dashboard takes a login (a token kept in the data directory, made on first
/// start) and acts as the admin identity the CLI uses. Returns the login path to print.
fn dashboard_login(
    http: &mut crate::config::HttpConfig,
    data_dir: PathBuf,
    admin_creds: &Option<String>,
) -> Result<String> {
    if http.admin_creds.is_none() {
        http.admin_creds = admin_creds.clone();
    }
    let path = match &http.token_file {
        Some(path) => PathBuf::from(path),
        None => {
            let path = data_dir.join("dashboard.token");
            if !path.exists() {
                std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
                crate::private_file::write(&path, &format!("{}\n", crate::dashboard::new_token()))?;
            }
            http.token_file = Some(path_str(&path));
            path
        }
    };
    let token = crate::dashboard::read_token(&path_str(&path))?;
    Ok(format!("login?token={token}"))
}

/// The socket `up` serves /livez, /readyz and /metrics on: 127.0.0.1:8642, or a free
/// local port when that one is taken.
fn bind_local_http() -> std::io::Result<std::net::TcpListener> {
    std::net::TcpListener::bind("127.0.0.1:8642").or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))
}

/// `up` started as root (a container, a test machine) runs shell jobs that name no user as
/// `nobody` rather than refusing them: a demo that works, without running jobs as root.
fn run_jobs_as_nobody_if_root(runner: &mut crate::runner::RunnerConfig) {
    use crate::runner::account::{Accounts, HostAccounts};
    if nix::unistd::geteuid().is_root()
        && runner.default_user.is_none()
        && !runner.allow_root
        && HostAccounts.user_by_name("nobody").is_some()
    {
        info!("running as root: shell jobs that name no user run as nobody ([runner] default_user)");
        runner.default_user = Some("nobody".into());
    }
}

/// Adds the example jobs if the deployment has no jobs at all.
async fn add_examples(
    config: &crate::config::AgentConfig,
    admin_creds: Option<String>,
    clock: &crate::clock::SharedClock,
) -> Result<()> {
    let client = crate::connect::connect(&config.nats, admin_creds.as_deref(), "cronrun-up examples").await?;
    let store = Store::open(client, config.names()?, &config.layout)
        .await?
        .acting_as(&crate::auth::actor(admin_creds.as_deref()));
    if !store.list_jobs().await?.is_empty() {
        return Ok(());
    }
    for spec in parse_jobs_file(EXAMPLE_JOBS, "examples/jobs.toml")? {
        store.put_job(&spec).await?;
        info!(job = %spec.name, schedule = %spec.schedule, "example job added");
    }
    let Some(plugin) = example_plugin() else {
        warn!("no example Wasm job: build the plugins first with plugins/build.sh");
        return Ok(());
    };
    let ctx = Ctx {
        global: Global {
            nats: Some(config.nats.clone()),
            creds: admin_creds,
            namespace: config.namespace.clone(),
            jetstream_domain: config.jetstream_domain.clone(),
            output: Output::Text,
            log_format: Output::Text,
        },
        clock: clock.clone(),
    };
    let args = DeployArgs {
        plugin,
        name: Some("hello-wasm".into()),
        schedule: None,
        tz: None,
        timeout: None,
        pool: None,
        config: vec!["greeting=hello from wasm".into()],
        config_secret: Vec::new(),
        allow_publish: Vec::new(),
        allow_http: Vec::new(),
        allow_kv: false,
        sign: None,
        drop_triggers: false,
    };
    super::deploy::run(&ctx, args).await
}

/// The `hello` plugin, when `plugins/build.sh` built it into the target directory this
/// binary runs from (`target/release/cronrun` -> `target/wasm32-wasip2/release/hello.wasm`).
fn example_plugin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let plugin = exe.parent()?.parent()?.join("wasm32-wasip2/release/hello.wasm");
    plugin.is_file().then_some(plugin)
}

fn path_str(path: &std::path::Path) -> String {
    path.to_string_lossy().into_owned()
}
