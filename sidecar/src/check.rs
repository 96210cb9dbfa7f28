//! `--check-config`: one verdict on the configuration and on the files it names, from the
//! loads the sidecar runs at start (range files, cached copies of range URLs; nothing is
//! fetched).

use std::path::PathBuf;

use crate::ranges::RefreshOutcome;

/// The verdict of `--check-config`: `ok` (print `text` on stdout, exit 0) or not (print it
/// on stderr, exit 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckVerdict {
    /// Whether every range file loaded.
    pub ok: bool,
    /// The report: a first line with the verdict, then one line per failing range file
    /// (path and why), then one warning line per unusable cached copy.
    pub text: String,
}

/// Judges the start-up loads: `bots` and `urls` count the catalog's bots and range URLs,
/// `files` is each range file with the outcome of its first load, `unusable_caches` each
/// range URL whose cached copy exists but cannot be used, with why.
///
/// A range file that fails makes the configuration invalid (the sidecar would run without
/// its ranges). An unusable cached copy does not: the sidecar fetches the URL at start, so
/// it is a warning.
pub fn check_verdict(
    bots: usize,
    urls: usize,
    files: &[(PathBuf, RefreshOutcome)],
    unusable_caches: &[(String, String)],
) -> CheckVerdict {
    let failed: Vec<String> = files
        .iter()
        .filter_map(|(path, outcome)| match outcome {
            RefreshOutcome::Failed { error, .. } => {
                Some(format!("  range file {}: {error}\n", path.display()))
            }
            _ => None,
        })
        .collect();
    let ok = failed.is_empty();
    let mut text = if ok {
        format!(
            "configuration ok: {bots} bots, {} range files, {urls} range URLs (fetched at \
             start, not by --check-config)\n",
            files.len()
        )
    } else {
        format!(
            "configuration invalid: {} of {} range files cannot be used\n",
            failed.len(),
            files.len()
        )
    };
    text.extend(failed);
    for (url, why) in unusable_caches {
        text.push_str(&format!(
            "warning: the cached copy of {url} is not usable ({why}); it is fetched at start\n"
        ));
    }
    CheckVerdict { ok, text }
}
