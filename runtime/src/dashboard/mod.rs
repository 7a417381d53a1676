//! The web dashboard at `/` of an agent's HTTP listener: jobs, a job, a run with its
//! output live, status; pause, resume, trigger and kill for admins.
//!
//! Who may do what (docs/dashboard.md):
//! - It reads through its own NATS identity, `[http] viewer_creds` (the agent's own by
//!   default), and acts only through `[http] admin_creds`: without one it is read-only and
//!   shows no buttons. The agent's identity is never used to act.
//! - `[http] token_file` asks for a login: the token, once, then a session cookie
//!   (`HttpOnly; SameSite=Strict`). Actions need it. Without a token the dashboard is
//!   served only on a loopback address, to requests that name it as their Host (no DNS
//!   rebinding); on any other address it is off and says why.
//! - Actions are JSON POSTs with an `X-Cronrun` header, which no cross-site form or
//!   simple request can send.
//!
//! Layout: `view` (recent runs per job, in memory), `api` (the JSON and SSE handlers),
//! `words` (schedules in words), `assets/` (the page, embedded in the binary).

mod api;
mod view;
mod words;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::http::Health;
use crate::store::Store;
pub use view::RunsView;

/// Where the dashboard connects and who it is: from the agent's configuration.
pub struct DashboardConfig {
    pub nats: String,
    pub namespace: String,
    /// The identity it reads with; None: the agent's connection.
    pub viewer_creds: Option<String>,
    pub admin_creds: Option<String>,
    pub token_file: Option<String>,
}

pub struct Dashboard {
    health: Arc<Health>,
    /// Why it is not served, if it is not.
    off: Option<String>,
    /// The login token and the session cookie's value derived from it.
    login: Option<(String, String)>,
    /// Host headers accepted without a login: the loopback address it listens on.
    local_hosts: Vec<String>,
    actions: bool,
    reader: OnceLock<Store>,
    admin: OnceLock<Store>,
    view: RunsView,
}

const COOKIE: &str = "cronrun_session";

impl Dashboard {
    /// Reads the token (a missing or unreadable file stops the agent with one line), then
    /// connects in the background: the page answers "starting" until its stores are open.
    pub fn start(
        config: DashboardConfig,
        agent: async_nats::Client,
        health: Arc<Health>,
        bound: SocketAddr,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>, Error> {
        let token = config.token_file.as_deref().map(read_token).transpose()?;
        let off = match (&token, bound.ip().is_loopback()) {
            (None, false) => Some(format!(
                "the dashboard is off: {bound} is not a loopback address and [http] token_file is not set; \
                 set one to serve it here"
            )),
            _ => None,
        };
        let port = bound.port();
        let dashboard = Arc::new(Self {
            health,
            off,
            actions: token.is_some() && config.admin_creds.is_some(),
            login: token.map(|t| {
                let session = session_value(&t);
                (t, session)
            }),
            local_hosts: vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")],
            reader: OnceLock::new(),
            admin: OnceLock::new(),
            view: RunsView::new(chrono::Utc::now()),
        });
        if dashboard.off.is_none() {
            tokio::spawn(dashboard.clone().connect(config, agent, cancel));
        }
        Ok(dashboard)
    }

    /// Opens the stores (retrying until NATS and the layout are there), then follows runs.
    async fn connect(self: Arc<Self>, config: DashboardConfig, agent: async_nats::Client, cancel: CancellationToken) {
        let open = async {
            loop {
                match open_stores(&config, agent.clone()).await {
                    Ok(stores) => return stores,
                    Err(e) => tracing::debug!("the dashboard waits for NATS: {e}"),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        let (reader, admin) = tokio::select! {
            _ = cancel.cancelled() => return,
            stores = open => stores,
        };
        let _ = self.reader.set(reader.clone());
        if let Some(admin) = admin.filter(|_| self.actions) {
            let _ = self.admin.set(admin);
        }
        self.view.follow(&reader, cancel).await;
    }

    pub fn routes(self: Arc<Self>) -> Router {
        Router::new()
            .route("/", get(|| async { asset("text/html; charset=utf-8", include_str!("assets/index.html")) }))
            .route("/app.js", get(|| async { asset("text/javascript", include_str!("assets/app.js")) }))
            .route("/app.css", get(|| async { asset("text/css", include_str!("assets/app.css")) }))
            .route("/login", get(login))
            .route("/api/session", get(api::session))
            .route("/api/jobs", get(api::jobs))
            .route("/api/jobs/{name}", get(api::job))
            .route("/api/jobs/{name}/{action}", post(api::job_action))
            .route("/api/runs/{job}/{run_id}", get(api::run))
            .route("/api/runs/{job}/{run_id}/output", get(api::output))
            .route("/api/runs/{job}/{run_id}/kill", post(api::kill))
            .route("/api/status", get(api::status))
            .with_state(self)
    }

    fn logged_in(&self, headers: &HeaderMap) -> bool {
        let Some((_, session)) = &self.login else { return false };
        let cookies = headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok());
        let mut presented =
            cookies.flat_map(|c| c.split(';')).filter_map(|c| c.trim().strip_prefix("cronrun_session="));
        presented.any(|value| same(value.as_bytes(), session.as_bytes()))
    }

    /// The store it reads with, once open.
    fn reader(&self) -> Result<&Store, ApiError> {
        self.reader.get().ok_or_else(|| ApiError::unavailable("the dashboard is still connecting to NATS"))
    }
}

async fn open_stores(config: &DashboardConfig, agent: async_nats::Client) -> Result<(Store, Option<Store>), Error> {
    let names = crate::names::Names::new(&config.namespace)?;
    let client = match &config.viewer_creds {
        Some(creds) => crate::connect::connect(&config.nats, Some(creds), "cronrun-dashboard").await?,
        None => agent,
    };
    let reader = Store::open_existing(client, names.clone()).await?;
    let admin = match &config.admin_creds {
        Some(creds) => {
            let client = crate::connect::connect(&config.nats, Some(creds), "cronrun-dashboard-admin").await?;
            let by = format!("{} via the dashboard", crate::auth::actor(Some(creds)));
            Some(Store::open_existing(client, names).await?.acting_as(&by))
        }
        None => None,
    };
    Ok((reader, admin))
}

fn read_token(path: &str) -> Result<String, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::invalid("http.token_file", format!("{path}: cannot read the dashboard token: {e}")))?;
    let token = text.trim().to_string();
    if token.len() < 16 {
        return Err(Error::invalid(
            "http.token_file",
            format!("{path}: the dashboard token must be at least 16 characters (e.g. `openssl rand -hex 24`)"),
        ));
    }
    Ok(token)
}

/// A new random token, for `cronrun up`.
pub fn new_token() -> String {
    let bytes: [u8; 24] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The session cookie's value: a MAC of a fixed text under the token, so that the cookie
/// is not the token itself and changing the token ends every session.
fn session_value(token: &str) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.as_bytes()) else { return new_token() };
    mac.update(b"cronrun dashboard session");
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// Equal bytes, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body)
}

