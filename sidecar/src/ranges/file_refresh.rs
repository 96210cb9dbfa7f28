//! Re-reading file sources whose (mtime, length) changed: [`RangeStore::refresh_files`] and
//! its [`RefreshOutcome`] per file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::{load_range_file, RangeError, RangeSource, RangeStore};

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

impl RangeStore {
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
    use std::net::IpAddr;
    use std::time::Duration;

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
