//! One notice, delivered: its body (JSON, or Slack's `{"text": ...}`), its signature, and
//! the POST or publish. Errors are one line, for the `notify_failed` event.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use super::outbound::{AllowHosts, refusal};
use crate::model::event::Event;
use crate::output::Mask;
use crate::record::RunRecord;
use crate::spec::notify::{Notice, Notify, NotifyFormat, check_webhook_url, header_value_ok};
use crate::spec::secret::{SecretValues, Value};
use crate::store::Store;

/// Header with the body's HMAC-SHA256 under the rule's secret: `sha256=<hex>`.
pub const SIGNATURE_HEADER: &str = "Cronrun-Signature";
/// Header naming the event a notice is for (`<stream>-<sequence>`): the same on every
/// attempt at delivering it, so a receiver can drop a repeat.
pub const DELIVERY_HEADER: &str = "Cronrun-Delivery";
/// Output lines a notice carries at most.
const OUTPUT_TAIL: usize = 10;

/// A notice with what it tells: the message sent.
pub struct Message<'a> {
    pub notice: Notice,
    pub event: &'a Event,
    /// The run's record, when it has one (a `missed` fire may not).
    pub record: Option<&'a RunRecord>,
    pub streak: u32,
    /// `[notify] dashboard_url`, for a link to the run.
    pub dashboard: Option<&'a str>,
    pub delivery: &'a str,
}

impl Message<'_> {
    /// The JSON body: job, run, what happened, status, error, the output's last lines,
    /// failures in a row, and a link when a dashboard URL is configured.
    pub fn json(&self) -> serde_json::Value {
        let e = self.event;
        let r = self.record;
        let output: Vec<&String> =
            r.map(|r| r.output.iter().rev().take(OUTPUT_TAIL).rev().collect()).unwrap_or_default();
        let mut body = json!({
            "job": e.job,
            "run_id": e.run_id,
            "notice": self.notice.as_str(),
            "event": e.event.as_str(),
            "attempt": e.attempt,
            "at": e.at,
            "status": r.map(|r| r.status.as_str()),
            "error": r.and_then(|r| r.error.as_deref()).or(e.detail.as_deref()),
            "exit_code": r.and_then(|r| r.exit_code),
            "host": r.and_then(|r| r.host.as_deref()),
            "scheduled_at": r.and_then(|r| r.scheduled_at),
            "failures_in_a_row": self.streak,
            "output": output,
            "delivery": self.delivery,
        });
        if let Some(link) = self.link() {
            body["link"] = json!(link);
        }
        body
    }

    /// The run's page on the dashboard, when its URL is configured.
    fn link(&self) -> Option<String> {
        let e = self.event;
        self.dashboard.map(|base| format!("{}/#/run/{}/{}", base.trim_end_matches('/'), e.job, e.run_id))
    }

    /// One line for people, then the output's last lines: Slack's `text`.
    pub fn text(&self) -> String {
        let e = self.event;
        let mut text = match self.notice {
            Notice::Recovered => format!("cronrun: job {} recovered (run {})", e.job, e.run_id),
            Notice::Late => {
                let status = self.record.map_or("unknown", |r| r.status.as_str());
                format!("cronrun: job {} late: run {} has not succeeded (it is {status})", e.job, e.run_id)
            }
            _ => format!("cronrun: job {} {} (run {}, attempt {})", e.job, self.notice.as_str(), e.run_id, e.attempt),
        };
        if self.streak > 1 && self.notice != Notice::Recovered {
            text.push_str(&format!(", {} failures in a row", self.streak));
        }
        if let Some(error) = self.record.and_then(|r| r.error.as_deref()).or(e.detail.as_deref()) {
            text.push_str(&format!(": {error}"));
        }
        let output: Vec<&str> = self
            .record
            .map(|r| r.output.iter().rev().take(OUTPUT_TAIL).rev().map(String::as_str).collect())
            .unwrap_or_default();
        if !output.is_empty() {
            text.push_str(&format!("\n```\n{}\n```", output.join("\n")));
        }
        if let Some(link) = self.link() {
            text.push_str(&format!("\n{link}"));
        }
        text
    }

    pub fn body(&self, format: NotifyFormat) -> Vec<u8> {
        let value = match format {
            NotifyFormat::Json => self.json(),
            NotifyFormat::Slack => json!({ "text": self.text() }),
        };
        // A JSON value's text is its compact JSON, which nothing can fail to write.
        value.to_string().into_bytes()
    }
}

/// `sha256=<hex>` of HMAC-SHA256(`secret`, `body`).
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    mac.update(body);
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Why a notice was not delivered, in one line.
#[derive(Debug)]
pub enum Failure {
    /// It may go through on another try.
    Failed(String),
    /// The webhook leads to an address `[notify] allow_hosts` does not allow: not tried again.
    Refused(String),
}

/// Where notices go: the webhook client (with the addresses it may reach) and NATS.
pub struct Target<'a> {
    pub http: &'a reqwest::Client,
    pub allow: &'a AllowHosts,
    pub store: &'a Store,
}

