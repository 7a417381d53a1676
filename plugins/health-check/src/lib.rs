//! `health-check`: GETs a URL through wasi:http and reports only changes.
//!
//! Each run fetches config `url`, compares the outcome (the HTTP status, or
//! `unreachable`) with the one stored in the job's KV under `last-status`, stores the new
//! one, and logs and returns a message only when it changed, so the run history shows
//! transitions rather than noise. An unreachable URL is an outcome, not a failed run;
//! a denied request (URL host not granted) or a KV error fails the run.
//!
//! Spec config: `url` (required). Grants: `allow_http` for the URL's host, `allow_kv`.

use cronrun_sdk::http::Request;
use cronrun_sdk::{Context, config, kv, log};
use std::time::Duration;

const KEY: &str = "last-status";

#[cronrun_sdk::job(
    schedule = "0 */5 * * * *",
    timezone = "UTC",
    timeout = "30s",
    overlap = "skip",
    description = "Reports when the HTTP status of the configured URL changes"
)]
fn run(_ctx: &Context) -> Result<Option<String>, String> {
    let url = config::require("url")?;
    let status = match Request::new("GET", &url).timeout(Duration::from_secs(10)).send() {
        Ok(response) => response.status.to_string(),
        Err(e) if e.contains("HttpRequestDenied") => return Err(e),
        Err(e) => {
            log::warn!("{e}");
            "unreachable".to_string()
        }
    };
    let previous = kv::get(KEY)?.map(|v| String::from_utf8_lossy(&v).into_owned());
    if previous.as_deref() == Some(status.as_str()) {
        return Ok(None);
    }
    kv::set(KEY, status.as_bytes())?;
    let message = match previous {
        Some(before) => format!("{url}: status changed from {before} to {status}"),
        None => format!("{url}: status {status} (first check)"),
    };
    log::info!("{message}");
    Ok(Some(message))
}
