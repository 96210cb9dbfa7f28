//! What the browser checks compare a request's signals with: the TLS stacks of HTTP
//! libraries ([`LibraryTlsFingerprint`], for the `tls_fingerprint` signal) and the hosting
//! and cloud networks ([`DatacenterAsn`], for the `network` signal), each entry with its
//! source, and their README tables.

use super::{Catalog, CatalogError};
use crate::ja4::Ja4Pattern;
use serde::{Deserialize, Serialize};

/// An HTTP library's TLS stack, as its JA4 fingerprints show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibraryTlsFingerprint {
    /// A [`Ja4Pattern`]: `a_b_c`, each part exact or `*`; usually the `b` part alone, the
    /// hash of the library's default cipher suites, which no browser shares.
    pub ja4: String,
    /// Who sends it (`Python 3 ssl (OpenSSL)`).
    pub stack: String,
    /// Key into [`Catalog::sources`].
    pub source: String,
    /// How the entry was found.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

/// A hosting or cloud network: a person's browser does not come from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatacenterAsn {
    /// The autonomous system number (1..=4294967294, not a private-use one).
    pub asn: u32,
    /// Its holder and what it is (`Amazon AWS (AMAZON-02)`).
    pub name: String,
    /// Key into [`Catalog::sources`].
    pub source: String,
}

impl Catalog {
    /// The signal lists' part of [`Catalog::validate`]: library fingerprints are valid
    /// [`Ja4Pattern`]s, unique, with a stack name; datacenter ASNs are public, unique and in
    /// ascending order (the filter looks them up by binary search), with a name; each cites
    /// a known source. Returns the sources cited.
    pub(super) fn validate_browser_signals(&self) -> Result<Vec<&str>, CatalogError> {
        let mut cited = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, f) in self.library_tls_fingerprints.iter().enumerate() {
            let err = |field: &str, why: String| {
                Err(CatalogError(format!(
                    "library_tls_fingerprints[{i}].{field}: {why}"
                )))
            };
            if let Err(e) = Ja4Pattern::parse(&f.ja4) {
                return err("ja4", e);
            }
            if !seen.insert(f.ja4.as_str()) {
                return err("ja4", format!("{:?} is listed twice", f.ja4));
            }
            if f.stack.trim().is_empty() {
                return err("stack", "must name the library".into());
            }
            if !self.sources.contains_key(&f.source) {
                return err("source", format!("{:?} is not in sources", f.source));
            }
            cited.push(f.source.as_str());
        }
        let mut last = 0u32;
        for (i, a) in self.datacenter_asns.iter().enumerate() {
            let err = |field: &str, why: String| {
                Err(CatalogError(format!(
                    "datacenter_asns[{i}] (AS{}).{field}: {why}",
                    a.asn
                )))
            };
            if !is_public_asn(a.asn) {
                return err("asn", "not a public AS number".into());
            }
            if a.asn <= last {
                return err(
                    "asn",
                    format!("must come after AS{last} (ascending, unique)"),
                );
            }
            last = a.asn;
            if a.name.trim().is_empty() {
                return err("name", "must name the network".into());
            }
            if !self.sources.contains_key(&a.source) {
                return err("source", format!("{:?} is not in sources", a.source));
            }
            cited.push(a.source.as_str());
        }
        Ok(cited)
    }

    /// The README's table of library TLS stacks: pattern, stack, source.
    pub fn markdown_library_tls_fingerprints(&self) -> String {
        let mut out = String::from("| JA4 | TLS stack | source |\n|---|---|---|\n");
        for f in &self.library_tls_fingerprints {
            out.push_str(&format!(
                "| `{}` | {} | {} |\n",
                f.ja4,
                f.stack,
                self.source_link(&f.source)
            ));
        }
        out
    }

    /// The README's table of datacenter networks: ASN, holder, source.
    pub fn markdown_datacenter_asns(&self) -> String {
        let mut out = String::from("| ASN | network | source |\n|---|---|---|\n");
        for a in &self.datacenter_asns {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                a.asn,
                a.name,
                self.source_link(&a.source)
            ));
        }
        out
    }
}

/// Whether `asn` is a public AS number: not 0, AS_TRANS (23456), documentation
/// (64496..=65551), private use (64512..=65534, 4200000000..=4294967294) or reserved
/// (65535, 4294967295), per RFC 6996, RFC 5398 and RFC 7300.
pub fn is_public_asn(asn: u32) -> bool {
    !matches!(asn, 0 | 23456 | 64496..=131071 | 4_200_000_000..)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_asns_leave_out_reserved_and_private_ranges() {
        for asn in [1, 15169, 16509, 396982, 4_199_999_999] {
            assert!(is_public_asn(asn), "{asn}");
        }
        for asn in [
            0,
            23456,
            64496,
            64512,
            65534,
            65535,
            131071,
            4_200_000_000,
            u32::MAX,
        ] {
            assert!(!is_public_asn(asn), "{asn}");
        }
    }
}
