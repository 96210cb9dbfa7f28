//! Prometheus metrics (OpenMetrics text via `prometheus-client`), all prefixed
//! `crawlguard_sidecar_`.
//!
//! Label values are bounded: `bot` is a catalog id or `unlisted` (query strings are
//! attacker-controlled and must not mint new series), `method`/`verdict`/`kind`/`type`/`result`
//! are fixed sets, `source` is a configured range source (a path or a URL).
//!
//! The range sources' age, staleness and failure gauges are computed when `/metrics` is
//! scraped ([`Metrics::on_scrape`]), so the age is exact, not as old as the last refresh.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::OnceLock;

/// Labels of `verdicts_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// Catalog bot id, or `unlisted`.
    pub bot: String,
    /// `fcrdns`, `ip_range` or `none`.
    pub method: String,
    /// `verified`, `spoofed` or `unknown`.
    pub verdict: String,
}

/// Labels of the DNS series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DnsLabels {
    /// Query type: `ptr`, `a` or `aaaa`.
    pub r#type: String,
}

/// Labels of `dns_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DnsErrorLabels {
    /// Query type: `ptr`, `a` or `aaaa`.
    pub r#type: String,
    /// Error class (`timeout`, `servfail`, `nxdomain`, ...).
    pub kind: String,
}

/// Labels of `range_reloads_total` and `range_fetches_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceResultLabels {
    /// The range source: a file path or a URL.
    pub source: String,
    /// Reloads: `ok` or `error`. Fetches: `ok`, `not_modified`, `error` or `invalid`.
    pub result: String,
}

/// Labels of the per-source gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// The range source: a file path or a URL.
    pub source: String,
}

/// A hook run before every scrape.
type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

/// Every metric the verifier exports.
pub struct Metrics {
    registry: Registry,
    /// Fleet mode: Redis and the sync endpoint.
    pub fleet: FleetMetrics,
    /// Signed agents: signatures and key directories.
    pub agents: crate::agents::AgentMetrics,
    /// Answers given, by bot, method and verdict (cache hits included).
    pub verdicts: Family<VerdictLabels, Counter>,
    /// Verdicts served from the cache (including requests that joined an in-flight
    /// resolution of the same key).
    pub cache_hits: Counter,
    /// Verdicts that had to be resolved.
    pub cache_misses: Counter,
    /// Verdicts currently cached (updated at scrape time).
    pub cache_entries: Gauge,
    /// DNS queries sent, by type.
    pub dns_queries: Family<DnsLabels, Counter>,
    /// DNS query failures, by type and kind.
    pub dns_errors: Family<DnsErrorLabels, Counter>,
    /// Resolutions in progress.
    pub in_flight: Gauge,
    /// Resolutions that gave up waiting for a lookup slot (`--max-concurrent-lookups`).
    pub lookups_rejected: Counter,
    /// Resolutions without a definite answer (DNS failed, no lookup slot): answered `503`.
    pub verify_errors: Counter,
    /// Time to resolve one verdict (cache misses), in seconds.
    pub verify_duration: Histogram,
    /// Range-file loads, by source and result.
    pub range_reloads: Family<SourceResultLabels, Counter>,
    /// Range-document fetches, by source (URL) and result.
    pub range_fetches: Family<SourceResultLabels, Counter>,
    /// Prefixes in use per range source.
    pub range_prefixes: Family<SourceLabels, Gauge>,
    /// Seconds since each source's data in use was last confirmed current (sources with
    /// data only).
    pub range_source_age: Family<SourceLabels, Gauge>,
    /// 1 while a source's data is older than `ranges.max_age_s`.
    pub range_source_stale: Family<SourceLabels, Gauge>,
    /// Failed loads or fetches of each source since its last good one.
    pub range_source_failures: Family<SourceLabels, Gauge>,
    /// Run before every scrape (see [`Metrics::on_scrape`]).
    scrape_hook: OnceLock<ScrapeHook>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("crawlguard_sidecar");
        let verdicts = Family::<VerdictLabels, Counter>::default();
        let cache_hits = Counter::default();
        let cache_misses = Counter::default();
        let cache_entries = Gauge::default();
        let dns_queries = Family::<DnsLabels, Counter>::default();
        let dns_errors = Family::<DnsErrorLabels, Counter>::default();
        let in_flight = Gauge::default();
        let lookups_rejected = Counter::default();
        let verify_errors = Counter::default();
        // 0.5 ms .. ~16 s: cached-DNS answers up to several timed-out attempts.
        let verify_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        let range_reloads = Family::<SourceResultLabels, Counter>::default();
        let range_fetches = Family::<SourceResultLabels, Counter>::default();
        let range_prefixes = Family::<SourceLabels, Gauge>::default();
        let range_source_age = Family::<SourceLabels, Gauge>::default();
        let range_source_stale = Family::<SourceLabels, Gauge>::default();
        let range_source_failures = Family::<SourceLabels, Gauge>::default();

