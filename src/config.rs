//! The filter configuration: one JSON document (Envoy `configuration` / Istio
//! `pluginConfig`), parsed and validated entirely at load time.
//!
//! An empty document means the embedded default, `envoy/crawlguard.default.json`. Every field
//! of a non-empty document is optional and takes the same default. Unknown fields are errors.
//! Every error names the field path and the reason, e.g. `limits[2].rate_per_s: must be > 0`.

use crate::bucket::Rate;
use crate::catalog::{builtin_catalog, BotEntry};
use crate::class::Class;
use crate::classify::Classifier;
use crawlguard_contract::bot_id::is_valid_bot_id;
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt;

/// The embedded default configuration (also shipped as `envoy/crawlguard.default.json`).
pub const DEFAULT_CONFIG_JSON: &str = include_str!("../envoy/crawlguard.default.json");

/// Name of the implicit route that matches every path no configured route matches.
pub const DEFAULT_ROUTE: &str = "default";

/// A configuration error: the field path (`limits[2].rate_per_s`, or `<root>`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending field, with `[i]` for list items.
    pub path: String,
    /// Human-readable reason.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl std::error::Error for ConfigError {}

fn err(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        path: path.into(),
        reason: reason.into(),
    }
}

/// `enforce` rejects over-limit requests; `shadow` only counts and annotates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Reject requests over a limit.
    #[default]
    Enforce,
    /// Count what would be rejected (`shadow_limited`), never reject.
    Shadow,
}

/// Where the client address comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IpSource {
    /// Envoy's downstream remote address (property `source.address`).
    #[default]
    RemoteAddress,
    /// The `x-forwarded-for` entry `xff_trusted_hops` from the right.
    Xff,
}

/// `client_ip` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientIpConfig {
    /// `remote_address` (default) or `xff`.
    pub source: IpSource,
    /// With `xff`: take the address this many entries from the right (1 = rightmost, the one
    /// the nearest trusted proxy appended). Fewer entries: the remote address is used.
    pub xff_trusted_hops: u32,
    /// IPv4 addresses sharing this many leading bits share one key (0..=32, default 32).
    pub ipv4_prefix_len: u8,
    /// IPv6 addresses sharing this many leading bits share one key (0..=128, default 64).
    pub ipv6_prefix_len: u8,
}

impl Default for ClientIpConfig {
    fn default() -> Self {
        ClientIpConfig {
            source: IpSource::RemoteAddress,
            xff_trusted_hops: 1,
            ipv4_prefix_len: 32,
            ipv6_prefix_len: 64,
        }
    }
}

/// `bots_mode`: whether `bots` extends or replaces the built-in catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BotsMode {
    /// Configured entries are matched before the built-in ones; a configured id replaces the
    /// built-in entry with the same id.
    #[default]
    Extend,
    /// Only the configured entries are used.
    Replace,
}

/// Retry-After policy of a class, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter {
    /// Lower clamp (>= 1).
    pub min_s: u32,
    /// Upper clamp (>= min_s, <= 86400).
    pub max_s: u32,
    /// Uniform random 0..=jitter_s added after clamping (<= 3600).
    pub jitter_s: u32,
}

/// Per-class rejection policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassPolicy {
    /// Retry-After computation.
    pub retry_after: RetryAfter,
    /// 429 (rate limited) or 503 (shed).
    pub reject_status: u16,
}

/// What a limit's bucket is keyed by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyKind {
    /// The client address, grouped by the configured prefix lengths.
    ClientIp,
    /// One bucket for every matching request.
    Global,
    /// The value of a request header (lowercase name); a missing header is its own key.
    Header(String),
}

impl KeyKind {
    /// Short name for logs: `client_ip`, `global` or `header`.
    pub fn kind_str(&self) -> &'static str {
        match self {
            KeyKind::ClientIp => "client_ip",
            KeyKind::Global => "global",
            KeyKind::Header(_) => "header",
        }
    }
}

/// A compiled limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Unique name (stats, logs, `RateLimit-Policy`).
    pub name: String,
    /// Class it applies to; `None` = every class.
    pub class: Option<Class>,
    /// Route index it applies to (see [`Config::routes`]); `None` = every route.
    pub route: Option<usize>,
    /// Refill rate, tokens per second.
    pub rate_per_s: f64,
    /// Capacity, tokens.
    pub burst: u32,
    /// Integer form of rate and burst.
    pub rate: Rate,
    /// Bucket key.
    pub key: KeyKind,
}

