//! Property tests of the limiter: the token-bucket math (`bucket`) and the per-request
//! decision over the shared store (`limits::decision::decide` with the in-memory store), including
//! every injected store fault.
//!
//! The bound used throughout is exact integer GCRA arithmetic: over a run of requests, the
//! number allowed never exceeds `burst + F / emission_ns`, where `F` is the forward progress of
//! the clock (the sum of its positive steps; for a monotone clock, `last - first`). A clock
//! that steps backwards neither refills nor drains a bucket, so backward steps add nothing.
//!
//! Cases: 256 by default; `PROPTEST_CASES=N` raises (or lowers) every test's count.

mod common;

use common::{pt_config, T0};
use crawlguard_core::config::{self, Config};
use crawlguard_core::identity::class::Class;
use crawlguard_core::identity::client_ip;
use crawlguard_core::limits::bucket::{self, BucketState, Rate, Take, NS_PER_S};
use crawlguard_core::limits::decision::decide;
use crawlguard_core::limits::limiter::{Decision, Limiter, RequestKeys};
use crawlguard_core::request::path_only;
use crawlguard_testkit::{Fault, MemStore};
use proptest::prelude::*;
use std::collections::HashMap;
use std::net::IpAddr;

/// A rate in [0.001, 1e6] per second, log-uniform-ish, and a burst.
fn rate_and_burst() -> impl Strategy<Value = (f64, u32)> {
    (
        prop_oneof![
            0.001f64..1.0,
            1.0f64..100.0,
            100.0f64..1e6,
            Just(1e6),
            Just(1.0)
        ],
        prop_oneof![1u32..=10, 1u32..=1000, Just(1), Just(1_000_000)],
    )
}

/// One clock step: forward by `n` (scaled to the emission interval by the test), or back.
#[derive(Debug, Clone, Copy)]
enum Step {
    Fwd(u64),
    Back(u64),
}

fn steps(backward: bool, max: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = if backward {
        prop_oneof![
            4 => any::<u64>().prop_map(Step::Fwd),
            1 => any::<u64>().prop_map(Step::Back),
        ]
        .boxed()
    } else {
        any::<u64>().prop_map(Step::Fwd).boxed()
    };
    prop::collection::vec(step, 1..max)
}

/// Applies `s` to `now`: forward steps are 0..=3 emission intervals (often 0, a burst), backward
/// steps up to 100 intervals (at most 1 h). Returns the new time and the forward progress.
fn advance(now: u64, s: Step, emission_ns: u64) -> (u64, u64) {
    match s {
        Step::Fwd(n) => {
            let span = emission_ns.saturating_mul(3).min(3_600 * NS_PER_S);
            let d = if n % 3 == 0 { 0 } else { n % (span + 1) };
            (now + d, d)
        }
        Step::Back(n) => {
            let span = emission_ns.saturating_mul(100).min(3_600 * NS_PER_S);
            (now.saturating_sub(n % (span + 1)), 0)
        }
    }
}

