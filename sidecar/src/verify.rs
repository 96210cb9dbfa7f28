//! Verdicts: the decision procedure (ranges, then FCrDNS) and the cached, de-duplicated
//! service around it.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::future::Cache;
use moka::Expiry;
use tokio::sync::Semaphore;

use crate::config::{BotMethods, TtlConfig};
use crate::domain::{matches_any, normalize_name};
use crate::metrics::{Metrics, VerdictLabels};
use crate::ranges::RangeStore;
use crate::redis_store::{RedisStore, SharedVerdict};
use crate::resolver::{DnsFailure, Resolve};

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

/// FCrDNS for one address against one bot's domains.
///
/// Every PTR name is considered; only names within the bot's domains are forward-checked
/// (at most `max_names` of them, so a hostile reverse zone cannot make us send hundreds of
/// queries). A name passes when its A (IPv4) or AAAA (IPv6) answer contains `ip`.
/// Only definite answers decide: `verified` when a name passes, `spoofed` on NXDOMAIN or no
/// data for the PTR, no PTR name in the domains, or forward answers (A/AAAA, NXDOMAIN, no
/// data) that all fail to confirm. A failure that is no answer (timeout, SERVFAIL, REFUSED,
/// unreachable server) is a [`VerifyError`] unless another name passed.
pub async fn fcrdns<R: Resolve>(
    resolver: &R,
    metrics: &Metrics,
    ip: IpAddr,
    domains: &[String],
    max_names: usize,
) -> Result<Outcome, VerifyError> {
    let ptr_type = "ptr";
    metrics.dns_query(ptr_type);
    let names = match resolver.reverse(ip).await {
        Ok(names) => names,
        Err(e) => {
            metrics.dns_error(ptr_type, e.kind.as_str());
            tracing::debug!(%ip, error = %e, "PTR lookup failed");
            if !e.kind.is_definite() {
                return Err(VerifyError::Dns {
                    query: ptr_type,
                    failure: e,
                });
            }
            return Ok(Outcome::new(Verdict::Spoofed, Method::Fcrdns));
        }
    };
    let mut seen = HashSet::new();
    let candidates: Vec<String> = names
        .iter()
        .map(|n| normalize_name(n))
        .filter(|n| matches_any(n, domains) && seen.insert(n.clone()))
        .take(max_names)
        .collect();
    if candidates.is_empty() {
        tracing::debug!(%ip, ?names, "no PTR name in the bot's domains");
        return Ok(Outcome::new(Verdict::Spoofed, Method::Fcrdns));
    }
    let fwd_type = if ip.is_ipv4() { "a" } else { "aaaa" };
    let mut no_answer = None;
    for name in candidates {
        metrics.dns_query(fwd_type);
        match resolver.forward(&name, ip).await {
            Ok(addrs) if addrs.iter().any(|a| a.to_canonical() == ip) => {
                return Ok(Outcome {
                    verdict: Verdict::Verified,
                    method: Method::Fcrdns,
                    host: name,
                });
            }
            Ok(addrs) => tracing::debug!(%ip, %name, ?addrs, "forward lookup does not confirm"),
            Err(e) => {
                metrics.dns_error(fwd_type, e.kind.as_str());
                tracing::debug!(%ip, %name, error = %e, "forward lookup failed");
                if !e.kind.is_definite() && no_answer.is_none() {
                    no_answer = Some(e);
                }
            }
        }
    }
    match no_answer {
        // A name we could not check might have passed.
        Some(failure) => Err(VerifyError::Dns {
            query: fwd_type,
            failure,
        }),
        None => Ok(Outcome::new(Verdict::Spoofed, Method::Fcrdns)),
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

type Key = (IpAddr, String);

/// How long a claim FCrDNS verified keeps its priority for lookup slots: a week, longer
/// than any verdict lives, so a crawler whose verdict expired during a flood still has it.
pub const VERIFIED_MEMORY: Duration = Duration::from_secs(7 * 86_400);

/// Lookup slots reserved for claims verified before, besides `dns.max_concurrent_lookups`:
/// a quarter of them, at least one.
pub fn reserved_lookup_slots(max_concurrent_lookups: usize) -> usize {
    (max_concurrent_lookups / 4).max(1)
}

#[derive(Debug)]
struct Cached {
    outcome: Outcome,
    ttl: Duration,
    expires_at: Instant,
}

struct PerEntryTtl;

impl Expiry<Key, Arc<Cached>> for PerEntryTtl {
    fn expire_after_create(&self, _: &Key, value: &Arc<Cached>, _: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// Decrements the in-flight gauge even when the resolving future is dropped (the HTTP
/// client went away): moka then hands the resolution to another waiter.
struct InFlight<'a>(&'a Metrics);

impl<'a> InFlight<'a> {
    fn enter(metrics: &'a Metrics) -> Self {
        metrics.in_flight.inc();
        InFlight(metrics)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
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

    /// The published-ranges document (`GET /v1/ranges`, `crawlguard_contract::ranges`) of
    /// the ranges in use now: per bot with at least one loaded range source, the prefixes
    /// of its loaded sources as one set (shared by bots with the same sources), `spoofed`
    /// outside it for a bot without FCrDNS domains (as [`Verifier::verify`] decides), else
    /// `fcrdns`. Returns the generation and the text.
    pub fn published_ranges(&self) -> (u64, String) {
        use crawlguard_contract::ranges::{render, OutOfRange, Prefix};
        let mut keys: Vec<Vec<&crate::ranges::RangeSource>> = Vec::new();
        let mut sets: Vec<Vec<Prefix>> = Vec::new();
        let mut bots = Vec::new();
        for (id, methods) in &self.catalog {
            let mut key = Vec::new();
            let mut prefixes: Vec<Prefix> = Vec::new();
            for source in &methods.ranges {
                let set = self.ranges.get(source);
                if set.is_empty() || key.contains(&source) {
                    continue;
                }
                key.push(source);
                let v4 = set.v4.iter().map(|n| (n.network().into(), n.prefix_len()));
                let v6 = set.v6.iter().map(|n| (n.network().into(), n.prefix_len()));
                prefixes.extend(v4.chain(v6));
            }
            if key.is_empty() {
                continue;
            }
            let index = match keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    keys.push(key);
                    sets.push(prefixes);
                    sets.len() - 1
                }
            };
            let out = match methods.domains.is_empty() {
                true => OutOfRange::Spoofed,
                false => OutOfRange::Fcrdns,
            };
            bots.push((id.clone(), out, index));
        }
        render(&sets, &bots)
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
        if has_ranges && self.ranges.contains_any(&methods.ranges, ip) {
            return Ok((Outcome::new(Verdict::Verified, Method::IpRange), None));
        }
        if !methods.domains.is_empty() {
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
        let outcome = if has_ranges && self.ranges.any_loaded(&methods.ranges) {
            Outcome::new(Verdict::Spoofed, Method::IpRange)
        } else {
            // Range-only bot whose files never loaded, or a bot without any method.
            Outcome::new(Verdict::Unknown, Method::None)
        };
        Ok((outcome, None))
    }

    /// FCrDNS with a lookup slot ([`VerifyError::Overloaded`] when none frees up in time). A
    /// claim verified before may also take one of the reserved slots, whichever frees first.
    async fn resolve(
        &self,
        ip: IpAddr,
        bot: &str,
        methods: &BotMethods,
    ) -> Result<Outcome, VerifyError> {
        let key = (ip, bot.to_string());
        let known = self.verified_before.contains_key(&key);
        let permit = tokio::time::timeout(self.settings.lookup_slot_wait, async {
            if known {
                tokio::select! {
                    p = self.lookups.acquire() => p,
                    p = self.reserved_lookups.acquire() => p,
                }
            } else {
                self.lookups.acquire().await
            }
        })
        .await;
        let Ok(Ok(_permit)) = permit else {
            // Overloaded: better a quick error (the filter keeps a stale verdict) than a
            // queue that outlives the filter's callout timeout.
            self.metrics.lookups_rejected.inc();
            return Err(VerifyError::Overloaded);
        };
        let outcome = fcrdns(
            self.resolver.as_ref(),
            &self.metrics,
            ip,
            &methods.domains,
            self.settings.max_ptr_names,
        )
        .await?;
        if outcome.verdict == Verdict::Verified {
            self.verified_before.insert(key, ()).await;
        }
        Ok(outcome)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ranges::RangeSource;
    use crate::resolver::DnsErrorKind;
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A scripted resolver: fixed answers per IP (PTR) and per name (forward), call counts.
    #[derive(Default)]
    pub struct FakeResolver {
        pub ptr: HashMap<IpAddr, Result<Vec<String>, DnsFailure>>,
        pub fwd: HashMap<String, Result<Vec<IpAddr>, DnsFailure>>,
        pub delay: Duration,
        pub reverse_calls: AtomicUsize,
        pub forward_calls: AtomicUsize,
    }

    fn fail(kind: DnsErrorKind) -> DnsFailure {
        DnsFailure::new(kind, "scripted")
    }

    impl FakeResolver {
        fn ptr(mut self, ip: &str, r: Result<&[&str], DnsErrorKind>) -> Self {
            self.ptr.insert(
                ip.parse().unwrap(),
                r.map(|n| n.iter().map(|s| s.to_string()).collect())
                    .map_err(fail),
            );
            self
        }
        fn fwd(mut self, name: &str, r: Result<&[&str], DnsErrorKind>) -> Self {
            self.fwd.insert(
                name.to_string(),
                r.map(|a| a.iter().map(|s| s.parse().unwrap()).collect())
                    .map_err(fail),
            );
            self
        }
    }

    impl Resolve for FakeResolver {
        async fn reverse(&self, ip: IpAddr) -> Result<Vec<String>, DnsFailure> {
            self.reverse_calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.ptr
                .get(&ip)
                .cloned()
                .unwrap_or_else(|| Err(fail(DnsErrorKind::Nxdomain)))
        }
        async fn forward(&self, name: &str, _: IpAddr) -> Result<Vec<IpAddr>, DnsFailure> {
            self.forward_calls.fetch_add(1, Ordering::SeqCst);
            self.fwd
                .get(name)
                .cloned()
                .unwrap_or_else(|| Err(fail(DnsErrorKind::Nxdomain)))
        }
    }

    fn settings() -> VerifierSettings {
        VerifierSettings {
            ttl: TtlConfig {
                verified_s: 86_400,
                spoofed_s: 3_600,
                unknown_s: 30,
            },
            cache_max_entries: 1000,
            max_concurrent_lookups: 8,
            lookup_slot_wait: Duration::from_millis(200),
            max_ptr_names: 8,
        }
    }

    fn google() -> BotMethods {
        BotMethods {
            domains: vec!["googlebot.com".into(), "google.com".into()],
            ranges: vec![],
        }
    }

    fn verifier(
        resolver: FakeResolver,
        catalog: Vec<(&str, BotMethods)>,
    ) -> Verifier<FakeResolver> {
        verifier_with(
            resolver,
            catalog,
            Arc::new(RangeStore::default()),
            settings(),
        )
    }

    fn verifier_with(
        resolver: FakeResolver,
        catalog: Vec<(&str, BotMethods)>,
        ranges: Arc<RangeStore>,
        settings: VerifierSettings,
    ) -> Verifier<FakeResolver> {
        Verifier::new(
            Arc::new(resolver),
            ranges,
            catalog
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            settings,
            Arc::new(Metrics::new()),
        )
    }

    fn expect(a: &Answer, verdict: Verdict, method: Method, host: &str, ttl_s: u64) {
        assert_eq!(
            (a.verdict, a.method, a.host.as_str(), a.ttl_s),
            (verdict, method, host, ttl_s),
            "{a:?}"
        );
    }

    const IP: &str = "66.249.66.1";

    #[tokio::test]
    async fn verified_when_ptr_in_domain_and_forward_confirms() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["Crawl-66-249-66-1.GoogleBot.com."]))
            .fwd("crawl-66-249-66-1.googlebot.com", Ok(&["66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        expect(
            &a,
            Verdict::Verified,
            Method::Fcrdns,
            "crawl-66-249-66-1.googlebot.com",
            86_400,
        );
        assert_eq!((a.ip.as_str(), a.bot.as_str()), (IP, "googlebot"));
    }

    #[tokio::test]
    async fn spoofed_when_no_ptr_name_in_domains() {
        let r = FakeResolver::default().ptr(
            IP,
            Ok(&["host.evilgooglebot.com", "googlebot.com.evil.net"]),
        );
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        expect(&a, Verdict::Spoofed, Method::Fcrdns, "", 3_600);
        // Look-alike names are never forward-checked.
        assert_eq!(v.resolver.forward_calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn spoofed_when_forward_returns_another_ip() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["liar.googlebot.com"]))
            .fwd("liar.googlebot.com", Ok(&["66.249.66.2"]));
        let v = verifier(r, vec![("googlebot", google())]);
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
    }

    #[tokio::test]
    async fn spoofed_on_ptr_nxdomain_and_nodata() {
        for kind in [DnsErrorKind::Nxdomain, DnsErrorKind::NoData] {
            let r = FakeResolver::default().ptr(IP, Err(kind));
            let v = verifier(r, vec![("googlebot", google())]);
            expect(
                &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
                Verdict::Spoofed,
                Method::Fcrdns,
                "",
                3_600,
            );
        }
    }

    #[tokio::test]
    async fn transient_ptr_failures_are_errors_and_not_cached() {
        for kind in [
            DnsErrorKind::Timeout,
            DnsErrorKind::Servfail,
            DnsErrorKind::Refused,
            DnsErrorKind::Connection,
            DnsErrorKind::Other,
        ] {
            let r = FakeResolver::default().ptr(IP, Err(kind));
            let v = verifier(r, vec![("googlebot", google())]);
            let e = v.verify(IP.parse().unwrap(), "googlebot").await;
            assert_eq!(
                e,
                Err(VerifyError::Dns {
                    query: "ptr",
                    failure: fail(kind)
                })
            );
            assert_eq!(
                e.unwrap_err().to_string(),
                format!("dns ptr query got no answer: {}: scripted", kind.as_str())
            );
            // Not cached: the next query asks DNS again.
            assert!(v.verify(IP.parse().unwrap(), "googlebot").await.is_err());
            assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 2);
            let text = v.metrics().encode();
            for series in [
                format!(
                    "crawlguard_sidecar_dns_errors_total{{type=\"ptr\",kind=\"{}\"}} 2",
                    kind.as_str()
                ),
                "crawlguard_sidecar_verify_errors_total 2".to_string(),
                "crawlguard_sidecar_cache_misses_total 0".to_string(),
            ] {
                assert!(text.contains(&series), "{series} not in\n{text}");
            }
            assert!(!text.contains("verdict=\"unknown\""), "{text}");
        }
    }

    #[tokio::test]
    async fn forward_servfail_is_an_error() {
        let ip: IpAddr = IP.parse().unwrap();
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .fwd("crawl.googlebot.com", Err(DnsErrorKind::Servfail));
        let v = verifier(r, vec![("googlebot", google())]);
        assert_eq!(
            v.verify(ip, "googlebot").await,
            Err(VerifyError::Dns {
                query: "a",
                failure: fail(DnsErrorKind::Servfail)
            })
        );
    }

    #[tokio::test]
    async fn one_passing_name_among_several_verifies() {
        let r = FakeResolver::default()
            .ptr(
                IP,
                Ok(&[
                    "other.example.net",
                    "evilgooglebot.com",
                    "liar.googlebot.com",
                    "crawl-1.google.com",
                ]),
            )
            .fwd("liar.googlebot.com", Ok(&["10.0.0.1"]))
            .fwd("crawl-1.google.com", Ok(&["10.0.0.2", "66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        expect(
            &a,
            Verdict::Verified,
            Method::Fcrdns,
            "crawl-1.google.com",
            86_400,
        );
        assert_eq!(v.resolver.forward_calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn forward_timeout_without_pass_is_an_error_but_a_pass_wins() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["a.googlebot.com", "b.googlebot.com"]))
            .fwd("a.googlebot.com", Err(DnsErrorKind::Timeout))
            .fwd("b.googlebot.com", Err(DnsErrorKind::Nxdomain));
        let v = verifier(r, vec![("googlebot", google())]);
        assert_eq!(
            v.verify(IP.parse().unwrap(), "googlebot").await,
            Err(VerifyError::Dns {
                query: "a",
                failure: fail(DnsErrorKind::Timeout)
            })
        );

        let r = FakeResolver::default()
            .ptr(IP, Ok(&["a.googlebot.com", "b.googlebot.com"]))
            .fwd("a.googlebot.com", Err(DnsErrorKind::Servfail))
            .fwd("b.googlebot.com", Ok(&["66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Verified,
            Method::Fcrdns,
            "b.googlebot.com",
            86_400,
        );
    }

    #[tokio::test]
    async fn forward_nodata_everywhere_is_spoofed() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["a.googlebot.com"]))
            .fwd("a.googlebot.com", Err(DnsErrorKind::NoData));
        let v = verifier(r, vec![("googlebot", google())]);
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
    }

    #[tokio::test]
    async fn ptr_names_checked_are_capped() {
        let names: Vec<String> = (0..20).map(|i| format!("h{i}.googlebot.com")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let r = FakeResolver::default().ptr(IP, Ok(&refs));
        let mut s = settings();
        s.max_ptr_names = 3;
        let v = verifier_with(
            r,
            vec![("googlebot", google())],
            Arc::new(RangeStore::default()),
            s,
        );
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
        assert_eq!(v.resolver.forward_calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn ipv6_fcrdns() {
        let ip6 = "2001:4860:4801:10::1";
        let r = FakeResolver::default()
            .ptr(ip6, Ok(&["crawl-v6.googlebot.com."]))
            .fwd("crawl-v6.googlebot.com", Ok(&["2001:4860:4801:10:0:0:0:1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(ip6.parse().unwrap(), "googlebot").await.unwrap();
        expect(
            &a,
            Verdict::Verified,
            Method::Fcrdns,
            "crawl-v6.googlebot.com",
            86_400,
        );
        assert_eq!(a.ip, "2001:4860:4801:10::1");
    }

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
    async fn published_ranges_decide_as_verify_does() {
        use crawlguard_contract::ranges::{parse, OutOfRange};
        let data = |rel: &str| {
            RangeSource::File(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../shared/data")
                    .join(rel),
            )
        };
        let googlebot = data("google-crawler-ips/googlebot.json");
        let gptbot = data("openai-crawler-ips/gptbot.json");
        let never = RangeSource::File(PathBuf::from("/nonexistent/ranges.json"));
        let store = Arc::new(RangeStore::new([
            googlebot.clone(),
            gptbot.clone(),
            never.clone(),
        ]));
        store.refresh_files();
        let v = verifier_with(
            FakeResolver::default(),
            vec![
                (
                    "googlebot",
                    BotMethods {
                        ranges: vec![googlebot.clone()],
                        ..google()
                    },
                ),
                (
                    "googlebot-image",
                    BotMethods {
                        ranges: vec![googlebot.clone()],
                        ..google()
                    },
                ),
                (
                    "gptbot",
                    BotMethods {
                        domains: vec![],
                        ranges: vec![gptbot.clone(), never.clone()],
                    },
                ),
                (
                    "claudebot",
                    BotMethods {
                        domains: vec![],
                        ranges: vec![never],
                    },
                ),
                ("yandexbot", google()),
            ],
            store.clone(),
            settings(),
        );
        let (generation, text) = v.published_ranges();
        let table = parse(text.as_bytes()).expect("the sidecar's own document");
        assert_eq!(
            table.generation,
            crawlguard_contract::ranges::generation_text(generation)
        );
        // One set per loaded source, shared by the two Google bots; only bots with ranges.
        assert_eq!(table.sets.len(), 2);
        assert_eq!(table.prefixes(), 169 + 146 + 8);
        let bots: Vec<(&str, OutOfRange, u32)> = table
            .bots
            .iter()
            .map(|b| (b.id.as_str(), b.out_of_range, b.set))
            .collect();
        assert_eq!(
            bots,
            [
                ("googlebot", OutOfRange::Fcrdns, 0),
                ("googlebot-image", OutOfRange::Fcrdns, 0),
                ("gptbot", OutOfRange::Spoofed, 1),
            ]
        );
        let mut addrs: Vec<IpAddr> = Vec::new();
        for source in [&googlebot, &gptbot] {
            let set = store.get(source);
            for n in &set.v4 {
                let (first, last) = (u32::from(n.network()), u32::from(n.broadcast()));
                addrs.extend(
                    [first.wrapping_sub(1), first, last, last.wrapping_add(1)]
                        .map(|a| IpAddr::from(std::net::Ipv4Addr::from(a))),
                );
            }
            for n in &set.v6 {
                let (first, last) = (u128::from(n.network()), u128::from(n.broadcast()));
                addrs.extend(
                    [first.wrapping_sub(1), first, last, last.wrapping_add(1)]
                        .map(|a| IpAddr::from(std::net::Ipv6Addr::from(a))),
                );
            }
        }
        let mut decided = 0;
        for ip in addrs {
            for bot in ["googlebot", "gptbot", "claudebot", "yandexbot"] {
                let answer = v.verify(ip, bot).await.expect("a verdict");
                match table.verdict(ip, bot) {
                    Some(verdict) => {
                        assert_eq!(
                            (verdict, Method::IpRange),
                            (answer.verdict, answer.method),
                            "{ip} {bot}"
                        );
                        decided += 1;
                    }
                    // Not decided by ranges: the sidecar decides by FCrDNS or cannot decide.
                    None => assert_ne!(answer.method, Method::IpRange, "{ip} {bot}"),
                }
            }
        }
        // Every gptbot claim, and the Googlebot claims inside the ranges.
        assert!(decided > (169 + 146 + 8) * 4, "{decided}");
    }

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

    #[tokio::test]
    async fn a_claim_verified_before_gets_a_reserved_slot_while_a_flood_holds_the_others() {
        // 66.249.66.9's zone never answers in time (the flood); IP is a real crawler.
        let mut r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .ptr("66.249.66.9", Ok(&["slow.example.net"]))
            .fwd("crawl.googlebot.com", Ok(&[IP]));
        r.delay = Duration::from_millis(300);
        let mut s = settings();
        s.max_concurrent_lookups = 1;
        s.lookup_slot_wait = Duration::from_millis(100);
        assert_eq!(reserved_lookup_slots(1), 1);
        let v = Arc::new(verifier_with(
            r,
            vec![("googlebot", google())],
            Arc::new(RangeStore::default()),
            s,
        ));
        // Verified once; then its verdict expires (dropped from the cache).
        let first = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        assert_eq!(first.verdict, Verdict::Verified);
        v.cache.invalidate_all();
        v.cache.run_pending_tasks().await;
        // The flood takes the only general slot.
        let flood = {
            let v = v.clone();
            tokio::spawn(async move { v.verify("66.249.66.9".parse().unwrap(), "googlebot").await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while v.lookups.available_permits() > 0 {
            assert!(
                Instant::now() < deadline,
                "the flood's lookup never started"
            );
            tokio::task::yield_now().await;
        }
        // A claim never verified waits in vain; the crawler gets the reserved slot.
        let stranger = v.verify("66.249.66.10".parse().unwrap(), "googlebot").await;
        assert_eq!(stranger, Err(VerifyError::Overloaded));
        let again = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        assert_eq!(again.verdict, Verdict::Verified);
        let _ = flood.await;
    }

    #[tokio::test]
    async fn no_lookup_slot_in_time_is_an_error() {
        let mut r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .ptr("66.249.66.2", Ok(&["crawl.googlebot.com"]));
        r.delay = Duration::from_millis(500);
        let mut s = settings();
        s.max_concurrent_lookups = 1;
        s.lookup_slot_wait = Duration::from_millis(50);
        let v = Arc::new(verifier_with(
            r,
            vec![("googlebot", google())],
            Arc::new(RangeStore::default()),
            s,
        ));
        let slow = {
            let v = v.clone();
            tokio::spawn(async move { v.verify(IP.parse().unwrap(), "googlebot").await })
        };
        // The slow one holds the only slot once it has asked for the PTR.
        let deadline = Instant::now() + Duration::from_secs(10);
        while v.resolver.reverse_calls.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the first lookup never started");
            tokio::task::yield_now().await;
        }
        let a = v.verify("66.249.66.2".parse().unwrap(), "googlebot").await;
        assert_eq!(a, Err(VerifyError::Overloaded));
        let text = v.metrics().encode();
        assert!(
            text.contains("crawlguard_sidecar_lookups_rejected_total 1"),
            "{text}"
        );
        assert!(
            text.contains("crawlguard_sidecar_verify_errors_total 1"),
            "{text}"
        );
        // NXDOMAIN for the forward name: a definite answer.
        expect(
            &slow.await.unwrap().unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
    }
}
