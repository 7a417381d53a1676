//! An OTLP/HTTP collector for tests: what the receiver (`receiver.rs`) got on
//! `POST /v1/traces`, decoded from protobuf as a collector would, span by span.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use prost::Message;

use super::Receiver;

/// One exported span, ids in lowercase hex (the parent empty for a root).
#[derive(Debug, Clone)]
pub struct OtlpSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Values as text (integers in decimal).
    pub attributes: BTreeMap<String, String>,
    /// The span's status is `error`.
    pub error: bool,
    /// The exporting process's resource attributes.
    pub resource: BTreeMap<String, String>,
}

impl OtlpSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn text(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    let value = |kv: &KeyValue| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    };
    attributes.iter().map(|kv| (kv.key.clone(), value(kv))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Receiver {
    /// Every span posted to `/v1/traces` so far, in the order received. Panics on a body
    /// that is not an OTLP protobuf export request (the agent sent something wrong).
    pub fn spans(&self) -> Vec<OtlpSpan> {
        let mut spans = Vec::new();
        for request in self.received().into_iter().filter(|r| r.path == "/v1/traces") {
            assert_eq!(request.header("content-type").as_deref(), Some("application/x-protobuf"));
            let export = ExportTraceServiceRequest::decode(request.body.as_ref()).unwrap();
            for resource_spans in export.resource_spans {
                let resource = text(&resource_spans.resource.map(|r| r.attributes).unwrap_or_default());
                for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                    let error = span.status.as_ref().is_some_and(|s| s.code == 2);
                    spans.push(OtlpSpan {
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent: hex(&span.parent_span_id),
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano,
                        attributes: text(&span.attributes),
                        error,
                        resource: resource.clone(),
                    });
                }
            }
        }
        spans
    }
}
