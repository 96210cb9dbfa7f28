//! The filter configuration: one JSON document (Envoy `configuration` / Istio
//! `pluginConfig`), parsed and validated entirely at load time.
//!
//! An empty document means the embedded default, `envoy/crawlguard.default.json`. Every field
//! of a non-empty document is optional and takes the same default. Unknown fields are errors.
//! Every error names the field path and the reason, e.g. `limits[2].rate_per_s: must be > 0`.
//!
//! Files: this one holds the compiled types and [`parse`]; `raw.rs` the serde shapes of the
//! document; `defaults.rs` every default value (the one source: `envoy/crawlguard.default.json`
//! and the README reference are checked against it by tests); `compile.rs` the validation,
//! one `compile_<section>` per section; `headers.rs` the header names each use refuses;
//! `warnings.rs` what is valid but probably not meant (logged at load); `error.rs` the
//! error type.

mod classes;
mod client_signals;
mod compile;
mod defaults;
mod error;
mod headers;
mod json_path;
mod key_kind;
mod limits;
mod raw;
mod sections;
mod signed_agents;
mod warnings;

use crate::identity::class::{Class, PerClass};
use crate::identity::classify::Classifier;
use crate::limits::bucket::Rate;
use serde::Deserialize;

pub use client_signals::{parse_asn, ClientSignals};
pub use defaults::DEFAULT_CLASS_HEADER;
use error::err;
pub use error::{ConfigError, MAX_ERROR_PART_BYTES};
pub use headers::{key_header_is_list, KEY_REFUSED};
pub use key_kind::KeyKind;
pub use sections::{
    BrowserCheckMode, BrowserChecks, DegradedShare, FleetConfig, OnError, RewriteConfig,
    ShedThresholds, Shedding, StoreConfig, VerifierConfig,
};
pub use signed_agents::{SignedAgent, SignedAgents, SignedAgentsMode, DEFAULT_NONCE_SLOTS};

/// The embedded default configuration (also shipped as `envoy/crawlguard.default.json`).
pub const DEFAULT_CONFIG_JSON: &str = include_str!("../../../envoy/crawlguard.default.json");

/// Name of the implicit route that matches every path no configured route matches.
pub const DEFAULT_ROUTE: &str = "default";

/// Longest time an empty bucket may take to refill, `burst / rate_per_s`, in seconds: one
/// year (365 days). Bucket times are u64 nanoseconds since the Unix epoch, which end in the
/// year 2554, and a bucket's state reaches at most `now + burst / rate_per_s`; one year keeps
/// every valid limit more than five centuries clear of that end (a longer window means
/// nothing to a rate limiter, and its RateLimit-Policy `w` would be absurd). Without a bound a
/// tiny rate (`1e-10`/s) pushed the times past u64, where the math used to saturate into
/// "allow" (the bucket now refuses what it cannot store; validation keeps configs away).
pub const MAX_REFILL_S: f64 = 31_536_000.0;

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

impl Mode {
    /// The mode's name in the configuration (`enforce`, `shadow`), as serde reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }
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

/// Escalation for clients that ignore their Retry-After (`classes.<class>.escalation`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Escalation {
    /// Escalate at all.
    pub enabled: bool,
    /// Ignored Retry-Afters before the first step (1..=1000).
    pub after_ignored: u16,
    /// Each step multiplies the Retry-After by this (1 < factor <= 100).
    pub factor: f64,
    /// Longest escalated Retry-After, s (class `retry_after.min_s`..=86400).
    pub max_s: u32,
    /// After this long without an ignored request the key starts over, s (1..=86400).
    pub decay_s: u32,
}

/// Per-class rejection policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClassPolicy {
    /// Retry-After computation.
    pub retry_after: RetryAfter,
    /// 429 (rate limited) or 503 (shed).
    pub reject_status: u16,
    /// Escalation for clients that ignore Retry-After.
    pub escalation: Escalation,
}