        registry.register(
            "verdicts",
            "Verdicts answered, by bot, method and verdict",
            verdicts.clone(),
        );
        registry.register(
            "cache_hits",
            "Verdicts served from the cache",
            cache_hits.clone(),
        );
        registry.register(
            "cache_misses",
            "Verdicts that needed a resolution",
            cache_misses.clone(),
        );
        registry.register(
            "cache_entries",
            "Verdicts currently cached",
            cache_entries.clone(),
        );
        registry.register(
            "dns_queries",
            "DNS queries sent, by record type",
            dns_queries.clone(),
        );
        registry.register(
            "dns_errors",
            "DNS query failures, by record type and kind",
            dns_errors.clone(),
        );
        registry.register(
            "in_flight",
            "Verdict resolutions in progress",
            in_flight.clone(),
        );
        registry.register(
            "lookups_rejected",
            "Resolutions that found no free lookup slot in time (answered 503)",
            lookups_rejected.clone(),
        );
        registry.register(
            "verify_errors",
            "Resolutions without a definite answer (DNS failure, no lookup slot), answered 503",
            verify_errors.clone(),
        );
        registry.register(
            "verify_duration_seconds",
            "Time to resolve one verdict on a cache miss",
            verify_duration.clone(),
        );
        registry.register(
            "range_reloads",
            "Range-file loads, by source and result",
            range_reloads.clone(),
        );
        registry.register(
            "range_fetches",
            "Range-document fetches, by source URL and result (ok, not_modified, error, invalid)",
            range_fetches.clone(),
        );
        registry.register(
            "range_prefixes",
            "Prefixes in use, by range source",
            range_prefixes.clone(),
        );
        registry.register(
            "range_source_age_seconds",
            "Seconds since the range data in use was last confirmed current, by source",
            range_source_age.clone(),
        );
        registry.register(
            "range_source_stale",
            "1 while a range source's data is older than ranges.max_age_s",
            range_source_stale.clone(),
        );
        registry.register(
            "range_source_failures",
            "Failed loads or fetches of a range source since its last good one",
            range_source_failures.clone(),
        );

        let fleet = FleetMetrics::register(&mut registry);
        let agents = crate::agents::AgentMetrics::register(&mut registry);

