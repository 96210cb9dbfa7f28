//! Helpers shared by the CLI's integration tests (`mod common;` in each test file).

// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

/// The `crawlguard` binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_crawlguard");

/// The repository's real access log (Apache combined, three days), from the shared data.
pub const APACHE_LOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/elastic-apache-logs/apache_logs"
);

/// A browser's User-Agent: classified `human` (a bare `Mozilla/5.0` has no platform section
/// and is not a browser shape).
pub const BROWSER_UA: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";

/// Googlebot's User-Agent (a claim that needs verification).
pub const GOOGLEBOT_UA: &str =
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// Writes `text` to `name` in `dir`; returns the path as text.
pub fn write_tmp(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).expect("write");
    p.display().to_string()
}