/// A route: the first whose `path_prefix` starts the request path wins.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Name (`[a-z0-9_-]+`, not `default`), used in stats and limits.
    pub name: String,
    /// Path prefix, starting with `/`.
    pub path_prefix: String,
}

/// `store` section: the shared-data slot table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Number of shared-data slots for buckets (1..=1048576). Memory is about
    /// `slots x 100` bytes per Envoy, whatever the number of clients.
    pub slots: u32,
    /// Extra attempts after a CAS mismatch before falling back to the local bucket (0..=32).
    pub cas_retries: u32,
    /// Seed of the key hash; set it per deployment so slot collisions cannot be planned.
    pub hash_seed: u64,
    /// Capacity of the per-worker fallback bucket map used when the shared store fails.
    pub fallback_buckets: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            slots: 16_384,
            cas_retries: 8,
            hash_seed: 0x6372_6177_6c67_7561,
            fallback_buckets: 10_000,
        }
    }
}

/// What a request whose claim could not be checked (verifier error) is classed as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// `unverified_bot`: strict limits, never crawler quota (default).
    #[default]
    UnverifiedBot,
    /// The class the User-Agent claims (trust the claim while the verifier is down).
    ClaimedClass,
}

/// `verifier` section: the callout to the crawlguard-verifier sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifierConfig {
    /// Ask the verifier at all; `false` keeps every `verify: true` claim `unverified_bot`.
    pub enabled: bool,
    /// Envoy cluster name of the sidecar.
    pub cluster: String,
    /// `:authority` sent to the sidecar.
    pub authority: String,
    /// How long a request may wait for a verdict, ms (10..=10000). Past it the request
    /// proceeds per `on_error`.
    pub timeout_ms: u32,
    /// Class on verifier errors (dispatch refused, timeout, non-200, malformed body).
    pub on_error: OnError,
    /// Shared-data slots of the verdict cache (1..=1048576).
    pub cache_slots: u32,
    /// Upper bound on a verdict's cache lifetime, s (the answer's `ttl_s` is clamped to it).
    pub max_ttl_s: u32,
    /// Upper bound on an `unknown` verdict's cache lifetime, s.
    pub unknown_ttl_s: u32,
    /// How long a verifier error is remembered before the next callout for that claim, s.
    pub error_ttl_s: u32,
    /// How long past its TTL a verdict still stands in when a new callout fails, s
    /// (stale-if-error; 0..=604800, default 24 h): a verifier outage does not demote a
    /// crawler verified before.
    pub stale_if_error_s: u32,
    /// After this many spoofed verdicts from one client prefix (the `client_ip` prefix
    /// grouping), further claims from it are `spoofed` without a callout until the latest
    /// spoofed verdict expires; also the most callouts in flight per prefix and worker.
    /// 0 = no limit. Default 4.
    pub max_spoofed_per_prefix: u32,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        VerifierConfig {
            enabled: true,
            cluster: "crawlguard_verifier".into(),
            authority: "crawlguard-verifier".into(),
            timeout_ms: 500,
            on_error: OnError::UnverifiedBot,
            cache_slots: 8_192,
            max_ttl_s: 86_400,
            unknown_ttl_s: 30,
            error_ttl_s: 10,
            stale_if_error_s: 86_400,
            max_spoofed_per_prefix: 4,
        }
    }
}

/// `rewrite` section: normalisation of rejections coming from upstream.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewriteConfig {
    /// Normalise upstream rejections at all (default true).
    pub enabled: bool,
    /// Upstream statuses normalised (400..=599; default 429 and 503; 502/504 optional).
    pub statuses: Vec<u16>,
}

impl Default for RewriteConfig {
    fn default() -> Self {
        RewriteConfig {
            enabled: true,
            statuses: vec![429, 503],
        }
    }
}

/// The validated, compiled configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Enforce or shadow.
    pub mode: Mode,
    /// Client address extraction.
    pub client_ip: ClientIpConfig,
    /// Compiled bot catalog.
    pub classifier: Classifier,
    /// Rejection policy per class, indexed like [`Class::ALL`].
    pub classes: [ClassPolicy; 8],
    /// Configured routes, in match order; route index `routes.len()` is [`DEFAULT_ROUTE`].
    pub routes: Vec<Route>,
    /// Limits; a request takes a token from every matching one.
    pub limits: Vec<Limit>,
    /// Exact paths never limited (query string ignored).
    pub exempt_paths: Vec<String>,
    /// Lowercase request header carrying the class upstream.
    pub class_header: String,
    /// Emit `RateLimit-Policy` / `RateLimit` on rejections.
    pub ratelimit_headers: bool,
    /// Slot table settings.
    pub store: StoreConfig,
    /// Verifier callout settings.
    pub verifier: VerifierConfig,
    /// Response-path normalisation.
    pub rewrite: RewriteConfig,
    /// Lowercase response header the origin sets on degraded pages; such a 200 becomes a 503
    /// for crawler classes (soft-404 guard). `None` = off.
    pub degraded: Option<String>,
}

