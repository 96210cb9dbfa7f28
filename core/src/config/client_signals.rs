//! `client_signals`: what Envoy tells crawlguard about the client beyond its own headers,
//! for the browser checks' `tls_fingerprint`, `http_version` and `network` signals and the
//! `asn` limit key. Every input is a header a filter before crawlguard sets (Envoy's
//! tls_inspector JA4 copied by a header mutation, Envoy's geoip filter) and strips from the
//! client first; none is read unless configured, so a client can never set one.

use super::headers::header_name;
use super::{err, ConfigError};
use crawlguard_contract::catalog::is_public_asn;
use crawlguard_contract::ja4::Ja4Pattern;
use serde::Deserialize;

/// `client_signals` as the document spells it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientSignals {
    pub(super) ja4_header: Option<String>,
    pub(super) asn_header: Option<String>,
    #[serde(default)]
    pub(super) listener_offers_h2: bool,
    #[serde(default)]
    pub(super) datacenter_asns: Vec<u32>,
    #[serde(default)]
    pub(super) not_datacenter_asns: Vec<u32>,
}

/// `client_signals`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientSignals {
    /// The request header holding the client's JA4 TLS fingerprint (lowercase), set by
    /// Envoy (`%TLS_JA4_FINGERPRINT%` through a header mutation) or a CDN (`cf-ja4`);
    /// `None` (default): the `tls_fingerprint` check never runs.
    pub ja4_header: Option<String>,
    /// The request header holding the client's autonomous system number (`15169` or
    /// `AS15169`), set by Envoy's geoip filter; `None` (default): the `network` check never
    /// runs and `asn` limit keys charge nothing.
    pub asn_header: Option<String>,
    /// The TLS listener offers h2 in ALPN: only then does the `http_version` check run.
    pub listener_offers_h2: bool,
    /// `client_signals.datacenter_asns`: hosting and cloud networks besides the catalog's
    /// `datacenter_asns` (a binary search over the built-in list, a scan of these two: no
    /// sort in the module).
    pub datacenter_asns: Vec<u32>,
    /// `client_signals.not_datacenter_asns`: networks taken out of both.
    pub not_datacenter_asns: Vec<u32>,
    /// The catalog's `library_tls_fingerprints`, parsed once.
    pub library_ja4: Vec<Ja4Pattern<'static>>,
}

impl ClientSignals {
    /// Whether JA4 fingerprint `ja4` is not a browser's: a handshake without ALPN, or an
    /// HTTP library's TLS stack. A value that is no fingerprint (Envoy's `-` for a
    /// connection without TLS) is neither.
    pub fn is_library_handshake(&self, ja4: &[u8]) -> bool {
        crawlguard_contract::ja4::offers_no_alpn(ja4)
            || self.library_ja4.iter().any(|p| p.matches(ja4))
    }

    /// Whether `asn` is a hosting or cloud network: in the catalog's `datacenter_asns` or
    /// `client_signals.datacenter_asns`, and not in `client_signals.not_datacenter_asns`.
    pub fn is_datacenter(&self, asn: u32) -> bool {
        let listed = crate::identity::catalog::builtin_datacenter_asns()
            .binary_search(&asn)
            .is_ok()
            || self.datacenter_asns.contains(&asn);
        listed && !self.not_datacenter_asns.contains(&asn)
    }
}

/// Most ASNs `datacenter_asns` or `not_datacenter_asns` may list.
const MAX_LISTED_ASNS: usize = 1_000;

/// Validates `client_signals`: header names (valid, not reserved, not `class_header`, not a
/// header a browser check reads), public AS numbers (at most [`MAX_LISTED_ASNS`] per list).
///
/// Errors name the field: `client_signals.asn_header: "x" is reserved`,
/// `client_signals.datacenter_asns[2]: 64512 is not a public AS number`.
pub(super) fn compile_client_signals(
    raw: RawClientSignals,
    class_header: &str,
) -> Result<ClientSignals, ConfigError> {
    let header = |field: &str, name: Option<String>| -> Result<Option<String>, ConfigError> {
        let Some(name) = name else {
            return Ok(None);
        };
        let path = format!("client_signals.{field}");
        let lower = header_name(&path, &name)?;
        if lower == class_header {
            return Err(err(
                path,
                "is the class_header, which crawlguard itself sets",
            ));
        }
        // A header a browser sends (and a check reads) cannot also be one only Envoy sets:
        // the filter before crawlguard would overwrite the browser's, or leave the client's.
        if let Some(check) = crate::identity::catalog::builtin_browser_checks()
            .iter()
            .find(|c| c.header == lower)
        {
            return Err(err(
                path,
                format!(
                    "is {lower:?}, which browsers send and the {} check reads: a header only \
                     Envoy sets needs a name of its own",
                    check.id
                ),
            ));
        }
        Ok(Some(lower))
    };
    let ja4_header = header("ja4_header", raw.ja4_header)?;
    let asn_header = header("asn_header", raw.asn_header)?;
    if ja4_header.is_some() && ja4_header == asn_header {
        return Err(err(
            "client_signals.asn_header",
            "is the ja4_header: one header cannot carry both",
        ));
    }
    for (field, list) in [
        ("datacenter_asns", &raw.datacenter_asns),
        ("not_datacenter_asns", &raw.not_datacenter_asns),
    ] {
        if list.len() > MAX_LISTED_ASNS {
            return Err(err(
                format!("client_signals.{field}"),
                format!("at most {MAX_LISTED_ASNS} entries"),
            ));
        }
        if let Some((i, asn)) = list.iter().enumerate().find(|(_, a)| !is_public_asn(**a)) {
            return Err(err(
                format!("client_signals.{field}[{i}]"),
                format!("{asn} is not a public AS number"),
            ));
        }
    }
    // An AS number in both lists says two opposite things; which one wins is a guess.
    if let Some((i, asn)) = raw
        .not_datacenter_asns
        .iter()
        .enumerate()
        .find(|(_, a)| raw.datacenter_asns.contains(a))
    {
        return Err(err(
            format!("client_signals.not_datacenter_asns[{i}]"),
            format!("{asn} is also in client_signals.datacenter_asns"),
        ));
    }
    Ok(ClientSignals {
        ja4_header,
        asn_header,
        listener_offers_h2: raw.listener_offers_h2,
        datacenter_asns: raw.datacenter_asns,
        not_datacenter_asns: raw.not_datacenter_asns,
        library_ja4: crate::identity::catalog::library_ja4_patterns().collect(),
    })
}

/// The AS number in a header value: decimal digits, optionally after `AS` (any case), at
/// most 4294967295; surrounding blanks ignored. Anything else (empty, Envoy's `-`, a name)
/// is `None`: no network known.
pub fn parse_asn(value: &[u8]) -> Option<u32> {
    let v = value.trim_ascii();
    let digits = match v {
        [a, s, rest @ ..] if a.eq_ignore_ascii_case(&b'a') && s.eq_ignore_ascii_case(&b's') => rest,
        _ => v,
    };
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    u32::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_asn;

    #[test]
    fn asn_values_are_digits_with_an_optional_as_prefix() {
        assert_eq!(parse_asn(b"15169"), Some(15169));
        assert_eq!(parse_asn(b" AS16509 "), Some(16509));
        assert_eq!(parse_asn(b"as396982"), Some(396982));
        assert_eq!(parse_asn(b"4294967295"), Some(u32::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"AS",
            b"4294967296",
            b"99999999999",
            b"15169 GOOGLE",
            b"+1",
            b"AS-1",
            b"\xff",
        ] {
            assert_eq!(parse_asn(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
