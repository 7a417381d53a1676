//! One `wasm.allow_http` entry: a scheme, a host (or `*.domain`) and a port, matched
//! exactly. `https://api.example.com` allows port 443 of that host over TLS and nothing
//! else; a bare `api.example.com` means the same. docs/security.md has the rules.

use std::net::IpAddr;

/// A parsed `allow_http` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    pub scheme: Scheme,
    /// Lower-cased host name or IP literal; for `*.example.com`, `example.com`.
    pub host: String,
    /// Whether the entry is `*.host`: any name below it (not the host itself).
    pub subdomains: bool,
    pub port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

impl HttpGrant {
    /// Parses `[http://|https://]host[:port]` or `[scheme://]*.domain[:port]`.
    pub fn parse(entry: &str) -> Result<HttpGrant, String> {
        let bad = |why: &str| {
            format!("allow_http entry {entry:?} {why}; write scheme://host[:port], e.g. https://api.example.com")
        };
        let (scheme, rest) = match entry.split_once("://") {
            Some((s, rest)) => (Scheme::parse(s).ok_or_else(|| bad("has a scheme other than http or https"))?, rest),
            None => (Scheme::Https, entry),
        };
        if rest.contains(['/', '?', '#', '@', ' ']) {
            return Err(bad("has more than scheme, host and port"));
        }
        let (host, port) = split_port(rest).ok_or_else(|| bad("has an invalid port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let (host, subdomains) = match host.strip_prefix("*.") {
            Some(domain) => (domain.to_string(), true),
            None => (host, false),
        };
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && (host.parse::<IpAddr>().is_ok()
                || host.split('.').all(|l| {
                    !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                }));
        if !name_ok || (subdomains && host.parse::<IpAddr>().is_ok()) {
            return Err(bad("has an invalid host"));
        }
        Ok(HttpGrant { scheme, port: port.unwrap_or(scheme.default_port()), host, subdomains })
    }

    /// Whether a request to `scheme://host:port` is within this entry.
    pub fn allows(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
        let host_ok = match self.subdomains {
            true => host.strip_suffix(&self.host).is_some_and(|head| head.ends_with('.') && head.len() > 1),
            false => host == self.host,
        };
        self.scheme == scheme && self.port == port && host_ok
    }

    /// Whether the entry is an IP literal: then the operator named the address, internal
    /// or not, and it is not checked. A name (`localhost` too) must resolve to public ones.
    pub fn names_address(&self) -> bool {
        !self.subdomains && self.host.parse::<IpAddr>().is_ok()
    }
}

/// `host:port`, `[v6]:port`, `host`, `[v6]` or a bare IPv6 address.
fn split_port(s: &str) -> Option<(&str, Option<u16>)> {
    if s.starts_with('[') {
        let end = s.find(']')?;
        let port = match &s[end + 1..] {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        return Some((&s[..=end], port));
    }
    match s.rsplit_once(':') {
        Some((h, _)) if h.contains(':') => Some((s, None)),
        Some((h, p)) => Some((h, Some(p.parse().ok().filter(|&p| p != 0)?))),
        None => Some((s, None)),
    }
}

/// Whether `ip` is loopback, link-local (cloud metadata lives there), private, shared
/// (carrier-grade NAT), unspecified or multicast: addresses a wildcard or a public name
/// must not lead a guest to.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || (a == 100 && (64..128).contains(&b))
                || a == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_scheme_host_and_port() {
        let https = Scheme::Https;
        let http = Scheme::Http;
        // (entry, scheme, host, port, allowed)
        let cases = [
            ("https://api.example.com", https, "api.example.com", 443, true),
            ("https://api.example.com", https, "API.example.com", 443, true),
            ("https://api.example.com", http, "api.example.com", 80, false),
            ("https://api.example.com", https, "api.example.com", 8443, false),
            ("api.example.com", https, "api.example.com", 443, true),
            ("api.example.com", http, "api.example.com", 80, false),
            ("http://127.0.0.1:8080", http, "127.0.0.1", 8080, true),
            ("http://127.0.0.1:8080", http, "127.0.0.1", 8081, false),
            ("http://127.0.0.1:8080", https, "127.0.0.1", 8080, false),
            ("https://*.svc.example", https, "db.svc.example", 443, true),
            ("https://*.svc.example", https, "svc.example", 443, false),
            ("https://*.svc.example", https, "evilsvc.example", 443, false),
            ("http://[::1]:9000", http, "[::1]", 9000, true),
        ];
        for (entry, scheme, host, port, allowed) in cases {
            let grant = HttpGrant::parse(entry).unwrap();
            assert_eq!(grant.allows(scheme, host, port), allowed, "{entry} vs {scheme:?}://{host}:{port}");
        }
    }

    #[test]
    fn bad_entries_are_refused_with_the_form_to_use() {
        for entry in [
            "ftp://x.com",
            "https://x.com/path",
            "https://user@x.com",
            "https://x.com:0",
            "https://x.com:99999",
            "https://",
            "https://*.10.0.0.1",
            "https://a b",
            "https://x..com",
        ] {
            let err = HttpGrant::parse(entry).unwrap_err();
            assert!(err.contains("scheme://host[:port]"), "{entry}: {err}");
        }
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "172.32.0.1"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
        assert!(HttpGrant::parse("http://127.0.0.1:80").unwrap().names_address());
        assert!(!HttpGrant::parse("http://localhost:80").unwrap().names_address());
        assert!(!HttpGrant::parse("https://*.example.com").unwrap().names_address());
        assert!(!HttpGrant::parse("https://internal.example.com").unwrap().names_address());
    }
}