impl Config {
    /// Rejection policy of `class`.
    pub fn policy(&self, class: Class) -> &ClassPolicy {
        // `classes` has one entry per class, so the fallback is never used; no indexing.
        self.classes.get(class.index()).unwrap_or(&FALLBACK_POLICY)
    }

    /// Name of route index `idx` (`default` past the configured routes).
    pub fn route_name(&self, idx: usize) -> &str {
        self.routes
            .get(idx)
            .map(|r| r.name.as_str())
            .unwrap_or(DEFAULT_ROUTE)
    }

    /// Route index of `path` (query string already removed).
    pub fn route_of(&self, path: &[u8]) -> usize {
        self.routes
            .iter()
            .position(|r| path.starts_with(r.path_prefix.as_bytes()))
            .unwrap_or(self.routes.len())
    }
}

// ---------------------------------------------------------------------------------------------
// Raw (serde) shapes.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    mode: Mode,
    #[serde(default)]
    client_ip: ClientIpConfig,
    #[serde(default)]
    bots: Vec<BotEntry>,
    #[serde(default)]
    bots_mode: BotsMode,
    #[serde(default)]
    classes: BTreeMap<String, RawClassPolicy>,
    #[serde(default)]
    routes: Vec<Route>,
    limits: Option<Vec<RawLimit>>,
    exempt_paths: Option<Vec<String>>,
    class_header: Option<String>,
    #[serde(default)]
    ratelimit_headers: bool,
    #[serde(default)]
    store: StoreConfig,
    #[serde(default)]
    verifier: VerifierConfig,
    #[serde(default)]
    rewrite: RewriteConfig,
    #[serde(default)]
    degraded: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClassPolicy {
    retry_after: Option<RawRetryAfter>,
    reject_status: Option<u16>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetryAfter {
    min_s: Option<u32>,
    max_s: Option<u32>,
    jitter_s: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    name: String,
    class: String,
    route: String,
    rate_per_s: f64,
    burst: u32,
    key: String,
}

// ---------------------------------------------------------------------------------------------
// Defaults. `envoy/crawlguard.default.json` spells out the same values (a test keeps them equal).

/// Never used (see [`Config::policy`]); the human defaults.
const FALLBACK_POLICY: ClassPolicy = ClassPolicy {
    retry_after: RetryAfter {
        min_s: 1,
        max_s: 60,
        jitter_s: 2,
    },
    reject_status: 429,
};

fn default_policy(class: Class) -> ClassPolicy {
    let (min_s, max_s, jitter_s) = match class {
        Class::SearchCrawler => (1, 60, 5),
        Class::AiRetriever => (1, 30, 3),
        Class::Human => (1, 60, 2),
        Class::Script => (1, 300, 10),
        Class::AiTrainer | Class::OtherBot | Class::UnverifiedBot => (5, 600, 30),
        Class::Spoofed => (60, 3600, 120),
    };
    ClassPolicy {
        retry_after: RetryAfter {
            min_s,
            max_s,
            jitter_s,
        },
        reject_status: 429,
    }
}

fn default_limits() -> Vec<RawLimit> {
    let l = |name: &str, class: &str, rate_per_s: f64, burst: u32, key: &str| RawLimit {
        name: name.into(),
        class: class.into(),
        route: "*".into(),
        rate_per_s,
        burst,
        key: key.into(),
    };
    vec![
        l("human_per_ip", "human", 20.0, 100, "client_ip"),
        l("script_per_ip", "script", 1.0, 10, "client_ip"),
        l(
            "search_crawler_per_ip",
            "search_crawler",
            10.0,
            50,
            "client_ip",
        ),
        l("ai_retriever_per_ip", "ai_retriever", 5.0, 20, "client_ip"),
        l("ai_trainer_per_ip", "ai_trainer", 1.0, 5, "client_ip"),
        l("other_bot_per_ip", "other_bot", 1.0, 10, "client_ip"),
        l(
            "unverified_bot_per_ip",
            "unverified_bot",
            0.5,
            5,
            "client_ip",
        ),
        l(
            "unverified_bot_global",
            "unverified_bot",
            20.0,
            100,
            "global",
        ),
        l("spoofed_per_ip", "spoofed", 0.1, 2, "client_ip"),
    ]
}

fn default_exempt_paths() -> Vec<String> {
    ["/robots.txt", "/sitemap.xml", "/sitemap_index.xml"]
        .into_iter()
        .map(String::from)
        .collect()
}

/// Default request header carrying the class upstream.
pub const DEFAULT_CLASS_HEADER: &str = "x-crawler-class";

// ---------------------------------------------------------------------------------------------
// Parsing and validation.

/// Parses and validates a configuration document. Empty or whitespace-only input means
/// [`DEFAULT_CONFIG_JSON`].
///
/// Errors: the first problem found, as `path: reason`.
pub fn parse(bytes: &[u8]) -> Result<Config, ConfigError> {
    let text = if bytes.iter().all(u8::is_ascii_whitespace) {
        DEFAULT_CONFIG_JSON.as_bytes()
    } else {
        bytes
    };
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(err("<root>", "must be a JSON object"));
    }
    let de = &mut serde_json::Deserializer::from_slice(text);
    let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        // serde_path_to_error prints the root as "." or "?" (syntax errors), and an empty
        // key as nothing; name both so the log line always points somewhere.
        let path = if path.is_empty() || path == "." || path == "?" {
            "<root>".into()
        } else if path.ends_with('.') {
            format!("{path}\"\"")
        } else {
            path
        };
        err(path, e.into_inner().to_string())
    })?;
    compile(raw)
}

