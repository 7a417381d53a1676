//! Where a webhook may lead: public addresses, and the internal ones `[notify]
//! allow_hosts` names. Loopback, link-local (cloud metadata at 169.254.169.254), private,
//! shared, unspecified, multicast and reserved addresses (`spec::http_grant::internal_kind`,
//! IPv4-mapped IPv6 included) are refused otherwise, so that a job author cannot make the
//! schedulers' hosts call internal services.
//!
//! The check is on the addresses the connection uses: the HTTP client resolves names
//! through `Guard` (a `reqwest` resolver) and connects only to what it returned, so a
//! public name that resolves to 127.0.0.1, now or by rebinding, is refused. IP literals,
//! which the client does not resolve, are checked before the request and at every
//! redirect (`redirect_policy`). A refusal is a `Refused` error: not tried again.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::error::Error;
use crate::spec::http_grant::internal_kind;

/// Redirects followed at most (reqwest's own default).
const MAX_REDIRECTS: usize = 10;

/// A delivery refused because of where it leads: one line, for the `notify_failed` event.
#[derive(Debug, Clone)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// `[notify] allow_hosts`, parsed: internal addresses (and networks) and host names a
/// webhook may reach.
#[derive(Debug, Clone, Default)]
pub struct AllowHosts {
    /// Address and prefix length (an address alone: the full length).
    nets: Vec<(IpAddr, u8)>,
    /// Lower-cased host names; `*.domain` as (`domain`, true): names below it.
    names: Vec<(String, bool)>,
}

impl AllowHosts {
    /// Parses entries: an IP address (`127.0.0.1`, `::1`), a network (`10.0.0.0/8`,
    /// `fd00::/8`) or a host name (`hooks.internal`, `*.svc.cluster.local`).
    pub fn parse(entries: &[String]) -> Result<AllowHosts, Error> {
        let mut allow = AllowHosts::default();
        for entry in entries {
            let bad = |why: &str| {
                Error::invalid(
                    "notify.allow_hosts",
                    format!(
                        "notify.allow_hosts: {entry:?} {why}; write an address (127.0.0.1), a network \
                         (10.0.0.0/8) or a host name (hooks.internal)"
                    ),
                )
            };
            let text = entry.trim().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
            if let Some((addr, len)) = text.split_once('/') {
                let addr: IpAddr = addr.parse().map_err(|_| bad("is not a network"))?;
                let most = if addr.is_ipv4() { 32 } else { 128 };
                let len: u8 = len.parse().ok().filter(|l| *l <= most).ok_or_else(|| bad("has a bad prefix length"))?;
                allow.nets.push((addr, len));
            } else if let Ok(addr) = text.parse::<IpAddr>() {
                allow.nets.push((addr, if addr.is_ipv4() { 32 } else { 128 }));
            } else {
                let (name, below) = match text.strip_prefix("*.") {
                    Some(domain) => (domain.to_string(), true),
                    None => (text, false),
                };
                let ok = !name.is_empty()
                    && name.len() <= 253
                    && name.split('.').all(|l| {
                        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    });
                if !ok {
                    return Err(bad("is not an address, a network or a host name"));
                }
                allow.names.push((name, below));
            }
        }
        Ok(allow)
    }

    fn allows_name(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.names.iter().any(|(name, below)| match below {
            true => host.strip_suffix(name.as_str()).is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            false => host == *name,
        })
    }

    fn allows_addr(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|&(net, len)| match (canonical(net), ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(u32::from(n).into(), u32::from(a).into(), len, 32),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(u128::from(n), u128::from(a), len, 128),
            _ => false,
        })
    }

    /// Err with one line when `ip`, reached for `host` (None: the URL named the address
    /// itself), is internal and not allowed.
    pub fn check(&self, host: Option<&str>, ip: IpAddr) -> Result<(), Refused> {
        let Some(kind) = internal_kind(ip) else { return Ok(()) };
        if self.allows_addr(ip) || host.is_some_and(|h| self.allows_name(h)) {
            return Ok(());
        }
        let what = match host {
            Some(host) => format!("{host} resolves to {ip}"),
            None => ip.to_string(),
        };
        let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u', 'I']) { "an" } else { "a" };
        Err(Refused(format!(
            "refused: {what}, {article} {kind} address (webhooks reach internal addresses only as [notify] allow_hosts \
             names them)"
        )))
    }

    /// Checks a URL whose host is an IP literal (the resolver never sees those); a name
    /// is checked when it is resolved.
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        // The URL parser writes every IPv4 form (`2130706433`, `0x7f.1`) as a.b.c.d.
        let host = url.host_str().unwrap_or("").trim_start_matches('[').trim_end_matches(']');
        match host.parse::<IpAddr>() {
            Ok(ip) => self.check(None, ip),
            Err(_) => Ok(()),
        }
    }
}

