//! The catalog's browser checks (`browser_checks` in `contract/catalog/bots.json`): what a
//! current browser of a family always shows, so that a request with that browser's
//! User-Agent and without it is not that browser (an HTTP library behind a copied
//! User-Agent, or a machine in a datacenter). The filter runs them on requests classed
//! `human` and gives those that fail one the class `suspect_browser`.
//!
//! Each check reads one signal ([`Signal`]): a request header a browser always sends, the
//! TLS handshake's JA4 fingerprint (against [`Catalog::library_tls_fingerprints`]), the HTTP
//! version, or the client's network (against [`Catalog::datacenter_asns`]). The two lists
//! and their README tables live in `browser_signals.rs`.

use super::{Catalog, CatalogError};
use serde::{Deserialize, Serialize};

/// What a browser check looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// A request header (`header`) every browser the check names sends: present with any
    /// value passes.
    Header,
    /// The TLS ClientHello's JA4 fingerprint (FoxIO's JA4 spec), as a trusted header sets
    /// it: a browser offers ALPN (JA4 `a` part not ending in `00`) and is no HTTP library's
    /// TLS stack ([`Catalog::library_tls_fingerprints`]).
    TlsFingerprint,
    /// The HTTP version: a browser that names h2 in ALPN gets HTTP/2 from a TLS listener
    /// that offers h2, so HTTP/1.x there is not that browser.
    HttpVersion,
    /// The client's autonomous system, as a trusted header sets it: a browser of a person
    /// does not browse from a hosting or cloud network ([`Catalog::datacenter_asns`]).
    Network,
}

impl Signal {
    /// The name in the data file and the README (`header`, `tls_fingerprint`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Header => "header",
            Signal::TlsFingerprint => "tls_fingerprint",
            Signal::HttpVersion => "http_version",
            Signal::Network => "network",
        }
    }
}

/// One browser check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserCheck {
    /// Stable id, `[a-z_]{1,32}`: the configuration's switch (`browser_checks.<id>`) and the
    /// counter `crawlguard.browser_check.<id>.inconsistent`.
    pub id: String,
    /// What the check looks at.
    pub signal: Signal,
    /// With [`Signal::Header`] (and only then): the request header (lowercase) every
    /// browser the check names sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The browsers it applies to: a User-Agent naming one of them at its minimum version.
    /// Empty only for [`Signal::Network`]: every `human` User-Agent.
    #[serde(default)]
    pub browsers: Vec<BrowserVersion>,
    /// Lowercase User-Agent substrings that excuse the check (an Android WebView, `; wv)`,
    /// is Chromium without every header of Chrome).
    #[serde(default)]
    pub unless: Vec<String>,
    /// Only on a request that came over TLS: browsers send the header only to secure
    /// origins (a potentially trustworthy URL, Fetch Metadata section 2 and Client Hints
    /// Infrastructure section 3.1); ALPN exists only over TLS. Never for the TLS fingerprint,
    /// whose trusted header is itself the evidence of a handshake (Envoy's, or a CDN's).
    pub secure_only: bool,
    /// Key into [`Catalog::sources`].
    pub source: String,
    /// What the check says and why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

/// A browser family and the first version a check holds for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserVersion {
    /// The product token before the version, lowercase with its `/` (`chrome/`).
    pub token: String,
    /// The first major version that sends the header (older ones are not checked).
    pub min_major: u32,
}

/// Longest id of a check.
const MAX_ID_LEN: usize = 32;

/// Most distinct browser tokens across all checks: the filter reads each token's version
/// once per request into a fixed array of this size.
pub const MAX_BROWSER_TOKENS: usize = 8;