/// A limit's own address prefix (`limits[].ipv4_prefix_len`, `limits[].ipv6_prefix_len`):
/// its `client_ip` part groups the full client address by these, whatever
/// `client_ip.ipv4_prefix_len`/`ipv6_prefix_len` say (an IPv4 /24 or an IPv6 /48 for an
/// aggregate limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressPrefix {
    /// IPv4 prefix length, bits (0..=32).
    pub ipv4_len: u8,
    /// IPv6 prefix length, bits (0..=128).
    pub ipv6_len: u8,
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
    /// The token bucket (`rate_per_s`, `burst`); `None` for a limit of requests in flight
    /// only.
    pub bucket: Option<TokenBucket>,
    /// Requests of one key in flight at once (`max_in_flight`, 1..=[`MAX_IN_FLIGHT`]);
    /// `None`: not bounded ([`crate::limits::in_flight`]).
    pub max_in_flight: Option<u16>,
    /// Bucket key.
    pub key: KeyKind,
    /// The limit's own address prefix for its `client_ip` part; `None`: the configured
    /// `client_ip` prefix lengths.
    pub address_prefix: Option<AddressPrefix>,
    /// `enforce` or `shadow` for this limit alone (`limits[].mode`, else the global `mode`).
    pub mode: Mode,
    /// Cost-based: reserve tokens at request time, settle from a response header.
    pub cost: Option<Cost>,
}

/// A limit's token bucket (`limits[].rate_per_s`, `limits[].burst`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    /// Refill rate, tokens per second.
    pub rate_per_s: f64,
    /// Capacity, tokens.
    pub burst: u32,
    /// Integer form of rate and burst.
    pub rate: Rate,
}

impl TokenBucket {
    /// The bucket of `rate_per_s` tokens a second and `burst` tokens (validated by the
    /// caller).
    pub fn new(rate_per_s: f64, burst: u32) -> TokenBucket {
        TokenBucket {
            rate_per_s,
            burst,
            rate: Rate::new(rate_per_s, burst),
        }
    }

    /// Seconds an empty bucket takes to refill (`burst / rate_per_s`, rounded up): the
    /// window `w` of its `RateLimit-Policy`.
    pub fn window_s(&self) -> u64 {
        (f64::from(self.burst) / self.rate_per_s).ceil() as u64
    }
}

/// Most `limits[].max_in_flight`.
pub const MAX_IN_FLIGHT: u16 = 10_000;

/// Name of the exempt paths' own limit (`exempt_limit`): in stats, logs and its
/// `RateLimit-Policy`; no entry of `limits` may take it.
pub const EXEMPT_LIMIT_NAME: &str = "exempt_limit";

/// The exempt paths' own limit (`exempt_limit`): a token bucket per client address (the
/// configured `client_ip` grouping), never a class limit, never shed.
#[derive(Debug, Clone, PartialEq)]
pub struct ExemptLimit {
    /// The limit: [`EXEMPT_LIMIT_NAME`], key `client_ip`, every class and route, its mode.
    pub limit: Limit,
    /// Its rejection: `429`, Retry-After in its `retry_after` range, no escalation.
    pub policy: ClassPolicy,
}

impl Limit {
    /// The key as the README's tables and `crawlguard replay` show it: the key
    /// ([`KeyKind`]'s form), and a limit's own address prefix after it (`client_ip /24 /48`).
    pub fn key_label(&self) -> String {
        match self.address_prefix {
            None => self.key.to_string(),
            Some(p) => format!("{} /{} /{}", self.key, p.ipv4_len, p.ipv6_len),
        }
    }
}

/// A cost-based limit (`limits[].cost`): a request reserves `reserve` tokens, and its
/// response settles them to the cost the origin reports in `from_response_header` (a
/// missing or invalid value settles at `reserve`; the header never reaches the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cost {
    /// Tokens reserved per request at least (1..=burst); a key reserves its last settled
    /// cost when that is more ([`crate::limits::cost`]).
    pub reserve: u32,
    /// Reservations of one key in flight at once (1..=255), the bound on how many requests
    /// can pass on a reservation smaller than their cost ([`crate::limits::cost`]).
    pub max_in_flight: u8,
    /// Lowercase response header carrying the actual cost (a whole number).
    pub from_response_header: String,
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