/// Sends `body` where `rule` says, signed with `secret` if given. `secrets` holds the
/// values of the secrets the rule's webhook URL and headers name, read for this delivery.
/// What is said of it (for the `notified` and `notify_failed` events, and the agent's
/// log) names a secret URL by its reference, and never holds a secret's value.
pub async fn send(
    target: Target<'_>,
    rule: &Notify,
    secrets: &SecretValues,
    body: Vec<u8>,
    secret: Option<&[u8]>,
    delivery: &str,
    timeout: Duration,
) -> Result<String, Failure> {
    let mask = Mask::new(secrets.values().map(String::as_str));
    let masked = |said: String| mask.apply(&said).into_owned();
    let sent = match &rule.webhook {
        Some(url) => post(&target, rule, url, secrets, body, secret, delivery, timeout).await,
        None => publish(&target, rule, body, secret, delivery, timeout).await,
    };
    match sent {
        Ok(how) => Ok(masked(how)),
        Err(Failure::Failed(why)) => Err(Failure::Failed(masked(why))),
        Err(Failure::Refused(why)) => Err(Failure::Refused(masked(why))),
    }
}

/// POSTs `body` to the rule's webhook, `url` with its secrets resolved, with its headers.
#[allow(clippy::too_many_arguments)]
async fn post(
    target: &Target<'_>,
    rule: &Notify,
    url: &Value,
    secrets: &SecretValues,
    body: Vec<u8>,
    secret: Option<&[u8]>,
    delivery: &str,
    timeout: Duration,
) -> Result<String, Failure> {
    // A secret URL is named by its reference: `POST [secret NAME]: 200 OK`.
    let shown = url.shown();
    let resolved = url.resolve(secrets).map_err(|e| Failure::Failed(format!("POST {shown}: {e}")))?;
    // A secret's value is only checked now; one that is no URL may be set again meanwhile.
    check_webhook_url(resolved).map_err(|why| Failure::Failed(format!("POST {shown}: the URL {why}")))?;
    let parsed = reqwest::Url::parse(resolved).map_err(|e| Failure::Refused(format!("POST {shown}: {e}")))?;
    target.allow.check_url(&parsed).map_err(|refused| Failure::Refused(format!("POST {shown}: {refused}")))?;
    let mut request = target
        .http
        .post(parsed)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(DELIVERY_HEADER, delivery);
    if let Some(signature) = secret.map(|s| signature(s, &body)) {
        request = request.header(SIGNATURE_HEADER, signature);
    }
    for (name, value) in &rule.headers {
        let text = value.resolve(secrets).map_err(|e| Failure::Failed(format!("POST {shown}: header {name}: {e}")))?;
        if !header_value_ok(text) {
            return Err(Failure::Failed(format!(
                "POST {shown}: header {name}: the value of {} is not a header value (printable ASCII, no line breaks)",
                value.shown()
            )));
        }
        request = request.header(name.as_str(), text);
    }
    let response = request.body(body).send().await.map_err(|e| match refusal(&e) {
        Some(refused) => Failure::Refused(format!("POST {shown}: {refused}")),
        // The error would name the URL: a secret one is not told.
        None => Failure::Failed(format!("POST {shown}: {}", one_line(&e.without_url()))),
    })?;
    let status = response.status();
    match status.is_success() {
        true => Ok(format!("POST {shown}: {status}")),
        false => Err(Failure::Failed(format!("POST {shown}: the receiver answered {status}"))),
    }
}

/// Publishes `body` on the rule's subject, under `<ns>.notify.`.
async fn publish(
    target: &Target<'_>,
    rule: &Notify,
    body: Vec<u8>,
    secret: Option<&[u8]>,
    delivery: &str,
    timeout: Duration,
) -> Result<String, Failure> {
    let store = target.store;
    let Some(subject) = &rule.subject else { return Err(Failure::Failed("the rule has no target".into())) };
    let subject = store.names.notify_subject(subject);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(DELIVERY_HEADER, delivery);
    if let Some(signature) = secret.map(|s| signature(s, &body)) {
        headers.insert(SIGNATURE_HEADER, signature.as_str());
    }
    let published = store.client.publish_with_headers(subject.clone(), headers, body.into()).await;
    published.map_err(|e| Failure::Failed(format!("publish on {subject}: {e}")))?;
    let flushed = tokio::time::timeout(timeout, store.client.flush()).await;
    match flushed {
        Ok(Ok(())) => Ok(format!("published on {subject}")),
        Ok(Err(e)) => Err(Failure::Failed(format!("publish on {subject}: {e}"))),
        Err(_) => Err(Failure::Failed(format!("publish on {subject}: NATS did not answer within {timeout:?}"))),
    }
}

/// An error and its causes on one line (reqwest nests the useful part).
fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_the_body_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_notice_links_to_the_runs_page_on_the_dashboard() {
        use crate::model::event::EventKind;
        let event = Event::new("backup", "20260101T000000Z", EventKind::Failed, 1, chrono::Utc::now());
        let message = |dashboard| Message {
            notice: Notice::Event(EventKind::Failed),
            event: &event,
            record: None,
            streak: 1,
            dashboard,
            delivery: "d-1",
        };
        let link = "https://cron.example/#/run/backup/20260101T000000Z";
        let linked = message(Some("https://cron.example/"));
        assert_eq!(linked.json()["link"], link);
        assert!(linked.text().ends_with(&format!("\n{link}")), "{}", linked.text());
        assert!(message(None).json().get("link").is_none());
    }
}
