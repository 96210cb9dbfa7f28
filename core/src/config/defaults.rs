//! Every default of the configuration, in one place. `envoy/crawlguard.default.json` spells
//! out the same values (a test keeps them equal), and the README's reference table is
//! checked against that file.

use super::raw::{RawKey, RawLimit};
use super::{
    ClassPolicy, ClientIpConfig, DegradedShare, Escalation, FleetConfig, IpSource, OnError,
    RetryAfter, RewriteConfig, StoreConfig, VerifierConfig,
};
use crate::identity::class::Class;

/// The escalation defaults: after 3 ignored Retry-Afters, double per step up to an hour;
/// forgotten after 10 minutes of good behaviour.
const fn escalation(enabled: bool) -> Escalation {
    Escalation {
        enabled,
        after_ignored: 3,
        factor: 2.0,
        max_s: 3_600,
        decay_s: 600,
    }
}

pub(super) fn default_policy(class: Class) -> ClassPolicy {
    let (min_s, max_s, jitter_s) = match class {
        Class::SearchCrawler => (1, 60, 5),
        Class::AiRetriever => (1, 30, 3),
        Class::Human => (1, 60, 2),
        Class::Script => (1, 300, 10),
        Class::AiTrainer | Class::OtherBot | Class::UnverifiedBot => (5, 600, 30),
        // Maybe a person whose browser a check misjudged: short waits, like a human's.
        Class::SuspectBrowser => (1, 120, 5),
        Class::Spoofed => (60, 3600, 120),
    };
    ClassPolicy {
        retry_after: RetryAfter {
            min_s,
            max_s,
            jitter_s,
        },
        reject_status: 429,
        // On for claims that failed or cannot be checked, and for scripts; never by default
        // for humans and crawlers.
        escalation: escalation(matches!(
            class,
            Class::Spoofed | Class::UnverifiedBot | Class::Script | Class::SuspectBrowser
        )),
    }
}

