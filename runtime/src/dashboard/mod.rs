//! The web dashboard at `/` of an agent's HTTP listener: jobs, a job, a run with its
//! output live, status; pause, resume, trigger and kill for admins.
//!
//! Who may do what (docs/dashboard.md):
//! - It reads through its own NATS identity, `[http] viewer_creds` (the agent's own by
//!   default), and acts only through `[http] admin_creds`: without one it is read-only and
//!   shows no buttons. The agent's identity is never used to act.
//! - `[http] token_file` is the login: the token, once, then a session cookie
//!   (`HttpOnly; SameSite=Strict`, 12 hours). Without a token the dashboard is off (its
//!   API says why): specs and run records hold what other local users must not read.
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

use crate::catalog::AllJobs;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::store::Store;
use crate::watchdog::restarting;
use view::RunsView;

/// Where the dashboard connects and who it is: from the agent's configuration.
pub struct DashboardConfig {
    pub nats: String,
    /// The deployment's names, with the JetStream API its stores address.
    pub names: crate::names::Names,
    /// The identity it reads with; None: the agent's connection.
    pub viewer_creds: Option<String>,
    pub admin_creds: Option<String>,
    pub token_file: Option<String>,
    /// What it takes "now" from: the agent's.
    pub clock: SharedClock,
}

pub struct Dashboard {
    /// The login token; None: the dashboard is off.
    token: Option<String>,
    /// The session cookie's name: per port, as browsers share cookies across the ports
    /// of one host.
    cookie: String,
    actions: bool,
    reader: OnceLock<Store>,
    admin: OnceLock<Store>,
    /// Every job, for the table: held only by an agent serving the dashboard.
    jobs: OnceLock<AllJobs>,
    view: RunsView,
    /// Live output streams open now, at most `MAX_STREAMS`.
    streams: Arc<tokio::sync::Semaphore>,
    cancel: CancellationToken,
    clock: SharedClock,
}

/// How long a session lasts.
const SESSION: Duration = Duration::from_secs(12 * 3600);
/// Live output streams one dashboard serves at once.
const MAX_STREAMS: usize = 32;
/// How long one live output stream lasts at most (the page then shows the record).
const STREAM_LIFETIME: Duration = Duration::from_secs(3600);
/// Why every API call is refused without a token.
const OFF: &str = "the dashboard is off: set [http] token_file (a login token) to serve it";

