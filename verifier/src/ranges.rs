//! Published IP-range files (`{"creationTime": .., "prefixes": [{"ipv4Prefix": ..} | {"ipv6Prefix": ..}]}`)
//! and their hot reload.
//!
//! Google, OpenAI, Bing, Perplexity and others publish their crawler ranges in this format.
//! Parsing is lenient about what does not matter (extra fields, whitespace, formatting,
//! a UTF-8 BOM, host bits set in a prefix, a bare address without `/len`) and strict about
//! what does: a file that is not JSON, has no `prefixes` array, holds a prefix that does not
//! parse, or holds no prefix at all is rejected as a whole. A half-written or truncated file
//! must never silently shrink a bot's ranges; the previously loaded ranges stay instead.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Deserialize;

/// A set of IPv4 and IPv6 prefixes, as loaded from one or more range files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// IPv4 prefixes, host bits cleared, in file order.
    pub v4: Vec<Ipv4Net>,
    /// IPv6 prefixes, host bits cleared, in file order.
    pub v6: Vec<Ipv6Net>,
}

impl RangeSet {
    /// True when `ip` lies inside one of the prefixes. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is checked as the IPv4 address it carries.
    pub fn contains(&self, ip: IpAddr) -> bool {
        // Linear scans: the largest real file (Google's user-triggered fetchers) has ~1,000
        // prefixes, a few microseconds per check, and the result is cached per (ip, bot).
        match ip.to_canonical() {
            IpAddr::V4(v4) => self.v4.iter().any(|n| n.contains(&v4)),
            IpAddr::V6(v6) => self.v6.iter().any(|n| n.contains(&v6)),
        }
    }

    /// Number of prefixes of both families.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// True when the set holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

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

fn parse_prefix(text: &str) -> Option<IpNet> {
    let t = text.trim();
    if let Ok(net) = t.parse::<IpNet>() {
        return Some(net.trunc());
    }
    // A bare address is a single-host prefix.
    t.parse::<IpAddr>().ok().map(IpNet::from)
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
    Ok(set)
}

/// Reads and parses one range file.
pub fn load_range_file(path: &Path) -> Result<RangeSet, RangeError> {
    let bytes = std::fs::read(path).map_err(|e| RangeError::Io(e.to_string()))?;
    parse_range_file(&bytes)
}

/// What happened to one file during a [`RangeStore::refresh`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// The file had not changed since the last look.
    Unchanged,
    /// The file changed and its new ranges are in use.
    Loaded {
        /// Prefixes now in use for this file.
        prefixes: usize,
    },
    /// The file changed (or is missing) but could not be used; the previous ranges stay.
    Failed {
        /// Why the file was rejected.
        error: RangeError,
        /// Prefixes still in use for this file (from the last good load, 0 if none).
        kept_prefixes: usize,
    },
}

#[derive(Debug, Default)]
struct FileState {
    /// Last good ranges of this file; empty until the first good load.
    ranges: Arc<RangeSet>,
    /// (mtime, length) of the last version looked at, good or bad, so a bad file is
    /// reported once per change rather than once per poll.
    seen: Option<(Option<SystemTime>, u64)>,
    /// Whether the last version looked at was rejected.
    failed: bool,
}

/// The current ranges of every configured file, keyed by path.
///
/// Several bots may share one file (all Google crawlers and `googlebot.json`), so files are
/// loaded once and bots look them up by path.
#[derive(Debug, Default)]
pub struct RangeStore {
    files: RwLock<HashMap<PathBuf, FileState>>,
}

