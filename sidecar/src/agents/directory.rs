//! Agents' key directories (draft-meunier-http-message-signatures-directory): a JWKS at
//! `<origin>/.well-known/http-message-signatures-directory`, fetched safely, its ed25519
//! keys indexed by JWK thumbprint (RFC 7638, the `keyid` of a Web Bot Auth signature).
//!
//! - **Safe fetching** ([`client`], [`check_host`]): https only (an `http://` URL or
//!   redirect is refused by the client), redirects only within the origin (scheme, host and
//!   port; at most 3), never an address that is not globally reachable unicast
//!   ([`is_fetchable`]: private, loopback, link-local, shared, unique local, the IANA
//!   special-purpose blocks, multicast, and IPv6 forms embedding such an IPv4 address),
//!   checked on every address the host name resolves to and on
//!   an IP literal, so a directory cannot be aimed at the inside of the network (the
//!   test-only `--allow-loopback-agent-directories` lets loopback through); no proxy; one
//!   timeout for the whole fetch; a size cap on the body (a larger `Content-Length` is
//!   refused before reading, a longer body while reading).
//! - **Parsing** ([`parse_directory`]): every `OKP`/`Ed25519` key with a 32-byte `x`; keys of
//!   other types are skipped; `nbf` / `exp` (seconds) bound when a key may be used.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One usable key of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The raw ed25519 public key.
    pub x: [u8; 32],
    /// Not before, seconds since the Unix epoch (`nbf`), if given.
    pub nbf: Option<u64>,
    /// Not after, seconds since the Unix epoch (`exp`), if given.
    pub exp: Option<u64>,
}

impl Key {
    /// Whether the key may be used at `now_s`.
    pub fn valid_at(&self, now_s: u64) -> bool {
        self.nbf.is_none_or(|n| n <= now_s) && self.exp.is_none_or(|e| now_s < e)
    }
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<serde_json::Value>,
}

/// The JWK thumbprint of an ed25519 public key (RFC 7638 section 3 over the required
/// members `crv`, `kty`, `x` in lexicographic order, SHA-256, base64url without padding):
/// the `keyid` Web Bot Auth signatures name.
pub fn thumbprint(x_b64url: &str) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x_b64url}"}}"#);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// The ed25519 keys of a directory document, by thumbprint. `Err` when the body is not a
/// JWKS (`{"keys": [...]}`).
pub fn parse_directory(body: &[u8]) -> Result<HashMap<String, Key>, String> {
    let jwks: Jwks = serde_json::from_slice(body).map_err(|e| format!("not a JWKS: {e}"))?;
    let mut out = HashMap::new();
    for k in &jwks.keys {
        let s = |name: &str| k.get(name).and_then(serde_json::Value::as_str);
        if s("kty") != Some("OKP") || s("crv") != Some("Ed25519") {
            continue;
        }
        let Some(x) = s("x") else { continue };
        let Some(raw) = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(x)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
        else {
            continue;
        };
        let n = |name: &str| k.get(name).and_then(serde_json::Value::as_u64);
        out.insert(
            thumbprint(x),
            Key {
                x: raw,
                nbf: n("nbf"),
                exp: n("exp"),
            },
        );
    }
    Ok(out)
}

/// IPv4 ranges no directory is fetched from: every block of the IANA IPv4 Special-Purpose
/// Address Registry (RFC 6890 and its updates) that is not globally reachable or is not
/// unicast, plus multicast; `(network, prefix length)`. Loopback (127/8) is separate
/// (allowed by `allow_loopback`).
const REFUSED_V4: [([u8; 4], u8); 14] = [
    ([0, 0, 0, 0], 8),       // "this network" (RFC 791)
    ([10, 0, 0, 0], 8),      // private (RFC 1918)
    ([100, 64, 0, 0], 10),   // shared address space (RFC 6598)
    ([169, 254, 0, 0], 16),  // link local (RFC 3927)
    ([172, 16, 0, 0], 12),   // private (RFC 1918)
    ([192, 0, 0, 0], 24),    // IETF protocol assignments (RFC 6890)
    ([192, 0, 2, 0], 24),    // documentation TEST-NET-1 (RFC 5737)
    ([192, 88, 99, 0], 24),  // 6to4 relay anycast, deprecated (RFC 7526)
    ([192, 168, 0, 0], 16),  // private (RFC 1918)
    ([198, 18, 0, 0], 15),   // benchmarking (RFC 2544)
    ([198, 51, 100, 0], 24), // documentation TEST-NET-2 (RFC 5737)
    ([203, 0, 113, 0], 24),  // documentation TEST-NET-3 (RFC 5737)
    ([224, 0, 0, 0], 4),     // multicast (RFC 5771)
    ([240, 0, 0, 0], 4),     // reserved (RFC 1112), with broadcast 255.255.255.255
];

