//! Range sources that are URLs: the vendors' published range documents, fetched and kept
//! fresh, with the last good copy of each kept on disk.
//!
//! - **Conditional GET**: once a source has data, requests carry `If-None-Match` (its ETag)
//!   and `If-Modified-Since` (its Last-Modified); a `304` confirms the copy in use.
//! - **Bounded**: one timeout for the whole request ([`FetchSettings::timeout`]), a size cap
//!   on the body ([`FetchSettings::max_body_bytes`]: a larger `Content-Length` is refused
//!   before reading, a longer body while reading), at most 5 redirects and only within the
//!   same origin (scheme, host and port): a redirect to another host is refused. TLS is
//!   rustls with the Mozilla root store built in (`webpki-roots`), so the sidecar needs no CA
//!   bundle from the system.
//! - **Never worse than before**: a failed request, an unexpected status or a body that does
//!   not parse ([`crate::ranges::parse_range_file`]) leaves the ranges in use untouched; the
//!   caller logs and counts it ([`FetchOutcome::Failed`]).
//! - **Cache**: every good document is written (temp file + rename) to the cache directory
//!   with its validators and fetch time; at start [`Fetcher::load_cache`] puts those copies in
//!   use, so a sidecar that starts without network verifies with its last good ranges.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use crate::ranges::{parse_range_file, RangeError, RangeSource, RangeStore};

/// Most redirects followed (each within the first URL's origin).
const MAX_REDIRECTS: usize = 5;

/// How range documents are fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSettings {
    /// Limit for the whole request (connect, TLS, headers and body).
    pub timeout: Duration,
    /// Largest body accepted, in bytes.
    pub max_body_bytes: u64,
    /// Where the last good copy of every source is kept; `None`: memory only.
    pub cache_dir: Option<PathBuf>,
}

/// Why a fetch did not produce new ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The request failed: connection, DNS, TLS, timeout, a body cut short.
    Request(String),
    /// A redirect was refused (to another origin, or too many).
    Redirect(String),
    /// The server answered with a status other than 200 (or 304 for a conditional GET).
    Status(u16),
    /// The body is larger than [`FetchSettings::max_body_bytes`].
    TooLarge {
        /// The cap, in bytes.
        limit: u64,
    },
    /// The body is not a range document.
    Invalid(RangeError),
}

impl FetchError {
    /// The `result` label of `range_fetches_total`: `invalid` for a body that does not parse,
    /// `error` for everything else.
    pub fn result_label(&self) -> &'static str {
        match self {
            FetchError::Invalid(_) => "invalid",
            _ => "error",
        }
    }
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Request(e) => write!(f, "request failed: {e}"),
            FetchError::Redirect(e) => write!(f, "redirect refused: {e}"),
            FetchError::Status(s) => write!(f, "unexpected status {s}"),
            FetchError::TooLarge { limit } => write!(f, "body larger than {limit} bytes"),
            FetchError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FetchError {}

/// What one fetch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchOutcome {
    /// A new document is in use (and cached, unless `cache_error` says why not).
    Updated {
        /// Prefixes now in use.
        prefixes: usize,
        /// Why the copy could not be written to the cache directory, if it could not.
        cache_error: Option<String>,
    },
    /// `304 Not Modified`: the copy in use is current.
    NotModified {
        /// Prefixes in use.
        prefixes: usize,
    },
    /// Nothing changed in use; see the error.
    Failed {
        /// What went wrong.
        error: FetchError,
        /// Prefixes still in use (0 if the source never had data).
        kept_prefixes: usize,
    },
}

/// What [`Fetcher::load_cache`] found for one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// The cached copy is in use.
    Loaded {
        /// Its prefixes.
        prefixes: usize,
        /// How long ago it was fetched.
        age: Duration,
    },
    /// No cache directory, or no copy of this source in it.
    Missing,
    /// A copy exists but cannot be used (unreadable, not a range document).
    Failed(String),
}

/// The validators and fetch time of the copy in use, as kept next to it in the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct CacheMeta {
    url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_modified: Option<String>,
    fetched_at_unix_s: u64,
}

/// Fetches URL sources into a [`RangeStore`].
pub struct Fetcher {
    client: reqwest::Client,
    settings: FetchSettings,
    /// Per URL: the validators of the copy in use.
    validators: Mutex<HashMap<String, CacheMeta>>,
}

