//! [`RangeStore`]: the ranges in use per source, when each was last confirmed current, and
//! its status for metrics and logs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::{RangeSet, RangeSource};

#[derive(Debug, Default)]
pub(super) struct SourceState {
    /// Last good ranges of this source; empty until the first good load.
    pub(super) ranges: Arc<RangeSet>,
    /// When the ranges in use were last confirmed current: the loaded file's mtime, or the
    /// time a URL last answered with them (200 or 304; for a cached copy, when it was
    /// fetched). `None` until the first good load.
    pub(super) confirmed: Option<SystemTime>,
    /// Files: (mtime, length) of the last version looked at, good or bad, so a bad file is
    /// reported once per change rather than once per poll.
    pub(super) seen: Option<(Option<SystemTime>, u64)>,
    /// Files: whether the last version looked at was rejected.
    pub(super) failed: bool,
    /// Failed loads or fetches since the last good one.
    pub(super) failures: u32,
    /// Whether the source was reported stale (so the log says it once per change).
    pub(super) stale: bool,
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

    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<RangeSource, SourceState>> {
        // A poisoned lock only means another thread panicked while holding it; the map is
        // still consistent (every write is a single update), so keep serving.
        self.sources.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn write(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, HashMap<RangeSource, SourceState>> {
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
}

#[cfg(test)]
mod tests {
    use super::super::parse_range_file;
    use super::*;

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
}
