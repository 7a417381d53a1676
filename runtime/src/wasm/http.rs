//! Outbound HTTP of Wasm jobs (`wasi:http/outgoing-handler`): linked for every job, but a
//! request leaves only when its host is in the spec's `allow_http`; any other fails with
//! `HttpRequestDenied` (the guest sees an error code, not a trap).

use std::future::Future;

use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::grants::Grants;

/// The HTTP hooks of one run: its grants.
pub struct HttpGrants {
    pub grants: Grants,
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
        let uri = request.uri();
        let allowed = uri.host().is_some_and(|host| self.grants.http_allowed(host, uri.port_u16()));
        if !allowed {
            tracing::debug!("wasm job: HTTP request to {uri} denied");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        Box::new(async move {
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as Pending))
        })
    }
}
