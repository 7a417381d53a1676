//! Shared fixtures of the test binaries, one file per concept:
//! - `accounts.rs`: deployments in NATS accounts of their own on one server.
//! - `operator.rs`: a server in operator mode, its identities `.creds` files of user JWTs.
//! - `server.rs`: a real nats-server per test (dynamic port, temp store, killed on drop),
//!   with the identities of `cronrun auth init`; a 3-node cluster; the CLI against them.
//! - `agents.rs`: cronrun agents as real processes of the built binary, with test timings.
//! - `records.rs`: what tests judge by: run records, events, shard holders, and the files
//!   jobs write to record their own executions.
//! - `plugins.rs`: the example Wasm plugins, built once per test binary.
//! - `receiver.rs`: a real HTTP server that records the webhooks it receives.
//! - `otlp.rs`: the same server as an OTLP/HTTP collector: the spans it got, decoded.
//! - `browser.rs`: a real headless Chromium over WebDriver, for the dashboard.
//! - `proxy.rs`: a TCP proxy that holds what a client sends, for windows between the two,
//!   or cuts every connection (a link that drops).
//! - `topology.rs`: servers started from the configs of `deploy/`: a hub and a leaf node
//!   linked through a proxy, two regions joined by a gateway.
//!
//! Here: what all of them use (the binary, test directories, bounded waits).
#![allow(dead_code, unused_imports)]

mod accounts;
mod agents;
mod browser;
mod operator;
mod otlp;
mod plugins;
mod proxy;
mod receiver;
mod records;
mod server;
mod topology;

use std::process::Child;
use std::time::{Duration, Instant};

pub use agents::*;
pub use browser::*;
pub use otlp::*;
pub use plugins::*;
pub use proxy::*;
pub use receiver::*;
pub use records::*;
pub use server::*;
pub use topology::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_cronrun");

/// A temporary directory for a test's store, configs and agent logs; kept (and named on
/// stderr) when `CRONRUN_TEST_KEEP` is set, to read the logs of a failed test.
pub fn test_dir() -> tempfile::TempDir {
    let keep = std::env::var_os("CRONRUN_TEST_KEEP").is_some();
    let dir = tempfile::Builder::new().prefix("cronrun-test").disable_cleanup(keep).tempdir().unwrap();
    if keep {
        eprintln!("test files kept in {}", dir.path().display());
    }
    dir
}

/// Polls `check` until it returns Some, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for `child` to exit; fails the test if it has not within `timeout`.
pub async fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < timeout, "process {} did not exit within {timeout:?}", child.id());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command, which may hold spaces and parentheses.
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|state| state != "Z")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The whole second at or after `t`.
pub fn ceil_second(t: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    let s = t.timestamp() + i64::from(t.timestamp_subsec_nanos() > 0);
    chrono::DateTime::from_timestamp(s, 0).unwrap()
}

/// `GET path` on 127.0.0.1:`port`: the status code and the body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    std::io::Write::write_all(&mut stream, request.as_bytes()).ok()?;
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

/// `method path` with `headers` and `body` on 127.0.0.1:`port`: status and body.
pub fn http_request(port: u16, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|h| h.to_ascii_lowercase().starts_with("host:")) {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for header in headers {
        request.push_str(&format!("{header}\r\n"));
    }
    request.push_str(&format!("\r\n{body}"));
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, response.split_once("\r\n\r\n").map(|r| r.1.to_string()).unwrap_or_default())
}

/// The session cookie `/login?token=` sets, as `name=value`.
pub fn login_cookie(port: u16, token: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET /login?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 303"), "{response}");
    let cookie = response.lines().find_map(|l| l.strip_prefix("set-cookie: ")).expect("a session cookie");
    cookie.split(';').next().unwrap().to_string()
}

/// The value of `series` (as `samples` keys it) on the agent's `/metrics` at `port`.
pub fn metric(port: u16, series: &str) -> Option<f64> {
    samples(&http_get(port, "/metrics")?.1).get(series).copied()
}

/// Shards the scheduler at `port` has read `from` the index or a snapshot (0 if none).
pub fn shard_loads(port: u16, from: &str) -> f64 {
    metric(port, &format!("cronrun_shard_loads_total{{from=\"{from}\"}}")).unwrap_or(0.0)
}

/// Prometheus text as `name{label="value",...}` (labels sorted) to value.
pub fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let key = match series.split_once('{') {
            Some((name, labels)) => {
                let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                labels.sort();
                format!("{name}{{{}}}", labels.join(","))
            }
            None => series.to_string(),
        };
        out.insert(key, value.parse().unwrap_or(f64::NAN));
    }
    out
}