/// IPv6 ranges refused whole (IANA IPv6 Special-Purpose Address Registry, RFC 6890 and its
/// updates, and the non-global unicast and multicast blocks); `(network, prefix length)`.
/// Loopback (::1) is separate; IPv4-mapped addresses are judged as IPv4. The forms that embed an IPv4 address and are judged by it are in [`embedded_v4`].
const REFUSED_V6: [(u128, u8); 11] = [
    (0, 128),                     // unspecified
    (0x0064_ff9b_0001 << 80, 48), // local-use NAT64 (RFC 8215)
    (0x0100 << 112, 64),          // discard-only (RFC 6666)
    (0x2001 << 112, 23), // IETF protocol assignments, Teredo 2001::/32 with them (RFC 2928)
    (0x2001_0db8 << 96, 32), // documentation (RFC 3849)
    (0x3fff << 112, 20), // documentation (RFC 9637)
    (0x5f00 << 112, 16), // segment routing SIDs (RFC 9602)
    (0xfc00 << 112, 7),  // unique local (RFC 4193)
    (0xfe80 << 112, 10), // link local (RFC 4291)
    (0xfec0 << 112, 10), // site local, deprecated (RFC 3879)
    (0xff00 << 112, 8),  // multicast (RFC 4291)
];

/// The IPv4 address an IPv6 address carries to a v4 host, for the forms where it decides
/// where the packets go: NAT64's well-known prefix 64:ff9b::/96 (RFC 6052: the last 32
/// bits), 6to4 2002::/16 (RFC 3056: bits 16..48) and the deprecated IPv4-compatible ::/96
/// (RFC 4291: the last 32 bits). These are judged by the embedded address, not refused
/// whole: an IPv6-only host behind DNS64 reaches every public server through
/// 64:ff9b::/96. Teredo (2001::/32) and local-use NAT64 (64:ff9b:1::/48, whose embedding
/// the operator chooses) are refused whole in [`REFUSED_V6`]: no directory needs them.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(v6);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000 {
        Some(low32)
    } else if bits >> 112 == 0x2002 {
        Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32))
    } else if bits >> 32 == 0 && bits > 1 {
        Some(low32)
    } else {
        None
    }
}

fn in_v4(ip: Ipv4Addr, (net, len): ([u8; 4], u8)) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in_v6(ip: Ipv6Addr, (net, len): (u128, u8)) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    u128::from(ip) & mask == net & mask
}

/// Whether an address may be fetched from: a globally reachable unicast address, or
/// loopback when `allow_loopback` (tests). Refused: the IPv4 ranges of [`REFUSED_V4`]
/// (private, shared, link-local, "this network", IETF protocol assignments, documentation,
/// benchmarking, 6to4 relay, multicast, reserved and broadcast) and the IPv6 ranges of
/// [`REFUSED_V6`] (unspecified, unique and link local, site local, discard, IETF protocol
/// assignments with Teredo, local-use NAT64, documentation, SRv6, multicast); IPv4-mapped,
/// NAT64 (64:ff9b::/96), 6to4 and IPv4-compatible addresses by their embedded IPv4 address.
pub fn is_fetchable(ip: IpAddr, allow_loopback: bool) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            if v4.is_loopback() {
                return allow_loopback;
            }
            !REFUSED_V4.iter().any(|&r| in_v4(v4, r))
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() {
                return allow_loopback;
            }
            if let Some(v4) = embedded_v4(v6) {
                // A loopback address tunnelled in IPv6 is not the test's loopback.
                return is_fetchable(IpAddr::V4(v4), false);
            }
            !REFUSED_V6.iter().any(|&r| in_v6(v6, r))
        }
    }
}

/// Refuses a URL host that is an IP literal no directory may be fetched from (a host name
/// is checked on each address it resolves to, by the client's resolver).
pub fn check_host(url: &reqwest::Url, allow_loopback: bool) -> Result<(), String> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        Some(url::Host::Domain(_)) => return Ok(()),
        None => return Err("no host".into()),
    };
    if is_fetchable(ip, allow_loopback) {
        Ok(())
    } else {
        Err(format!(
            "{ip} is not a globally reachable unicast address (private, loopback, link-local, \
             special-purpose or multicast)"
        ))
    }
}

