//! Publishing to NATS subjects the job spec grants in `allow_publish`.

use crate::__private::bindings::cronrun::job::nats as host;

/// Publishes `payload` with `headers` (name, value) to `subject`.
///
/// When the subject belongs to a JetStream stream the call returns after the stream
/// acknowledged the message, so a `Nats-Msg-Id` header deduplicates retries. A subject
/// not granted fails with e.g. `"publish to orders.new denied: not granted"`.
pub fn publish(subject: &str, payload: &[u8], headers: &[(&str, &str)]) -> Result<(), String> {
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    host::publish(subject, payload, &headers)
}
