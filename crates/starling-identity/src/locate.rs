//! Where a DID's document lives: `{plc_url}/{did}` for did:plc, and
//! `https://{host}/.well-known/did.json` for did:web (the did:web spec, with the atproto
//! restriction that the identifier is a bare host with an optional `%3A`-encoded port).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use starling_core::syntax;

use crate::{ConfigError, IdentityError};

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// Plain TCP: the configured PLC URL, or a loopback did:web host in test mode.
    Http,
    /// TLS with the webpki roots.
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Which addresses a fetch may connect to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddressPolicy {
    /// The operator chose the URL (the PLC directory): anything goes.
    Any,
    /// A did:web host named by whoever signed a JWT: public unicast addresses only.
    PublicOnly,
    /// A did:web loopback host in test mode.
    LoopbackOnly,
}

impl AddressPolicy {
    pub(crate) fn allows(self, address: IpAddr) -> bool {
        match self {
            AddressPolicy::Any => true,
            AddressPolicy::PublicOnly => is_public(address),
            AddressPolicy::LoopbackOnly => address.is_loopback(),
        }
    }
}

/// One HTTP GET to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub scheme: Scheme,
    /// The host as it goes into the `Host` header and TLS SNI; an IPv6 literal keeps its
    /// brackets here.
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
    pub policy: AddressPolicy,
}

impl Target {
    /// The value of the `Host` header: the host, and the port unless it is the default.
    pub(crate) fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The host to look up in DNS, without IPv6 brackets.
    pub(crate) fn connect_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// The whole URL, for error messages.
    pub(crate) fn url(&self) -> Box<str> {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority(),
            self.path
        )
        .into_boxed_str()
    }
}

/// The PLC directory base URL, parsed once at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlcBase {
    scheme: Scheme,
    host: String,
    port: u16,
    /// The base path without a trailing `/` (usually empty).
    path_prefix: String,
}

impl PlcBase {
    pub(crate) fn parse(url: &str) -> Result<PlcBase, ConfigError> {
        let bad = |reason| ConfigError::BadPlcUrl {
            url: url.into(),
            reason,
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|_| bad("not a URL (expected e.g. `https://plc.directory`)"))?;
        let scheme = match uri.scheme_str() {
            Some("https") => Scheme::Https,
            Some("http") => Scheme::Http,
            _ => return Err(bad("the scheme must be `http` or `https`")),
        };
        let authority = uri.authority().ok_or_else(|| bad("the URL has no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        if uri.query().is_some() {
            return Err(bad("the URL must not have a query"));
        }
        let res = PlcBase {
            scheme,
            host: authority.host().to_owned(),
            port: authority.port_u16().unwrap_or(scheme.default_port()),
            path_prefix: uri.path().trim_end_matches('/').to_owned(),
        };
        Ok(res)
    }
}

/// Where the document of `did` is, or why it cannot be fetched. `did` has passed
/// `is_valid_did`. No I/O.
pub(crate) fn locate(
    did: &str,
    plc: &PlcBase,
    did_web_insecure_loopback: bool,
) -> Result<Target, IdentityError> {
    if let Some(identifier) = did.strip_prefix("did:plc:") {
        return locate_plc(did, identifier, plc);
    }
    if let Some(identifier) = did.strip_prefix("did:web:") {
        return locate_web(did, identifier, did_web_insecure_loopback);
    }
    Err(IdentityError::UnsupportedMethod { did: did.into() })
}

fn locate_plc(did: &str, identifier: &str, plc: &PlcBase) -> Result<Target, IdentityError> {
    // PLC issues 24 base32 characters. Test networks use other lowercase names
    // (`did:plc:alice`), so only the character set is checked: that keeps `%`, `:` and `.` out
    // of the request path.
    let is_plc_char = |byte: u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    if !identifier.bytes().all(is_plc_char) {
        return Err(IdentityError::BadIdentifier {
            did: did.into(),
            reason: "a did:plc identifier has only lowercase letters and digits".into(),
        });
    }
    let res = Target {
        scheme: plc.scheme,
        host: plc.host.clone(),
        port: plc.port,
        path: format!("{}/{did}", plc.path_prefix),
        policy: AddressPolicy::Any,
    };
    Ok(res)
}

fn locate_web(
    did: &str,
    identifier: &str,
    did_web_insecure_loopback: bool,
) -> Result<Target, IdentityError> {
    let bad = |reason: String| IdentityError::BadIdentifier {
        did: did.into(),
        reason: reason.into_boxed_str(),
    };
    if identifier.contains(':') {
        return Err(bad("did:web with a path is not supported in atproto".into()));
    }
    // The port separator is the only percent escape a host can need.
    let (host, port) = match split_port(identifier) {
        Some((host, port)) => (host, Some(port)),
        None => (identifier, None),
    };
    if host.contains('%') || port.is_some_and(|port| port.contains('%')) {
        return Err(bad(
            "only `%3A` (the port separator) may be percent-encoded in a did:web host".into(),
        ));
    }
    let port = match port {
        None => None,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port != 0 => Some(port),
            _ => return Err(bad(format!("`{port}` is not a TCP port"))),
        },
    };
    let (scheme, policy) = if syntax::is_valid_handle(host) {
        (Scheme::Https, AddressPolicy::PublicOnly)
    } else if did_web_insecure_loopback && is_loopback_v4(host) {
        (Scheme::Http, AddressPolicy::LoopbackOnly)
    } else if is_loopback_v4(host) {
        return Err(bad(format!(
            "`{host}` is a loopback address; did:web over plain HTTP on loopback is only for \
             tests (`did_web_insecure_loopback`)"
        )));
    } else {
        return Err(bad(format!("did:web host `{host}` is not a DNS name")));
    };
    let res = Target {
        scheme,
        host: host.to_owned(),
        port: port.unwrap_or(scheme.default_port()),
        path: "/.well-known/did.json".to_owned(),
        policy,
    };
    Ok(res)
}