/// A resolver that drops every address [`is_fetchable`] refuses, and fails when none is
/// left (so the client never connects to the inside of the network).
struct PublicOnly {
    allow_loopback: bool,
}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_loopback = self.allow_loopback;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| is_fetchable(a.ip(), allow_loopback))
                .collect();
            if addrs.is_empty() {
                return Err(format!(
                    "{host} resolves to no address a directory may be fetched from (only \
                     private, loopback, link-local, special-purpose or multicast ones)"
                )
                .into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Most redirects followed within an origin.
const MAX_REDIRECTS: usize = 3;

/// The directory client: https only, same-origin redirects, public addresses only, no
/// proxy, `timeout` for the whole request; `extra_ca_pem` adds trusted roots (PEM) to the
/// built-in Mozilla roots.
pub fn client(
    timeout: Duration,
    allow_loopback: bool,
    extra_ca_pem: Option<&[u8]>,
) -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().first().is_some_and(|first| {
            let next = attempt.url();
            first.scheme() == next.scheme()
                && first.host_str() == next.host_str()
                && first.port_or_known_default() == next.port_or_known_default()
        });
        if !same_origin {
            let to = attempt.url().to_string();
            attempt.error(format!("redirect away from the origin: {to}"))
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    let mut b = reqwest::Client::builder()
        .https_only(true)
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(policy)
        .dns_resolver(Arc::new(PublicOnly { allow_loopback }))
        .user_agent(concat!(
            "crawlguard-sidecar/",
            env!("CARGO_PKG_VERSION"),
            " (signed agents' key directories)"
        ));
    if let Some(pem) = extra_ca_pem {
        for cert in reqwest::Certificate::from_pem_bundle(pem).map_err(|e| e.to_string())? {
            b = b.add_root_certificate(cert);
        }
    }
    b.build().map_err(|e| e.to_string())
}

/// How long a directory may be used without refetching, from its response headers (RFC
/// 9111 for a shared cache): `s-maxage`, else `max-age`, minus `Age`; else `Expires -
/// Date`; `no-store` / `no-cache` count as 0; without any, `default_s`. Clamped to
/// `min_s..=max_s` (a directory is needed again at once; a too short lifetime would refetch
/// it on every request).
pub fn freshness_s(
    headers: &reqwest::header::HeaderMap,
    default_s: u64,
    min_s: u64,
    max_s: u64,
) -> u64 {
    let text = |name: reqwest::header::HeaderName| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",")
    };
    let cc = text(reqwest::header::CACHE_CONTROL).to_ascii_lowercase();
    let directive = |d: &str| {
        cc.split(',').find_map(|part| {
            let (k, v) = part.trim().split_once('=')?;
            (k.trim() == d).then(|| v.trim().trim_matches('"').parse::<u64>().ok())?
        })
    };
    let age: u64 = text(reqwest::header::AGE).trim().parse().unwrap_or(0);
    let lifetime = if cc
        .split(',')
        .any(|p| matches!(p.trim(), "no-store" | "no-cache"))
    {
        Some(0)
    } else if let Some(s) = directive("s-maxage").or_else(|| directive("max-age")) {
        Some(s.saturating_sub(age))
    } else {
        let date = |name| httpdate::parse_http_date(&text(name)).ok();
        match (date(reqwest::header::EXPIRES), date(reqwest::header::DATE)) {
            (Some(e), Some(d)) => Some(e.duration_since(d).map_or(0, |x| x.as_secs())),
            _ => None,
        }
    };
    lifetime.unwrap_or(default_s).clamp(min_s, max_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thumbprint_of_the_rfc_9421_test_key_is_the_drafts_keyid() {
        // RFC 9421 appendix B.1.4's test-key-ed25519 and the keyid the Web Bot Auth drafts
        // give for it.
        assert_eq!(
            thumbprint("JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"),
            "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"
        );
    }

    #[test]
    fn directories_keep_ed25519_keys_by_thumbprint() {
        let doc = br#"{"keys":[
            {"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs","nbf":10,"exp":20},
            {"kty":"RSA","n":"xx","e":"AQAB"},
            {"kty":"OKP","crv":"Ed25519","x":"c2hvcnQ"}
        ],"purpose":"ai"}"#;
        let keys = parse_directory(doc).unwrap();
        assert_eq!(keys.len(), 1);
        let k = keys["poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"];
        assert!(!k.valid_at(9) && k.valid_at(10) && k.valid_at(19) && !k.valid_at(20));
        assert!(parse_directory(b"[]").is_err());
        assert!(parse_directory(b"<html>").is_err());
    }

    #[test]
    fn only_public_addresses_are_fetched_from() {
        for ip in ["127.0.0.1", "::1", "127.255.0.9", "::ffff:127.0.0.1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_fetchable(ip, false), "{ip}");
            assert!(is_fetchable(ip, true), "{ip}");
        }
        // (address, fetchable): every refused block at its first and last address or an
        // inside one, and public neighbours that must stay fetchable.
        let table = [
            ("0.0.0.0", false),
            ("0.255.255.255", false),
            ("10.1.2.3", false),
            ("100.64.0.1", false),
            ("100.127.255.254", false),
            ("169.254.169.254", false),
            ("172.16.0.1", false),
            ("172.31.255.255", false),
            ("192.0.0.1", false),
            ("192.0.0.255", false),
            ("192.0.2.7", false),
            ("192.88.99.1", false),
            ("192.168.1.1", false),
            ("198.18.0.1", false),
            ("198.19.255.255", false),
            ("198.51.100.1", false),
            ("203.0.113.9", false),
            ("224.0.0.1", false),
            ("239.255.255.250", false),
            ("240.0.0.1", false),
            ("255.255.255.255", false),
            ("::", false),
            ("::ffff:10.0.0.1", false),
            ("::ffff:169.254.169.254", false),
            ("::10.0.0.1", false),
            ("::169.254.169.254", false),
            ("::127.0.0.1", false),
            ("64:ff9b::a9fe:a9fe", false),
            ("64:ff9b::7f00:1", false),
            ("64:ff9b::c612:1", false),
            ("64:ff9b:1::808:808", false),
            ("2002:a00:1::1", false),
            ("2002:a9fe:a9fe::1", false),
            ("2002:7f00:1::", false),
            ("2001::1", false),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", false),
            ("2001:1ff:ffff::1", false),
            ("2001:db8::1", false),
            ("3fff::1", false),
            ("5f00::1", false),
            ("100::1", false),
            ("fc00::1", false),
            ("fd00::1", false),
            ("fe80::1", false),
            ("fec0::1", false),
            ("ff02::1", false),
            ("ff0e::1", false),
            // Public.
            ("1.1.1.1", true),
            ("8.8.8.8", true),
            ("104.18.0.1", true),
            ("100.128.0.1", true),
            ("172.32.0.1", true),
            ("192.0.1.1", true),
            ("198.20.0.1", true),
            ("223.255.255.254", true),
            ("::ffff:8.8.8.8", true),
            ("64:ff9b::808:808", true),
            ("2002:808:808::1", true),
            ("2001:200::1", true),
            ("2606:4700::1111", true),
            ("2a00:1450:4001::1", true),
        ];
        let wrong: Vec<&str> = table
            .iter()
            .filter(|(ip, want)| is_fetchable(ip.parse().unwrap(), true) != *want)
            .map(|(ip, _)| *ip)
            .collect();
        assert_eq!(wrong, Vec::<&str>::new());
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(check_host(&url("https://169.254.169.254/x"), true).is_err());
        assert!(check_host(&url("https://[64:ff9b::a9fe:a9fe]/x"), true).is_err());
        assert!(check_host(&url("https://[::1]:8443/x"), false).is_err());
        assert!(check_host(&url("https://[::1]:8443/x"), true).is_ok());
        assert!(check_host(&url("https://agent.example/x"), false).is_ok());
    }

    /// The README's list of refused ranges is these tables.
    #[test]
    fn the_readme_names_every_refused_range() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let v4 = REFUSED_V4
            .iter()
            .map(|(net, len)| format!("{}/{len}", Ipv4Addr::from(*net)));
        let v6 = REFUSED_V6
            .iter()
            .map(|(net, len)| format!("{}/{len}", Ipv6Addr::from(*net)));
        let missing: Vec<String> = v4
            .chain(v6)
            .filter(|r| !readme.contains(r.as_str()))
            .collect();
        assert_eq!(missing, Vec::<String>::new());
    }

    #[test]
    fn freshness_follows_http_caching_and_is_clamped() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = reqwest::header::HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            m
        };
        assert_eq!(freshness_s(&h(&[]), 3600, 60, 86400), 3600);
        assert_eq!(
            freshness_s(
                &h(&[("cache-control", "public, max-age=600")]),
                3600,
                60,
                86400
            ),
            600
        );
        assert_eq!(
            freshness_s(
                &h(&[
                    ("cache-control", "max-age=600, s-maxage=900"),
                    ("age", "100")
                ]),
                3600,
                60,
                86400
            ),
            800
        );
        assert_eq!(
            freshness_s(&h(&[("cache-control", "no-store")]), 3600, 60, 86400),
            60
        );
        assert_eq!(
            freshness_s(&h(&[("cache-control", "max-age=999999")]), 3600, 60, 86400),
            86400
        );
        assert_eq!(
            freshness_s(
                &h(&[
                    ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
                    ("expires", "Tue, 20 Apr 2021 03:07:55 GMT")
                ]),
                10,
                60,
                86400
            ),
            3600
        );
    }
}
