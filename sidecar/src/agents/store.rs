//! The key directories in use, per allowed agent origin: in memory with their lifetime,
//! and on disk (`<cache_dir>/<origin>-<hash>.json`, written after each good fetch and loaded
//! at start), so a sidecar that restarts while a directory is unreachable still has keys.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::directory::{self, Key};
use super::{AgentMetrics, AgentsConfig};
use crawlguard_contract::catalog::DIRECTORY_PATH;

/// A signature whose agent's directory cannot be had (never fetched, no copy on disk, and
/// the last fetch failed): answered `503`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupError(pub String);

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no key directory: {}", self.0)
    }
}

/// One origin's directory as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Entry {
    /// Keys by thumbprint (empty until a fetch or the disk gave some).
    keys: Arc<HashMap<String, Key>>,
    /// A directory was fetched or loaded.
    has_data: bool,
    /// When it was fetched, s.
    fetched_s: u64,
    /// Fresh until, s.
    fresh_until_s: u64,
    /// No fetch before, s (the last one failed).
    failed_until_s: u64,
    /// Why the last fetch failed.
    last_error: String,
}

/// The on-disk copy of a directory.
#[derive(Debug, Serialize, Deserialize)]
struct DiskCopy {
    origin: String,
    fetched_at_unix_s: u64,
    fresh_until_unix_s: u64,
    directory: String,
}

/// The directories of the allowed origins.
pub struct DirectoryStore {
    client: reqwest::Client,
    cfg: AgentsConfig,
    allowed: BTreeSet<String>,
    cache_dir: Option<PathBuf>,
    allow_loopback: bool,
    metrics: AgentMetrics,
    entries: Mutex<HashMap<String, Entry>>,
    /// One fetch per origin at a time; the others wait for it.
    locks: HashMap<String, tokio::sync::Mutex<()>>,
}

impl DirectoryStore {
    /// A store for `allowed` origins, with the copies found in `cache_dir` in use.
    pub fn new(
        client: reqwest::Client,
        cfg: AgentsConfig,
        allowed: BTreeSet<String>,
        cache_dir: Option<PathBuf>,
        allow_loopback: bool,
        metrics: AgentMetrics,
    ) -> DirectoryStore {
        let store = DirectoryStore {
            client,
            cfg,
            locks: allowed
                .iter()
                .map(|o| (o.clone(), tokio::sync::Mutex::new(())))
                .collect(),
            allowed,
            cache_dir,
            allow_loopback,
            metrics,
            entries: Mutex::new(HashMap::new()),
        };
        for origin in &store.allowed {
            if let Some(e) = store.load(origin) {
                tracing::info!(agent = %origin, keys = e.keys.len(), "agent key directory loaded from the cache");
                store.set_keys_gauge(origin, &e);
                store.entries().insert(origin.clone(), e);
            }
        }
        store
    }

    /// Whether `origin` is allowed.
    pub fn allows(&self, origin: &str) -> bool {
        self.allowed.contains(origin)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // Poisoned only if a holder panicked; the map is still consistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_keys_gauge(&self, origin: &str, e: &Entry) {
        let labels = super::metrics::AgentLabels {
            agent: origin.to_string(),
        };
        self.metrics
            .keys
            .get_or_create(&labels)
            .set(i64::try_from(e.keys.len()).unwrap_or(i64::MAX));
    }

    fn file(&self, origin: &str) -> Option<PathBuf> {
        let dir = self.cache_dir.as_ref()?;
        let safe: String = origin
            .trim_start_matches("https://")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(96)
            .collect();
        let hash = origin.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        Some(dir.join(format!("{safe}-{hash:016x}.json")))
    }

