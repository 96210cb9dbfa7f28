//! The catalog's browser checks (`browser_checks` in `contract/catalog/bots.json`): what a
//! current browser of a family always sends on a request, so that a request with that
//! browser's User-Agent and without it is not that browser (an HTTP library behind a copied
//! User-Agent). Each check is one header; the filter runs it on requests classed `human`
//! and gives those that fail it the class `suspect_browser`.

use super::{Catalog, CatalogError};
use serde::{Deserialize, Serialize};

/// One browser check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserCheck {
    /// Stable id, `[a-z_]{1,32}`: the configuration's switch (`browser_checks.<id>`) and the
    /// counter `crawlguard.browser_check.<id>.inconsistent`.
    pub id: String,
    /// The request header (lowercase) every browser the check names sends: present with
    /// any value passes.
    pub header: String,
    /// The browsers it applies to: a User-Agent naming one of them at its minimum version.
    pub browsers: Vec<BrowserVersion>,
    /// Lowercase User-Agent substrings that excuse the check (an Android WebView, `; wv)`,
    /// is Chromium without every header of Chrome).
    #[serde(default)]
    pub unless: Vec<String>,
    /// Only on a request that came over TLS: browsers send the header only to secure
    /// origins (a potentially trustworthy URL, Fetch Metadata section 2 and Client Hints
    /// Infrastructure section 3.1).
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

impl Catalog {
    /// The browser checks' part of [`Catalog::validate`]: unique ids of `[a-z_]{1,32}`, a
    /// lowercase header name, at least one browser, lowercase tokens ending in `/`, a known
    /// source. Returns the sources the checks cite.
    pub(super) fn validate_browser_checks(&self) -> Result<Vec<&str>, CatalogError> {
        let mut ids = std::collections::HashSet::new();
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
            let header_ok = !c.header.is_empty()
                && c.header
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !header_ok {
                return err("header", format!("{:?}: a lowercase header name", c.header));
            }
            if c.browsers.is_empty() {
                return err("browsers", "must not be empty".into());
            }
            for b in &c.browsers {
                if !b.token.ends_with('/') || b.token != b.token.to_ascii_lowercase() {
                    return err(
                        "browsers",
                        format!("{:?}: a lowercase product token ending in /", b.token),
                    );
                }
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
        Ok(cited)
    }

    /// The README's table of browser checks: id, header, browsers, excuses, TLS only,
    /// source.
    pub fn markdown_browser_checks(&self) -> String {
        let mut out = String::from(
            "| check | header | browsers (from version) | unless the User-Agent has | only over TLS | source |\n\
             |---|---|---|---|---|---|\n",
        );
        for c in &self.browser_checks {
            let browsers: Vec<String> = c
                .browsers
                .iter()
                .map(|b| format!("`{}` {}", b.token, b.min_major))
                .collect();
            let unless: Vec<String> = c.unless.iter().map(|u| format!("`{u}`")).collect();
            let source = self
                .sources
                .get(&c.source)
                .map_or(c.source.clone(), |s| format!("[{}]({})", s.name, s.url));
            out.push_str(&format!(
                "| `{}` | `{}` | {} | {} | {} | {} |\n",
                c.id,
                c.header,
                browsers.join(", "),
                if unless.is_empty() {
                    "-".to_string()
                } else {
                    unless.join(", ")
                },
                if c.secure_only { "yes" } else { "no" },
                source
            ));
        }
        out
    }
}
