//! Agents' key directories (draft-meunier-http-message-signatures-directory): a JWKS at
//! `<origin>/.well-known/http-message-signatures-directory`, fetched safely, its ed25519
//! keys indexed by JWK thumbprint (RFC 7638, the `keyid` of a Web Bot Auth signature).
//!
//! - **Safe fetching** ([`client`], [`check_host`]): https only (an `http://` URL or
//!   redirect is refused by the client), redirects only within the origin (scheme, host and
//!   port; at most 3), never a private, loopback, link-local, shared (100.64/10), unique
//!   local or multicast address, checked on every address the host name resolves to and on
//!   an IP literal, so a directory cannot be aimed at the inside of the network (the
//!   test-only `--allow-loopback-agent-directories` lets loopback through); no proxy; one
//!   timeout for the whole fetch; a size cap on the body (a larger `Content-Length` is
//!   refused before reading, a longer body while reading).
//! - **Parsing** ([`parse_directory`]): every `OKP`/`Ed25519` key with a 32-byte `x`; keys of
//!   other types are skipped; `nbf` / `exp` (seconds) bound when a key may be used.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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

/// Whether an address may be fetched from: a global unicast address, or loopback when
/// `allow_loopback` (tests). Private (RFC 1918), shared (100.64/10), link-local, unique
/// local (fc00::/7), unspecified, multicast and broadcast addresses never.
pub fn is_fetchable(ip: IpAddr, allow_loopback: bool) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                return allow_loopback;
            }
            !(v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || o[0] == 0)
        }
        IpAddr::V6(v6) => {
            if v6.is_loopback() {
                return allow_loopback;
            }
            let first = v6.segments()[0];
            !(v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
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
        Err(format!("{ip} is a private, loopback or link-local address"))
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
                    "{host} resolves to no address a directory may be fetched from (private, \
                     loopback or link-local only)"
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
        for ip in ["127.0.0.1", "::1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_fetchable(ip, false));
            assert!(is_fetchable(ip, true));
        }
        for ip in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "fe80::1",
            "fd00::1",
            "::",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_fetchable(ip.parse().unwrap(), true), "{ip}");
        }
        for ip in ["104.18.0.1", "2606:4700::1", "8.8.8.8"] {
            assert!(is_fetchable(ip.parse().unwrap(), false), "{ip}");
        }
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(check_host(&url("https://169.254.169.254/x"), true).is_err());
        assert!(check_host(&url("https://[::1]:8443/x"), false).is_err());
        assert!(check_host(&url("https://[::1]:8443/x"), true).is_ok());
        assert!(check_host(&url("https://agent.example/x"), false).is_ok());
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