    fn load(&self, origin: &str) -> Option<Entry> {
        let path = self.file(origin)?;
        let bytes = std::fs::read(&path).ok()?;
        let copy: DiskCopy = match serde_json::from_slice(&bytes) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unusable agent directory copy");
                return None;
            }
        };
        let keys = directory::parse_directory(copy.directory.as_bytes()).ok()?;
        (copy.origin == origin).then(|| Entry {
            keys: Arc::new(keys),
            has_data: true,
            fetched_s: copy.fetched_at_unix_s,
            fresh_until_s: copy.fresh_until_unix_s,
            ..Entry::default()
        })
    }

    async fn save(&self, origin: &str, e: &Entry, body: &[u8]) {
        let Some(path) = self.file(origin) else {
            return;
        };
        let copy = DiskCopy {
            origin: origin.to_string(),
            fetched_at_unix_s: e.fetched_s,
            fresh_until_unix_s: e.fresh_until_s,
            directory: String::from_utf8_lossy(body).into_owned(),
        };
        let write = async {
            if let Some(dir) = path.parent() {
                tokio::fs::create_dir_all(dir).await?;
            }
            let tmp = path.with_extension("tmp");
            tokio::fs::write(&tmp, serde_json::to_vec(&copy).unwrap_or_default()).await?;
            tokio::fs::rename(&tmp, &path).await
        };
        if let Err(err) = write.await {
            tracing::warn!(path = %path.display(), error = %err, "could not cache an agent directory");
        }
    }

    /// `keyid`'s key in `e`, if it may be used at `now_s`.
    fn usable(e: &Entry, keyid: &str, now_s: u64) -> Option<[u8; 32]> {
        e.keys.get(keyid).filter(|k| k.valid_at(now_s)).map(|k| k.x)
    }

    /// What `e` decides without a fetch, if it does: a fresh directory (with the key, or
    /// fetched too recently to look again for a missing one), or, while fetches back off,
    /// the stale keys or the error.
    fn without_fetch(
        &self,
        origin: &str,
        e: Option<&Entry>,
        keyid: &str,
        now_s: u64,
    ) -> Option<Result<Option<[u8; 32]>, LookupError>> {
        let e = e?;
        let key = Self::usable(e, keyid, now_s);
        let fresh = e.has_data && now_s < e.fresh_until_s;
        let recent = now_s < e.fetched_s.saturating_add(self.cfg.refetch_unknown_key_s);
        if fresh && (key.is_some() || recent || now_s < e.failed_until_s) {
            return Some(Ok(key));
        }
        if now_s < e.failed_until_s {
            return Some(self.stale_or_error(origin, e, key, now_s));
        }
        None
    }

    fn stale_or_error(
        &self,
        origin: &str,
        e: &Entry,
        key: Option<[u8; 32]>,
        now_s: u64,
    ) -> Result<Option<[u8; 32]>, LookupError> {
        let stale_until = e.fresh_until_s.saturating_add(self.cfg.stale_if_error_s);
        if e.has_data && now_s < stale_until {
            if now_s >= e.fresh_until_s {
                let labels = super::metrics::AgentLabels {
                    agent: origin.to_string(),
                };
                self.metrics.stale.get_or_create(&labels).inc();
            }
            return Ok(key);
        }
        Err(LookupError(e.last_error.clone()))
    }

    /// The key `keyid` of `origin` (an allowed origin) at `now_s`: `Ok(None)` when the
    /// directory has no usable key of that thumbprint, `Err` when no directory can be had.
    pub async fn key(
        &self,
        origin: &str,
        keyid: &str,
        now_s: u64,
    ) -> Result<Option<[u8; 32]>, LookupError> {
        let before = self.entries().get(origin).cloned();
        if let Some(r) = self.without_fetch(origin, before.as_ref(), keyid, now_s) {
            return r;
        }
        let Some(lock) = self.locks.get(origin) else {
            return Err(LookupError(format!("{origin} is not an allowed agent")));
        };
        let _one_fetch = lock.lock().await;
        let current = self.entries().get(origin).cloned();
        if current != before {
            // Another request fetched (or failed) while this one waited.
            if let Some(r) = self.without_fetch(origin, current.as_ref(), keyid, now_s) {
                return r;
            }
        }
        match self.fetch(origin, now_s).await {
            Ok((e, body)) => {
                self.save(origin, &e, &body).await;
                self.set_keys_gauge(origin, &e);
                let key = Self::usable(&e, keyid, now_s);
                self.entries().insert(origin.to_string(), e);
                Ok(key)
            }
            Err((result, why)) => {
                self.metrics.fetched(origin, result);
                tracing::warn!(agent = %origin, error = %why, "agent key directory fetch failed");
                let mut e = current.unwrap_or_default();
                e.failed_until_s = now_s.saturating_add(self.cfg.retry_after_failure_s);
                e.last_error = why;
                self.entries().insert(origin.to_string(), e.clone());
                let key = Self::usable(&e, keyid, now_s);
                self.stale_or_error(origin, &e, key, now_s)
            }
        }
    }

    /// Fetches `origin`'s directory: the entry and the body, or the fetch result label and
    /// why.
    async fn fetch(
        &self,
        origin: &str,
        now_s: u64,
    ) -> Result<(Entry, Vec<u8>), (&'static str, String)> {
        let url = reqwest::Url::parse(&format!("{origin}{DIRECTORY_PATH}"))
            .map_err(|e| ("error", e.to_string()))?;
        directory::check_host(&url, self.allow_loopback).map_err(|e| ("refused_address", e))?;
        let sent = self
            .client
            .get(url)
            .header(
                reqwest::header::ACCEPT,
                "application/http-message-signatures-directory+json, application/json",
            )
            .send()
            .await;
        let chain = |e: &reqwest::Error| {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(x) = src {
                s.push_str(": ");
                s.push_str(&x.to_string());
                src = x.source();
            }
            s
        };
        let mut resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return Err(("timeout", chain(&e))),
            Err(e) if e.is_redirect() => return Err(("redirect", chain(&e))),
            Err(e) if chain(&e).contains("resolves to no address") => {
                return Err(("refused_address", chain(&e)))
            }
            Err(e) => return Err(("error", chain(&e))),
        };
        if resp.status() != reqwest::StatusCode::OK {
            return Err(("status", format!("status {}", resp.status().as_u16())));
        }
        let limit = self.cfg.max_directory_bytes;
        let too_large = || ("too_large", format!("directory larger than {limit} bytes"));
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(c)) => {
                    if (body.len() + c.len()) as u64 > limit {
                        return Err(too_large());
                    }
                    body.extend_from_slice(&c);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => return Err(("timeout", chain(&e))),
                Err(e) => return Err(("error", chain(&e))),
            }
        }
        let keys = directory::parse_directory(&body).map_err(|e| ("invalid", e))?;
        let ttl = directory::freshness_s(
            resp.headers(),
            self.cfg.default_ttl_s,
            self.cfg.min_ttl_s,
            self.cfg.max_ttl_s,
        );
        self.metrics.fetched(origin, "ok");
        tracing::info!(agent = %origin, keys = keys.len(), ttl_s = ttl, "agent key directory fetched");
        Ok((
            Entry {
                keys: Arc::new(keys),
                has_data: true,
                fetched_s: now_s,
                fresh_until_s: now_s.saturating_add(ttl),
                failed_until_s: 0,
                last_error: String::new(),
            },
            body,
        ))
    }
}