impl Fetcher {
    /// An HTTP client with the settings' timeout, the same-origin redirect policy and rustls.
    /// Fails only if the TLS backend cannot be initialised.
    pub fn new(settings: FetchSettings) -> Result<Fetcher, String> {
        let policy = reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt.previous().first().is_some_and(|first| {
                let next = attempt.url();
                first.scheme() == next.scheme()
                    && first.host_str() == next.host_str()
                    && first.port_or_known_default() == next.port_or_known_default()
            });
            if !same_origin {
                let to = attempt.url().to_string();
                attempt.error(format!("redirect to another origin: {to}"))
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
            } else {
                attempt.follow()
            }
        });
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(policy)
            .user_agent(concat!(
                "crawlguard-sidecar/",
                env!("CARGO_PKG_VERSION"),
                " (published IP ranges refresh)"
            ))
            .build()
            .map_err(|e| error_chain(&e))?;
        Ok(Fetcher {
            client,
            settings,
            validators: Mutex::new(HashMap::new()),
        })
    }

    /// The settings this fetcher was built with.
    pub fn settings(&self) -> &FetchSettings {
        &self.settings
    }

    fn validators(&self) -> std::sync::MutexGuard<'_, HashMap<String, CacheMeta>> {
        // Poisoned only if a holder panicked; the map is still consistent.
        self.validators.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache files of `url`: the document and its metadata. The name is the URL made
    /// safe for a file name (and shortened), plus a hash of the whole URL.
    pub fn cache_paths(&self, url: &str) -> Option<(PathBuf, PathBuf)> {
        let dir = self.settings.cache_dir.as_ref()?;
        let safe: String = url
            .split_once("://")
            .map_or(url, |(_, rest)| rest)
            .chars()
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' => c,
                _ => '_',
            })
            .take(96)
            .collect();
        let name = format!("{safe}-{:016x}", fnv1a(url.as_bytes()));
        Some((
            dir.join(format!("{name}.json")),
            dir.join(format!("{name}.meta.json")),
        ))
    }

    /// Puts the cached copy of `url` in use, if there is a usable one (blocking file I/O;
    /// called once at start). Its age is that of its fetch, and its validators are used for
    /// the next conditional GET.
    pub fn load_cache(&self, store: &RangeStore, url: &str) -> CacheOutcome {
        let Some((body_path, meta_path)) = self.cache_paths(url) else {
            return CacheOutcome::Missing;
        };
        let meta = match std::fs::read(&meta_path) {
            Ok(bytes) => match serde_json::from_slice::<CacheMeta>(&bytes) {
                Ok(m) if m.url == url => m,
                Ok(_) => return CacheOutcome::Missing,
                Err(e) => return CacheOutcome::Failed(format!("{}: {e}", meta_path.display())),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return CacheOutcome::Missing,
            Err(e) => return CacheOutcome::Failed(format!("{}: {e}", meta_path.display())),
        };
        let ranges = match std::fs::read(&body_path)
            .map_err(|e| e.to_string())
            .and_then(|b| parse_range_file(&b).map_err(|e| e.to_string()))
        {
            Ok(r) => r,
            Err(e) => return CacheOutcome::Failed(format!("{}: {e}", body_path.display())),
        };
        let fetched = UNIX_EPOCH + Duration::from_secs(meta.fetched_at_unix_s);
        let prefixes = store.install(&RangeSource::Url(url.to_string()), ranges, fetched);
        self.validators().insert(url.to_string(), meta);
        CacheOutcome::Loaded {
            prefixes,
            age: SystemTime::now()
                .duration_since(fetched)
                .unwrap_or_default(),
        }
    }

    /// Fetches `url` once and updates `store`: new ranges on a good `200`, a confirmation on
    /// `304`, nothing (but a failure count) otherwise.
    pub async fn fetch(&self, store: &RangeStore, url: &str) -> FetchOutcome {
        let source = RangeSource::Url(url.to_string());
        let failed = |error: FetchError| FetchOutcome::Failed {
            error,
            kept_prefixes: store.record_failure(&source),
        };
        // Validators only for a copy that is in use: a 304 must mean "keep what you have".
        let have = store.any_loaded(std::slice::from_ref(&source));
        let mut request = self.client.get(url);
        if have {
            if let Some(meta) = self.validators().get(url) {
                if let Some(etag) = &meta.etag {
                    request = request.header(IF_NONE_MATCH, etag.as_str());
                }
                if let Some(lm) = &meta.last_modified {
                    request = request.header(IF_MODIFIED_SINCE, lm.as_str());
                }
            }
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_redirect() => return failed(FetchError::Redirect(error_chain(&e))),
            Err(e) => return failed(FetchError::Request(error_chain(&e))),
        };
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED && have {
            store.confirm(&source, SystemTime::now());
            return FetchOutcome::NotModified {
                prefixes: store.get(&source).len(),
            };
        }
        if status != StatusCode::OK {
            return failed(FetchError::Status(status.as_u16()));
        }
        let limit = self.settings.max_body_bytes;
        if response.content_length().is_some_and(|n| n > limit) {
            return failed(FetchError::TooLarge { limit });
        }
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
                .map(str::to_string)
        };
        let (etag, last_modified) = (header(ETAG), header(LAST_MODIFIED));
        tracing::debug!(url, content_type = ?header(CONTENT_TYPE), "range document received");
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if (body.len() + chunk.len()) as u64 > limit {
                        return failed(FetchError::TooLarge { limit });
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return failed(FetchError::Request(error_chain(&e))),
            }
        }
        let ranges = match parse_range_file(&body) {
            Ok(r) => r,
            Err(e) => return failed(FetchError::Invalid(e)),
        };
        let now = SystemTime::now();
        let prefixes = store.install(&source, ranges, now);
        let meta = CacheMeta {
            url: url.to_string(),
            etag,
            last_modified,
            fetched_at_unix_s: now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        };
        let cache_error = self.write_cache(url, &body, &meta).await.err();
        self.validators().insert(url.to_string(), meta);
        FetchOutcome::Updated {
            prefixes,
            cache_error,
        }
    }

    /// Writes the document and its metadata to the cache directory, each atomically.
    async fn write_cache(&self, url: &str, body: &[u8], meta: &CacheMeta) -> Result<(), String> {
        let Some((body_path, meta_path)) = self.cache_paths(url) else {
            return Ok(());
        };
        let meta_bytes = serde_json::to_vec_pretty(meta).map_err(|e| e.to_string())?;
        if let Some(dir) = body_path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        write_atomically(&body_path, body).await?;
        write_atomically(&meta_path, &meta_bytes).await
    }
}