/// Splits `host%3Aport` (either case of the escape) at its first escaped colon.
fn split_port(identifier: &str) -> Option<(&str, &str)> {
    let escape_idx = identifier.find("%3A").or_else(|| identifier.find("%3a"))?;
    let host = identifier.get(..escape_idx)?;
    let port = identifier.get(escape_idx + 3..)?;
    Some((host, port))
}

fn is_loopback_v4(host: &str) -> bool {
    host.parse::<Ipv4Addr>()
        .is_ok_and(|address| address.is_loopback())
}

/// Whether `address` is a public unicast address, one a did:web host may resolve to. Refuses
/// loopback, private (RFC 1918, IPv6 unique local), shared (RFC 6598), link-local,
/// unspecified, multicast, broadcast, documentation and benchmarking ranges, and IPv4-mapped
/// IPv6 forms of those.
fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(address: Ipv4Addr) -> bool {
    let [a, b, c, _] = address.octets();
    let is_shared = a == 100 && (64..128).contains(&b);
    let is_benchmarking = a == 198 && (b == 18 || b == 19);
    let is_reserved = a >= 240 || a == 0;
    let is_ietf_protocol = a == 192 && b == 0 && c == 0;
    !(address.is_loopback()
        || address.is_private()
        || address.is_link_local()
        || address.is_unspecified()
        || address.is_multicast()
        || address.is_broadcast()
        || address.is_documentation()
        || is_shared
        || is_benchmarking
        || is_reserved
        || is_ietf_protocol)
}