fn drain(
    mut state: Option<BucketState>,
    now: u64,
    rate: Rate,
    cap: u32,
) -> (u32, Option<BucketState>) {
    let mut n = 0;
    while n < cap {
        match bucket::take(state, now, rate) {
            Take::Allowed { state: s, .. } => {
                state = Some(s);
                n += 1;
            }
            Take::Limited { .. } => break,
        }
    }
    (n, state)
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn allowed_never_exceeds_burst_plus_refill(
        (rate_per_s, burst) in rate_and_burst(),
        backward in any::<bool>(),
        seq in steps(true, 400),
        start in 0u64..NS_PER_S,
    ) {
        let rate = Rate::new(rate_per_s, burst);
        let e = rate.emission_ns;
        let mut now = T0 + start;
        let mut state: Option<BucketState> = None;
        let (mut allowed, mut forward) = (0u64, 0u64);
        for s in seq {
            let s = match s { Step::Back(n) if !backward => Step::Fwd(n), s => s };
            let (t, f) = advance(now, s, e);
            now = t;
            forward += f;
            let before = bucket::tokens(state, now, rate);
            prop_assert!(before <= rate.burst);
            match bucket::take(state, now, rate) {
                Take::Allowed { remaining, state: next } => {
                    allowed += 1;
                    prop_assert!(before >= 1, "allowed with {} tokens", before);
                    prop_assert_eq!(remaining, before - 1);
                    prop_assert_eq!(bucket::tokens(Some(next), now, rate), remaining);
                    state = Some(next);
                }
                Take::Limited { wait_ns } => {
                    prop_assert_eq!(before, 0);
                    prop_assert!(wait_ns >= 1 && wait_ns <= e);
                    // Exact wait, when the clock is not behind the state's own time.
                    if state.is_none_or(|s| now >= s.last_ns) {
                        let later = now + wait_ns;
                        prop_assert!(matches!(bucket::take(state, later, rate), Take::Allowed { .. }), "not allowed after wait");
                        prop_assert!(matches!(bucket::take(state, later - 1, rate), Take::Limited { .. }), "allowed before wait");
                    }
                }
            }
            let bound = u64::from(rate.burst) + forward / e;
            prop_assert!(allowed <= bound, "allowed {} > burst {} + {} / {}", allowed, rate.burst, forward, e);
        }
    }

    #[test]
    fn a_drained_bucket_refills_exactly(
        (rate_per_s, burst) in prop_oneof![0.001f64..1e4, Just(1.0), Just(3.0)].prop_flat_map(|r| (Just(r), 1u32..=2000)),
        d in any::<u64>(),
    ) {
        let rate = Rate::new(rate_per_s, burst);
        let e = rate.emission_ns;
        let (n, st) = drain(None, T0, rate, burst);
        prop_assert_eq!(n, burst);
        prop_assert_eq!(bucket::tokens(st, T0, rate), 0);
        let d = d % (e.saturating_mul(u64::from(burst) + 2) + 1);
        let want = u32::try_from((d / e).min(u64::from(burst))).unwrap_or(u32::MAX);
        prop_assert_eq!(bucket::tokens(st, T0 + d, rate), want);
        let (m, _) = drain(st, T0 + d, rate, burst + 1);
        prop_assert_eq!(m, want);
        // Stepping the clock back never refills: tokens stay 0.
        prop_assert_eq!(bucket::tokens(st, T0 - d, rate), 0);
    }

    #[test]
    fn tokens_never_exceed_burst_and_take_never_panics(
        rate_per_s in prop_oneof![any::<f64>(), 1e-12f64..1e12],
        burst in any::<u32>(),
        tat_ns in any::<u64>(),
        last_ns in any::<u64>(),
        now in any::<u64>(),
    ) {
        let rate = Rate::new(rate_per_s, burst);
        prop_assert!(rate.emission_ns >= 1 && rate.burst >= 1);
        let s = BucketState { tat_ns, last_ns };
        for st in [None, Some(s)] {
            prop_assert!(bucket::tokens(st, now, rate) <= rate.burst);
            match bucket::take(st, now, rate) {
                Take::Allowed { remaining, .. } => prop_assert!(remaining < rate.burst),
                Take::Limited { wait_ns } => prop_assert!(wait_ns >= 1),
            }
        }
        let _ = bucket::refund(s, rate);
        let _ = bucket::is_full(s, now);
    }

    #[test]
    fn refund_after_take_restores_the_tokens(
        (rate_per_s, burst) in rate_and_burst(),
        used in 0u32..=1000,
        back in prop_oneof![Just(0u64), 0u64..=3_600 * NS_PER_S],
        ahead in 0u64..=3_600 * NS_PER_S,
    ) {
        let rate = Rate::new(rate_per_s, burst);
        // A bucket with `used` tokens taken at T0 + ahead, looked at from T0 + ahead - back.
        let (_, st) = drain(None, T0 + ahead, rate, used.min(burst));
        let now = T0 + ahead - back;
        let before = bucket::tokens(st, now, rate);
        match bucket::take(st, now, rate) {
            Take::Allowed { state, .. } => {
                prop_assert_eq!(bucket::tokens(Some(state), now, rate), before - 1);
                prop_assert_eq!(bucket::tokens(Some(bucket::refund(state, rate)), now, rate), before);
            }
            Take::Limited { .. } => prop_assert_eq!(before, 0),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Any window, any valid limit, any time

/// A burst and a rate that configuration validation accepts for it: `burst / rate_per_s` up to
/// one year (`config::MAX_REFILL_S`), `rate_per_s` up to 1e6. The rate is log-uniform between
/// the smallest one the burst allows and 1e6, or one of those two ends.
fn valid_limit() -> impl Strategy<Value = (f64, u32)> {
    prop_oneof![1u32..=10, 1u32..=1000, Just(1), Just(1_000_000)].prop_flat_map(|burst| {
        // The smallest valid rate, nudged up by 1e-12 (relative) so that rounding in the
        // division, the decimal text and its parsing cannot push it past the bound.
        let min = f64::from(burst) / config::MAX_REFILL_S * (1.0 + 1e-12);
        let (lo, hi) = (min.log10(), 6.0f64);
        (
            prop_oneof![
                3 => (lo..=hi).prop_map(move |x| 10f64.powf(x).clamp(min, 1e6)),
                1 => Just(min),
                1 => Just(1e6),
            ],
            Just(burst),
        )
    })
}

/// A start time: realistic (now-ish), the epoch, or the last two years of u64 nanoseconds
/// (year 2554), where the bucket's times stop fitting.
fn start_time() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => T0 - 1_000 * NS_PER_S..T0 + 1_000 * NS_PER_S,
        1 => 0u64..NS_PER_S,
        1 => (0u64..=2 * 31_536_000 * NS_PER_S).prop_map(|back| u64::MAX - back),
    ]
}

proptest! {
    #![proptest_config(pt_config(1))]

    /// Over any window of the clock `[t_i, t_j]` (a monotone clock), the bucket admits at most
    /// `burst + floor((t_j - t_i) / emission_ns)` of the requests made in it, where
    /// `emission_ns = round(1e9 / rate_per_s)` (within half a nanosecond of the exact
    /// interval, checked here too): `burst + rate x t`, with the rate rounded to whole
    /// nanoseconds per token and the refill part rounded down. This holds for every limit
    /// configuration validation accepts, from any start time, including the end of u64
    /// time, where the bucket refuses what it cannot store.
    #[test]
    fn admitted_in_any_window_is_at_most_burst_plus_rate_times_window(
        (rate_per_s, burst) in valid_limit(),
        start in start_time(),
        gaps in prop::collection::vec(any::<u64>(), 1..300),
    ) {
        let doc = format!(
            r#"{{"limits":[{{"name":"l","class":"*","route":"*","rate_per_s":{rate_per_s:e},"burst":{burst},"key":"global"}}]}}"#
        );
        let cfg = match config::parse(doc.as_bytes()) {
            Ok(c) => c,
            Err(e) => return Err(TestCaseError::fail(format!("not a valid limit: {e}"))),
        };
        let Some(b) = cfg.limits.first().and_then(|l| l.bucket) else {
            return Err(TestCaseError::fail("no limit"));
        };
        let rate = b.rate;
        let e = rate.emission_ns;
        prop_assert!((e as f64 - 1e9 / b.rate_per_s).abs() <= 0.5 + 1e-9 * e as f64,
            "emission_ns {} for rate_per_s {}", e, rate_per_s);
        // Request times: a third at the same instant as the previous one (bursts), the rest
        // up to three emission intervals later (at most an hour).
        let span = e.saturating_mul(3).min(3_600 * NS_PER_S);
        let mut now = start;
        let mut state: Option<BucketState> = None;
        let mut admitted: Vec<u64> = Vec::new();
        for g in gaps {
            let d = if g % 3 == 0 { 0 } else { g % (span + 1) };
            now = now.saturating_add(d);
            if let Take::Allowed { state: s, .. } = bucket::take(state, now, rate) {
                state = Some(s);
                admitted.push(now);
            }
        }
        // Every window that starts and ends at an admitted request (the tightest ones).
        for (i, ti) in admitted.iter().enumerate() {
            for (k, tj) in admitted.iter().enumerate().skip(i) {
                let n = (k - i + 1) as u64;
                let bound = u64::from(rate.burst) + (tj - ti) / e;
                prop_assert!(n <= bound, "admitted {} in [{}, {}] > burst {} + {} / {}",
                    n, ti, tj, rate.burst, tj - ti, e);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// limits::decision::decide over the shared store, with faults

/// Remote addresses; the two IPv6 ones share a /64 and so are one client.
const REMOTES: &[&str] = &[
    "10.0.0.1:1234",
    "10.0.0.2:80",
    "[2001:db8:1:2::a]:443",
    "[2001:db8:1:2::b]:443",
    "[2001:db8:9::1]:443",
    "::ffff:10.0.0.1",
];
const PATHS: &[&str] = &[
    "/",
    "/api/x?q=1",
    "/api/",
    "/robots.txt",
    "/robots.txt?x",
    "/about#top",
];
const CLASSES: &[Class] = &[Class::Human, Class::Script, Class::SearchCrawler];

#[derive(Debug, Clone)]
struct Setup {
    per_ip: (String, u32),
    api: Option<(String, u32)>,
    human_status: u16,
    script_status: u16,
    ra: (u32, u32, u32),
    shadow: bool,
}

/// A rate written as a short decimal, in [0.01, 1000].
fn rate_text() -> impl Strategy<Value = String> {
    (1u32..=100_000).prop_map(|n| format!("{}.{:02}", n / 100, n % 100))
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        (rate_text(), 1u32..=20),
        prop::option::of((rate_text(), 1u32..=20)),
        prop::sample::select(&[429u16, 503][..]),
        prop::sample::select(&[429u16, 503][..]),
        (1u32..=10, 0u32..=50, 0u32..=5),
        prop_oneof![4 => Just(false), 1 => Just(true)],
    )
        .prop_map(
            |(per_ip, api, human_status, script_status, (min_s, extra, jitter), shadow)| Setup {
                per_ip,
                api,
                human_status,
                script_status,
                ra: (min_s, min_s + extra, jitter),
                shadow,
            },
        )
}

fn config_of(s: &Setup) -> Config {
    let (min_s, max_s, jitter_s) = s.ra;
    let mut limits = vec![format!(
        r#"{{"name":"per_ip","class":"*","route":"*","rate_per_s":{},"burst":{},"key":"client_ip"}}"#,
        s.per_ip.0, s.per_ip.1
    )];
    if let Some((r, b)) = &s.api {
        limits.push(format!(
            r#"{{"name":"api_global","class":"*","route":"api","rate_per_s":{r},"burst":{b},"key":"global"}}"#
        ));
    }
    let ra = format!(r#""retry_after":{{"min_s":{min_s},"max_s":{max_s},"jitter_s":{jitter_s}}}"#);
    let doc = format!(
        r#"{{"mode":"{}","routes":[{{"name":"api","path_prefix":"/api/"}}],"limits":[{}],
            "classes":{{"human":{{{ra},"reject_status":{}}},"script":{{{ra},"reject_status":{}}},
                        "search_crawler":{{{ra}}}}},
            "store":{{"slots":1024,"cas_retries":2,"hash_seed":42,"fallback_buckets":64}}}}"#,
        if s.shadow { "shadow" } else { "enforce" },
        limits.join(","),
        s.human_status,
        s.script_status,
    );
    match config::parse(doc.as_bytes()) {
        Ok(c) => c,
        Err(e) => panic!("test config rejected: {e}\n{doc}"),
    }
}

#[derive(Debug, Clone, Copy)]
struct Req {
    remote: usize,
    path: usize,
    class: usize,
    step: Step,
    random: u32,
}

fn reqs() -> impl Strategy<Value = Vec<Req>> {
    let r = (
        0..REMOTES.len(),
        0..PATHS.len(),
        0..CLASSES.len(),
        prop_oneof![6 => any::<u64>().prop_map(Step::Fwd), 1 => any::<u64>().prop_map(Step::Back)],
        any::<u32>(),
    )
        .prop_map(|(remote, path, class, step, random)| Req {
            remote,
            path,
            class,
            step,
            random,
        });
    prop::collection::vec(r, 1..200)
}

/// The limiter's view of a request from `remote` for `path` (no key headers).
fn keys<'a>(cfg: &crawlguard_core::config::Config, path: &'a str, remote: &str) -> RequestKeys<'a> {
    let ip = client_ip::parse_addr(remote.as_bytes());
    RequestKeys {
        route: cfg.route_of(path_only(path.as_bytes())),
        client: ip.map(|ip| client_ip::masked(ip, &cfg.client_ip)),
        client_ip: ip,
        bot: None,
        path: path_only(path.as_bytes()),
        asn: None,
        key_headers: &[],
        verified_claim: false,
    }
}

fn fault() -> impl Strategy<Value = Fault> {
    prop::sample::select(vec![
        Fault::None,
        Fault::Error,
        Fault::CasMismatch,
        Fault::Truncate,
    ])
}

proptest! {
    #![proptest_config(pt_config(1))]

    #[test]
    fn decide_limits_every_client_under_every_store_fault(
        s in setup(),
        fault in fault(),
        stream in reqs(),
    ) {
        let cfg = config_of(&s);
        let mut limiter = Limiter::new(&cfg);
        let store = MemStore::default();
        prop_assert!(limiter.table().precreate(&store).is_ok());
        store.fault.set(fault);

        let per_ip = cfg.limits.first().and_then(|l| l.bucket).map(|b| b.rate);
        let api = cfg.limits.get(1).and_then(|l| l.bucket).map(|b| b.rate);
        let Some(per_ip) = per_ip else { return Err(TestCaseError::fail("no per_ip limit")) };
        // Coarsest step unit: the slower of the two limits.
        let unit = per_ip.emission_ns.max(api.map_or(0, |r| r.emission_ns));

        let mut now = T0;
        let mut forward = 0u64;
        let mut allowed_by_client: HashMap<IpAddr, u64> = HashMap::new();
        let mut allowed_api = 0u64;
        for r in &stream {
            let (t, f) = advance(now, r.step, unit);
            now = t;
            forward += f;
            let remote = REMOTES.get(r.remote).copied().unwrap_or("10.0.0.1");
            let path = PATHS.get(r.path).copied().unwrap_or("/");
            let class = CLASSES.get(r.class).copied().unwrap_or(Class::Human);
            let exempt = path.starts_with("/robots.txt");
            if exempt {
                // Exempt paths never reach the limiter (the request machine decides them
                // first; tests/request_flow.rs).
                continue;
            }
            let req = keys(&cfg, path, remote);
            let mut calls = 0;
            let out = decide(&cfg, &mut limiter, &store, &req, class, now, &mut || {
                calls += 1;
                r.random
            });
            let is_api = path.starts_with("/api/");
            prop_assert_eq!(out.route, if is_api { 0 } else { 1 });
            match out.decision {
                Decision::Allowed => {
                    prop_assert_eq!(calls, 0);
                    let client = client_ip::parse_addr(remote.as_bytes())
                        .map(|ip| client_ip::masked(ip, &cfg.client_ip));
                    let Some(client) = client else { return Err(TestCaseError::fail("remote parses")) };
                    *allowed_by_client.entry(client).or_default() += 1;
                    if is_api && api.is_some() {
                        allowed_api += 1;
                    }
                }
                Decision::Limited(rej) | Decision::ShadowLimited(rej) => {
                    prop_assert_eq!(matches!(out.decision, Decision::ShadowLimited(_)), s.shadow);
                    prop_assert_eq!(calls, 1, "random is drawn once per rejection");
                    let want_status = match class {
                        Class::Human => s.human_status,
                        Class::Script => s.script_status,
                        _ => 429,
                    };
                    prop_assert!(matches!(rej.status, 429 | 503));
                    prop_assert_eq!(rej.status, want_status);
                    prop_assert_eq!(rej.status, cfg.policy(class).reject_status);
                    let (min_s, max_s, jitter_s) = s.ra;
                    prop_assert!(rej.retry_after_s >= min_s.max(1));
                    // Escalation (on by default for scripts) may lengthen it, up to its own max.
                    let esc = cfg.policy(class).escalation;
                    let cap = if out.escalated { esc.max_s.max(max_s) } else { max_s };
                    prop_assert!(!out.escalated || esc.enabled);
                    prop_assert!(rej.retry_after_s <= cap + jitter_s);
                    prop_assert!(rej.limit == 0 || (rej.limit == 1 && is_api));
                }
                Decision::Malformed { .. } | Decision::ShadowMalformed { .. } => {
                    return Err(TestCaseError::fail("malformed without a key header"));
                }
            }
            // Store faults are counted on every charged request, and only then.
            prop_assert_eq!(out.store.fell_back(), fault != Fault::None, "{:?} {:?}", fault, out.store);
            prop_assert_eq!(out.store.errors > 0, fault == Fault::Error);
            prop_assert_eq!(out.store.cas_exhausted > 0, fault == Fault::CasMismatch);
            prop_assert_eq!(out.store.corrupt > 0, fault == Fault::Truncate);
            prop_assert_eq!(out.store.collisions, 0);
            // In shadow mode nothing is enforced, so the bounds below do not apply.
            if s.shadow {
                continue;
            }
            for (c, n) in &allowed_by_client {
                let bound = u64::from(per_ip.burst) + forward / per_ip.emission_ns;
                prop_assert!(*n <= bound, "client {} allowed {} > {} ({:?})", c, n, bound, fault);
            }
            if let Some(api) = api {
                let bound = u64::from(api.burst) + forward / api.emission_ns;
                prop_assert!(allowed_api <= bound, "api allowed {} > {} ({:?})", allowed_api, bound, fault);
            }
        }
    }

    /// With a frozen clock the count is exact: each client gets exactly `burst`, whatever the
    /// store does.
    #[test]
    fn frozen_clock_gives_each_client_exactly_its_burst(
        burst in 1u32..=30,
        fault in fault(),
        order in prop::collection::vec(0..REMOTES.len(), 1..150),
    ) {
        let s = Setup {
            per_ip: ("0.01".into(), burst),
            api: None,
            human_status: 429,
            script_status: 429,
            ra: (1, 60, 0),
            shadow: false,
        };
        let cfg = config_of(&s);
        let mut limiter = Limiter::new(&cfg);
        let store = MemStore::default();
        prop_assert!(limiter.table().precreate(&store).is_ok());
        store.fault.set(fault);
        let mut seen: HashMap<IpAddr, (u32, u32)> = HashMap::new();
        for i in &order {
            let remote = REMOTES.get(*i).copied().unwrap_or("10.0.0.1");
            let req = keys(&cfg, "/", remote);
            let out = decide(&cfg, &mut limiter, &store, &req, Class::Human, T0, &mut || 0);
            let client = client_ip::parse_addr(remote.as_bytes())
                .map(|ip| client_ip::masked(ip, &cfg.client_ip));
            let Some(client) = client else { return Err(TestCaseError::fail("remote parses")) };
            let e = seen.entry(client).or_default();
            match out.decision {
                Decision::Allowed => e.0 += 1,
                Decision::Limited(rej) => {
                    e.1 += 1;
                    prop_assert_eq!(rej.status, 429);
                    // 0.01/s: next token in 100 s, clamped to max_s 60.
                    prop_assert_eq!(rej.retry_after_s, 60);
                }
                other => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            }
        }
        for (c, (allowed, limited)) in seen {
            let requests = allowed + limited;
            prop_assert_eq!(allowed, requests.min(burst), "client {} under {:?}", c, fault);
        }
    }
}