/// Writes `bytes` to a temporary file next to `path`, then renames it over `path`.
async fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    tokio::fs::write(&tmp, bytes)
        .await
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    tokio::fs::rename(&tmp, path)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// An error and its sources, joined by `: ` (reqwest's own message is rarely the useful part).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// 64-bit FNV-1a: a stable hash for cache file names.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The delay before the next fetch of a source: `interval` after a success; after
/// `failures` consecutive failures, `retry` doubled per further failure, at most `interval`;
/// then `jitter` (a value in `[0, 1)`) moves it within ±10%, so sidecars started together do
/// not fetch together.
pub fn next_delay(interval: Duration, retry: Duration, failures: u32, jitter: f64) -> Duration {
    let base = if failures == 0 {
        interval
    } else {
        let doubled = retry.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        doubled.min(interval)
    };
    let factor = 0.9 + 0.2 * jitter.clamp(0.0, 1.0);
    base.mul_f64(factor)
}

/// A value in `[0, 1)` that differs between calls (and processes): for [`next_delay`].
pub fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetcher(dir: Option<&Path>) -> Fetcher {
        Fetcher::new(FetchSettings {
            timeout: Duration::from_secs(5),
            max_body_bytes: 1024,
            cache_dir: dir.map(Path::to_path_buf),
        })
        .expect("client")
    }

    #[test]
    fn cache_names_are_readable_and_distinct() {
        let f = fetcher(Some(Path::new("/c")));
        let (body, meta) = f
            .cache_paths("https://openai.com/gptbot.json")
            .expect("paths");
        let name = body.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(name.starts_with("openai.com_gptbot.json-"), "{name}");
        assert!(name.ends_with(".json"));
        assert_eq!(body.parent(), Some(Path::new("/c")));
        assert!(meta.to_string_lossy().ends_with(".meta.json"));
        // Same safe spelling, different URLs: different files.
        let a = f.cache_paths("https://x.example/a/b.json").map(|p| p.0);
        let b = f.cache_paths("https://x.example/a_b.json").map(|p| p.0);
        assert_ne!(a, b);
        assert_eq!(fetcher(None).cache_paths("https://x.example/a.json"), None);
    }

    #[test]
    fn retry_delays_double_up_to_the_interval_with_ten_percent_jitter() {
        let (hour, minute) = (Duration::from_secs(3600), Duration::from_secs(60));
        assert_eq!(next_delay(hour, minute, 0, 0.5), hour);
        assert_eq!(next_delay(hour, minute, 1, 0.5), minute);
        assert_eq!(next_delay(hour, minute, 2, 0.5), 2 * minute);
        assert_eq!(next_delay(hour, minute, 4, 0.5), 8 * minute);
        assert_eq!(next_delay(hour, minute, 7, 0.5), hour);
        assert_eq!(next_delay(hour, minute, u32::MAX, 0.5), hour);
        assert_eq!(next_delay(hour, minute, 0, 0.0), hour.mul_f64(0.9));
        assert!(next_delay(hour, minute, 0, 0.999_999) < hour.mul_f64(1.1));
        assert!(next_delay(hour, minute, 0, 0.999_999) > hour.mul_f64(1.099));
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn a_broken_or_foreign_cache_copy_is_not_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = fetcher(Some(dir.path()));
        let url = "https://x.example/r.json";
        let store = RangeStore::new([RangeSource::Url(url.into())]);
        assert_eq!(f.load_cache(&store, url), CacheOutcome::Missing);
        let (body, meta) = f.cache_paths(url).expect("paths");
        std::fs::write(&body, br#"{"prefixes":[{"ipv4Prefix":"127.0.5.0/24"}]}"#).expect("body");
        std::fs::write(
            &meta,
            r#"{"url":"https://other.example/r.json","fetched_at_unix_s":1}"#,
        )
        .expect("meta");
        assert_eq!(f.load_cache(&store, url), CacheOutcome::Missing);
        std::fs::write(&meta, format!(r#"{{"url":"{url}","fetched_at_unix_s":1}}"#)).expect("meta");
        assert!(matches!(
            f.load_cache(&store, url),
            CacheOutcome::Loaded { prefixes: 1, .. }
        ));
        std::fs::write(&body, b"{").expect("body");
        assert!(matches!(f.load_cache(&store, url), CacheOutcome::Failed(_)));
    }
}