/// The default limits: per address for every class, and beside them, for every class but
/// `human`, an aggregate one: per /24 (IPv6 /48) for classes a scraper's address pool lands
/// in (a pool spread over addresses, each under its own rate), per bot id for crawler
/// classes (one operator across all its addresses, however many), and one bucket for claims
/// that failed or cannot be checked; browser claims that failed a check also per network
/// (autonomous system).
///
/// The per-address limits of the classes whose rate admits many requests at once also bound
/// the requests of one address in flight (`max_in_flight`, in the spirit of nginx's
/// `limit_conn`): [`CRAWLER_MAX_IN_FLIGHT`] for the verified crawler classes that would
/// otherwise pass it, [`SCRIPT_MAX_IN_FLIGHT`] for scripts and browser claims that failed a
/// check. With Envoy's default route timeout (15 s) an address holds at most `burst +
/// rate_per_s x 15` requests in flight, so the other classes' rates already bound it below
/// these (`ai_trainer`: 20, `other_bot`: 25, `unverified_bot`: 12, `spoofed`: 3); `human` has
/// none: a browser opens several connections, and many people share one address behind a
/// NAT.
pub(super) fn default_limits() -> Vec<RawLimit> {
    let l = |name: &str, class: &str, rate_per_s: f64, burst: u32, key: &str| RawLimit {
        name: name.into(),
        class: class.into(),
        route: "*".into(),
        rate_per_s: Some(rate_per_s),
        burst: Some(burst),
        max_in_flight: None,
        key: RawKey::One(key.into()),
        ipv4_prefix_len: None,
        ipv6_prefix_len: None,
        mode: None,
        cost: None,
    };
    // Per /24 and /48: a network's share, whatever its addresses.
    let per_24 = |name: &str, class: &str, rate_per_s: f64, burst: u32| RawLimit {
        ipv4_prefix_len: Some(u32::from(AGGREGATE_IPV4_PREFIX_LEN)),
        ipv6_prefix_len: Some(u32::from(AGGREGATE_IPV6_PREFIX_LEN)),
        ..l(name, class, rate_per_s, burst, "client_ip")
    };
    // Per address, with at most `max_in_flight` of its requests in flight.
    let per_ip = |name: &str, class: &str, rate_per_s: f64, burst: u32, max_in_flight: u32| {
        with_max_in_flight(
            l(name, class, rate_per_s, burst, "client_ip"),
            max_in_flight,
        )
    };
    vec![
        l("human_per_ip", "human", 20.0, 100, "client_ip"),
        per_ip("script_per_ip", "script", 1.0, 10, SCRIPT_MAX_IN_FLIGHT),
        per_24("script_per_24", "script", 5.0, 50),
        per_ip(
            "search_crawler_per_ip",
            "search_crawler",
            10.0,
            50,
            CRAWLER_MAX_IN_FLIGHT,
        ),
        l(
            "search_crawler_per_bot",
            "search_crawler",
            200.0,
            2_000,
            "bot",
        ),
        per_ip(
            "ai_retriever_per_ip",
            "ai_retriever",
            5.0,
            20,
            CRAWLER_MAX_IN_FLIGHT,
        ),
        l("ai_retriever_per_bot", "ai_retriever", 50.0, 500, "bot"),
        l("ai_trainer_per_ip", "ai_trainer", 1.0, 5, "client_ip"),
        l("ai_trainer_per_bot", "ai_trainer", 5.0, 50, "bot"),
        l("other_bot_per_ip", "other_bot", 1.0, 10, "client_ip"),
        per_24("other_bot_per_24", "other_bot", 3.0, 30),
        l(
            "unverified_bot_per_ip",
            "unverified_bot",
            0.5,
            5,
            "client_ip",
        ),
        per_24("unverified_bot_per_24", "unverified_bot", 2.0, 20),
        l(
            "unverified_bot_global",
            "unverified_bot",
            20.0,
            100,
            "global",
        ),
        l("spoofed_per_ip", "spoofed", 0.1, 2, "client_ip"),
        per_24("spoofed_per_24", "spoofed", 0.5, 5),
        l("spoofed_global", "spoofed", 5.0, 50, "global"),
        // A browser claim that failed a check: a page's worth per address (a person a check
        // misjudged still loads pages), and a network's and everyone's share together.
        per_ip(
            "suspect_browser_per_ip",
            "suspect_browser",
            2.0,
            40,
            SCRIPT_MAX_IN_FLIGHT,
        ),
        per_24("suspect_browser_per_24", "suspect_browser", 5.0, 100),
        // One network's share (a cloud's address pool; charges nothing until
        // client_signals.asn_header names where the network comes from).
        l(
            "suspect_browser_per_asn",
            "suspect_browser",
            10.0,
            100,
            "asn",
        ),
        l(
            "suspect_browser_global",
            "suspect_browser",
            50.0,
            500,
            "global",
        ),
    ]
}

/// `max_in_flight` of the default per-address limits of the verified crawler classes that
/// a slow origin would otherwise let hold more (`search_crawler`, `ai_retriever`): nginx's
/// `limit_conn` of 30 for crawlers. A crawler fetching at its full rate (10/s) from an origin
/// answering in 3 s holds 30; a slower origin gets no more of it.
pub const CRAWLER_MAX_IN_FLIGHT: u32 = 30;

/// `max_in_flight` of the default per-address limits of `script` and `suspect_browser`
/// (an HTTP library behind a copied browser User-Agent): `limit_conn` 8 for scripts, a
/// browser's worth of parallel connections (6 per host over HTTP/1.1) and a little more.
pub const SCRIPT_MAX_IN_FLIGHT: u32 = 8;

/// `exempt_limit`: on; per client address, 60 requests at once and one a second after
/// that: a crawler fetching robots.txt once a minute uses a sixtieth of it, a client sending
/// thousands is refused most of them.
pub(super) mod exempt_limit {
    use crate::config::RetryAfter;

    /// `exempt_limit.enabled`.
    pub const ENABLED: bool = true;
    /// `exempt_limit.rate_per_s`.
    pub const RATE_PER_S: f64 = 1.0;
    /// `exempt_limit.burst`.
    pub const BURST: u32 = 60;
    /// `exempt_limit.retry_after`: the next token comes within a second; a client that is
    /// refused has sent 60 in a burst, and waits at least that.
    pub const RETRY_AFTER: RetryAfter = RetryAfter {
        min_s: 1,
        max_s: 60,
        jitter_s: 5,
    };
}

