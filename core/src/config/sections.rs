//! The types of the `store`, `verifier`, `fleet`, `rewrite`, `shedding` and
//! `browser_checks` sections, as validated (re-exported by [`crate::config`]).

use super::{Mode, RetryAfter};
use crate::identity::class::Class;
use serde::Deserialize;

/// `store` section: the shared-data slot table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Number of shared-data slots for buckets (1..=1048576), four candidates per key.
    /// Memory is about `slots x 144` bytes per Envoy (measured), whatever the number of
    /// clients.
    pub slots: u32,
    /// Extra attempts after a CAS mismatch before falling back to the local bucket (0..=32).
    pub cas_retries: u32,
    /// Seed of the key hash. `None` (the default): each Envoy draws a random one at its first
    /// load and keeps it in shared data across configuration reloads
    /// ([`crate::store::resolve_hash_seed`]), so slot collisions cannot be planned from
    /// the source; required in fleet mode, where every replica must hash alike. `on_configure`
    /// resolves it before the workers are built, so the limiter always sees `Some`.
    pub hash_seed: Option<u64>,
    /// Capacity of the per-worker fallback bucket map used when the shared store fails.
    pub fallback_buckets: u32,
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

/// `verifier` section: the callout to the crawlguard-sidecar sidecar.
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
    /// How often this Envoy fetches the sidecar's published ranges (`GET /v1/ranges`), s
    /// (0..=86400; 0: never, every claim goes to the sidecar). Claims of bots the sidecar
    /// verifies by ranges are then decided without a callout ([`crate::identity::published_ranges`]).
    pub ranges_refresh_s: u32,
}

/// How a replica limits while its fleet syncs fail (`fleet.degraded_share`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DegradedShare {
    /// Each replica keeps its share of every limit (rate and burst divided by the last
    /// known replica count): the fleet stays close to one limit (default).
    #[default]
    Split,
    /// Each replica decides alone with the whole limit: the fleet admits up to
    /// replicas x the limit until syncing resumes.
    Full,
}

/// `fleet` section: one limit across every Envoy replica. Requests are still decided
/// against this Envoy's shared-data buckets; each worker sends the consumption it saw to the
/// sidecar every `sync_interval_ms` (`POST /v1/fleet/sync`, the contract in
/// `crawlguard_contract::fleet`), which keeps the fleet's buckets in Redis, and folds the
/// fleet-wide state it gets back into the local buckets (`crate::fleet`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// Sync with the fleet at all (default false: every limit is per Envoy).
    pub enabled: bool,
    /// Envoy cluster name of the sidecar.
    pub cluster: String,
    /// `:authority` sent to the sidecar.
    pub authority: String,
    /// How often each worker syncs, ms (100..=60000). The fleet's overshoot grows with it.
    pub sync_interval_ms: u32,
    /// How long a sync may take before it counts as failed, ms (10..=`sync_interval_ms`).
    pub timeout_ms: u32,
    /// Most bucket keys in one sync (1..=10000); more wait for the next one.
    pub max_keys_per_sync: u32,
    /// The most replicas a limit is split over (1..=10000): a larger count in a sync answer
    /// (a broken sidecar, or anyone posting made-up replica ids to it) is taken as this, so
    /// each replica's share stays at least `burst / max_replicas` tokens.
    pub max_replicas: u32,
    /// How each replica limits while syncs fail.
    pub degraded_share: DegradedShare,
}

/// `rewrite` section: normalisation of rejections coming from upstream.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewriteConfig {
    /// Normalise upstream rejections at all (default true).
    pub enabled: bool,
    /// Upstream statuses normalised (400..=599; default 429 and 503; 502/504 optional).
    pub statuses: Vec<u16>,
    /// Longest Retry-After a normalised 503 keeps from the upstream, s
    /// (`shedding.retry_after.max_s`..=86400; default 3600): a 503 is the site's load, so its
    /// Retry-After is the upstream's clamped to `[shedding.retry_after.min_s, this]`, or,
    /// when missing or invalid, the shedding one.
    pub max_retry_after_s: u32,
}

/// Thresholds that make a route's origin unhealthy (`shedding` or a route override).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShedThresholds {
    /// p95 upstream time above this is unhealthy, ms.
    pub latency_ms: u32,
    /// A 5xx share above this is unhealthy, per thousand (`error_ratio` x 1000).
    pub error_permille: u32,
}

/// `shedding` section: class-priority load shedding when the origin slows down.
#[derive(Debug, Clone, PartialEq)]
pub struct Shedding {
    /// Shed at all (default false).
    pub enabled: bool,
    /// `enforce` (503s) or `shadow` (count would-be sheds); default the global `mode`.
    pub mode: Mode,
    /// Thresholds per route index (`routes.len()` is the default route): the section's,
    /// or the route's override.
    pub thresholds: Vec<ShedThresholds>,
    /// Window the origin is judged over, s (1..=60).
    pub window_s: u32,
    /// Fewer responses than this in the window: never unhealthy.
    pub min_requests: u32,
    /// The level moves at most one class per this many seconds (1..=3600).
    pub step_s: u32,
    /// Each client prefix counts for at most as many slow (or failed) responses as the
    /// `min_clients`-th heaviest, so fewer clients than this cannot make the origin look
    /// unhealthy (1..=[`crate::protection::top_clients::TOP_CLIENTS`]; 1 counts every response as is).
    pub min_clients: u32,
    /// Classes in the order they are shed, lowest priority first.
    pub order: Vec<Class>,
    /// Retry-After of a shed request (its base is `step_s`, clamped, plus jitter).
    pub retry_after: RetryAfter,
}

impl Shedding {
    /// The thresholds of route index `route`.
    pub fn thresholds_of(&self, route: usize) -> ShedThresholds {
        self.thresholds
            .get(route)
            .or(self.thresholds.last())
            .copied()
            .unwrap_or(ShedThresholds {
                latency_ms: u32::MAX,
                error_permille: 1000,
            })
    }

    /// Position of `class` in the shed order (`None`: never shed).
    pub fn rank_of(&self, class: Class) -> Option<usize> {
        self.order.iter().position(|c| *c == class)
    }
}

/// What one browser check does (`browser_checks.<id>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BrowserCheckMode {
    /// A `human` request that fails it is `suspect_browser` (and counted).
    #[default]
    Enforce,
    /// Counted only (`crawlguard.browser_check.<id>.inconsistent`): the request stays `human`.
    Shadow,
    /// Not run.
    Off,
}

/// `browser_checks`: the mode of each of the catalog's browser checks
/// ([`crate::identity::catalog::builtin_browser_checks`], same order); `enforce`
/// unless configured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrowserChecks {
    /// Per check, by index; a missing entry is `enforce`.
    pub modes: Vec<BrowserCheckMode>,
}

impl BrowserChecks {
    /// The mode of check `i`.
    pub fn mode(&self, i: usize) -> BrowserCheckMode {
        self.modes.get(i).copied().unwrap_or_default()
    }
}