impl RangeStore {
    /// A store watching `paths`; nothing is loaded until [`RangeStore::refresh`].
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let files = paths
            .into_iter()
            .map(|p| (p, FileState::default()))
            .collect();
        RangeStore {
            files: RwLock::new(files),
        }
    }

    /// The watched paths, sorted.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.read().keys().cloned().collect();
        paths.sort();
        paths
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<PathBuf, FileState>> {
        // A poisoned lock only means another thread panicked while holding it; the map is
        // still consistent (every write is a single insert), so keep serving.
        self.files.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<PathBuf, FileState>> {
        self.files.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The ranges currently in use for `path` (empty if never loaded or not watched).
    pub fn get(&self, path: &Path) -> Arc<RangeSet> {
        self.read()
            .get(path)
            .map(|s| s.ranges.clone())
            .unwrap_or_default()
    }

    /// True when `ip` is inside the current ranges of any of `paths`.
    pub fn contains_any(&self, paths: &[PathBuf], ip: IpAddr) -> bool {
        let files = self.read();
        paths
            .iter()
            .filter_map(|p| files.get(p))
            .any(|s| s.ranges.contains(ip))
    }

    /// True when at least one of `paths` currently has ranges loaded.
    pub fn any_loaded(&self, paths: &[PathBuf]) -> bool {
        let files = self.read();
        paths
            .iter()
            .filter_map(|p| files.get(p))
            .any(|s| !s.ranges.is_empty())
    }

    /// Looks at every watched file and reloads those whose (mtime, length) changed.
    /// Blocking file I/O: call it from a blocking context (`spawn_blocking`) in async code.
    pub fn refresh(&self) -> Vec<(PathBuf, RefreshOutcome)> {
        let paths = self.paths();
        let mut outcomes = Vec::with_capacity(paths.len());
        for path in paths {
            let outcome = self.refresh_one(&path);
            outcomes.push((path, outcome));
        }
        outcomes
    }

    fn refresh_one(&self, path: &Path) -> RefreshOutcome {
        let stamp = std::fs::metadata(path).map(|m| (m.modified().ok(), m.len()));
        let (previous_seen, kept) = {
            let files = self.read();
            let state = files.get(path);
            (
                state.and_then(|s| s.seen),
                state.map(|s| s.ranges.len()).unwrap_or(0),
            )
        };
        let stamp = match stamp {
            Ok(stamp) => stamp,
            Err(e) => {
                // Missing file: report it once, keep what we had.
                let mut files = self.write();
                let state = files.entry(path.to_path_buf()).or_default();
                let first_report = state.seen.is_some() || !state.failed;
                state.seen = None;
                state.failed = true;
                return if first_report {
                    RefreshOutcome::Failed {
                        error: RangeError::Io(e.to_string()),
                        kept_prefixes: kept,
                    }
                } else {
                    RefreshOutcome::Unchanged
                };
            }
        };
        if previous_seen == Some(stamp) {
            return RefreshOutcome::Unchanged;
        }
        let result = load_range_file(path);
        let mut files = self.write();
        let state = files.entry(path.to_path_buf()).or_default();
        state.seen = Some(stamp);
        match result {
            Ok(set) => {
                let prefixes = set.len();
                state.ranges = Arc::new(set);
                state.failed = false;
                RefreshOutcome::Loaded { prefixes }
            }
            Err(error) => {
                state.failed = true;
                RefreshOutcome::Failed {
                    error,
                    kept_prefixes: state.ranges.len(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(matches!(
            parse_range_file(br#"{"prefixes":[{"ipv4Prefix":5}]}"#),
            Err(RangeError::Json(_))
        ));
        assert!(matches!(
            parse_range_file(&[0xff, 0xfe, 0x00]),
            Err(RangeError::Json(_))
        ));
    }

    #[test]
    fn malformed_file_keeps_previous_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bot.json");
        std::fs::write(&path, br#"{"prefixes":[{"ipv4Prefix":"127.10.0.0/16"}]}"#).unwrap();
        let store = RangeStore::new([path.clone()]);
        assert_eq!(
            store.refresh(),
            vec![(path.clone(), RefreshOutcome::Loaded { prefixes: 1 })]
        );
        let ip: IpAddr = "127.10.1.1".parse().unwrap();
        assert!(store.contains_any(std::slice::from_ref(&path), ip));

        std::fs::write(&path, b"{\"prefixes\": [ {\"ipv4Prefix\": ").unwrap();
        let outcome = store.refresh();
        assert!(matches!(
            &outcome[0].1,
            RefreshOutcome::Failed {
                error: RangeError::Json(_),
                kept_prefixes: 1
            }
        ));
        assert!(store.contains_any(std::slice::from_ref(&path), ip));
        // Reported once per change, not on every poll.
        assert_eq!(store.refresh()[0].1, RefreshOutcome::Unchanged);

        // A missing file is reported and the ranges stay as well.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            store.refresh()[0].1,
            RefreshOutcome::Failed {
                error: RangeError::Io(_),
                kept_prefixes: 1
            }
        ));
        assert_eq!(store.refresh()[0].1, RefreshOutcome::Unchanged);
        assert!(store.contains_any(std::slice::from_ref(&path), ip));

        // A valid replacement is picked up.
        std::fs::write(
            &path,
            br#"{"prefixes":[{"ipv4Prefix":"127.20.0.0/16"},{"ipv6Prefix":"2001:db8::/48"}]}"#,
        )
        .unwrap();
        assert_eq!(store.refresh()[0].1, RefreshOutcome::Loaded { prefixes: 2 });
        assert!(!store.contains_any(std::slice::from_ref(&path), ip));
        assert!(store.contains_any(
            std::slice::from_ref(&path),
            "2001:db8:0:1::5".parse().unwrap()
        ));
        assert!(store.any_loaded(std::slice::from_ref(&path)));
        assert!(!store.any_loaded(&[dir.path().join("other.json")]));
    }
}