impl Dashboard {
    /// Reads the token (a missing or unreadable file stops the agent with one line), then
    /// connects in the background: the API answers "connecting" until its stores are open.
    pub fn start(
        config: DashboardConfig,
        agent: async_nats::Client,
        bound: SocketAddr,
        tasks: &mut crate::watchdog::Watched,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>, Error> {
        let token = config.token_file.as_deref().map(read_token).transpose()?;
        let dashboard = Arc::new(Self {
            actions: token.is_some() && config.admin_creds.is_some(),
            token,
            cookie: format!("cronrun_session_{}", bound.port()),
            reader: OnceLock::new(),
            admin: OnceLock::new(),
            jobs: OnceLock::new(),
            view: RunsView::default(),
            streams: Arc::new(tokio::sync::Semaphore::new(MAX_STREAMS)),
            cancel: cancel.clone(),
            clock: config.clock.clone(),
        });
        if dashboard.token.is_some() {
            let names = config.names.clone();
            // Reading does not wait for the admin identity: a bad one leaves the dashboard
            // read-only, saying why in the agent's log.
            let reader = {
                let (names, nats, creds) = (names.clone(), config.nats.clone(), config.viewer_creds.clone());
                async move {
                    let client = match &creds {
                        Some(creds) => connect_until(&nats, Some(creds), "cronrun-dashboard").await,
                        None => agent,
                    };
                    open_until(client, names, "read").await
                }
            };
            let admin = config.admin_creds.clone().filter(|_| dashboard.actions).map(|creds| async move {
                let client = connect_until(&config.nats, Some(&creds), "cronrun-dashboard-admin").await;
                let by = format!("{} via the dashboard", crate::auth::actor(Some(&creds)));
                open_until(client, names, "act").await.acting_as(&by)
            });
            tasks.spawn("the dashboard's reader", dashboard.clone().run(reader, admin, cancel));
        }
        Ok(dashboard)
    }

    /// Opens its stores, then follows runs and notes job revisions every few seconds.
    async fn run(
        self: Arc<Self>,
        reader: impl std::future::Future<Output = Store>,
        admin: Option<impl std::future::Future<Output = Store>>,
        cancel: CancellationToken,
    ) {
        let acting = async {
            if let Some(admin) = admin {
                let _ = self.admin.set(admin.await);
            }
            std::future::pending::<()>().await
        };
        let reading = async {
            let reader = reader.await;
            let _ = self.reader.set(reader.clone());
            let (jobs, following) = AllJobs::new(reader.clone());
            let jobs = self.jobs.get_or_init(|| jobs);
            let revisions = || async {
                loop {
                    if jobs.is_loaded() {
                        self.view.note_revisions(jobs, self.clock.now());
                    }
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            };
            // A panic here (a bug meeting a record) costs the dashboard a second, not the
            // agent its scheduling.
            tokio::join!(
                restarting("the dashboard's job list", &cancel, || following.run(cancel.clone())),
                restarting("the dashboard's runs", &cancel, || self.view.follow(&reader, cancel.clone())),
                restarting("the dashboard's revisions", &cancel, revisions),
            );
        };
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = acting => {}
            _ = reading => {}
        }
    }

    pub fn routes(self: Arc<Self>) -> Router {
        Router::new()
            .route("/", get(|| async { asset("text/html; charset=utf-8", include_str!("assets/index.html")) }))
            .route("/app.js", get(|| async { asset("text/javascript", include_str!("assets/app.js")) }))
            .route("/app.css", get(|| async { asset("text/css", include_str!("assets/app.css")) }))
            .route("/login", get(login).post(login_form))
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

    /// A request from a session: a cookie this token made less than `SESSION` ago.
    fn allow(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(token) = &self.token else { return Err(ApiError::new(StatusCode::FORBIDDEN, OFF)) };
        let now = self.clock.now().timestamp();
        let cookies = headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok());
        let prefix = format!("{}=", self.cookie);
        let mut presented = cookies.flat_map(|c| c.split(';')).filter_map(|c| c.trim().strip_prefix(prefix.as_str()));
        let valid = presented.any(|value| {
            let Some((issued, _)) = value.split_once('.') else { return false };
            let Ok(issued) = issued.parse::<i64>() else { return false };
            let fresh = (0..SESSION.as_secs() as i64).contains(&(now - issued));
            fresh && same(value.as_bytes(), session_value(token, issued).as_bytes())
        });
        match valid {
            true => Ok(()),
            false => Err(ApiError::new(StatusCode::UNAUTHORIZED, "log in with the dashboard token")),
        }
    }

    /// The cookie that opens a session, for a request that gave the right token.
    fn session_cookie(&self, given: &str) -> Option<String> {
        let token = self.token.as_ref()?;
        if !same(given.trim().as_bytes(), token.as_bytes()) {
            return None;
        }
        let value = session_value(token, self.clock.now().timestamp());
        Some(format!("{}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}", self.cookie, SESSION.as_secs()))
    }

    /// The store it reads with, once open.
    /// Every job now (none while connecting).
    fn all_jobs(&self) -> Vec<Arc<crate::catalog::CatalogJob>> {
        self.jobs.get().map(AllJobs::snapshot).unwrap_or_default()
    }

    fn reader(&self) -> Result<&Store, ApiError> {
        self.reader.get().ok_or_else(|| ApiError::unavailable("the dashboard is still connecting to NATS"))
    }
}

/// Connects as `creds`, trying again every few seconds (saying why once) until it can.
async fn connect_until(nats: &str, creds: Option<&str>, name: &str) -> async_nats::Client {
    let mut said = false;
    loop {
        match crate::connect::connect(nats, creds, name).await {
            Ok(client) => return client,
            Err(e) if !std::mem::replace(&mut said, true) => tracing::warn!("the dashboard cannot connect yet: {e}"),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Opens the layout on `client`, trying again until it is there.
async fn open_until(client: async_nats::Client, names: crate::names::Names, to: &str) -> Store {
    let mut said = false;
    loop {
        match Store::open_existing(client.clone(), names.clone()).await {
            Ok(store) => return store,
            Err(e) if !std::mem::replace(&mut said, true) => {
                tracing::warn!("the dashboard cannot {to} yet: {e}")
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The token in `path`, trimmed; refused when unreadable or shorter than 16 characters.
pub fn read_token(path: &str) -> Result<String, Error> {
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

/// A session cookie's value: when it was issued and a MAC of that under the token, so the
/// cookie is not the token, expires, and changing the token ends every session.
fn session_value(token: &str, issued: i64) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(token.as_bytes()) else { return new_token() };
    mac.update(format!("cronrun dashboard session {issued}").as_bytes());
    let mac: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("{issued}.{mac}")
}

/// Equal bytes, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    let headers = [(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache"), NO_REFERRER];
    (headers, body)
}

/// Pages that came from a login link do not pass it on.
const NO_REFERRER: (header::HeaderName, &str) = (header::REFERRER_POLICY, "no-referrer");

#[derive(serde::Deserialize)]
struct Login {
    token: String,
}

/// `/login?token=T` (the link `cronrun up` prints): a session cookie, then the dashboard.
async fn login(State(d): State<Arc<Dashboard>>, Query(q): Query<Login>) -> Response {
    match d.session_cookie(&q.token) {
        Some(cookie) => ([(header::SET_COOKIE, cookie.as_str()), NO_REFERRER], Redirect::to("/")).into_response(),
        None if d.token.is_none() => (StatusCode::FORBIDDEN, format!("{OFF}\n")).into_response(),
        None => (StatusCode::UNAUTHORIZED, "wrong token: use the one in [http] token_file\n").into_response(),
    }
}

/// The login form's POST (`{"token": "..."}`): the token stays out of the address bar.
async fn login_form(State(d): State<Arc<Dashboard>>, axum::Json(body): axum::Json<Login>) -> Response {
    match d.session_cookie(&body.token) {
        Some(cookie) => ([(header::SET_COOKIE, cookie)], axum::Json(serde_json::json!({ "ok": true }))).into_response(),
        None if d.token.is_none() => ApiError::new(StatusCode::FORBIDDEN, OFF).into_response(),
        None => {
            ApiError::new(StatusCode::UNAUTHORIZED, "wrong token: use the one in [http] token_file").into_response()
        }
    }
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

/// A request from a session: what every API call but the login needs.
pub struct Viewer;

impl FromRequestParts<Arc<Dashboard>> for Viewer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, d: &Arc<Dashboard>) -> Result<Self, ApiError> {
        d.allow(&parts.headers).map(|_| Viewer)
    }
}

/// A request allowed to act: from a session, on a dashboard with an admin identity, sent
/// as a script sends it (`X-Cronrun` header), which a cross-site form cannot. Its store
/// acts as that identity; the dashboard's clock stamps what it does.
pub struct Admin(pub Store, pub SharedClock);

impl FromRequestParts<Arc<Dashboard>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, d: &Arc<Dashboard>) -> Result<Self, ApiError> {
        d.allow(&parts.headers)?;
        if parts.headers.get("x-cronrun").is_none() {
            return Err(ApiError::new(StatusCode::FORBIDDEN, "actions need the X-Cronrun header"));
        }
        match d.admin.get() {
            Some(store) => Ok(Admin(store.clone(), d.clock.clone())),
            None if d.actions => Err(ApiError::unavailable("the dashboard is still connecting to NATS")),
            None => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "this dashboard is read-only: actions need [http] admin_creds and [http] token_file",
            )),
        }
    }
}
