//! Verdicts: the decision procedure (ranges, then FCrDNS) and the cached, de-duplicated
//! service around it.
//!
//! Submodules by job: `fcrdns` (the DNS procedure), `cache` (the verdict cache's
//! entries), `lookup_slots` (bounded DNS concurrency with reserved slots), `published`
//! (the `GET /v1/ranges` document).

mod cache;
pub mod decision_order;
mod fcrdns;
mod lookup_slots;
mod published;
#[cfg(test)]
mod test_support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::future::Cache;
use tokio::sync::Semaphore;

use crate::config::{BotMethods, TtlConfig};
use crate::domain::matches_any;
use crate::metrics::{Metrics, VerdictLabels};
use crate::ranges::RangeStore;
use crate::redis_store::{RedisStore, SharedVerdict};
use crate::resolver::{DnsFailure, Resolve};

use cache::{Cached, InFlight, Key, PerEntryTtl};
use decision_order::FirstStep;
pub use fcrdns::fcrdns;
pub use lookup_slots::{reserved_lookup_slots, VERIFIED_MEMORY};

/// The wire types of `GET /v1/verify`, shared with the filter (crate `crawlguard-contract`):
/// the JSON [`Answer`] this service sends, its [`Verdict`] and [`Method`].
pub use crawlguard_contract::verify::{Answer, Method, Verdict};

/// A decision before TTLs are applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The verdict.
    pub verdict: Verdict,
    /// The method that decided (or failed to).
    pub method: Method,
    /// The PTR name that passed FCrDNS (normalised), else empty.
    pub host: String,
}

impl Outcome {
    fn new(verdict: Verdict, method: Method) -> Self {
        Outcome {
            verdict,
            method,
            host: String::new(),
        }
    }
}

/// Why a claim could not be decided now: no definite answer came back. Never cached and
/// never shared with the fleet; `GET /v1/verify` answers it with `503` and
/// `{"error":"<this, displayed>"}`, which the filter takes as a verifier error, so its
/// stale-if-error keeps a verdict it already had (a DNS outage must not unverify a crawler
/// that only FCrDNS can verify).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// A DNS query (`query`: `ptr`, `a` or `aaaa`) got no definite answer: timeout,
    /// SERVFAIL, REFUSED, no nameserver reachable, a malformed answer.
    Dns {
        /// The query type, as in `dns_errors_total{type}`.
        query: &'static str,
        /// What failed.
        failure: DnsFailure,
    },
    /// No lookup slot freed up within `lookup_slot_wait` (`dns.max_concurrent_lookups`).
    Overloaded,
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyError::Dns { query, failure } => {
                write!(f, "dns {query} query got no answer: {failure}")
            }
            VerifyError::Overloaded => f.write_str("overloaded: no DNS lookup slot free in time"),
        }
    }
}

/// Settings of a [`Verifier`].
#[derive(Debug, Clone)]
pub struct VerifierSettings {
    /// Verdict lifetimes.
    pub ttl: TtlConfig,
    /// Cache capacity in entries.
    pub cache_max_entries: u64,
    /// Concurrent resolutions allowed to use DNS.
    pub max_concurrent_lookups: usize,
    /// How long a resolution may wait for a lookup slot before answering `unknown`.
    pub lookup_slot_wait: Duration,
    /// PTR names forward-checked per address.
    pub max_ptr_names: usize,
}

/// The verification service: catalog + ranges + resolver + bounded verdict cache (+ the
/// fleet's shared FCrDNS verdicts in Redis, see [`Verifier::with_shared_verdicts`]).
pub struct Verifier<R: Resolve> {
    shared: Option<Arc<RedisStore>>,
    resolver: Arc<R>,
    ranges: Arc<RangeStore>,
    catalog: BTreeMap<String, BotMethods>,
    cache: Cache<Key, Arc<Cached>>,
    lookups: Semaphore,
    /// Lookup slots only claims verified before may use, so a flood of claims whose
    /// zones never answer cannot starve a real crawler's re-verification.
    reserved_lookups: Semaphore,
    /// The claims FCrDNS verified in the last [`VERIFIED_MEMORY`] (bounded like the cache).
    verified_before: Cache<Key, ()>,
    settings: VerifierSettings,
    metrics: Arc<Metrics>,
}

