//! `emit-event`: publishes one event per fire, e.g. to drive consumers on a schedule.
//!
//! At each fire it publishes `{"schedule_id", "generated_at", "payload"}` to the subject
//! in config `subject`, with header `Nats-Msg-Id: <job>-<fire unix seconds>`. Every
//! attempt of one fire carries the same id, so a JetStream stream on that subject keeps
//! one event per fire even when a run is retried.
//!
//! Spec config: `subject` (required), `payload` (optional; embedded as JSON when it
//! parses as JSON, otherwise as a string; default `null`).
//! Grants: `allow_publish` must cover `subject`.

use cronrun_sdk::{Context, config, log, nats, time};
use serde_json::{Value, json};

#[cronrun_sdk::job(
    schedule = "0 * * * * *",
    timezone = "UTC",
    timeout = "10s",
    overlap = "skip",
    retries = 3,
    backoff = "5s",
    description = "Publishes one event per fire to the configured subject"
)]
fn run(ctx: &Context) -> Result<Option<String>, String> {
    let subject = config::require("subject")?;
    let payload = match config::get("payload") {
        Some(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        None => Value::Null,
    };
    let fire =
        ctx.scheduled_unix_seconds().ok_or_else(|| format!("scheduled_at {:?} is not RFC 3339", ctx.scheduled_at()))?;
    let msg_id = format!("{}-{fire}", ctx.job());
    let event = json!({
        "schedule_id": ctx.job(),
        "generated_at": time::now_rfc3339(),
        "payload": payload,
    });
    let body = serde_json::to_vec(&event).map_err(|e| format!("encoding the event: {e}"))?;
    nats::publish(&subject, &body, &[("Nats-Msg-Id", &msg_id), ("Content-Type", "application/json")])?;
    log::info!("published {} bytes to {subject} as {msg_id}", body.len());
    Ok(Some(format!("event {msg_id} published to {subject}")))
}
