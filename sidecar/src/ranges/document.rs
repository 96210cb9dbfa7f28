//! The vendors' range document format: lenient parsing of a document or file into a
//! [`RangeSet`], and why one is rejected ([`RangeError`]).

use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;
use serde::Deserialize;

use super::RangeSet;

/// Why a range file was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeError {
    /// The file could not be read (missing, permissions, ...).
    Io(String),
    /// The bytes are not a JSON document of the expected shape.
    Json(String),
    /// An entry holds a prefix that does not parse.
    BadPrefix {
        /// Zero-based index in `prefixes`.
        index: usize,
        /// The offending text.
        value: String,
    },
    /// The file parsed but holds no prefix (a truncated download, most likely).
    Empty,
    /// Its prefixes together cover more than `crawlguard_contract::ranges::MAX_SET_ADDRESSES`
    /// (IPv4, IPv6 addresses): no vendor publishes that much, and it would verify nearly
    /// every claimant.
    TooWide {
        /// IPv4 addresses covered.
        v4: u128,
        /// IPv6 addresses covered.
        v6: u128,
    },
}

impl std::fmt::Display for RangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RangeError::Io(e) => write!(f, "cannot read: {e}"),
            RangeError::Json(e) => write!(f, "not a range document: {e}"),
            RangeError::BadPrefix { index, value } => {
                write!(f, "prefixes[{index}]: invalid prefix {value:?}")
            }
            RangeError::Empty => write!(f, "no prefixes in file"),
            RangeError::TooWide { v4, v6 } => write!(
                f,
                "the prefixes cover {v4} IPv4 and {v6} IPv6 addresses, more than a crawler \
                 vendor publishes (at most {} and {})",
                crawlguard_contract::ranges::MAX_SET_ADDRESSES.0,
                crawlguard_contract::ranges::MAX_SET_ADDRESSES.1
            ),
        }
    }
}

impl std::error::Error for RangeError {}

#[derive(Deserialize)]
struct RangeDoc {
    // Unknown fields (creationTime, syncToken, ...) are ignored on purpose.
    prefixes: Vec<PrefixEntry>,
}

#[derive(Deserialize)]
struct PrefixEntry {
    #[serde(rename = "ipv4Prefix", default)]
    ipv4: Option<String>,
    #[serde(rename = "ipv6Prefix", default)]
    ipv6: Option<String>,
}

/// A prefix of a range file (host bits cleared; a bare address is a single-host prefix);
/// `None` for a bad one or one wider than a vendor publishes
/// (`crawlguard_contract::ranges::MIN_PREFIX_LEN`: `0.0.0.0/0` would verify everyone).
fn parse_prefix(text: &str) -> Option<IpNet> {
    let t = text.trim();
    let net = match t.parse::<IpNet>() {
        Ok(net) => net.trunc(),
        Err(_) => IpNet::from(t.parse::<IpAddr>().ok()?),
    };
    crawlguard_contract::ranges::is_plausible_prefix_len(
        matches!(net, IpNet::V4(_)),
        net.prefix_len(),
    )
    .then_some(net)
}

/// Parses one range document. See the module docs for what is accepted.
pub fn parse_range_file(bytes: &[u8]) -> Result<RangeSet, RangeError> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let doc: RangeDoc =
        serde_json::from_slice(bytes).map_err(|e| RangeError::Json(e.to_string()))?;
    let mut set = RangeSet::default();
    for (index, entry) in doc.prefixes.iter().enumerate() {
        // An entry may carry either key (or, leniently, both); each value is filed by the
        // family of the address it holds, not by the key it came under.
        for value in [&entry.ipv4, &entry.ipv6].into_iter().flatten() {
            match parse_prefix(value) {
                Some(IpNet::V4(n)) => set.v4.push(n),
                Some(IpNet::V6(n)) => set.v6.push(n),
                None => {
                    return Err(RangeError::BadPrefix {
                        index,
                        value: value.clone(),
                    })
                }
            }
        }
    }
    if set.is_empty() {
        return Err(RangeError::Empty);
    }
    use crawlguard_contract::ranges::{coverage, is_plausible_coverage, key};
    let intervals: Vec<(u128, u128)> = set
        .v4
        .iter()
        .map(|n| (IpAddr::V4(n.network()), IpAddr::V4(n.broadcast())))
        .chain(
            set.v6
                .iter()
                .map(|n| (IpAddr::V6(n.network()), IpAddr::V6(n.broadcast()))),
        )
        .map(|(a, b)| (key(a), key(b)))
        .collect();
    if !is_plausible_coverage(&intervals) {
        let (v4, v6) = coverage(&intervals);
        return Err(RangeError::TooWide { v4, v6 });
    }
    Ok(set)
}