impl<R: Resolve> Verifier<R> {
    /// Builds a verifier. `ranges` must hold every range source named in `catalog`.
    pub fn new(
        resolver: Arc<R>,
        ranges: Arc<RangeStore>,
        catalog: BTreeMap<String, BotMethods>,
        settings: VerifierSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        let cache = Cache::builder()
            .max_capacity(settings.cache_max_entries)
            .expire_after(PerEntryTtl)
            .build();
        Verifier {
            shared: None,
            resolver,
            ranges,
            catalog,
            cache,
            lookups: Semaphore::new(settings.max_concurrent_lookups),
            reserved_lookups: Semaphore::new(reserved_lookup_slots(
                settings.max_concurrent_lookups,
            )),
            verified_before: Cache::builder()
                .max_capacity(settings.cache_max_entries)
                .time_to_live(VERIFIED_MEMORY)
                .build(),
            settings,
            metrics,
        }
    }

    /// Shares FCrDNS verdicts with the fleet through `store`: on a cache miss, a verdict
    /// another sidecar stored is used (with its remaining lifetime) instead of resolving DNS,
    /// and a verdict resolved here is stored for the others. Redis trouble never fails a
    /// verification: it falls back to resolving.
    pub fn with_shared_verdicts(mut self, store: Arc<RedisStore>) -> Self {
        self.shared = Some(store);
        self
    }

    /// The metrics this verifier reports to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Drops every cached verdict (range files changed, so verdicts may have too).
    pub fn invalidate_cache(&self) {
        self.cache.invalidate_all();
    }

    /// Number of cached verdicts (approximate, as moka reports it).
    pub fn cached_entries(&self) -> u64 {
        self.cache.entry_count()
    }

    fn ttl_of(&self, verdict: Verdict) -> Duration {
        let t = &self.settings.ttl;
        Duration::from_secs(match verdict {
            Verdict::Verified => t.verified_s,
            Verdict::Spoofed => t.spoofed_s,
            Verdict::Unknown => t.unknown_s,
        })
    }

    /// Answers one query. `bot` must already be validated/lower-cased by the caller.
    /// A [`VerifyError`] (no definite DNS answer, no lookup slot) is not cached: the next
    /// query for the claim resolves again (concurrent ones share one attempt).
    pub async fn verify(&self, ip: IpAddr, bot: &str) -> Result<Answer, VerifyError> {
        // `::ffff:a.b.c.d` is the IPv4 client as some proxies report it; verify and cache
        // it as the IPv4 address so both spellings share one verdict.
        let ip = ip.to_canonical();
        let Some(methods) = self.catalog.get(bot) else {
            // Not in the catalog: nothing to check, nothing worth caching.
            let outcome = Outcome::new(Verdict::Unknown, Method::None);
            self.count("unlisted", &outcome);
            return Ok(self.answer(ip, bot, outcome, self.settings.ttl.unknown_s));
        };
        let key = (ip, bot.to_string());
        let entry = self
            .cache
            .entry(key)
            .or_try_insert_with(async {
                let started = Instant::now();
                let _guard = InFlight::enter(&self.metrics);
                let decided = self.decide(ip, bot, methods).await;
                self.metrics
                    .verify_duration
                    .observe(started.elapsed().as_secs_f64());
                let (outcome, shared_ttl) = decided.inspect_err(|e| {
                    self.metrics.verify_errors.inc();
                    tracing::debug!(%ip, bot, error = %e, "undecided");
                })?;
                let ttl = shared_ttl.unwrap_or_else(|| self.ttl_of(outcome.verdict));
                // Debug, not info: one line per cache miss would flood logs under load;
                // the verdicts_total series carries the counts.
                tracing::debug!(
                    %ip, bot, verdict = outcome.verdict.as_str(), method = outcome.method.as_str(),
                    host = %outcome.host, "resolved"
                );
                Ok(Arc::new(Cached {
                    outcome,
                    ttl,
                    expires_at: Instant::now() + ttl,
                }))
            })
            .await
            .map_err(|e| VerifyError::clone(&e))?;
        if entry.is_fresh() {
            self.metrics.cache_misses.inc();
        } else {
            self.metrics.cache_hits.inc();
        }
        let cached = entry.into_value();
        let remaining = cached.expires_at.saturating_duration_since(Instant::now());
        // Round up and never answer 0: a 0 TTL would make the filter ask again at once.
        let ttl_s = remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
        self.count(bot, &cached.outcome);
        Ok(self.answer(ip, bot, cached.outcome.clone(), ttl_s.max(1)))
    }