/// `limit` with `max_in_flight` (not inlined: one copy of the struct update in the module).
#[inline(never)]
fn with_max_in_flight(limit: RawLimit, max_in_flight: u32) -> RawLimit {
    RawLimit {
        max_in_flight: Some(max_in_flight),
        ..limit
    }
}

/// The aggregate default limits' IPv4 prefix: a /24, the smallest block routed on the
/// Internet (a hosting tenant's or a small network's addresses).
pub const AGGREGATE_IPV4_PREFIX_LEN: u8 = 24;
/// The aggregate default limits' IPv6 prefix: a /48, a site's usual allocation.
pub const AGGREGATE_IPV6_PREFIX_LEN: u8 = 48;

pub(super) fn default_exempt_paths() -> Vec<String> {
    ["/robots.txt", "/sitemap.xml", "/sitemap_index.xml"]
        .into_iter()
        .map(String::from)
        .collect()
}

/// `limits[].cost.max_in_flight`: a few parallel requests of one key (a browser's
/// connections), few enough that a burst of costly ones overspends by at most 4 costs.
pub const COST_MAX_IN_FLIGHT: u8 = 4;

/// Default request header carrying the class upstream.
pub const DEFAULT_CLASS_HEADER: &str = "x-crawler-class";

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

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            slots: 65_536,
            cas_retries: 8,
            hash_seed: None,
            fallback_buckets: 10_000,
        }
    }
}

impl Default for VerifierConfig {
    fn default() -> Self {
        VerifierConfig {
            enabled: true,
            cluster: "crawlguard_verifier".into(),
            authority: "crawlguard-sidecar".into(),
            timeout_ms: 500,
            on_error: OnError::UnverifiedBot,
            cache_slots: 8_192,
            max_ttl_s: 86_400,
            unknown_ttl_s: 30,
            error_ttl_s: 10,
            stale_if_error_s: 86_400,
            max_spoofed_per_prefix: 4,
            ranges_refresh_s: 60,
        }
    }
}

/// Fleet defaults: off; each worker syncs twice a second, a sync fails after 200 ms, at
/// most 1000 keys per sync, and a replica keeps its share of each limit while syncs fail.
impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            enabled: false,
            cluster: "crawlguard_verifier".into(),
            authority: "crawlguard-sidecar".into(),
            sync_interval_ms: 500,
            timeout_ms: 200,
            max_keys_per_sync: 1_000,
            max_replicas: 64,
            degraded_share: DegradedShare::Split,
        }
    }
}

impl Default for RewriteConfig {
    fn default() -> Self {
        RewriteConfig {
            enabled: true,
            statuses: vec![429, 503],
            max_retry_after_s: 3_600,
        }
    }
}

/// Shedding defaults: off; judged over 10 s with at least 20 responses; unhealthy above a
/// p95 of 2 s or 20% 5xx; one class per 10 s; shed requests retry in 15-30 s.
pub(super) mod shedding {
    use crate::config::RetryAfter;
    use crate::identity::class::Class;

    /// `shedding.enabled`.
    pub const ENABLED: bool = false;
    /// `shedding.latency_ms`.
    pub const LATENCY_MS: u32 = 2_000;
    /// `shedding.error_ratio`.
    pub const ERROR_RATIO: f64 = 0.2;
    /// `shedding.window_s`.
    pub const WINDOW_S: u32 = 10;
    /// `shedding.min_requests`.
    pub const MIN_REQUESTS: u32 = 20;
    /// `shedding.step_s`.
    pub const STEP_S: u32 = 10;
    /// `shedding.min_clients`: the evidence of trouble must come from 3 client prefixes.
    pub const MIN_CLIENTS: u32 = 3;
    /// `shedding.retry_after`.
    pub const RETRY_AFTER: RetryAfter = RetryAfter {
        min_s: 15,
        max_s: 60,
        jitter_s: 15,
    };
    /// `shedding.order`: failed and unverifiable claims first, then AI training, browser
    /// claims that failed a check, scripts, other bots, AI retrievers and humans; verified
    /// search crawlers never by default.
    pub const ORDER: [Class; 8] = [
        Class::Spoofed,
        Class::UnverifiedBot,
        Class::AiTrainer,
        Class::SuspectBrowser,
        Class::Script,
        Class::OtherBot,
        Class::AiRetriever,
        Class::Human,
    ];
}