impl Catalog {
    /// The browser checks' part of [`Catalog::validate`]: unique ids of `[a-z_]{1,32}`, a
    /// lowercase header name exactly for a header check, browsers (lowercase tokens ending
    /// in `/`, at most [`MAX_BROWSER_TOKENS`] distinct ones in all) for every check but a
    /// network one, `secure_only` for the HTTP version check and not for the TLS fingerprint
    /// (a CDN's JA4 header comes over plain HTTP), a known source; then
    /// the library fingerprints and datacenter networks. Returns the sources cited.
    pub(super) fn validate_browser_checks(&self) -> Result<Vec<&str>, CatalogError> {
        let mut ids = std::collections::HashSet::new();
        let mut tokens = std::collections::HashSet::new();
        let mut cited = Vec::new();
        for (i, c) in self.browser_checks.iter().enumerate() {
            let err = |field: &str, why: String| {
                Err(CatalogError(format!(
                    "browser_checks[{i}] ({}).{field}: {why}",
                    c.id
                )))
            };
            let id_ok = (1..=MAX_ID_LEN).contains(&c.id.len())
                && c.id.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
            if !id_ok {
                return err("id", format!("must be 1..={MAX_ID_LEN} bytes of [a-z_]"));
            }
            if !ids.insert(c.id.as_str()) {
                return err("id", "duplicate id".into());
            }
            match (&c.header, c.signal) {
                (Some(h), Signal::Header) => {
                    let ok = !h.is_empty()
                        && h.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
                    if !ok {
                        return err("header", format!("{h:?}: a lowercase header name"));
                    }
                }
                (None, Signal::Header) => return err("header", "a header check needs one".into()),
                (Some(_), s) => {
                    return err(
                        "header",
                        format!("only for a header check, not {}", s.as_str()),
                    )
                }
                (None, _) => {}
            }
            if c.browsers.is_empty() && c.signal != Signal::Network {
                return err("browsers", "must not be empty".into());
            }
            // The HTTP version check reads this connection's ALPN. The TLS fingerprint is
            // not tied to it: its header is the evidence of a handshake, Envoy's or a CDN's
            // that ends TLS and speaks plain HTTP to Envoy.
            if !c.secure_only && c.signal == Signal::HttpVersion {
                return err("secure_only", "ALPN exists only over TLS".into());
            }
            if c.secure_only && c.signal == Signal::TlsFingerprint {
                return err(
                    "secure_only",
                    "a JA4 header proves a handshake, a CDN's too: judge it over any connection"
                        .into(),
                );
            }
            for b in &c.browsers {
                if !b.token.ends_with('/') || b.token != b.token.to_ascii_lowercase() {
                    return err(
                        "browsers",
                        format!("{:?}: a lowercase product token ending in /", b.token),
                    );
                }
                tokens.insert(b.token.as_str());
            }
            if tokens.len() > MAX_BROWSER_TOKENS {
                return err(
                    "browsers",
                    format!("more than {MAX_BROWSER_TOKENS} distinct tokens in all checks"),
                );
            }
            for u in &c.unless {
                if u.trim().is_empty() || *u != u.to_ascii_lowercase() {
                    return err("unless", format!("{u:?} is blank or not lowercase"));
                }
            }
            if !self.sources.contains_key(&c.source) {
                return err("source", format!("{:?} is not in sources", c.source));
            }
            cited.push(c.source.as_str());
        }
        cited.extend(self.validate_browser_signals()?);
        Ok(cited)
    }

    /// The README's table of browser checks: id, what it reads, browsers, excuses, TLS
    /// only, source.
    pub fn markdown_browser_checks(&self) -> String {
        let mut out = String::from(
            "| check | signal | browsers (from version) | unless the User-Agent has | only over TLS | source |\n\
             |---|---|---|---|---|---|\n",
        );
        for c in &self.browser_checks {
            let browsers: Vec<String> = c
                .browsers
                .iter()
                .map(|b| format!("`{}` {}", b.token, b.min_major))
                .collect();
            let unless: Vec<String> = c.unless.iter().map(|u| format!("`{u}`")).collect();
            let signal = match &c.header {
                Some(h) => format!("header `{h}`"),
                None => format!("`{}`", c.signal.as_str()),
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} |\n",
                c.id,
                signal,
                if browsers.is_empty() {
                    "every `human` User-Agent".to_string()
                } else {
                    browsers.join(", ")
                },
                if unless.is_empty() {
                    "-".to_string()
                } else {
                    unless.join(", ")
                },
                if c.secure_only { "yes" } else { "no" },
                self.source_link(&c.source)
            ));
        }
        out
    }

    /// `[name](url)` of source `key`, or the key itself when unknown.
    pub(super) fn source_link(&self, key: &str) -> String {
        self.sources
            .get(key)
            .map_or(key.to_string(), |s| format!("[{}]({})", s.name, s.url))
    }
}

#[cfg(test)]
mod tests {
    use crate::catalog::{Catalog, BOTS_JSON};

    /// The built-in catalog with the `secure_only` of check `id` set to `to`.
    fn with_secure_only(id: &str, to: bool) -> String {
        let at = BOTS_JSON
            .find(&format!(r#""id": "{id}""#))
            .unwrap_or_else(|| panic!("no check {id}"));
        let (head, tail) = BOTS_JSON.split_at(at);
        let from = format!(r#""secure_only": {}"#, !to);
        assert!(tail.contains(&from), "{id} is not {from}");
        format!(
            "{head}{}",
            tail.replacen(&from, &format!(r#""secure_only": {to}"#), 1)
        )
    }

    #[test]
    fn only_the_http_version_check_is_tied_to_this_connections_tls() {
        assert!(Catalog::parse(BOTS_JSON).is_ok());
        let refused = |json: String| match Catalog::parse(&json) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.0,
        };
        assert_eq!(
            refused(with_secure_only("tls_fingerprint", true)),
            "browser_checks[2] (tls_fingerprint).secure_only: a JA4 header proves a handshake, \
             a CDN's too: judge it over any connection"
        );
        assert_eq!(
            refused(with_secure_only("http_version", false)),
            "browser_checks[3] (http_version).secure_only: ALPN exists only over TLS"
        );
    }
}
