//! Published IP ranges (`{"creationTime": .., "prefixes": [{"ipv4Prefix": ..} | {"ipv6Prefix": ..}]}`),
//! their sources (local files and URLs) and the ranges currently in use per source.
//!
//! Google, OpenAI, Bing, Perplexity and others publish their crawler ranges in this format.
//! Parsing is lenient about what does not matter (extra fields, whitespace, formatting,
//! a UTF-8 BOM, host bits set in a prefix, a bare address without `/len`) and strict about
//! what does: a document that is not JSON, has no `prefixes` array, holds a prefix that does
//! not parse, or holds no prefix at all is rejected as a whole. A half-written or truncated
//! file, or a download that went wrong, must never silently shrink a bot's ranges; the
//! previously loaded ranges stay instead.
//!
//! [`RangeStore`] keeps the ranges of every [`RangeSource`]: files are re-read here when they
//! change ([`RangeStore::refresh_files`]); URLs are fetched by [`crate::fetch`], which installs
//! what it gets ([`RangeStore::install`]). Each source remembers when its data was last
//! confirmed current, for the age and staleness metrics ([`RangeStore::status`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

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

/// Where a bot's ranges come from: a local file (re-read when it changes) or a URL (fetched
/// on start and every `ranges.refresh_interval_s`, last good copy cached on disk).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RangeSource {
    /// A file in the vendors' format.
    File(PathBuf),
    /// An `http://` or `https://` address of a document in the vendors' format.
    Url(String),
}

impl RangeSource {
    /// `http://...` and `https://...` are URLs (scheme case-insensitive); anything else is a
    /// file path.
    pub fn parse(text: &str) -> RangeSource {
        let lower = text.get(..8).unwrap_or(text).to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            RangeSource::Url(text.to_string())
        } else {
            RangeSource::File(PathBuf::from(text))
        }
    }

    /// The source as written in logs and metric labels: the path or the URL.
    pub fn label(&self) -> String {
        match self {
            RangeSource::File(p) => p.display().to_string(),
            RangeSource::Url(u) => u.clone(),
        }
    }

    /// True for a URL source.
    pub fn is_url(&self) -> bool {
        matches!(self, RangeSource::Url(_))
    }
}

impl std::fmt::Display for RangeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// Reads and parses one range file.
pub fn load_range_file(path: &Path) -> Result<RangeSet, RangeError> {
    let bytes = std::fs::read(path).map_err(|e| RangeError::Io(e.to_string()))?;
    parse_range_file(&bytes)
}

/// What happened to one file during a [`RangeStore::refresh_files`].
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
struct SourceState {
    /// Last good ranges of this source; empty until the first good load.
    ranges: Arc<RangeSet>,
    /// When the ranges in use were last confirmed current: the loaded file's mtime, or the
    /// time a URL last answered with them (200 or 304; for a cached copy, when it was
    /// fetched). `None` until the first good load.
    confirmed: Option<SystemTime>,
    /// Files: (mtime, length) of the last version looked at, good or bad, so a bad file is
    /// reported once per change rather than once per poll.
    seen: Option<(Option<SystemTime>, u64)>,
    /// Files: whether the last version looked at was rejected.
    failed: bool,
    /// Failed loads or fetches since the last good one.
    failures: u32,
    /// Whether the source was reported stale (so the log says it once per change).
    stale: bool,
}

/// One source's state, for metrics and logs ([`RangeStore::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    /// The source.
    pub source: RangeSource,
    /// Prefixes in use (0 until the first good load).
    pub prefixes: usize,
    /// Age of the data in use (`None` without data): time since it was last confirmed
    /// current (see [`RangeStore::install`], [`RangeStore::confirm`]).
    pub age: Option<Duration>,
    /// Failed loads or fetches since the last good one.
    pub failures: u32,
    /// Whether the data is older than the maximum age given to [`RangeStore::status`].
    pub stale: bool,
}

/// A change of staleness found by [`RangeStore::check_staleness`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StalenessChange {
    /// The source.
    pub source: RangeSource,
    /// True: it became stale; false: it is fresh again.
    pub stale: bool,
    /// Age of its data.
    pub age: Duration,
}

/// The current ranges of every configured source.
///
/// Several bots may share one source (all Google crawlers and the common-crawlers file), so
/// sources are loaded once and bots look them up.
#[derive(Debug, Default)]
pub struct RangeStore {
    sources: RwLock<HashMap<RangeSource, SourceState>>,
}

