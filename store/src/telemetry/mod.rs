//! `[telemetry]`: each run a trace, exported over OTLP/HTTP (protobuf).
//!
//! A run's spans are made in two processes: the scheduler's `fire` and `dispatch`, the
//! runner's `claim`, `run` and `finish`. Each is built whole once it has ended, with the
//! times and ids we choose (`SpanData` handed straight to the SDK's batch processor):
//! the spans of one run are not open at once in one process, so the API's "current span"
//! has nothing to offer, and the SDK's tracer picks span ids itself, which the run's
//! deterministic ids (`ids.rs`) must not leave to it.
//!
//! Off unless `otlp_endpoint` is set: then nothing is made, no header is added and no
//! thread started; every entry point is one check of a `OnceLock`. On, export never holds
//! a run up: spans queue in the batch processor (bounded; past its bound they are
//! dropped), its own thread sends them, and a failing collector is logged at most once a
//! minute (`export.rs`).

mod export;
pub mod ids;
mod run;

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanProcessor};
use serde::Deserialize;

pub use ids::{Traceparent, run_ids};
pub use run::{DispatchSpan, RunTrace, TracedRun, fire_span};

/// The NATS header of a dispatch message that names the span it continues (W3C).
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// `[telemetry]` in `cronrun.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`: spans go to
    /// `<it>/v1/traces` (as with `OTEL_EXPORTER_OTLP_ENDPOINT`). Default: none (off).
    pub otlp_endpoint: Option<String>,
}

impl TelemetryConfig {
    /// The URL spans are posted to, or an error naming the key.
    pub fn traces_url(&self) -> Result<Option<reqwest::Url>, crate::Error> {
        let Some(base) = self.otlp_endpoint.as_deref() else { return Ok(None) };
        let invalid = |why: String| crate::Error::invalid("telemetry.otlp_endpoint", why);
        let url = reqwest::Url::parse(base)
            .map_err(|e| invalid(format!("telemetry.otlp_endpoint {base:?} is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!("telemetry.otlp_endpoint {base:?} must be an http:// or https:// URL")));
        }
        let path = url.path().trim_end_matches('/');
        let path = if path.ends_with("/v1/traces") { path.to_string() } else { format!("{path}/v1/traces") };
        let mut url = url;
        url.set_path(&path);
        Ok(Some(url))
    }
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Config(#[from] crate::Error),
    #[error("the OTLP exporter could not be built")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("the HTTP client for OTLP could not be built")]
    Client(#[from] reqwest::Error),
    #[error("telemetry was started already in this process")]
    Started,
}

/// What exports: the batch processor and the scope every span names.
struct Exporting {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

static EXPORTING: OnceLock<Exporting> = OnceLock::new();

/// Whether spans are exported (telemetry configured and started in this process).
pub fn enabled() -> bool {
    EXPORTING.get().is_some()
}

/// An error and its sources on one line (reqwest's own says little: "error sending
/// request").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Started telemetry; [`Telemetry::shutdown`] flushes what is queued.
#[must_use = "flush it on shutdown"]
pub struct Telemetry(());

/// Starts exporting to `config`'s endpoint, the spans' resource naming this agent
/// (`service.instance.id`). None when no endpoint is set. Needs a tokio runtime (the
/// exporter's requests run on it).
pub fn start(config: &TelemetryConfig, agent: &str) -> Result<Option<Telemetry>, TelemetryError> {
    let Some(url) = config.traces_url()? else { return Ok(None) };
    let exporter = export::exporter(&url)?;
    let batch = BatchConfigBuilder::default().build();
    let mut processor = BatchSpanProcessor::new(exporter, batch);
    let resource = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "cronrun"),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", agent.to_string()),
        ])
        .build();
    processor.set_resource(&resource);
    let scope = InstrumentationScope::builder("cronrun").with_version(env!("CARGO_PKG_VERSION")).build();
    EXPORTING.set(Exporting { processor, scope }).map_err(|_| TelemetryError::Started)?;
    tracing::info!(endpoint = %url, "exporting a trace per run over OTLP/HTTP");
    Ok(Some(Telemetry(())))
}

/// How long the spans still queued at shutdown may take to leave.
const FLUSH_BOUND: Duration = Duration::from_secs(5);

impl Telemetry {
    /// Sends what is queued and stops the exporter, within `FLUSH_BOUND`: a collector
    /// away does not hold the agent's stop up.
    pub async fn shutdown(self) {
        let Some(exporting) = EXPORTING.get() else { return };
        // Blocking (it waits for the processor's thread), and that thread's requests run on
        // this runtime: off its workers.
        let flush = tokio::task::spawn_blocking(move || exporting.processor.shutdown_with_timeout(FLUSH_BOUND));
        match tokio::time::timeout(FLUSH_BOUND + Duration::from_secs(1), flush).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!("flushing spans on shutdown: {e}"),
            Ok(Err(e)) => tracing::warn!("flushing spans on shutdown: {e}"),
            Err(_) => tracing::warn!("flushing spans on shutdown: not done within {FLUSH_BOUND:?}"),
        }
    }
}

/// One ended span, as the run's code describes it.
pub(crate) struct Ended {
    pub name: &'static str,
    pub trace: TraceId,
    pub id: SpanId,
    /// `SpanId::INVALID` for the root.
    pub parent: SpanId,
    /// Whether the parent was made in another process (it came in a header).
    pub remote_parent: bool,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub error: Option<String>,
}

/// Queues `span` for export (a no-op when telemetry is off). Never blocks: a full queue
/// drops it.
pub(crate) fn emit(span: Ended) {
    let Some(exporting) = EXPORTING.get() else { return };
    exporting.processor.on_end(span_data(span, &exporting.scope));
}

fn span_data(span: Ended, scope: &InstrumentationScope) -> SpanData {
    let context = SpanContext::new(span.trace, span.id, TraceFlags::SAMPLED, false, TraceState::NONE);
    let status = match span.error {
        Some(description) => Status::Error { description: Cow::Owned(description) },
        None => Status::Ok,
    };
    SpanData {
        span_context: context,
        parent_span_id: span.parent,
        parent_span_is_remote: span.remote_parent,
        span_kind: span.kind,
        name: Cow::Borrowed(span.name),
        start_time: span.start,
        // A clock stepping back between the two must not make a span end before it starts.
        end_time: span.end.max(span.start),
        attributes: span.attributes,
        dropped_attributes_count: 0,
        events: Default::default(),
        links: Default::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_a_base_url_to_which_the_traces_path_is_added_once() {
        let url = |endpoint: &str| {
            let config = TelemetryConfig { otlp_endpoint: Some(endpoint.into()) };
            config.traces_url().map(|u| u.map(|u| u.to_string()))
        };
        assert_eq!(url("http://127.0.0.1:4318").unwrap().unwrap(), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(url("http://c:4318/otlp/").unwrap().unwrap(), "http://c:4318/otlp/v1/traces");
        assert_eq!(url("https://c/v1/traces").unwrap().unwrap(), "https://c/v1/traces");
        for bad in ["127.0.0.1:4318", "grpc://c:4317", "not a url"] {
            let err = url(bad).unwrap_err();
            assert_eq!(err.kind(), &crate::ErrorKind::Invalid { field: "telemetry.otlp_endpoint".into() }, "{bad}");
        }
        assert!(TelemetryConfig::default().traces_url().unwrap().is_none());
    }
}
