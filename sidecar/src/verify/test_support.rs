//! Test doubles shared by the verifier's tests: a scripted resolver, settings, a catalog
//! entry and verifier builders.

use super::*;
use crate::resolver::DnsErrorKind;
use std::collections::HashMap;
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

pub fn fail(kind: DnsErrorKind) -> DnsFailure {
    DnsFailure::new(kind, "scripted")
}

impl FakeResolver {
    pub fn ptr(mut self, ip: &str, r: Result<&[&str], DnsErrorKind>) -> Self {
        self.ptr.insert(
            ip.parse().unwrap(),
            r.map(|n| n.iter().map(|s| s.to_string()).collect())
                .map_err(fail),
        );
        self
    }
    pub fn fwd(mut self, name: &str, r: Result<&[&str], DnsErrorKind>) -> Self {
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

pub fn settings() -> VerifierSettings {
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

pub fn google() -> BotMethods {
    BotMethods {
        domains: vec!["googlebot.com".into(), "google.com".into()],
        ranges: vec![],
    }
}

pub fn verifier(
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

pub fn verifier_with(
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

pub fn expect(a: &Answer, verdict: Verdict, method: Method, host: &str, ttl_s: u64) {
    assert_eq!(
        (a.verdict, a.method, a.host.as_str(), a.ttl_s),
        (verdict, method, host, ttl_s),
        "{a:?}"
    );
}

pub const IP: &str = "66.249.66.1";
