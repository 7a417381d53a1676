//! Outbound HTTP through standard `wasi:http` (WASI 0.2.12), blocking, for jobs.
//!
//! The host only lets requests through to hosts the job spec grants in `allow_http`;
//! others fail with an error mentioning `HttpRequestDenied`.
//!
//! ```no_run
//! let resp = cronrun_sdk::http::get("https://example.com/health")?;
//! cronrun_sdk::log::info!("status {}", resp.status);
//! # Ok::<(), String>(())
//! ```

use std::time::Duration;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme};
use wasip2::io::streams::StreamError;

/// A complete response: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// Header names (lower case) and values, in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, read to its end.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| k.to_ascii_lowercase() == name).map(|(_, v)| v.as_slice())
    }

    /// The body as UTF-8 text (invalid sequences replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An HTTP request to build and [`send`](Request::send).
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
}

/// `GET url`, with no extra headers.
pub fn get(url: &str) -> Result<Response, String> {
    Request::new("GET", url).send()
}

impl Request {
    /// A request with `method` (`GET`, `POST`, ...) to an `http://` or `https://` URL.
    pub fn new(method: &str, url: &str) -> Self {
        Request {
            method: method.to_ascii_uppercase(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.as_bytes().to_vec()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Limits connecting, the wait for the first byte and each pause between bytes.
    /// Without it only the run's own deadline applies.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends the request and reads the whole response. Errors name the method and URL.
    pub fn send(self) -> Result<Response, String> {
        let what = format!("{} {}", self.method, self.url);
        self.send_inner().map_err(|e| format!("{what}: {e}"))
    }

    fn send_inner(self) -> Result<Response, String> {
        let (scheme, authority, path) = split_url(&self.url)?;
        let fields = Fields::from_list(&self.headers).map_err(|e| format!("bad header: {e:?}"))?;
        let request = OutgoingRequest::new(fields);
        let method = match self.method.as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_string()),
        };
        request.set_method(&method).map_err(|()| "invalid method".to_string())?;
        request.set_scheme(Some(&scheme)).map_err(|()| "invalid scheme".to_string())?;
        request.set_authority(Some(authority)).map_err(|()| "invalid host".to_string())?;
        request.set_path_with_query(Some(&path)).map_err(|()| "invalid path".to_string())?;
        let options = self.timeout.map(|t| {
            let nanos = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let options = RequestOptions::new();
            // Setting a timeout the host does not support is not an error worth failing on.
            let _ = options.set_connect_timeout(Some(nanos));
            let _ = options.set_first_byte_timeout(Some(nanos));
            let _ = options.set_between_bytes_timeout(Some(nanos));
            options
        });
        let body = request.body().map_err(|()| "request body taken twice".to_string())?;
        let pending = outgoing_handler::handle(request, options).map_err(describe)?;
        write_body(&body, &self.body)?;
        OutgoingBody::finish(body, None).map_err(describe)?;

        let response = loop {
            match pending.get() {
                Some(result) => {
                    break result.map_err(|()| "response taken twice".to_string())?.map_err(describe)?;
                }
                None => pending.subscribe().block(),
            }
        };
        let status = response.status();
        let headers = response.headers().entries();
        let incoming = response.consume().map_err(|()| "response body taken twice".to_string())?;
        let body = read_body(&incoming)?;
        // Child resources must go before their parents, or the host traps.
        drop(incoming);
        drop(response);
        Ok(Response { status, headers, body })
    }
}

fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), String> {
    if bytes.is_empty() {
        return Ok(());
    }
    let stream = body.write().map_err(|()| "request body stream taken twice".to_string())?;
    // blocking-write-and-flush accepts at most 4096 bytes per call.
    for chunk in bytes.chunks(4096) {
        stream.blocking_write_and_flush(chunk).map_err(|e| stream_error("writing the body", e))?;
    }
    Ok(())
}

fn read_body(incoming: &IncomingBody) -> Result<Vec<u8>, String> {
    let stream = incoming.stream().map_err(|()| "response stream taken twice".to_string())?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(body),
            Err(e) => return Err(stream_error("reading the body", e)),
        }
    }
}

fn stream_error(doing: &str, e: StreamError) -> String {
    match e {
        StreamError::Closed => format!("{doing}: stream closed"),
        StreamError::LastOperationFailed(err) => format!("{doing}: {}", err.to_debug_string()),
    }
}

fn describe(e: wasip2::http::types::ErrorCode) -> String {
    use wasip2::http::types::ErrorCode;
    match e {
        ErrorCode::HttpRequestDenied => {
            "HttpRequestDenied: the host is not granted in the job spec's allow_http".to_string()
        }
        other => format!("{other:?}"),
    }
}

/// Splits `scheme://authority/path?query` (a fragment is dropped).
fn split_url(url: &str) -> Result<(Scheme, &str, String), String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else {
        return Err("only http:// and https:// URLs are supported".to_string());
    };
    let rest = rest.split('#').next().unwrap_or(rest);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err("the URL has no host".to_string());
    }
    let path = if path.starts_with('/') { path.to_string() } else { format!("/{path}") };
    Ok((scheme, authority, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_urls() {
        let (s, a, p) = split_url("https://example.com:8443/a/b?x=1#frag").unwrap();
        assert!(matches!(s, Scheme::Https));
        assert_eq!((a, p.as_str()), ("example.com:8443", "/a/b?x=1"));
        let (s, a, p) = split_url("http://localhost?q").unwrap();
        assert!(matches!(s, Scheme::Http));
        assert_eq!((a, p.as_str()), ("localhost", "/?q"));
        assert!(split_url("ftp://x/").is_err());
        assert!(split_url("http:///x").is_err());
    }
}