        Metrics {
            registry,
            fleet,
            agents,
            verdicts,
            cache_hits,
            cache_misses,
            cache_entries,
            dns_queries,
            dns_errors,
            in_flight,
            lookups_rejected,
            verify_errors,
            verify_duration,
            range_reloads,
            range_fetches,
            range_prefixes,
            range_source_age,
            range_source_stale,
            range_source_failures,
            scrape_hook: OnceLock::new(),
        }
    }

    /// Runs `hook` before every scrape ([`Metrics::encode`]), to bring gauges up to date.
    /// Only the first hook set is kept.
    pub fn on_scrape(&self, hook: impl Fn(&Metrics) + Send + Sync + 'static) {
        let _ = self.scrape_hook.set(Box::new(hook));
    }

    /// Counts one range-file load of `source` with `result` (`ok` or `error`).
    pub fn range_reload(&self, source: &str, result: &str) {
        self.range_reloads
            .get_or_create(&SourceResultLabels {
                source: source.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    /// Counts one fetch of `source` with `result`.
    pub fn range_fetch(&self, source: &str, result: &str) {
        self.range_fetches
            .get_or_create(&SourceResultLabels {
                source: source.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    /// Counts one DNS query of `rtype`.
    pub fn dns_query(&self, rtype: &str) {
        self.dns_queries
            .get_or_create(&DnsLabels {
                r#type: rtype.to_string(),
            })
            .inc();
    }

    /// Counts one DNS failure.
    pub fn dns_error(&self, rtype: &str, kind: &str) {
        self.dns_errors
            .get_or_create(&DnsErrorLabels {
                r#type: rtype.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// The OpenMetrics text exposition (after running the scrape hook, if any).
    pub fn encode(&self) -> String {
        if let Some(hook) = self.scrape_hook.get() {
            hook(self);
        }
        let mut out = String::new();
        // Writing into a String cannot fail; an error here would be a library bug, and an
        // empty scrape is better than a panic.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Labels of the Redis command series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RedisOpLabels {
    /// `sync` (a batch's script), `verdict_get` or `verdict_set`.
    pub op: String,
}

/// Labels of `redis_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RedisErrorLabels {
    /// `sync`, `verdict_get` or `verdict_set`.
    pub op: String,
    /// `timeout`, `connection`, `server`, `reply` or `other`.
    pub kind: String,
}

/// Labels of `fleet_sync_batches_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncResultLabels {
    /// `ok`, `invalid` (400/413), `unavailable` (Redis error, 503) or `off` (no Redis, 503).
    pub result: String,
}

/// Fleet-mode metrics: Redis commands, sync batches, replicas, shared verdicts.
pub struct FleetMetrics {
    /// Redis command latency (a whole script or pipeline, as the caller waits for it),
    /// seconds, by operation; failed and timed-out commands included.
    pub redis_duration: Family<RedisOpLabels, Histogram, fn() -> Histogram>,
    /// Redis failures by operation and kind.
    pub redis_errors: Family<RedisErrorLabels, Counter>,
    /// Sync batches answered, by result.
    pub sync_batches: Family<SyncResultLabels, Counter>,
    /// Keys per applied sync batch.
    pub sync_batch_keys: Histogram,
    /// Live replicas reported by the last applied batch.
    pub replicas: Gauge,
    /// FCrDNS verdicts found in Redis (another sidecar resolved them).
    pub verdict_hits: Counter,
    /// FCrDNS verdicts not in Redis (resolved here, then stored).
    pub verdict_misses: Counter,
}

impl FleetMetrics {
    fn register(registry: &mut Registry) -> Self {
        // 0.1 ms .. ~3.3 s.
        let redis_duration =
            Family::<RedisOpLabels, Histogram, fn() -> Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 16))
            });
        let redis_errors = Family::<RedisErrorLabels, Counter>::default();
        let sync_batches = Family::<SyncResultLabels, Counter>::default();
        // 1 .. 16384 keys (a batch holds at most 10,000).
        let sync_batch_keys = Histogram::new(exponential_buckets(1.0, 2.0, 15));
        let replicas = Gauge::default();
        let verdict_hits = Counter::default();
        let verdict_misses = Counter::default();
        registry.register(
            "redis_command_duration_seconds",
            "Redis command latency by operation (sync script, verdict get/set), errors included",
            redis_duration.clone(),
        );
        registry.register(
            "redis_errors",
            "Redis failures by operation and kind",
            redis_errors.clone(),
        );
        registry.register(
            "fleet_sync_batches",
            "Fleet sync batches answered, by result",
            sync_batches.clone(),
        );
        registry.register(
            "fleet_sync_batch_keys",
            "Keys per applied fleet sync batch",
            sync_batch_keys.clone(),
        );
        registry.register(
            "fleet_replicas",
            "Live replicas reported by the last applied sync batch",
            replicas.clone(),
        );
        registry.register(
            "redis_verdict_hits",
            "FCrDNS verdicts found in Redis (resolved by another sidecar of the fleet)",
            verdict_hits.clone(),
        );
        registry.register(
            "redis_verdict_misses",
            "FCrDNS verdicts not found in Redis (resolved here)",
            verdict_misses.clone(),
        );
        FleetMetrics {
            redis_duration,
            redis_errors,
            sync_batches,
            sync_batch_keys,
            replicas,
            verdict_hits,
            verdict_misses,
        }
    }

    /// Observes one Redis operation's latency.
    pub fn redis_latency(&self, op: &str, seconds: f64) {
        self.redis_duration
            .get_or_create(&RedisOpLabels { op: op.to_string() })
            .observe(seconds);
    }

    /// Counts one Redis failure.
    pub fn redis_error(&self, op: &str, kind: &str) {
        self.redis_errors
            .get_or_create(&RedisErrorLabels {
                op: op.to_string(),
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Counts one answered sync batch.
    pub fn sync_batch(&self, result: &str) {
        self.sync_batches
            .get_or_create(&SyncResultLabels {
                result: result.to_string(),
            })
            .inc();
    }
}