/// 1..=64 chars of `[a-z0-9_-]`, plus `.` when `dot` (bot ids, limit names).
fn is_name(s: &str, dot: bool) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|b| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || b == b'_'
                || b == b'-'
                || (dot && b == b'.')
        })
}

/// RFC 9110 section 5.1 field-name token, lowercased.
fn header_name(path: &str, s: &str) -> Result<String, ConfigError> {
    const TCHAR: &[u8] = b"!#$%&'*+-.^_`|~";
    let lower = s.to_ascii_lowercase();
    if lower.is_empty()
        || lower.len() > 128
        || !lower
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || TCHAR.contains(&b))
    {
        return Err(err(path, format!("{s:?} is not a valid header name")));
    }
    const RESERVED: &[&str] = &[
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "te",
        "upgrade",
        "user-agent",
        "x-forwarded-for",
    ];
    if RESERVED.contains(&lower.as_str()) {
        return Err(err(path, format!("{s:?} is reserved")));
    }
    Ok(lower)
}

fn compile(raw: RawConfig) -> Result<Config, ConfigError> {
    // client_ip
    let ci = raw.client_ip;
    if ci.ipv4_prefix_len > 32 {
        return Err(err("client_ip.ipv4_prefix_len", "must be 0..=32"));
    }
    if ci.ipv6_prefix_len > 128 {
        return Err(err("client_ip.ipv6_prefix_len", "must be 0..=128"));
    }
    if !(1..=16).contains(&ci.xff_trusted_hops) {
        return Err(err("client_ip.xff_trusted_hops", "must be 1..=16"));
    }

    // bots
    let mut seen = HashSet::new();
    for (i, b) in raw.bots.iter().enumerate() {
        let p = format!("bots[{i}]");
        if !is_valid_bot_id(&b.id) {
            return Err(err(
                format!("{p}.id"),
                "must be 1..=64 chars of [a-z0-9._-]",
            ));
        }
        if !seen.insert(b.id.as_str()) {
            return Err(err(format!("{p}.id"), format!("duplicate id {:?}", b.id)));
        }
        if b.ua_contains.is_empty() {
            return Err(err(format!("{p}.ua_contains"), "must not be empty"));
        }
        for (j, t) in b.ua_contains.iter().enumerate() {
            if t.trim().is_empty() || t.len() > 256 {
                return Err(err(
                    format!("{p}.ua_contains[{j}]"),
                    "must be 1..=256 bytes, not blank",
                ));
            }
        }
        if matches!(b.class, Class::UnverifiedBot | Class::Spoofed) {
            return Err(err(
                format!("{p}.class"),
                "unverified_bot and spoofed are assigned by verification, not by the catalog",
            ));
        }
        if b.class.is_crawler() && !b.verify {
            return Err(err(
                format!("{p}.class"),
                format!(
                    "{} is only given to verified claims: set verify: true (and teach the \
                     verifier how to check it) or use other_bot",
                    b.class.as_str()
                ),
            ));
        }
    }
    let entries = match raw.bots_mode {
        BotsMode::Replace => raw.bots,
        BotsMode::Extend => {
            let ids: HashSet<String> = raw.bots.iter().map(|b| b.id.clone()).collect();
            let builtin = builtin_catalog().map_err(|e| {
                err(
                    "bots_mode",
                    format!("extend needs the built-in catalog, which does not load: {e}"),
                )
            })?;
            let mut v = raw.bots;
            v.extend(builtin.into_iter().filter(|b| !ids.contains(&b.id)));
            v
        }
    };

    // classes
    let mut classes = Class::ALL.map(default_policy);
    for (name, rc) in &raw.classes {
        let p = format!("classes.{name}");
        let Some(class) = Class::parse(name) else {
            return Err(err(p, "unknown class"));
        };
        let Some(pol) = classes.get_mut(class.index()) else {
            return Err(err(p, "unknown class"));
        };
        if let Some(ra) = &rc.retry_after {
            pol.retry_after.min_s = ra.min_s.unwrap_or(pol.retry_after.min_s);
            pol.retry_after.max_s = ra.max_s.unwrap_or(pol.retry_after.max_s);
            pol.retry_after.jitter_s = ra.jitter_s.unwrap_or(pol.retry_after.jitter_s);
        }
        if let Some(s) = rc.reject_status {
            pol.reject_status = s;
        }
        let ra = pol.retry_after;
        if ra.min_s < 1 {
            return Err(err(format!("{p}.retry_after.min_s"), "must be >= 1"));
        }
        if ra.max_s < ra.min_s || ra.max_s > 86_400 {
            return Err(err(
                format!("{p}.retry_after.max_s"),
                format!("must be in min_s..=86400 (min_s is {})", ra.min_s),
            ));
        }
        if ra.jitter_s > 3_600 {
            return Err(err(format!("{p}.retry_after.jitter_s"), "must be <= 3600"));
        }
        if !matches!(pol.reject_status, 429 | 503) {
            return Err(err(format!("{p}.reject_status"), "must be 429 or 503"));
        }
    }

    // routes
    let mut route_names = HashSet::new();
    for (i, r) in raw.routes.iter().enumerate() {
        let p = format!("routes[{i}]");
        if !is_name(&r.name, false) || r.name == DEFAULT_ROUTE {
            return Err(err(
                format!("{p}.name"),
                "must be 1..=64 chars of [a-z0-9_-] and not \"default\"",
            ));
        }
        if !route_names.insert(r.name.as_str()) {
            return Err(err(
                format!("{p}.name"),
                format!("duplicate route {:?}", r.name),
            ));
        }
        if !r.path_prefix.starts_with('/') {
            return Err(err(format!("{p}.path_prefix"), "must start with '/'"));
        }
    }

    // limits
    let raw_limits = raw.limits.unwrap_or_else(default_limits);
    let mut limits = Vec::with_capacity(raw_limits.len());
    let mut limit_names = HashSet::new();
    for (i, l) in raw_limits.iter().enumerate() {
        let p = format!("limits[{i}]");
        if !is_name(&l.name, true) {
            return Err(err(
                format!("{p}.name"),
                "must be 1..=64 chars of [a-z0-9._-]",
            ));
        }
        if !limit_names.insert(l.name.as_str()) {
            return Err(err(
                format!("{p}.name"),
                format!("duplicate limit {:?}", l.name),
            ));
        }
        let class = if l.class == "*" {
            None
        } else {
            Some(Class::parse(&l.class).ok_or_else(|| {
                err(
                    format!("{p}.class"),
                    format!(
                        "unknown class {:?} (expected a class name or \"*\")",
                        l.class
                    ),
                )
            })?)
        };
        let route = if l.route == "*" {
            None
        } else if l.route == DEFAULT_ROUTE {
            Some(raw.routes.len())
        } else {
            Some(
                raw.routes
                    .iter()
                    .position(|r| r.name == l.route)
                    .ok_or_else(|| {
                        err(
                            format!("{p}.route"),
                            format!("unknown route {:?} (define it in routes)", l.route),
                        )
                    })?,
            )
        };
        if !(l.rate_per_s.is_finite() && l.rate_per_s > 0.0) {
            return Err(err(format!("{p}.rate_per_s"), "must be > 0"));
        }
        if l.rate_per_s > 1_000_000.0 {
            return Err(err(format!("{p}.rate_per_s"), "must be <= 1000000"));
        }
        if !(1..=1_000_000).contains(&l.burst) {
            return Err(err(format!("{p}.burst"), "must be 1..=1000000"));
        }
        let key = match l.key.as_str() {
            "client_ip" => KeyKind::ClientIp,
            "global" => KeyKind::Global,
            k => match k.strip_prefix("header:") {
                Some(h) => KeyKind::Header(header_name(&format!("{p}.key"), h)?),
                None => {
                    return Err(err(
                        format!("{p}.key"),
                        format!("{k:?}: expected \"client_ip\", \"global\" or \"header:<name>\""),
                    ))
                }
            },
        };
        limits.push(Limit {
            name: l.name.clone(),
            class,
            route,
            rate_per_s: l.rate_per_s,
            burst: l.burst,
            rate: Rate::new(l.rate_per_s, l.burst),
            key,
        });
    }

    // exempt paths
    let exempt_paths = raw.exempt_paths.unwrap_or_else(default_exempt_paths);
    for (i, e) in exempt_paths.iter().enumerate() {
        if !e.starts_with('/') || e.contains('?') {
            return Err(err(
                format!("exempt_paths[{i}]"),
                "must start with '/' and have no query",
            ));
        }
    }

    let class_header = header_name(
        "class_header",
        raw.class_header.as_deref().unwrap_or(DEFAULT_CLASS_HEADER),
    )?;

    let st = raw.store;
    if !(1..=1_048_576).contains(&st.slots) {
        return Err(err("store.slots", "must be 1..=1048576"));
    }
    if st.cas_retries > 32 {
        return Err(err("store.cas_retries", "must be 0..=32"));
    }
    if !(1..=1_000_000).contains(&st.fallback_buckets) {
        return Err(err("store.fallback_buckets", "must be 1..=1000000"));
    }

    let v = &raw.verifier;
    let printable =
        |s: &str| !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic());
    if !printable(&v.cluster) {
        return Err(err(
            "verifier.cluster",
            "must be 1..=128 printable ASCII chars",
        ));
    }
    if !printable(&v.authority) {
        return Err(err(
            "verifier.authority",
            "must be 1..=128 printable ASCII chars",
        ));
    }
    if !(10..=10_000).contains(&v.timeout_ms) {
        return Err(err("verifier.timeout_ms", "must be 10..=10000"));
    }
    if !(1..=1_048_576).contains(&v.cache_slots) {
        return Err(err("verifier.cache_slots", "must be 1..=1048576"));
    }
    if !(1..=604_800).contains(&v.max_ttl_s) {
        return Err(err("verifier.max_ttl_s", "must be 1..=604800"));
    }
    if !(1..=3_600).contains(&v.unknown_ttl_s) {
        return Err(err("verifier.unknown_ttl_s", "must be 1..=3600"));
    }
    if !(1..=3_600).contains(&v.error_ttl_s) {
        return Err(err("verifier.error_ttl_s", "must be 1..=3600"));
    }
    if v.stale_if_error_s > 604_800 {
        return Err(err("verifier.stale_if_error_s", "must be 0..=604800"));
    }
    if v.max_spoofed_per_prefix > 1_000 {
        return Err(err("verifier.max_spoofed_per_prefix", "must be 0..=1000"));
    }

    for (i, s) in raw.rewrite.statuses.iter().enumerate() {
        if !(400..=599).contains(s) {
            return Err(err(format!("rewrite.statuses[{i}]"), "must be 400..=599"));
        }
    }
    let degraded = match &raw.degraded {
        None => None,
        Some(h) => Some(header_name("degraded", h)?),
    };

    Ok(Config {
        mode: raw.mode,
        client_ip: ci,
        classifier: Classifier::new(entries),
        classes,
        routes: raw.routes,
        limits,
        exempt_paths,
        class_header,
        ratelimit_headers: raw.ratelimit_headers,
        store: st,
        verifier: raw.verifier,
        rewrite: raw.rewrite,
        degraded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(json: &str) -> String {
        match parse(json.as_bytes()) {
            Ok(_) => panic!("accepted: {json}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_document_is_the_embedded_default() {
        let c = parse(b"").expect("default parses");
        assert_eq!(c.mode, Mode::Enforce);
        assert_eq!(c.limits.len(), 9);
        assert_eq!(c.class_header, "x-crawler-class");
        assert_eq!(
            c.exempt_paths,
            vec!["/robots.txt", "/sitemap.xml", "/sitemap_index.xml"]
        );
        assert_eq!(c.store.slots, 16_384);
        assert!(!c.classifier.entries().is_empty());
    }

    #[test]
    fn embedded_default_file_equals_field_defaults() {
        let file = parse(DEFAULT_CONFIG_JSON.as_bytes()).expect("file parses");
        let fields = parse(b"{}").expect("{} parses");
        assert_eq!(file.limits, fields.limits);
        assert_eq!(file.classes, fields.classes);
        assert_eq!(file.exempt_paths, fields.exempt_paths);
        assert_eq!(file.store, fields.store);
        assert_eq!(file.client_ip, fields.client_ip);
        assert_eq!(file.class_header, fields.class_header);
        assert_eq!(file.mode, fields.mode);
        assert_eq!(file.ratelimit_headers, fields.ratelimit_headers);
        assert_eq!(file.routes, fields.routes);
        assert_eq!(file.verifier, fields.verifier);
        assert_eq!(file.rewrite, fields.rewrite);
        assert_eq!(file.degraded, fields.degraded);
        assert_eq!(file.classifier.entries(), fields.classifier.entries());
    }

    #[test]
    fn errors_name_the_field_path() {
        let l =
            r#"{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":1,"key":"client_ip"}"#;
        let bad = l
            .replace(r#""rate_per_s":1"#, r#""rate_per_s":0"#)
            .replace("\"a\"", "\"c\"");
        let doc = format!(
            r#"{{"limits":[{l},{l2},{bad}]}}"#,
            l2 = l.replace("\"a\"", "\"b\"")
        );
        assert_eq!(parse_err(&doc), "limits[2].rate_per_s: must be > 0");
        assert_eq!(
            parse_err(&format!(r#"{{"limits":[{l},{l}]}}"#)),
            r#"limits[1].name: duplicate limit "a""#
        );
        assert_eq!(
            parse_err(
                &l.replace("\"*\",\"route\"", "\"robot\",\"route\"")
                    .replace('{', r#"{"limits":[{"#)
                    .replace("ip\"}", "ip\"}]}")
            ),
            r#"limits[0].class: unknown class "robot" (expected a class name or "*")"#
        );
        assert_eq!(
            parse_err(
                r#"{"limits":[{"name":"a","class":"*","route":"api","rate_per_s":1,"burst":1,"key":"client_ip"}]}"#
            ),
            r#"limits[0].route: unknown route "api" (define it in routes)"#
        );
        assert_eq!(
            parse_err(
                r#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":0,"key":"client_ip"}]}"#
            ),
            "limits[0].burst: must be 1..=1000000"
        );
        assert_eq!(
            parse_err(
                r#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":1,"burst":1,"key":"cookie"}]}"#
            ),
            r#"limits[0].key: "cookie": expected "client_ip", "global" or "header:<name>""#
        );
        assert_eq!(
            parse_err(r#"{"classes":{"human":{"reject_status":500}}}"#),
            "classes.human.reject_status: must be 429 or 503"
        );
        assert_eq!(
            parse_err(r#"{"classes":{"human":{"retry_after":{"min_s":10,"max_s":5}}}}"#),
            "classes.human.retry_after.max_s: must be in min_s..=86400 (min_s is 10)"
        );
        assert_eq!(
            parse_err(r#"{"classes":{"robots":{}}}"#),
            "classes.robots: unknown class"
        );
        assert_eq!(
            parse_err(r#"{"client_ip":{"ipv6_prefix_len":129}}"#),
            "client_ip.ipv6_prefix_len: must be 0..=128"
        );
        assert_eq!(
            parse_err(r#"{"class_header":"x bad"}"#),
            r#"class_header: "x bad" is not a valid header name"#
        );
        assert_eq!(
            parse_err(r#"{"store":{"slots":0}}"#),
            "store.slots: must be 1..=1048576"
        );
        assert_eq!(
            parse_err(r#"{"exempt_paths":["robots.txt"]}"#),
            "exempt_paths[0]: must start with '/' and have no query"
        );
        assert_eq!(
            parse_err(r#"{"bots":[{"id":"x","ua_contains":[" "],"class":"other_bot"}]}"#),
            "bots[0].ua_contains[0]: must be 1..=256 bytes, not blank"
        );
        assert_eq!(
            parse_err(r#"{"bots":[{"id":"x","ua_contains":["x"],"class":"spoofed"}]}"#),
            "bots[0].class: unverified_bot and spoofed are assigned by verification, not by the catalog"
        );
        assert_eq!(
            parse_err(r#"{"bots":[{"id":"x","ua_contains":["x"],"class":"ai_trainer"}]}"#),
            "bots[0].class: ai_trainer is only given to verified claims: set verify: true (and \
             teach the verifier how to check it) or use other_bot"
        );
        assert_eq!(
            parse_err(r#"{"rewrite":{"statuses":[429,200]}}"#),
            "rewrite.statuses[1]: must be 400..=599"
        );
        assert_eq!(
            parse_err(r#"{"verifier":{"timeout_ms":0}}"#),
            "verifier.timeout_ms: must be 10..=10000"
        );
        assert_eq!(
            parse_err(r#"{"verifier":{"on_error":"allow"}}"#)
                .split(',')
                .next(),
            Some("verifier.on_error: unknown variant `allow`")
        );
        assert_eq!(
            parse_err(r#"{"routes":[{"name":"api","path_prefix":"api"}]}"#),
            "routes[0].path_prefix: must start with '/'"
        );
    }

    #[test]
    fn unknown_and_mistyped_fields_are_errors_with_their_path() {
        let e = parse_err(r#"{"bogus":1}"#);
        assert!(
            e.starts_with("bogus: unknown field `bogus`, expected one of `mode`"),
            "{e}"
        );
        let e = parse_err(r#"{"store":{"slotz":1}}"#);
        assert!(e.starts_with("store.slotz: unknown field `slotz`"), "{e}");
        let e = parse_err(r#"{"":1}"#);
        assert!(e.starts_with("<root>: unknown field ``"), "{e}");
        let e = parse_err(r#"{"store":{"":1}}"#);
        assert!(e.starts_with("store.\"\": unknown field ``"), "{e}");
        let e = parse_err(r#"{"mode":"off"}"#);
        assert!(e.starts_with("mode: unknown variant `off`"), "{e}");
        let e = parse_err(
            r#"{"limits":[{"name":"a","class":"*","route":"*","rate_per_s":"1","burst":1,"key":"global"}]}"#,
        );
        assert!(e.starts_with("limits[0].rate_per_s: invalid type"), "{e}");
        let e = parse_err("{not json");
        assert!(e.starts_with("<root>: key must be a string"), "{e}");
        assert_eq!(parse_err("[]"), "<root>: must be a JSON object");
        assert_eq!(parse_err("\u{feff}{}"), "<root>: must be a JSON object");
    }

    #[test]
    fn routes_first_match_wins_and_default_route() {
        let c = parse(
            br#"{"routes":[{"name":"api","path_prefix":"/api/"},{"name":"all_a","path_prefix":"/a"}],
                 "limits":[{"name":"api","class":"*","route":"api","rate_per_s":1,"burst":1,"key":"global"},
                           {"name":"dflt","class":"human","route":"default","rate_per_s":1,"burst":1,"key":"header:X-Api-Key"}]}"#,
        )
        .expect("valid");
        assert_eq!(c.route_of(b"/api/v1"), 0);
        assert_eq!(c.route_of(b"/about"), 1);
        assert_eq!(c.route_of(b"/"), 2);
        assert_eq!(c.route_name(2), "default");
        assert_eq!(c.limits[0].route, Some(0));
        assert_eq!(c.limits[1].route, Some(2));
        assert_eq!(c.limits[1].class, Some(Class::Human));
        assert_eq!(c.limits[1].key, KeyKind::Header("x-api-key".into()));
    }

    #[test]
    fn class_overrides_merge_onto_defaults() {
        let c = parse(
            br#"{"classes":{"script":{"retry_after":{"max_s":20}},"human":{"reject_status":503}}}"#,
        )
        .expect("valid");
        assert_eq!(
            c.policy(Class::Script).retry_after,
            RetryAfter {
                min_s: 1,
                max_s: 20,
                jitter_s: 10
            }
        );
        assert_eq!(c.policy(Class::Human).reject_status, 503);
        assert_eq!(c.policy(Class::Spoofed).retry_after.min_s, 60);
    }

    #[test]
    fn bots_extend_puts_configured_entries_first_and_replace_drops_builtins() {
        let c =
            parse(br#"{"bots":[{"id":"acmebot","ua_contains":["AcmeBot"],"class":"other_bot"}]}"#)
                .expect("valid");
        assert_eq!(c.classifier.entries()[0].id, "acmebot");
        assert!(c.classifier.entries().len() > 1);
        let c = parse(br#"{"bots_mode":"replace","bots":[{"id":"acmebot","ua_contains":["AcmeBot"],"class":"other_bot","verify":false}]}"#)
            .expect("valid");
        assert_eq!(c.classifier.entries().len(), 1);
    }
}