/// 1..=64 chars of `[a-z0-9_-]`, plus `.` when `dot` (bot ids, limit and route names).
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
    pub classes: PerClass<ClassPolicy>,
    /// Configured routes, in match order; route index `routes.len()` is [`DEFAULT_ROUTE`].
    pub routes: Vec<Route>,
    /// Limits; a request takes a token from every matching one.
    pub limits: Vec<Limit>,
    /// The distinct `cost.from_response_header` names of cost-based limits (removed from
    /// every response).
    pub cost_headers: Vec<String>,
    /// Exact paths never limited by a class limit nor shed (a request for one with a query
    /// string is not exempt).
    pub exempt_paths: Vec<String>,
    /// The exempt paths' own per-client limit (`exempt_limit`); `None` when disabled.
    pub exempt_limit: Option<ExemptLimit>,
    /// Lowercase request header carrying the class upstream.
    pub class_header: String,
    /// Emit `RateLimit-Policy` / `RateLimit` on rejections.
    pub ratelimit_headers: bool,
    /// Slot table settings.
    pub store: StoreConfig,
    /// Verifier callout settings.
    pub verifier: VerifierConfig,
    /// Fleet mode: one limit across every Envoy replica.
    pub fleet: FleetConfig,
    /// Response-path normalisation.
    pub rewrite: RewriteConfig,
    /// Class-priority load shedding.
    pub shedding: Shedding,
    /// `browser_checks`: each catalog browser check's mode.
    pub browser_checks: BrowserChecks,
    /// `client_signals`: the trusted headers the browser checks and the `asn` key read.
    pub client_signals: ClientSignals,
    /// Bit `class as usize`: some limit of the class (or of every class) has an `asn` key
    /// part, so its requests read `client_signals.asn_header` ([`Config::asn_keyed`]).
    pub asn_keyed_classes: u32,
    /// `signed_agents`: Web Bot Auth signatures and the agents they name.
    pub signed_agents: SignedAgents,
    /// Lowercase response header the origin sets on degraded pages; such a 200 becomes a 503
    /// for crawler classes (soft-404 guard). `None` = off.
    pub degraded: Option<String>,
    /// Things that are valid but probably not meant, one line each starting with the field
    /// path (`limits[0].rate_per_s: ...`); `on_configure` logs each at warn level.
    pub warnings: Vec<String>,
}

impl Config {
    /// Whether requests of `class` need their network for an `asn` limit key.
    pub fn asn_keyed(&self, class: Class) -> bool {
        self.asn_keyed_classes & (1 << (class as u32)) != 0
    }

    /// Rejection policy of `class`.
    pub fn policy(&self, class: Class) -> &ClassPolicy {
        &self.classes[class]
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

/// Parses and validates a configuration document. Empty or whitespace-only input means
/// the embedded default, [`DEFAULT_CONFIG_JSON`]: every field at its default, which is
/// what that file spells out (a test keeps them equal), so the filter parses `{}` rather
/// than carry the file's 6 KB in the module.
///
/// Errors: the first problem found, as `path: reason`.
pub fn parse(bytes: &[u8]) -> Result<Config, ConfigError> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        // Some editors write one; JSON (RFC 8259 section 8.1) does not allow it.
        return Err(err(
            "<root>",
            "starts with a UTF-8 byte-order mark (EF BB BF); save the file without it",
        ));
    }
    let text = if bytes.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        bytes
    };
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(err("<root>", "must be a JSON object"));
    }
    let de = &mut serde_json::Deserializer::from_slice(text);
    let raw = raw::RawConfig::deserialize(&mut *de).map_err(|e| {
        // The field where serde_json stopped (`json_path`); the top level is `<root>`.
        let path = json_path::path_at(text, e.line(), e.column());
        let path = if path.is_empty() {
            "<root>".into()
        } else {
            path
        };
        err(path, e.to_string())
    })?;
    // One document: anything after it (a second pasted object, stray text) would otherwise
    // be ignored unchecked, e.g. `{"mode":"shadow"}{"mode":"enforce",...}` loading as shadow.
    de.end().map_err(|e| {
        err(
            "<root>",
            format!("trailing characters after the configuration object ({e})"),
        )
    })?;
    compile::compile(raw)
}

#[cfg(test)]
mod tests;