/// Reads and parses one range file.
pub fn load_range_file(path: &Path) -> Result<RangeSet, RangeError> {
    let bytes = std::fs::read(path).map_err(|e| RangeError::Io(e.to_string()))?;
    parse_range_file(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipnet::{Ipv4Net, Ipv6Net};
    use std::path::PathBuf;

    /// `shared/data/` of the project, next to the repository root.
    fn data(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/data")
            .join(rel)
    }

    fn counts(rel: &str) -> (usize, usize) {
        let set = load_range_file(&data(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        (set.v4.len(), set.v6.len())
    }

    // Counts measured on the copies in shared/data (see shared/data/README.md).
    #[test]
    fn google_files_parse_with_both_families() {
        assert_eq!(counts("google-crawler-ips/googlebot.json"), (169, 146));
        assert_eq!(counts("google-crawler-ips/googlesc.json"), (135, 135));
        assert_eq!(counts("google-crawler-ips/googleutf.json"), (528, 528));
    }

    #[test]
    fn openai_files_parse_in_all_three_formattings() {
        assert_eq!(counts("openai-crawler-ips/gptbot.json"), (8, 0));
        assert_eq!(counts("openai-crawler-ips/searchbot.json"), (21, 0));
        // Single-line formatting.
        assert_eq!(counts("openai-crawler-ips/chatgpt-user.json"), (103, 0));
    }

    #[test]
    fn ip_fetcher_excerpts_parse() {
        assert_eq!(counts("ip-fetcher-testdata/bingbot.json"), (5, 0));
        assert_eq!(counts("ip-fetcher-testdata/perplexitybot.json"), (4, 0));
    }

    #[test]
    fn real_files_contain_their_addresses() {
        let g = load_range_file(&data("google-crawler-ips/googlebot.json")).unwrap();
        assert!(g.contains("2001:4860:4801:10::1".parse().unwrap()));
        assert!(!g.contains("2001:db8::1".parse().unwrap()));
        let gpt = load_range_file(&data("openai-crawler-ips/gptbot.json")).unwrap();
        assert!(gpt.contains("52.230.152.7".parse().unwrap()));
        assert!(gpt.contains("::ffff:52.230.152.7".parse().unwrap()));
        assert!(!gpt.contains("52.230.153.7".parse().unwrap()));
        let bing = load_range_file(&data("ip-fetcher-testdata/bingbot.json")).unwrap();
        assert!(bing.contains("20.15.133.191".parse().unwrap()));
        assert!(!bing.contains("20.15.133.192".parse().unwrap()));
    }

    #[test]
    fn lenient_about_formatting_and_extra_fields() {
        let doc = br#"\xef\xbb\xbf{"syncToken":"1","creationTime":"x","prefixes":[
            {"ipv4Prefix":" 10.1.2.3/24 ","service":"x"},
            {"ipv6Prefix":"2001:DB8::/32"},
            {"ipv4Prefix":"192.0.2.7"},
            {"comment":"no prefix here"}
        ],"other":[1,2]}"#;
        // The literal above spells the BOM as text; build the real bytes.
        let mut bytes = vec![0xef, 0xbb, 0xbf];
        bytes.extend_from_slice(&doc[12..]);
        let set = parse_range_file(&bytes).unwrap();
        assert_eq!(
            set.v4,
            vec![
                "10.1.2.0/24".parse::<Ipv4Net>().unwrap(),
                "192.0.2.7/32".parse().unwrap()
            ]
        );
        assert_eq!(set.v6, vec!["2001:db8::/32".parse::<Ipv6Net>().unwrap()]);
    }

    #[test]
    fn rejects_malformed_documents() {
        assert!(matches!(parse_range_file(b"{"), Err(RangeError::Json(_))));
        assert!(matches!(parse_range_file(b"[]"), Err(RangeError::Json(_))));
        assert!(matches!(
            parse_range_file(br#"{"creationTime":"x"}"#),
            Err(RangeError::Json(_))
        ));
        assert_eq!(
            parse_range_file(br#"{"prefixes":[]}"#),
            Err(RangeError::Empty)
        );
        assert_eq!(
            parse_range_file(
                br#"{"prefixes":[{"ipv4Prefix":"1.2.3.0/24"},{"ipv4Prefix":"1.2.3.0/33"}]}"#
            ),
            Err(RangeError::BadPrefix {
                index: 1,
                value: "1.2.3.0/33".into()
            })
        );
        // 256 /8s side by side: all of IPv4, refused whole.
        let all: Vec<String> = (0..=255)
            .map(|a| format!(r#"{{"ipv4Prefix":"{a}.0.0.0/8"}}"#))
            .collect();
        let doc = format!(r#"{{"prefixes":[{}]}}"#, all.join(","));
        assert_eq!(
            parse_range_file(doc.as_bytes()),
            Err(RangeError::TooWide { v4: 1 << 32, v6: 0 })
        );
        // Wider than any vendor publishes: refused, it would verify every claimant.
        for (wide, index) in [("0.0.0.0/0", 0), ("10.0.0.0/7", 0), ("2000::/15", 1)] {
            let key = if wide.contains(':') {
                "ipv6Prefix"
            } else {
                "ipv4Prefix"
            };
            let doc = if index == 0 {
                format!(r#"{{"prefixes":[{{"{key}":"{wide}"}}]}}"#)
            } else {
                format!(r#"{{"prefixes":[{{"ipv4Prefix":"1.2.3.0/24"}},{{"{key}":"{wide}"}}]}}"#)
            };
            assert_eq!(
                parse_range_file(doc.as_bytes()),
                Err(RangeError::BadPrefix {
                    index,
                    value: wide.into()
                }),
                "{wide}"
            );
        }
        assert!(matches!(
            parse_range_file(br#"{"prefixes":[{"ipv4Prefix":5}]}"#),
            Err(RangeError::Json(_))
        ));
        assert!(matches!(
            parse_range_file(&[0xff, 0xfe, 0x00]),
            Err(RangeError::Json(_))
        ));
    }
}
