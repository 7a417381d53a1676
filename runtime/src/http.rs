//! The agent's HTTP listener (`--http ADDR`, `[http] listen`): `/livez` (the process
//! serves), `/readyz` (NATS connected, layout present, roles started: 200, or 503 with a
//! one-line reason; then a `warning:` line per stream nearly full, which leaves a ready
//! agent ready), `/metrics` (Prometheus text, see `metrics`) and the dashboard at `/`
//! (see `dashboard`). axum, on a task of its own that stops with the agent and is watched
//! by it: a listener that fails stops the agent rather than leaving it unhealthy-looking
//! yet alive.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::dashboard::{Dashboard, DashboardConfig};
use crate::error::Error;
use crate::watchdog::Watched;

/// What `/readyz` reports, set by the agent as it starts.
pub struct Health {
    client: async_nats::Client,
    /// The scheduler's connection, when it has one of its own (`[scheduler] creds`).
    pub scheduler_connection: std::sync::OnceLock<async_nats::Client>,
    layout: AtomicBool,
    /// How full the layout's streams are, read once the layout is there.
    streams: std::sync::OnceLock<crate::store::StreamUseCache>,
    roles_expected: usize,
    roles_started: AtomicUsize,
    /// The runner's slots (total, in use), when it runs one.
    pub slots: std::sync::OnceLock<(usize, Arc<AtomicUsize>)>,
    /// The next fires of the shards led here.
    pub next_fires: crate::metrics::NextFires,
    /// The agent's catalog, which knows the jobs removed while it ran: their series are
    /// not shown.
    pub catalog: std::sync::OnceLock<crate::catalog::Catalog>,
    /// The agent's clock against the server's.
    pub server_time: std::sync::OnceLock<crate::server_time::ServerTime>,
}

impl Health {
    pub fn new(client: async_nats::Client, roles_expected: usize) -> Self {
        Self {
            client,
            scheduler_connection: std::sync::OnceLock::new(),
            layout: AtomicBool::new(false),
            streams: std::sync::OnceLock::new(),
            roles_expected,
            roles_started: AtomicUsize::new(0),
            slots: std::sync::OnceLock::new(),
            next_fires: crate::metrics::NextFires::default(),
            catalog: std::sync::OnceLock::new(),
            server_time: std::sync::OnceLock::new(),
        }
    }

    /// The layout is there, in `store`: its streams' use is read from now on.
    pub fn layout_ready(&self, store: &crate::store::Store) {
        let _ = self.streams.set(crate::store::StreamUseCache::new(store.clone()));
        self.layout.store(true, Ordering::SeqCst);
    }

    /// Warnings of streams nearly full (see `store::StreamUse::warning`).
    fn stream_warnings(&self) -> Vec<String> {
        self.streams.get().map(|s| s.warnings()).unwrap_or_default()
    }

    pub fn role_started(&self) {
        self.roles_started.fetch_add(1, Ordering::SeqCst);
    }

    fn nats_connected(&self) -> bool {
        let connected = |c: &async_nats::Client| c.connection_state() == async_nats::connection::State::Connected;
        connected(&self.client) && self.scheduler_connection.get().is_none_or(connected)
    }

    /// None when ready, else why not.
    fn not_ready(&self) -> Option<String> {
        if !self.nats_connected() {
            Some("NATS is not connected".into())
        } else if !self.layout.load(Ordering::SeqCst) {
            Some("waiting for the cronrun layout in NATS".into())
        } else if self.roles_started.load(Ordering::SeqCst) < self.roles_expected {
            Some("roles starting".into())
        } else {
            self.clock_off()
        }
    }

    /// Why the agent's clock keeps it from leading shards, if it does.
    fn clock_off(&self) -> Option<String> {
        let server_time = self.server_time.get()?;
        let state = server_time.state();
        let offset = state.offset.filter(|_| state.off)?;
        Some(format!(
            "this agent's clock is {offset:+.1} s off the NATS server's (max_clock_offset {}): it leads no shards; fix its time (NTP)",
            humantime::format_duration(server_time.max())
        ))
    }
}

/// Binds `addr` now (so that a taken port is an error at start), or takes the socket
/// `bound` to it already, then serves until `cancel` on a task in `tasks` (with the
/// dashboard's).
pub async fn serve(
    addr: &str,
    bound: Option<&std::net::TcpListener>,
    health: Arc<Health>,
    dashboard: DashboardConfig,
    tasks: &mut Watched,
    cancel: CancellationToken,
) -> Result<SocketAddr, Error> {
    let cannot =
        |e: std::io::Error| Error::invalid("http", format!("--http {addr}: cannot listen: {e}; pick another address"));
    let listener = match bound {
        Some(socket) => {
            let socket = socket.try_clone().map_err(cannot)?;
            socket.set_nonblocking(true).map_err(cannot)?;
            TcpListener::from_std(socket).map_err(cannot)?
        }
        None => TcpListener::bind(addr).await.map_err(cannot)?,
    };
    let bound = listener.local_addr().map_err(cannot)?;
    let dashboard = Dashboard::start(dashboard, health.client.clone(), bound, tasks, cancel.clone())?;
    let app = Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
        .merge(dashboard.routes());
    tasks.spawn(format!("the HTTP listener on {bound}"), async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(cancel.cancelled_owned()).await;
        if let Err(e) = served {
            tracing::error!("HTTP listener on {bound} failed: {e}");
        }
    });
    Ok(bound)
}

/// A stream nearly full is a warning, not a reason to be unready: every agent shares the
/// streams, so all would turn unready at once, and taking them out of service empties no
/// stream (old output and events are dropped by design; a full dispatch queue needs an
/// operator, whom the warning and `cronrun_stream_use_ratio` alert).
async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    let (code, mut body) = match health.not_ready() {
        None => (StatusCode::OK, "ready\n".to_string()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    };
    for warning in health.stream_warnings() {
        body.push_str(&format!("warning: {warning}\n"));
    }
    (code, body)
}

async fn metrics(State(health): State<Arc<Health>>) -> impl IntoResponse {
    crate::metrics::nats_connected(health.nats_connected());
    // Sets the streams' gauges when its reading is renewed.
    health.stream_warnings();
    if let Some((total, used)) = health.slots.get() {
        crate::metrics::runner_slots(used.load(Ordering::SeqCst), *total);
    }
    let mut body = crate::metrics::handle().map(|h| h.render()).unwrap_or_default();
    body.push_str(&health.next_fires.render());
    if let Some(catalog) = health.catalog.get().filter(|c| c.is_loaded()) {
        // Removed jobs are remembered only while a series of theirs is there to hide.
        let named = crate::metrics::jobs_named(&body);
        catalog.retain_removed(|job| named.contains(job));
        crate::metrics::forget_removed_jobs(|job| catalog.was_removed(job));
        body = crate::metrics::without_removed_jobs(&body, |job| !catalog.was_removed(job));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
