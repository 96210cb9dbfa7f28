//! Signed agents (Web Bot Auth): `POST /v1/signature` verifies one signed request
//! ([`crawlguard_contract::signature`]) against its agent's key directory, fetched and
//! cached here; the filter does the rest (replay, class, limits).
//!
//! Key directories are fetched only for allowed origins: the catalog's `signed_agents`
//! (unless `agents.builtin = false`) and `agents.origins`. A directory is kept in memory as
//! long as its HTTP caching headers allow ([`directory::freshness_s`], clamped to
//! `agents.min_ttl_s..=max_ttl_s`) and on disk (`<ranges.cache_dir>/agents/`, loaded at
//! start); after that it is fetched again on the next signature that needs it (one fetch
//! per origin at a time, the other requests wait for it). A fetch that fails keeps the
//! keys in use for `agents.stale_if_error_s` past their freshness (stale-if-error, counted
//! `agent_directory_stale_total`), and the origin is not fetched again for
//! `agents.retry_after_failure_s`. An unknown `keyid` refetches a directory older than
//! `agents.refetch_unknown_key_s` (a key rotation reaches us within that time). A
//! signature whose directory cannot be had at all is answered `503` (the filter's verifier
//! error), never a verdict.

pub mod directory;
pub mod message;
mod metrics;
mod store;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crawlguard_contract::catalog::{is_agent_origin, Catalog};
use crawlguard_contract::signature::{
    Answer, Outcome, Request, MAX_HEADERS, MAX_REQUEST_BYTES, PATH,
};
pub use metrics::AgentMetrics;
use store::{DirectoryStore, LookupError};

/// `[agents]`: which agents' directories are fetched, how, and the signature window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    /// Allow the catalog's signed agents (`signed_agents` of the bot catalog).
    pub builtin: bool,
    /// More agent origins to allow, `https://<host>[:<port>]`.
    pub origins: Vec<String>,
    /// Clock difference allowed on a signature's `created` and `expires`, seconds.
    pub max_skew_s: u64,
    /// Longest `expires - created` accepted, seconds.
    pub max_validity_s: u64,
    /// Limit for one directory fetch (connect, TLS, headers, body), ms.
    pub fetch_timeout_ms: u64,
    /// Largest directory body accepted, bytes.
    pub max_directory_bytes: u64,
    /// A directory's lifetime without caching headers, seconds.
    pub default_ttl_s: u64,
    /// Shortest lifetime a directory gets, whatever its headers say, seconds.
    pub min_ttl_s: u64,
    /// Longest lifetime a directory gets, seconds.
    pub max_ttl_s: u64,
    /// How long past its lifetime a directory's keys stay in use while fetching fails, s.
    pub stale_if_error_s: u64,
    /// After a failed fetch, the origin is not fetched again for this long, seconds.
    pub retry_after_failure_s: u64,
    /// An unknown keyid refetches a directory at least this old, seconds.
    pub refetch_unknown_key_s: u64,
    /// PEM file of CA certificates trusted besides the built-in Mozilla roots (`""`: none).
    pub extra_ca_file: PathBuf,
    /// Tests only (`--allow-loopback-agent-directories`): directories may be on loopback.
    /// Never read from the file.
    #[serde(skip)]
    pub allow_loopback: bool,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            builtin: true,
            origins: Vec::new(),
            max_skew_s: 60,
            max_validity_s: 3600,
            fetch_timeout_ms: 5000,
            max_directory_bytes: 65_536,
            default_ttl_s: 3600,
            min_ttl_s: 60,
            max_ttl_s: 86_400,
            stale_if_error_s: 86_400,
            retry_after_failure_s: 10,
            refetch_unknown_key_s: 60,
            extra_ca_file: PathBuf::new(),
            allow_loopback: false,
        }
    }
}

