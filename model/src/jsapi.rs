//! How a client addresses JetStream: the API of the servers it is connected to
//! (`$JS.API`), or the API of a JetStream domain (`$JS.<domain>.API`).
//!
//! A runner on a leaf node without JetStream reaches the hub's JetStream only through the
//! hub's domain: nats-server denies `$JS.API.>`, `$KV.>` and `$OBJ.>` on the leaf links of
//! an ordinary account, but maps `$JS.<domain>.API.…` in every account of a server whose
//! `jetstream { domain }` is set, and that prefix crosses the link (docs/deploy.md, "Leaf
//! nodes"). Its table (`generateJSMappingTable` in nats-server) maps
//! `$JS.<d>.API.<X>` to `$JS.API.<X>` for the API's own tokens (`INFO`, `STREAM`,
//! `CONSUMER`, `DIRECT`, …), and `$JS.<d>.API.$KV.>` to `$KV.>`: a KV put goes to
//! `$JS.<d>.API.$KV.<bucket>.<key>`, as async-nats forms it for a context opened
//! `with_domain`. Object store subjects (`$O.`) have no domain form (the server maps
//! `$OBJ`, which no client uses), so plugins are uploaded from the hub.
//!
//! This is the one place that turns a subject cronrun publishes to into its domain form:
//! the store's own raw publishes and the domain forms of the permissions both use it.

use crate::error::Error;

/// The JetStream API a client uses: its servers' own, or a domain's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsApi {
    domain: Option<String>,
}

const PLAIN_API: &str = "$JS.API.";
const KV: &str = "$KV.";

impl JsApi {
    /// The API of the servers a client is connected to (no domain).
    pub fn local() -> JsApi {
        JsApi::default()
    }

    /// The API of JetStream domain `domain`, which must be one subject token of
    /// `A-Z a-z 0-9 _ -` (nats-server refuses others in `jetstream { domain }`).
    pub fn domain(domain: &str) -> Result<JsApi, Error> {
        let ok = !domain.is_empty()
            && domain.len() <= 64
            && domain.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(Error::invalid(
                "jetstream_domain",
                format!(
                    "JetStream domain {domain:?} must be 1 to 64 characters of A-Z a-z 0-9 _ -, as the hub's `jetstream {{ domain }}` names it"
                ),
            ));
        }
        Ok(JsApi { domain: Some(domain.to_string()) })
    }

    /// `domain` when there is one, else the local API.
    pub fn new(domain: Option<&str>) -> Result<JsApi, Error> {
        domain.map_or(Ok(JsApi::local()), JsApi::domain)
    }

    /// The domain's name, if any.
    pub fn domain_name(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// `$JS.API`, or `$JS.<domain>.API`: what async-nats's context prefixes requests with.
    pub fn prefix(&self) -> String {
        match &self.domain {
            Some(d) => format!("$JS.{d}.API"),
            None => "$JS.API".into(),
        }
    }

    /// The subject a client of this API publishes to for `plain`, a subject (or pattern)
    /// as a client of the servers' own API would: `$JS.API.<X>` and `$KV.<X>` in their
    /// domain form, anything else (stream subjects, `$JS.ACK.…` and `$JS.FC.…` reply
    /// subjects, which the server hands out) as it is.
    pub fn subject(&self, plain: &str) -> String {
        self.domain_form(plain).unwrap_or_else(|| plain.to_string())
    }

    /// The domain form of `plain` when it has one (see [`Self::subject`]): None without a
    /// domain, and for subjects that are the same in every domain.
    pub fn domain_form(&self, plain: &str) -> Option<String> {
        let domain = self.domain.as_deref()?;
        if let Some(rest) = plain.strip_prefix(PLAIN_API) {
            return Some(format!("$JS.{domain}.API.{rest}"));
        }
        plain.strip_prefix(KV).map(|rest| format!("$JS.{domain}.API.$KV.{rest}"))
    }

    /// The subject of a put to `key` of KV bucket `bucket`.
    pub fn kv_put(&self, bucket: &str, key: &str) -> String {
        self.subject(&format!("$KV.{bucket}.{key}"))
    }

    /// The subject of the JetStream API request `request` (e.g. `DIRECT.GET.KV_x`).
    pub fn request(&self, request: &str) -> String {
        format!("{}.{request}", self.prefix())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_moves_api_requests_and_kv_puts_under_its_prefix_and_leaves_the_rest() {
        let hub = JsApi::domain("hub").unwrap();
        assert_eq!(hub.prefix(), "$JS.hub.API");
        assert_eq!(hub.request("DIRECT.GET.KV_x"), "$JS.hub.API.DIRECT.GET.KV_x");
        assert_eq!(hub.kv_put("cronrun_runs", "j.r"), "$JS.hub.API.$KV.cronrun_runs.j.r");
        assert_eq!(hub.subject("$JS.API.STREAM.INFO.X"), "$JS.hub.API.STREAM.INFO.X");
        for same in ["$JS.ACK.S.c.1.2.3.4.5.6.7", "$JS.FC.S.x", "$O.cronrun_plugins.C.x", "cronrun.logs.j", "_INBOX.x"]
        {
            assert_eq!(hub.subject(same), same);
            assert_eq!(hub.domain_form(same), None);
        }
        let local = JsApi::local();
        assert_eq!(local.prefix(), "$JS.API");
        assert_eq!(local.kv_put("b", "k"), "$KV.b.k");
        assert_eq!(local.request("INFO"), "$JS.API.INFO");
        assert_eq!(local.domain_form("$JS.API.INFO"), None);
    }

    #[test]
    fn a_domain_is_one_plain_token() {
        for bad in ["", "a.b", "a*", ">", "a b", &"d".repeat(65)] {
            assert!(JsApi::domain(bad).is_err(), "{bad:?}");
        }
        assert_eq!(JsApi::new(Some("edge-1_a")).unwrap().domain_name(), Some("edge-1_a"));
        assert_eq!(JsApi::new(None).unwrap(), JsApi::local());
    }
}
