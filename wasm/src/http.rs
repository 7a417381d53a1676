//! Outbound HTTP of Wasm jobs (`wasi:http/outgoing-handler`): linked for every job, but a
//! request leaves only when an `allow_http` entry names its scheme, host and port, and
//! the host's addresses are public unless the entry names the address itself
//! (docs/security.md). Anything else fails with `HttpRequestDenied` (the guest sees an
//! error code, not a trap). Redirects are not followed here: a guest that follows one
//! sends a new request, checked again. Time and size are bounded whatever the guest asks,
//! and so are its requests: at most `[wasm] http_max_concurrent` at once and
//! `http_max_requests` per run; one beyond fails with `ConnectionLimitReached`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use tokio::sync::Semaphore;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::grants::Grants;
use crate::spec::http_grant::{Scheme, is_internal};

/// Bounds of one request: connecting (DNS included), the first response byte, the gap
/// between later bytes, and the sizes of the request and response bodies.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);
pub const BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(30);
pub const MAX_REQUEST_BYTES: usize = 16 << 20;
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// The HTTP hooks of one run: its grants, and what it has sent so far.
pub struct HttpGrants {
    grants: Grants,
    /// Requests this run may still start.
    left: u32,
    /// One permit per request in flight: held from the send until its connection closes
    /// (the response read, dropped, or the run over).
    in_flight: Arc<Semaphore>,
}

impl HttpGrants {
    /// A run's hooks: `max_concurrent` requests at once, `max_requests` in all.
    pub fn new(grants: Grants, max_concurrent: usize, max_requests: u32) -> HttpGrants {
        HttpGrants { grants, left: max_requests, in_flight: Arc::new(Semaphore::new(max_concurrent)) }
    }
}

type Pending = Box<dyn Future<Output = Result<(), Error>> + Send>;
type Sent = Box<dyn Future<Output = Result<(http::Response<WasiBody>, Pending), Error>> + Send>;

impl WasiHttpHooks for HttpGrants {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Pending,
    ) -> Sent {
        drop(fut);
        let uri = request.uri().clone();
        let scheme = uri.scheme_str().and_then(Scheme::parse);
        let (Some(scheme), Some(host)) = (scheme, uri.host().map(str::to_string)) else {
            return Box::new(async { Err(Error::HttpRequestUriInvalid) });
        };
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        let Some(grant) = self.grants.http_grant(scheme, &host, port) else {
            tracing::debug!("wasm job: HTTP request to {uri} denied: no allow_http entry for it");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        };
        let check_addresses = !grant.names_address();
        if self.left == 0 {
            tracing::debug!("wasm job: HTTP request to {uri} refused: the run made [wasm] http_max_requests requests");
            return Box::new(async { Err(Error::ConnectionLimitReached) });
        }
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            tracing::debug!("wasm job: HTTP request to {uri} refused: [wasm] http_max_concurrent requests in flight");
            return Box::new(async { Err(Error::ConnectionLimitReached) });
        };
        self.left -= 1;
        Box::new(async move {
            if check_addresses {
                check_public(&host, port).await?;
            }
            let request = request.map(|body| {
                Limited::new(body, MAX_REQUEST_BYTES)
                    .map_err(|e| unlimited(e, Error::HttpRequestBodySize(None)))
                    .boxed_unsync()
            });
            let (response, io) = wasmtime_wasi_http::default_send_request(request, Some(bounded(options))).await?;
            let response = response.map(|body| {
                Limited::new(body, MAX_RESPONSE_BYTES)
                    .map_err(|e| unlimited(e, Error::HttpResponseBodySize(None)))
                    .boxed_unsync()
            });
            let io = async move {
                let _permit = permit;
                io.await
            };
            Ok((response, Box::new(io) as Pending))
        })
    }
}

/// The guest's timeouts, each at most ours (ours where it gave none).
fn bounded(options: Option<RequestOptions>) -> RequestOptions {
    let cap = |asked: Option<Duration>, most: Duration| Some(asked.map_or(most, |a| a.min(most)));
    let o = options.unwrap_or_default();
    RequestOptions {
        connect_timeout: cap(o.connect_timeout, CONNECT_TIMEOUT),
        first_byte_timeout: cap(o.first_byte_timeout, FIRST_BYTE_TIMEOUT),
        between_bytes_timeout: cap(o.between_bytes_timeout, BETWEEN_BYTES_TIMEOUT),
    }
}

/// The body's own error, or `over` when `Limited` stopped it.
fn unlimited(e: Box<dyn std::error::Error + Send + Sync>, over: Error) -> Error {
    match e.downcast::<Error>() {
        Ok(inner) => *inner,
        Err(_) => over,
    }
}

/// Refuses a host any of whose addresses is internal (loopback, link-local and metadata,
/// private ranges): a public name or a wildcard entry must not lead a guest inside.
/// The connection resolves the name again; a DNS answer changed in between is not seen.
async fn check_public(host: &str, port: u16) -> Result<(), Error> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port))).await {
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect::<Vec<_>>(),
        Ok(Err(e)) => return Err(Error::DnsError { rcode: Some(e.to_string()), info_code: None }),
        Err(_) => return Err(Error::DnsTimeout),
    };
    if let Some(ip) = addrs.iter().find(|ip| is_internal(**ip)) {
        tracing::debug!("wasm job: HTTP request to {host} denied: it resolves to the internal address {ip}");
        return Err(Error::HttpRequestDenied);
    }
    Ok(())
}
