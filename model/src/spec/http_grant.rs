//! One `wasm.allow_http` entry: a scheme, a host (or `*.domain`) and a port, matched
//! exactly. `https://api.example.com` allows port 443 of that host over TLS and nothing
//! else; a bare `api.example.com` means the same. docs/security.md has the rules.

use std::net::IpAddr;

/// An `allow_http` entry refused: which, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allow_http entry {entry:?} {fault}; write scheme://host[:port], e.g. https://api.example.com")]
pub struct HttpGrantError {
    pub entry: String,
    pub fault: HttpGrantFault,
}

/// What is wrong with an `allow_http` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HttpGrantFault {
    #[error("has a scheme other than http or https")]
    Scheme,
    #[error("has more than scheme, host and port")]
    MoreThanHostAndPort,
    #[error("has an invalid port")]
    Port,
    #[error("has an invalid host")]
    Host,
}

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
    pub fn parse(entry: &str) -> Result<HttpGrant, HttpGrantError> {
        let bad = |fault| HttpGrantError { entry: entry.to_string(), fault };
        let (scheme, rest) = match entry.split_once("://") {
            Some((s, rest)) => (Scheme::parse(s).ok_or_else(|| bad(HttpGrantFault::Scheme))?, rest),
            None => (Scheme::Https, entry),
        };
        if rest.contains(['/', '?', '#', '@', ' ']) {
            return Err(bad(HttpGrantFault::MoreThanHostAndPort));
        }
        let (host, port) = split_port(rest).ok_or_else(|| bad(HttpGrantFault::Port))?;
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
            return Err(bad(HttpGrantFault::Host));
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
/// (carrier-grade NAT), unspecified, multicast or another range not reachable on the
/// public internet: addresses a wildcard or a public name must not lead a guest (or a
/// webhook) to. `internal_kind` says which.
pub fn is_internal(ip: IpAddr) -> bool {
    internal_kind(ip).is_some()
}

/// What kind of non-public address `ip` is (`"loopback"`, `"link-local"`, `"private"`,
/// ...), or None for a public one. IPv4 inside IPv6 (mapped `::ffff:a.b.c.d`, NAT64
/// `64:ff9b::a.b.c.d`, 6to4 `2002:aabb:ccdd::`) is judged by the IPv4 address it carries.
pub fn internal_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            let kind = match () {
                _ if v4.is_loopback() => "loopback",
                _ if v4.is_private() => "private",
                _ if v4.is_link_local() => "link-local",
                _ if v4.is_unspecified() || a == 0 => "unspecified",
                _ if v4.is_multicast() => "multicast",
                _ if a == 100 && (64..128).contains(&b) => "shared (carrier-grade NAT)",
                _ if a >= 240 => "reserved",
                _ if (a, b, c) == (192, 0, 0) || (a == 198 && (b & 0xfe) == 18) => "reserved",
                _ if matches!((a, b, c), (192, 0, 2) | (198, 51, 100) | (203, 0, 113)) => "documentation",
                _ => return None,
            };
            Some(kind)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return internal_kind(IpAddr::V4(v4));
            }
            let s = v6.segments();
            let o = v6.octets();
            let embedded = |i: usize| IpAddr::from([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            let kind = match s[0] {
                _ if v6.is_loopback() => "loopback",
                _ if v6.is_unspecified() => "unspecified",
                _ if v6.is_multicast() => "multicast",
                first if (first & 0xfe00) == 0xfc00 => "private (unique local)",
                first if (first & 0xffc0) == 0xfe80 => "link-local",
                first if (first & 0xffc0) == 0xfec0 => "site-local",
                0x64 if s[1] == 0xff9b => return internal_kind(embedded(12)),
                0x2002 => return internal_kind(embedded(2)),
                0x2001 if s[1] == 0xdb8 => "documentation",
                0 if s[1..6] == [0; 5] => "IPv4-compatible",
                0x100 if s[1..4] == [0; 3] => "discard",
                _ => return None,
            };
            Some(kind)
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
            let err = HttpGrant::parse(entry).unwrap_err().to_string();
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
            "::ffff:0.0.0.0",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "240.0.0.1",
            "255.255.255.255",
            "fec0::1",
            "ff02::1",
            "224.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        assert_eq!(internal_kind("::ffff:127.0.0.1".parse().unwrap()), Some("loopback"));
        assert_eq!(internal_kind("169.254.169.254".parse().unwrap()), Some("link-local"));
        for ip in
            ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "172.32.0.1", "64:ff9b::101:101", "2002:101:101::"]
        {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
        assert!(HttpGrant::parse("http://127.0.0.1:80").unwrap().names_address());
        assert!(!HttpGrant::parse("http://localhost:80").unwrap().names_address());
        assert!(!HttpGrant::parse("https://*.example.com").unwrap().names_address());
        assert!(!HttpGrant::parse("https://internal.example.com").unwrap().names_address());
    }
}