    fn count(&self, bot_label: &str, outcome: &Outcome) {
        self.metrics
            .verdicts
            .get_or_create(&VerdictLabels {
                bot: bot_label.to_string(),
                method: outcome.method.as_str().to_string(),
                verdict: outcome.verdict.as_str().to_string(),
            })
            .inc();
    }

    fn answer(&self, ip: IpAddr, bot: &str, outcome: Outcome, ttl_s: u64) -> Answer {
        Answer {
            ip: ip.to_string(),
            bot: bot.to_string(),
            verdict: outcome.verdict,
            method: outcome.method,
            host: outcome.host,
            ttl_s,
        }
    }

    /// Ranges first (no I/O), then FCrDNS if the bot has domains (through the fleet's shared
    /// verdicts when configured). With a lifetime when the verdict came from the fleet.
    async fn decide(
        &self,
        ip: IpAddr,
        bot: &str,
        methods: &BotMethods,
    ) -> Result<(Outcome, Option<Duration>), VerifyError> {
        let has_ranges = !methods.ranges.is_empty();
        let in_ranges = has_ranges && self.ranges.contains_any(&methods.ranges, ip);
        let step = decision_order::first_step(methods, in_ranges, || {
            self.ranges.any_loaded(&methods.ranges)
        });
        if step == FirstStep::Verified {
            return Ok((Outcome::new(Verdict::Verified, Method::IpRange), None));
        }
        if step == FirstStep::Fcrdns {
            let Some(shared) = &self.shared else {
                return Ok((self.resolve(ip, bot, methods).await?, None));
            };
            let shared_verdict = shared.get_verdict(bot, ip).await.filter(|(v, _)| {
                // Sidecars share FCrDNS verdicts only, and a verified one counts only while
                // its PTR name passes this sidecar's domains: one stored under an older
                // catalog (a Google Cloud VM's bc.googleusercontent.com name), or with
                // another method, is resolved again, and replaced.
                v.method == Method::Fcrdns
                    && (v.verdict != Verdict::Verified || matches_any(&v.host, &methods.domains))
            });
            if let Some((v, remaining)) = shared_verdict {
                if v.verdict == Verdict::Verified {
                    // Known to the fleet: priority for lookups here too.
                    self.verified_before.insert((ip, bot.to_string()), ()).await;
                }
                // Never longer than this sidecar would keep it.
                let ttl = remaining.min(self.ttl_of(v.verdict));
                let outcome = Outcome {
                    verdict: v.verdict,
                    method: v.method,
                    host: v.host,
                };
                return Ok((outcome, Some(ttl)));
            }
            let outcome = self.resolve(ip, bot, methods).await?;
            if outcome.verdict != Verdict::Unknown {
                let verdict = SharedVerdict {
                    verdict: outcome.verdict,
                    method: outcome.method,
                    host: outcome.host.clone(),
                };
                shared.put_verdict(bot, ip, verdict, self.ttl_of(outcome.verdict));
            }
            return Ok((outcome, None));
        }
        let outcome = if step == FirstStep::Spoofed {
            Outcome::new(Verdict::Spoofed, Method::IpRange)
        } else {
            // Range-only bot whose files never loaded, or a bot without any method.
            Outcome::new(Verdict::Unknown, Method::None)
        };
        Ok((outcome, None))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::ranges::RangeSource;
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;

    #[tokio::test]
    async fn ipv4_mapped_address_is_verified_as_ipv4() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .fwd("crawl.googlebot.com", Ok(&["66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v
            .verify("::ffff:66.249.66.1".parse().unwrap(), "googlebot")
            .await
            .unwrap();
        expect(
            &a,
            Verdict::Verified,
            Method::Fcrdns,
            "crawl.googlebot.com",
            86_400,
        );
        assert_eq!(a.ip, IP);
    }

    fn ranges_with(prefix: &str) -> (tempfile::TempDir, RangeSource, Arc<RangeStore>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(
            &path,
            format!(r#"{{"prefixes":[{{"ipv4Prefix":"{prefix}"}}]}}"#),
        )
        .unwrap();
        let source = RangeSource::File(path);
        let store = Arc::new(RangeStore::new([source.clone()]));
        store.refresh_files();
        (dir, source, store)
    }

    #[tokio::test]
    async fn ranges_verify_before_any_dns() {
        let (_d, path, store) = ranges_with("66.249.64.0/19");
        let methods = BotMethods {
            ranges: vec![path],
            ..google()
        };
        let v = verifier_with(
            FakeResolver::default(),
            vec![("googlebot", methods)],
            store,
            settings(),
        );
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Verified,
            Method::IpRange,
            "",
            86_400,
        );
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 0);
        // Outside the ranges: falls through to FCrDNS (fake answers NXDOMAIN).
        expect(
            &v.verify("1.2.3.4".parse().unwrap(), "googlebot")
                .await
                .unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn range_only_bots() {
        let (_d, path, store) = ranges_with("52.230.152.0/24");
        let gpt = BotMethods {
            domains: vec![],
            ranges: vec![path],
        };
        let missing = BotMethods {
            domains: vec![],
            ranges: vec![RangeSource::File(PathBuf::from("/nonexistent/ranges.json"))],
        };
        let v = verifier_with(
            FakeResolver::default(),
            vec![
                ("gptbot", gpt),
                ("claudebot", missing),
                ("nomethod", BotMethods::default()),
            ],
            store,
            settings(),
        );
        expect(
            &v.verify("52.230.152.9".parse().unwrap(), "gptbot")
                .await
                .unwrap(),
            Verdict::Verified,
            Method::IpRange,
            "",
            86_400,
        );
        expect(
            &v.verify("52.230.153.9".parse().unwrap(), "gptbot")
                .await
                .unwrap(),
            Verdict::Spoofed,
            Method::IpRange,
            "",
            3_600,
        );
        // Ranges configured but never loaded: no data, cannot decide.
        expect(
            &v.verify("52.230.153.9".parse().unwrap(), "claudebot")
                .await
                .unwrap(),
            Verdict::Unknown,
            Method::None,
            "",
            30,
        );
        expect(
            &v.verify("52.230.153.9".parse().unwrap(), "nomethod")
                .await
                .unwrap(),
            Verdict::Unknown,
            Method::None,
            "",
            30,
        );
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 0);
    }

    /// The published table decides every claim it decides exactly as `verify` does, with the
    /// real published files: each prefix's first and last address and the ones just outside.
    #[tokio::test]
    async fn unlisted_bot_is_unknown_none_and_not_cached() {
        let v = verifier(FakeResolver::default(), vec![("googlebot", google())]);
        let a = v.verify(IP.parse().unwrap(), "madeupbot").await.unwrap();
        expect(&a, Verdict::Unknown, Method::None, "", 30);
        assert!(v.metrics().encode().contains(
            "crawlguard_sidecar_verdicts_total{bot=\"unlisted\",method=\"none\",verdict=\"unknown\"} 1"
        ));
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn cache_serves_repeats_and_remaining_ttl() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .fwd("crawl.googlebot.com", Ok(&["66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google()), ("googleother", google())]);
        let ip: IpAddr = IP.parse().unwrap();
        v.verify(ip, "googlebot").await.unwrap();
        let again = v.verify(ip, "googlebot").await.unwrap();
        assert!(again.ttl_s <= 86_400 && again.ttl_s >= 86_399, "{again:?}");
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 1);
        // The key is (ip, bot): another bot id resolves separately.
        v.verify(ip, "googleother").await.unwrap();
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 2);
        let text = v.metrics().encode();
        assert!(
            text.contains("crawlguard_sidecar_cache_hits_total 1"),
            "{text}"
        );
        assert!(
            text.contains("crawlguard_sidecar_cache_misses_total 2"),
            "{text}"
        );
        v.invalidate_cache();
        v.verify(ip, "googlebot").await.unwrap();
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_share_one_resolution() {
        let mut r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .fwd("crawl.googlebot.com", Ok(&["66.249.66.1"]));
        r.delay = Duration::from_millis(100);
        let v = Arc::new(verifier(r, vec![("googlebot", google())]));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let v = v.clone();
            set.spawn(async move { v.verify(IP.parse().unwrap(), "googlebot").await.unwrap() });
        }
        while let Some(a) = set.join_next().await {
            assert_eq!(a.unwrap().verdict, Verdict::Verified);
        }
        assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 1);
        assert_eq!(v.resolver.forward_calls.load(Ordering::SeqCst), 1);
    }
}
