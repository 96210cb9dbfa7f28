//! Logs and metrics of the range sources: what a file refresh or a URL fetch did, staleness
//! changes, and the per-source gauges brought up to date at each scrape.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::fetch::FetchOutcome;
use crate::metrics::{Metrics, SourceLabels};
use crate::ranges::{RangeStore, RefreshOutcome};

/// Logs and counts what a range-file refresh did; true when any file's ranges changed.
pub fn report_refresh(outcomes: &[(PathBuf, RefreshOutcome)], metrics: &Metrics) -> bool {
    let mut changed = false;
    for (path, outcome) in outcomes {
        let source = path.display().to_string();
        let result = match outcome {
            RefreshOutcome::Unchanged => continue,
            RefreshOutcome::Loaded { prefixes } => {
                tracing::info!(source, prefixes, "range file loaded");
                changed = true;
                "ok"
            }
            RefreshOutcome::Failed {
                error,
                kept_prefixes,
            } => {
                tracing::error!(source, %error, kept_prefixes, "range file rejected; keeping previous ranges");
                "error"
            }
        };
        metrics.range_reload(&source, result);
    }
    changed
}

/// Logs and counts one fetch of a range URL; true when new ranges are in use.
pub fn report_fetch(url: &str, outcome: &FetchOutcome, metrics: &Metrics) -> bool {
    match outcome {
        FetchOutcome::Updated {
            prefixes,
            cache_error,
        } => {
            tracing::info!(source = url, prefixes, "range source fetched");
            if let Some(error) = cache_error {
                tracing::warn!(source = url, error, "range source not written to the cache");
            }
            metrics.range_fetch(url, "ok");
            true
        }
        FetchOutcome::NotModified { prefixes } => {
            tracing::debug!(source = url, prefixes, "range source not modified");
            metrics.range_fetch(url, "not_modified");
            false
        }
        FetchOutcome::Failed {
            error,
            kept_prefixes,
        } => {
            tracing::warn!(
                source = url, %error, kept_prefixes,
                "range source fetch failed; keeping previous ranges"
            );
            metrics.range_fetch(url, error.result_label());
            false
        }
    }
}

/// Logs each range source whose staleness changed.
pub fn report_staleness(store: &RangeStore, max_age: Duration) {
    for change in store.check_staleness(SystemTime::now(), max_age) {
        let (source, age_s) = (change.source.label(), change.age.as_secs());
        if change.stale {
            tracing::warn!(
                source,
                age_s,
                max_age_s = max_age.as_secs(),
                "range source stale; its ranges stay in use"
            );
        } else {
            tracing::info!(source, age_s, "range source fresh again");
        }
    }
}

/// Brings the per-source gauges up to date (run at every scrape).
pub fn update_source_gauges(store: &RangeStore, max_age: Duration, m: &Metrics) {
    for st in store.status(SystemTime::now(), max_age) {
        let labels = SourceLabels {
            source: st.source.label(),
        };
        m.range_prefixes
            .get_or_create(&labels)
            .set(i64::try_from(st.prefixes).unwrap_or(i64::MAX));
        if let Some(age) = st.age {
            m.range_source_age
                .get_or_create(&labels)
                .set(i64::try_from(age.as_secs()).unwrap_or(i64::MAX));
        }
        m.range_source_stale
            .get_or_create(&labels)
            .set(i64::from(st.stale));
        m.range_source_failures
            .get_or_create(&labels)
            .set(i64::from(st.failures));
    }
}