#[derive(serde::Deserialize)]
struct LoginQuery {
    token: String,
}

/// `/login?token=T`: a session cookie, then the dashboard.
async fn login(State(d): State<Arc<Dashboard>>, Query(q): Query<LoginQuery>) -> Response {
    let Some((token, session)) = &d.login else { return Redirect::to("/").into_response() };
    if !same(q.token.trim().as_bytes(), token.as_bytes()) {
        return (StatusCode::UNAUTHORIZED, "wrong token: use the one in [http] token_file\n").into_response();
    }
    let cookie = format!("{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

/// An error of the JSON API: its status and one line, as `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        use crate::ErrorKind;
        let status = match e.kind() {
            ErrorKind::Invalid { .. } => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict | ErrorKind::AlreadyExists => StatusCode::CONFLICT,
            ErrorKind::Nats => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Other => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, e.message())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(serde_json::json!({ "error": self.message }))).into_response()
    }
}

/// A request allowed to read: logged in, or, without a token, addressed to the loopback
/// address the dashboard listens on.
pub struct Viewer;

impl FromRequestParts<Arc<Dashboard>> for Viewer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, d: &Arc<Dashboard>) -> Result<Self, ApiError> {
        if let Some(why) = &d.off {
            return Err(ApiError::new(StatusCode::FORBIDDEN, why.clone()));
        }
        let allowed = match &d.login {
            Some(_) => d.logged_in(&parts.headers),
            None => {
                let host = parts.headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
                d.local_hosts.iter().any(|h| h == host)
            }
        };
        match allowed {
            true => Ok(Viewer),
            false => Err(ApiError::new(StatusCode::UNAUTHORIZED, "log in with the dashboard token")),
        }
    }
}

/// A request allowed to act: a viewer, on a dashboard with an admin identity and a login,
/// sent as a script sends it (`X-Cronrun` header), which a cross-site form cannot.
pub struct Admin<'a>(pub &'a Store);

pub(crate) fn admin<'a>(d: &'a Dashboard, headers: &HeaderMap) -> Result<Admin<'a>, ApiError> {
    if headers.get("x-cronrun").is_none() {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "actions need the X-Cronrun header"));
    }
    match d.admin.get() {
        Some(store) => Ok(Admin(store)),
        None if d.actions => Err(ApiError::unavailable("the dashboard is still connecting to NATS")),
        None => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this dashboard is read-only: actions need [http] admin_creds and [http] token_file",
        )),
    }
}