/// IPv4-mapped IPv6 as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn prefix_eq(net: u128, addr: u128, len: u8, bits: u32) -> bool {
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    (net >> shift) == (addr >> shift)
}

/// The webhook client's resolver: the system's, then `AllowHosts::check` on every address.
/// A name with any refused address is refused whole.
#[derive(Clone)]
pub struct Guard(pub Arc<AllowHosts>);

impl Resolve for Guard {
    fn resolve(&self, name: Name) -> Resolving {
        let allow = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            // The request's timeout bounds this lookup too.
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for addr in &addrs {
                allow.check(Some(&host), addr.ip())?;
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Redirects are followed (at most 10) only to where the first request could go: an IP
/// literal is checked here, a name by the resolver when connecting.
pub fn redirect_policy(allow: Arc<AllowHosts>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            return attempt.error(Refused(format!("more than {MAX_REDIRECTS} redirects")));
        }
        match allow.check_url(attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(Refused(why)) => {
                let why = format!("redirected to {}: {why}", attempt.url());
                attempt.error(Refused(why))
            }
        }
    })
}

/// The `Refused` error among `e`'s causes, if any.
pub fn refusal<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    let mut cause = Some(e);
    while let Some(e) = cause {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return Some(refused);
        }
        cause = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> AllowHosts {
        AllowHosts::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_naming_the_address_and_the_setting() {
        let none = allow(&[]);
        for ip in ["127.0.0.1", "::1", "::ffff:127.0.0.1", "0.0.0.0", "::", "169.254.169.254", "10.0.0.1", "fd00::1"] {
            let err = none.check(None, ip.parse().unwrap()).unwrap_err().0;
            assert!(err.contains(&format!("refused: {ip}, a")) && err.contains("[notify] allow_hosts"), "{err}");
        }
        let err = none.check(Some("localhost"), "127.0.0.1".parse().unwrap()).unwrap_err().0;
        assert!(err.starts_with("refused: localhost resolves to 127.0.0.1, a loopback address"), "{err}");
        assert!(none.check(Some("hooks.example.com"), "93.184.216.34".parse().unwrap()).is_ok());
    }

    #[test]
    fn allow_hosts_names_addresses_networks_and_host_names() {
        let a = allow(&["127.0.0.1", "10.0.0.0/8", "fd00::/8", "hooks.internal", "*.svc.local", "[::1]"]);
        let ok = |host: Option<&str>, ip: &str| a.check(host, ip.parse().unwrap()).is_ok();
        assert!(ok(None, "127.0.0.1"));
        assert!(ok(None, "::ffff:127.0.0.1"), "a mapped address is the IPv4 one");
        assert!(!ok(None, "127.0.0.2"));
        assert!(ok(None, "10.200.1.1"));
        assert!(!ok(None, "192.168.1.1"));
        assert!(ok(None, "fd12::1"));
        assert!(ok(None, "::1"));
        assert!(ok(Some("hooks.internal"), "192.168.1.1"));
        assert!(ok(Some("HOOKS.internal."), "192.168.1.1"));
        assert!(!ok(Some("evilhooks.internal"), "192.168.1.1"));
        assert!(ok(Some("a.svc.local"), "192.168.1.1"));
        assert!(!ok(Some("svc.local"), "192.168.1.1"));
        assert!(!ok(Some("localhost"), "169.254.169.254"));
        let everything = allow(&["0.0.0.0/0", "::/0"]);
        assert!(everything.check(None, "169.254.169.254".parse().unwrap()).is_ok());
        assert!(everything.check(None, "::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn bad_allow_hosts_entries_are_refused_naming_the_field() {
        for entry in ["10.0.0.0/33", "fd00::/129", "10.0.0/8", "a b", "", "x..y", "http://x"] {
            let err = AllowHosts::parse(&[entry.to_string()]).unwrap_err().to_string();
            assert!(err.contains("notify.allow_hosts") && err.contains("10.0.0.0/8"), "{entry}: {err}");
        }
    }

    #[test]
    fn urls_naming_an_internal_address_are_refused_before_connecting() {
        let none = allow(&[]);
        for url in [
            "http://127.0.0.1:9/x",
            "http://[::1]:9/",
            "http://0.0.0.0:9/",
            "http://[::ffff:7f00:1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://2130706433/",
        ] {
            let url = reqwest::Url::parse(url).unwrap();
            assert!(none.check_url(&url).is_err(), "{url}");
        }
        // A name is the resolver's to check.
        assert!(none.check_url(&reqwest::Url::parse("http://localhost:9/").unwrap()).is_ok());
    }
}
