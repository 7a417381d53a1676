//! The OTLP/HTTP exporter, sending through the agent's reqwest.
//!
//! The batch processor exports from a thread of its own, polling the export with a
//! plain executor; reqwest's async client needs tokio. So each request is spawned on the
//! runtime the agent started telemetry on, and its result awaited from that thread (a
//! tokio `JoinHandle` wakes any executor). That keeps one reqwest (0.12) in the tree
//! where opentelemetry-otlp's own client feature would bring another.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};

use super::TelemetryError;

/// How long one export request may take, response included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The least time between two logged export failures: a collector away fails every
/// batch, and each would be a line.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The span exporter for `url` (`.../v1/traces`), protobuf-encoded.
pub(super) fn exporter(url: &reqwest::Url) -> Result<SpanExporter, TelemetryError> {
    let client = Client {
        http: reqwest::Client::builder().timeout(REQUEST_TIMEOUT).build()?,
        runtime: tokio::runtime::Handle::current(),
        logged: Mutex::new(None),
    };
    Ok(SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.as_str())
        .with_timeout(REQUEST_TIMEOUT)
        .build()?)
}

#[derive(Debug)]
struct Client {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// When an export failure was last logged.
    logged: Mutex<Option<Instant>>,
}

impl Client {
    /// Logs `why` unless a failure was logged within `LOG_EVERY`.
    fn failed(&self, why: &str) {
        let Ok(mut logged) = self.logged.lock() else { return };
        if logged.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return;
        }
        *logged = Some(Instant::now());
        tracing::warn!("exporting spans failed (runs go on; said again at most once a minute): {why}");
    }
}

#[async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let http = self.http.clone();
        let sent = self.runtime.spawn(async move {
            let response = http.execute(request).await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = match sent.await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                self.failed(&super::error_chain(&e));
                return Err(Box::new(e));
            }
            Err(e) => {
                self.failed(&e.to_string());
                return Err(Box::new(e));
            }
        };
        if !status.is_success() {
            self.failed(&format!("the collector answered {status}"));
        }
        let mut response = Response::new(body);
        *response.status_mut() = status;
        Ok(response)
    }
}