impl RangeStore {
    /// A store for `sources`; nothing is loaded until [`RangeStore::refresh_files`] or
    /// [`RangeStore::install`].
    pub fn new(sources: impl IntoIterator<Item = RangeSource>) -> Self {
        let sources = sources
            .into_iter()
            .map(|s| (s, SourceState::default()))
            .collect();
        RangeStore {
            sources: RwLock::new(sources),
        }
    }

    /// Every source, sorted (files first, then URLs).
    pub fn sources(&self) -> Vec<RangeSource> {
        let mut sources: Vec<RangeSource> = self.read().keys().cloned().collect();
        sources.sort();
        sources
    }

    /// The URL sources, sorted.
    pub fn urls(&self) -> Vec<String> {
        self.sources()
            .into_iter()
            .filter_map(|s| match s {
                RangeSource::Url(u) => Some(u),
                RangeSource::File(_) => None,
            })
            .collect()
    }

    /// The file sources, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.sources()
            .into_iter()
            .filter_map(|s| match s {
                RangeSource::File(p) => Some(p),
                RangeSource::Url(_) => None,
            })
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<RangeSource, SourceState>> {
        // A poisoned lock only means another thread panicked while holding it; the map is
        // still consistent (every write is a single update), so keep serving.
        self.sources.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<RangeSource, SourceState>> {
        self.sources.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The ranges currently in use for `source` (empty if never loaded or not configured).
    pub fn get(&self, source: &RangeSource) -> Arc<RangeSet> {
        self.read()
            .get(source)
            .map(|s| s.ranges.clone())
            .unwrap_or_default()
    }

    /// True when `ip` is inside the current ranges of any of `sources`.
    pub fn contains_any(&self, sources: &[RangeSource], ip: IpAddr) -> bool {
        let map = self.read();
        sources
            .iter()
            .filter_map(|s| map.get(s))
            .any(|s| s.ranges.contains(ip))
    }

    /// True when at least one of `sources` currently has ranges loaded.
    pub fn any_loaded(&self, sources: &[RangeSource]) -> bool {
        let map = self.read();
        sources
            .iter()
            .filter_map(|s| map.get(s))
            .any(|s| !s.ranges.is_empty())
    }

    /// Puts `ranges` in use for `source`, confirmed current at `confirmed`; returns the
    /// number of prefixes. For fetched documents and cached copies.
    pub fn install(&self, source: &RangeSource, ranges: RangeSet, confirmed: SystemTime) -> usize {
        let prefixes = ranges.len();
        let mut map = self.write();
        let state = map.entry(source.clone()).or_default();
        state.ranges = Arc::new(ranges);
        state.confirmed = Some(confirmed);
        state.failures = 0;
        prefixes
    }

    /// The source answered that the ranges in use are still current (HTTP 304) at `at`.
    pub fn confirm(&self, source: &RangeSource, at: SystemTime) {
        let mut map = self.write();
        let state = map.entry(source.clone()).or_default();
        if !state.ranges.is_empty() {
            state.confirmed = Some(at);
        }
        state.failures = 0;
    }

    /// A load or fetch of `source` failed; the ranges in use stay. Returns how many prefixes
    /// stay in use.
    pub fn record_failure(&self, source: &RangeSource) -> usize {
        let mut map = self.write();
        let state = map.entry(source.clone()).or_default();
        state.failures = state.failures.saturating_add(1);
        state.ranges.len()
    }

    /// Every source's state at `now`; `stale` when the data is older than `max_age`.
    pub fn status(&self, now: SystemTime, max_age: Duration) -> Vec<SourceStatus> {
        let map = self.read();
        let mut out: Vec<SourceStatus> = map
            .iter()
            .map(|(source, s)| {
                let age = s
                    .confirmed
                    .map(|c| now.duration_since(c).unwrap_or_default());
                SourceStatus {
                    source: source.clone(),
                    prefixes: s.ranges.len(),
                    age,
                    failures: s.failures,
                    stale: age.is_some_and(|a| a > max_age),
                }
            })
            .collect();
        out.sort_by(|a, b| a.source.cmp(&b.source));
        out
    }

    /// The sources whose staleness changed since the last call (a source with data older
    /// than `max_age` is stale; one that got fresh data again is not), so each change is
    /// logged once.
    pub fn check_staleness(&self, now: SystemTime, max_age: Duration) -> Vec<StalenessChange> {
        let mut map = self.write();
        let mut changes = Vec::new();
        for (source, s) in map.iter_mut() {
            let Some(confirmed) = s.confirmed else {
                continue;
            };
            let age = now.duration_since(confirmed).unwrap_or_default();
            let stale = age > max_age;
            if stale != s.stale {
                s.stale = stale;
                changes.push(StalenessChange {
                    source: source.clone(),
                    stale,
                    age,
                });
            }
        }
        changes.sort_by(|a, b| a.source.cmp(&b.source));
        changes
    }

    /// Looks at every file source and reloads those whose (mtime, length) changed.
    /// Blocking file I/O: call it from a blocking context (`spawn_blocking`) in async code.
    pub fn refresh_files(&self) -> Vec<(PathBuf, RefreshOutcome)> {
        let paths = self.files();
        let mut outcomes = Vec::with_capacity(paths.len());
        for path in paths {
            let outcome = self.refresh_file(&path);
            outcomes.push((path, outcome));
        }
        outcomes
    }

    fn refresh_file(&self, path: &Path) -> RefreshOutcome {
        let key = RangeSource::File(path.to_path_buf());
        let stamp = std::fs::metadata(path).map(|m| (m.modified().ok(), m.len()));
        let (previous_seen, kept) = {
            let map = self.read();
            let state = map.get(&key);
            (
                state.and_then(|s| s.seen),
                state.map(|s| s.ranges.len()).unwrap_or(0),
            )
        };
        let stamp = match stamp {
            Ok(stamp) => stamp,
            Err(e) => {
                // Missing file: report it once, keep what we had.
                let mut map = self.write();
                let state = map.entry(key).or_default();
                let first_report = state.seen.is_some() || !state.failed;
                state.seen = None;
                state.failed = true;
                return if first_report {
                    state.failures = state.failures.saturating_add(1);
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
        let mut map = self.write();
        let state = map.entry(key).or_default();
        state.seen = Some(stamp);
        match result {
            Ok(set) => {
                let prefixes = set.len();
                state.ranges = Arc::new(set);
                // A file is as current as its last write (now, if the clock says otherwise).
                state.confirmed = Some(stamp.0.unwrap_or_else(SystemTime::now));
                state.failed = false;
                state.failures = 0;
                RefreshOutcome::Loaded { prefixes }
            }
            Err(error) => {
                state.failed = true;
                state.failures = state.failures.saturating_add(1);
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

    #[test]
    fn malformed_file_keeps_previous_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bot.json");
        std::fs::write(&path, br#"{"prefixes":[{"ipv4Prefix":"127.10.0.0/16"}]}"#).unwrap();
        let src = RangeSource::File(path.clone());
        let store = RangeStore::new([src.clone()]);
        assert_eq!(
            store.refresh_files(),
            vec![(path.clone(), RefreshOutcome::Loaded { prefixes: 1 })]
        );
        let ip: IpAddr = "127.10.1.1".parse().unwrap();
        assert!(store.contains_any(std::slice::from_ref(&src), ip));

        std::fs::write(&path, b"{\"prefixes\": [ {\"ipv4Prefix\": ").unwrap();
        let outcome = store.refresh_files();
        assert!(matches!(
            &outcome[0].1,
            RefreshOutcome::Failed {
                error: RangeError::Json(_),
                kept_prefixes: 1
            }
        ));
        assert!(store.contains_any(std::slice::from_ref(&src), ip));
        // Reported once per change, not on every poll.
        assert_eq!(store.refresh_files()[0].1, RefreshOutcome::Unchanged);

        // A missing file is reported and the ranges stay as well.
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            store.refresh_files()[0].1,
            RefreshOutcome::Failed {
                error: RangeError::Io(_),
                kept_prefixes: 1
            }
        ));
        assert_eq!(store.refresh_files()[0].1, RefreshOutcome::Unchanged);
        assert!(store.contains_any(std::slice::from_ref(&src), ip));

        // A valid replacement is picked up.
        std::fs::write(
            &path,
            br#"{"prefixes":[{"ipv4Prefix":"127.20.0.0/16"},{"ipv6Prefix":"2001:db8::/48"}]}"#,
        )
        .unwrap();
        assert_eq!(
            store.refresh_files()[0].1,
            RefreshOutcome::Loaded { prefixes: 2 }
        );
        assert!(!store.contains_any(std::slice::from_ref(&src), ip));
        assert!(store.contains_any(
            std::slice::from_ref(&src),
            "2001:db8:0:1::5".parse().unwrap()
        ));
        assert!(store.any_loaded(std::slice::from_ref(&src)));
        assert!(!store.any_loaded(&[RangeSource::File(dir.path().join("other.json"))]));
    }

    #[test]
    fn sources_are_urls_or_files() {
        assert_eq!(
            RangeSource::parse("https://openai.com/gptbot.json"),
            RangeSource::Url("https://openai.com/gptbot.json".into())
        );
        assert_eq!(
            RangeSource::parse("HTTP://127.0.0.1:8080/r.json"),
            RangeSource::Url("HTTP://127.0.0.1:8080/r.json".into())
        );
        assert_eq!(
            RangeSource::parse("ranges/gptbot.json"),
            RangeSource::File(PathBuf::from("ranges/gptbot.json"))
        );
        assert_eq!(
            RangeSource::parse("https"),
            RangeSource::File(PathBuf::from("https"))
        );
        assert_eq!(RangeSource::parse("/a/b.json").label(), "/a/b.json");
        assert!(RangeSource::parse("http://x.example/r.json").is_url());
    }

    fn set(prefix: &str) -> RangeSet {
        parse_range_file(format!(r#"{{"prefixes":[{{"ipv4Prefix":"{prefix}"}}]}}"#).as_bytes())
            .unwrap()
    }

    #[test]
    fn installed_ranges_age_and_go_stale_and_fresh_again() {
        let url = RangeSource::Url("https://x.example/r.json".into());
        let other = RangeSource::Url("https://y.example/r.json".into());
        let store = RangeStore::new([url.clone(), other.clone()]);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let day = Duration::from_secs(86_400);
        assert_eq!(store.urls().len(), 2);
        assert!(store.files().is_empty());
        // Nothing yet: no age, never stale, a failure is counted.
        assert_eq!(store.record_failure(&url), 0);
        let st = store.status(t0, day);
        assert_eq!(
            st[0],
            SourceStatus {
                source: url.clone(),
                prefixes: 0,
                age: None,
                failures: 1,
                stale: false
            }
        );
        assert!(store.check_staleness(t0, day).is_empty());
        // A 304 without data confirms nothing.
        store.confirm(&url, t0);
        assert_eq!(store.status(t0, day)[0].age, None);

        assert_eq!(store.install(&url, set("127.0.9.0/24"), t0), 1);
        let ip: IpAddr = "127.0.9.1".parse().unwrap();
        assert!(store.contains_any(std::slice::from_ref(&url), ip));
        assert!(!store.contains_any(std::slice::from_ref(&other), ip));
        let later = t0 + day + Duration::from_secs(1);
        let st = &store.status(later, day)[0];
        assert_eq!(
            (st.prefixes, st.age, st.failures, st.stale),
            (1, Some(day + Duration::from_secs(1)), 0, true)
        );
        // The change is reported once.
        let changes = store.check_staleness(later, day);
        assert_eq!(
            changes,
            vec![StalenessChange {
                source: url.clone(),
                stale: true,
                age: day + Duration::from_secs(1)
            }]
        );
        assert!(store.check_staleness(later, day).is_empty());
        // A failed fetch keeps the ranges; a 304 confirms them: fresh again.
        assert_eq!(store.record_failure(&url), 1);
        assert!(store.contains_any(std::slice::from_ref(&url), ip));
        assert_eq!(store.status(later, day)[0].failures, 1);
        store.confirm(&url, later);
        let st = &store.status(later, day)[0];
        assert_eq!(
            (st.age, st.failures, st.stale),
            (Some(Duration::ZERO), 0, false)
        );
        assert_eq!(
            store.check_staleness(later, day),
            vec![StalenessChange {
                source: url.clone(),
                stale: false,
                age: Duration::ZERO
            }]
        );
        // A clock that went backwards gives age 0, not an error.
        assert_eq!(store.status(t0, day)[0].age, Some(Duration::ZERO));
    }

    #[test]
    fn a_file_is_as_old_as_its_last_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, br#"{"prefixes":[{"ipv4Prefix":"127.0.8.0/24"}]}"#).unwrap();
        let old = SystemTime::now() - Duration::from_secs(7200);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let src = RangeSource::File(path.clone());
        let store = RangeStore::new([src.clone()]);
        store.refresh_files();
        let st = &store.status(SystemTime::now(), Duration::from_secs(3600))[0];
        assert_eq!(st.prefixes, 1);
        let age = st.age.unwrap();
        assert!(
            age >= Duration::from_secs(7200) && age < Duration::from_secs(7300),
            "{age:?}"
        );
        assert!(st.stale);
        // A rejected change counts as a failure, the old ranges and their age stay.
        std::fs::write(&path, b"{").unwrap();
        store.refresh_files();
        let st = &store.status(SystemTime::now(), Duration::from_secs(3600))[0];
        assert_eq!((st.prefixes, st.failures), (1, 1));
    }
}