fn is_public_v6(address: Ipv6Addr) -> bool {
    let first = address.segments().first().copied().unwrap_or_default();
    let is_unique_local = first & 0xfe00 == 0xfc00;
    let is_link_local = first & 0xffc0 == 0xfe80;
    let is_documentation = first == 0x2001 && address.segments().get(1) == Some(&0x0db8);
    !(address.is_loopback()
        || address.is_unspecified()
        || address.is_multicast()
        || is_unique_local
        || is_link_local
        || is_documentation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plc(url: &str) -> PlcBase {
        PlcBase::parse(url).unwrap()
    }

    // The PLC URL may carry a port and a path prefix, with or without a trailing slash; the DID
    // is appended as one path segment.
    #[test]
    fn plc_targets() {
        let did = "did:plc:2a7ygipkrbh544aqhcav53oy";
        let cases = [
            (
                "https://plc.directory",
                "https://plc.directory/did:plc:2a7ygipkrbh544aqhcav53oy",
            ),
            (
                "https://plc.directory/",
                "https://plc.directory/did:plc:2a7ygipkrbh544aqhcav53oy",
            ),
            (
                "http://127.0.0.1:2582",
                "http://127.0.0.1:2582/did:plc:2a7ygipkrbh544aqhcav53oy",
            ),
            (
                "http://localhost:80/plc/",
                "http://localhost/plc/did:plc:2a7ygipkrbh544aqhcav53oy",
            ),
            (
                "http://[::1]:2582",
                "http://[::1]:2582/did:plc:2a7ygipkrbh544aqhcav53oy",
            ),
        ];
        for (base, url) in cases {
            let target = locate(did, &plc(base), false).unwrap();
            assert_eq!(&*target.url(), url);
            assert_eq!(target.policy, AddressPolicy::Any);
        }
        let target = locate(did, &plc("http://[::1]:2582"), false).unwrap();
        assert_eq!(target.connect_host(), "::1");
        for bad in [
            "plc.directory",
            "ftp://plc.directory",
            "https://u:p@plc.directory",
            "https://plc.directory/?a=b",
        ] {
            assert!(PlcBase::parse(bad).is_err(), "{bad}");
        }
        let err = locate("did:plc:ABC", &plc("https://plc.directory"), false).unwrap_err();
        assert!(matches!(err, IdentityError::BadIdentifier { .. }), "{err}");
    }

    // did:web: a DNS host over HTTPS with an optional `%3A` port; loopback over HTTP only in
    // test mode; paths, other escapes, IP hosts and bad ports are refused before any I/O.
    #[test]
    fn web_targets() {
        let good = [
            (
                "did:web:example.com",
                false,
                "https://example.com/.well-known/did.json",
            ),
            (
                "did:web:example.com%3A8443",
                false,
                "https://example.com:8443/.well-known/did.json",
            ),
            (
                "did:web:127.0.0.1%3A8080",
                true,
                "http://127.0.0.1:8080/.well-known/did.json",
            ),
            (
                "did:web:127.9.9.9%3a81",
                true,
                "http://127.9.9.9:81/.well-known/did.json",
            ),
        ];
        for (did, loopback, url) in good {
            let target = locate(did, &plc("https://plc.directory"), loopback).unwrap();
            assert_eq!(&*target.url(), url, "{did}");
        }
        let bad = [
            ("did:web:example.com:user:alice", false),
            ("did:web:127.0.0.1%3A8080", false),
            ("did:web:10.0.0.1", true),
            ("did:web:localhost%3A8080", true),
            ("did:web:example.com%2Fx", false),
            ("did:web:example.com%3A0", false),
            ("did:web:example.com%3A99999", false),
            ("did:web:example.com%3A", false),
        ];
        for (did, loopback) in bad {
            let err = locate(did, &plc("https://plc.directory"), loopback).unwrap_err();
            assert!(
                matches!(err, IdentityError::BadIdentifier { .. }),
                "{did}: {err}"
            );
            assert!(err.to_string().starts_with(did), "{err}");
        }
        let err = locate("did:key:zQ3sh", &plc("https://plc.directory"), false).unwrap_err();
        assert!(
            matches!(err, IdentityError::UnsupportedMethod { .. }),
            "{err}"
        );
    }

    // did:web hosts may only resolve to public unicast addresses.
    #[test]
    fn public_addresses() {
        let public = ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "::ffff:1.1.1.1"];
        let refused = [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ];
        for address in public {
            assert!(is_public(address.parse().unwrap()), "{address}");
        }
        for address in refused {
            assert!(!is_public(address.parse().unwrap()), "{address}");
        }
    }
}