impl AgentsConfig {
    /// Checks every field; the error names it (`agents.<field>: ...`).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(o) = self.origins.iter().find(|o| !is_agent_origin(o)) {
            return Err(format!(
                "agents.origins: {o:?} is not https://<host>[:<port>] (lowercase, no path)"
            ));
        }
        let ranges: [(&str, u64, u64, u64); 9] = [
            ("max_skew_s", self.max_skew_s, 0, 3600),
            ("max_validity_s", self.max_validity_s, 1, 86_400),
            ("fetch_timeout_ms", self.fetch_timeout_ms, 100, 60_000),
            (
                "max_directory_bytes",
                self.max_directory_bytes,
                1024,
                1 << 20,
            ),
            ("min_ttl_s", self.min_ttl_s, 1, 86_400),
            ("max_ttl_s", self.max_ttl_s, self.min_ttl_s, 604_800),
            ("stale_if_error_s", self.stale_if_error_s, 0, 604_800),
            ("retry_after_failure_s", self.retry_after_failure_s, 1, 3600),
            (
                "refetch_unknown_key_s",
                self.refetch_unknown_key_s,
                1,
                86_400,
            ),
        ];
        for (name, v, lo, hi) in ranges {
            if !(lo..=hi).contains(&v) {
                return Err(format!("agents.{name}: must be {lo}..={hi}, got {v}"));
            }
        }
        if !(self.min_ttl_s..=self.max_ttl_s).contains(&self.default_ttl_s) {
            return Err(format!(
                "agents.default_ttl_s: must be min_ttl_s..=max_ttl_s, got {}",
                self.default_ttl_s
            ));
        }
        Ok(())
    }

    /// The allowed origins: the catalog's (when `builtin`) and `origins`.
    pub fn allowed(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.origins.iter().cloned().collect();
        if self.builtin {
            if let Ok(c) = Catalog::builtin() {
                out.extend(c.signed_agents.into_iter().map(|a| a.origin));
            }
        }
        out
    }
}

/// The signature service: the allowlist, the directories, the window.
pub struct Agents {
    directories: DirectoryStore,
    window: message::Window,
    metrics: AgentMetrics,
}

impl Agents {
    /// The service for `cfg`; directories are cached on disk under `cache_dir/agents` when
    /// set (those of allowed origins are loaded now). Fails when the extra CA file cannot be
    /// read or the TLS client cannot be built.
    pub fn new(
        cfg: &AgentsConfig,
        cache_dir: Option<PathBuf>,
        metrics: AgentMetrics,
    ) -> Result<Agents, String> {
        let allow_loopback = cfg.allow_loopback;
        let pem = if cfg.extra_ca_file.as_os_str().is_empty() {
            None
        } else {
            Some(std::fs::read(&cfg.extra_ca_file).map_err(|e| {
                format!("agents.extra_ca_file: {}: {e}", cfg.extra_ca_file.display())
            })?)
        };
        let client = directory::client(
            Duration::from_millis(cfg.fetch_timeout_ms),
            allow_loopback,
            pem.as_deref(),
        )?;
        let directories = DirectoryStore::new(
            client,
            cfg.clone(),
            cfg.allowed(),
            cache_dir.map(|d| d.join("agents")),
            allow_loopback,
            metrics.clone(),
        );
        Ok(Agents {
            directories,
            window: message::Window {
                max_skew_s: cfg.max_skew_s,
                max_validity_s: cfg.max_validity_s,
            },
            metrics,
        })
    }

    /// Checks one signed request at `now` (`Err`: its directory cannot be had).
    pub async fn check(&self, req: &Request, now: SystemTime) -> Result<Answer, LookupError> {
        let now_s = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let answer = |result, agent: String, keyid: String, nonce, valid_until| Answer {
            result,
            agent,
            keyid,
            nonce,
            valid_until,
        };
        let p = match message::prepare(req, now_s, self.window) {
            Ok(p) => p,
            Err(r) => return Ok(answer(r.outcome, r.agent, r.keyid, None, None)),
        };
        if !self.directories.allows(&p.agent) {
            return Ok(answer(Outcome::UnknownAgent, p.agent, p.keyid, None, None));
        }
        let result = match self.directories.key(&p.agent, &p.keyid, now_s).await? {
            Some(key) => {
                let started = std::time::Instant::now();
                let r = p.verify(&key);
                self.metrics
                    .verify_seconds
                    .observe(started.elapsed().as_secs_f64());
                r
            }
            None => Outcome::UnknownKey,
        };
        let valid_until = p.expires.saturating_add(self.window.max_skew_s);
        Ok(answer(result, p.agent, p.keyid, p.nonce, Some(valid_until)))
    }
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

async fn signature(State(agents): State<Arc<Agents>>, body: Bytes) -> Response {
    if body.len() > MAX_REQUEST_BYTES {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body too large: at most {MAX_REQUEST_BYTES} bytes"),
        );
    }
    let req: Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid request: {e}")),
    };
    if req.headers.len() > MAX_HEADERS {
        return error(
            StatusCode::BAD_REQUEST,
            format!("invalid request: more than {MAX_HEADERS} headers"),
        );
    }
    match agents.check(&req, SystemTime::now()).await {
        Ok(a) => {
            agents.metrics.count(a.result);
            Json(a).into_response()
        }
        Err(e) => {
            agents.metrics.errors.inc();
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
    }
}

/// The `POST /v1/signature` route.
pub fn router(agents: Arc<Agents>) -> Router {
    Router::new()
        .route(PATH, post(signature))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REQUEST_BYTES + 1))
        .with_state(agents)
}
