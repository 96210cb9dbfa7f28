//! Verified bots end to end: Envoy with the crawlguard filter, the real `crawlguard-verifier`
//! sidecar behind cluster `crawlguard_verifier`, and a local dnsmasq serving the PTR and
//! A/AAAA records of each scenario (harness: `crawlguard_integration::stack`). One test per
//! promise, exact values.
//!
//! Client addresses come from `x-forwarded-for`. hickory-resolver, inside the sidecar,
//! answers reverse lookups of `127.0.0.0/8` and `::1` itself (RFC 6761, `localhost.`) and
//! never asks dnsmasq, so the loopback source addresses the clients really use cannot carry
//! test PTR records. The filter is therefore configured with
//! `"client_ip": {"source": "xff", "xff_trusted_hops": 1}` and each client sends
//! `X-Forwarded-For: <documentation address>` (192.0.2.0/24, 198.51.100.0/24,
//! 203.0.113.0/24, 2001:db8::/32); dnsmasq serves the records for those addresses (they are
//! only names in DNS answers, nothing connects to them). Envoy forwards `x-forwarded-for` as
//! the client sent it (`skip_xff_append`), so the rightmost entry is the claimed address.
//!
//! Limits use a refill rate of 0.001 token/s so nothing refills while a test runs and the
//! counts are exact. After every test Envoy's log must show no filter panic.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crawlguard_integration::{
    client, Blackhole, EnvoyOpts, Record, Reply, SidecarOpts, Stack, UA_CHROME, UA_GOOGLEBOT,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GPTBot's User-Agent (OpenAI's documentation): bot id `gptbot`, class `ai_trainer`.
const UA_GPTBOT: &str = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; \
                         GPTBot/1.2; +https://openai.com/gptbot)";

/// PTR `crawl-192-0-2-1.googlebot.com`, whose A record is 192.0.2.1: a real Googlebot.
const GOOGLEBOT_V4: &str = "192.0.2.1";
/// PTR `host-2.example.net`: not Google's.
const NOT_GOOGLE_PTR: &str = "192.0.2.2";
/// Four PTR names; only `crawl-3.google.com` resolves back to it.
const SEVERAL_PTRS: &str = "192.0.2.3";
/// PTR `liar.googlebot.com`, whose A record is another address.
const FORWARD_MISMATCH: &str = "192.0.2.5";
/// PTR `crawl-v6.googlebot.com`, whose AAAA record is this address.
const GOOGLEBOT_V6: &str = "2001:db8::66";
/// Inside the test GPTBot range file (192.0.2.64/26).
const GPTBOT_IN_RANGE: &str = "192.0.2.70";
/// Outside it.
const GPTBOT_OUT_OF_RANGE: &str = "198.51.100.70";

/// The incident's scrapers: 203.0.113.1..=50; the first 25 have PTRs outside Google's
/// domains, the other 25 have no PTR at all (NXDOMAIN).
fn spoofer(i: usize) -> String {
    format!("203.0.113.{i}")
}

/// Every record the scenarios need.
fn records() -> Vec<Record> {
    let mut r = vec![
        Record::host("crawl-192-0-2-1.googlebot.com", GOOGLEBOT_V4),
        Record::ptr(NOT_GOOGLE_PTR, "host-2.example.net"),
        Record::forward("host-2.example.net", NOT_GOOGLE_PTR),
        Record::ptr(SEVERAL_PTRS, "other.example.net"),
        Record::ptr(SEVERAL_PTRS, "crawl.evilgooglebot.com"),
        Record::ptr(SEVERAL_PTRS, "liar.googlebot.com"),
        Record::ptr(SEVERAL_PTRS, "crawl-3.google.com"),
        Record::forward("crawl-3.google.com", SEVERAL_PTRS),
        Record::ptr(FORWARD_MISMATCH, "liar.googlebot.com"),
        Record::forward("liar.googlebot.com", "198.51.100.99"),
        Record::host("crawl-v6.googlebot.com", GOOGLEBOT_V6),
    ];
    for i in 1..=25 {
        r.push(Record::ptr(
            &spoofer(i),
            &format!("scraper-{i}.example.net"),
        ));
    }
    r
}

/// A per-client-IP limit for one class, 0.001 token/s.
fn limit(class: &str, burst: u32) -> Value {
    json!({"name": format!("{class}_per_ip"), "class": class, "route": "*",
           "rate_per_s": 0.001, "burst": burst, "key": "client_ip"})
}

/// The limits of every scenario: a verified crawler gets 10, an unverified claim 2, a
/// spoofed one 1, GPTBot 3, a browser plenty.
fn limits() -> Vec<Value> {
    vec![
        limit("search_crawler", 10),
        limit("ai_trainer", 3),
        limit("unverified_bot", 2),
        limit("spoofed", 1),
        limit("human", 1000),
    ]
}

/// The filter configuration: client address from XFF, `limits()`, verifier timeout.
fn config(timeout_ms: u32) -> Value {
    json!({
        "client_ip": {"source": "xff", "xff_trusted_hops": 1},
        "limits": limits(),
        "verifier": {"timeout_ms": timeout_ms},
    })
}

/// One request claiming to be `ua` from `xff`, with its latency.
async fn claim(c: &reqwest::Client, url: &str, ua: &str, xff: &str) -> (Reply, Duration) {
    let started = Instant::now();
    let r = crawlguard_integration::get(c, url, ua, &[("x-forwarded-for", xff)]).await;
    (r, started.elapsed())
}

/// `n` requests one after the other.
async fn claims(c: &reqwest::Client, url: &str, ua: &str, xff: &str, n: usize) -> Vec<Reply> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(claim(c, url, ua, xff).await.0);
    }
    out
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status).collect()
}

/// The classes the origin saw for the forwarded requests.
fn classes(replies: &[Reply]) -> Vec<&str> {
    replies
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.upstream_class().unwrap_or("<none>"))
        .collect()
}

fn repeat(status: u16, n: usize) -> Vec<u16> {
    vec![status; n]
}

fn cat(parts: &[Vec<u16>]) -> Vec<u16> {
    parts.concat()
}

fn local(last: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, 0, last)
}

/// Sidecar verdict counter for one (bot, method, verdict).
fn verdicts(bot: &str, method: &str, verdict: &str) -> String {
    format!(
        "crawlguard_verifier_verdicts_total{{bot=\"{bot}\",method=\"{method}\",verdict=\"{verdict}\"}}"
    )
}

/// Asserts crawlguard counters (names without the `wasmcustom.` prefix) have exactly these
/// values (0 = absent or zero).
async fn assert_counters(s: &Stack, expected: &[(&str, u64)]) {
    let stats = s.envoy.crawlguard_stats().await;
    for (name, want) in expected {
        let got = stats.get(*name).copied().unwrap_or(0);
        assert_eq!(got, *want, "{name}; all crawlguard stats: {stats:?}");
    }
}

#[tokio::test]
async fn verified_googlebot_gets_the_search_crawler_limit() {
    let s = Stack::start(
        EnvoyOpts::with_config(config(500)),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");
    let replies = claims(&client(local(2)), &url, UA_GOOGLEBOT, GOOGLEBOT_V4, 12).await;

    // The search_crawler burst (10), not the unverified_bot one (2).
    assert_eq!(statuses(&replies), cat(&[repeat(200, 10), repeat(429, 2)]));
    assert_eq!(classes(&replies), vec!["search_crawler"; 10]);
    for r in &replies[10..] {
        let ra = r.retry_after_s().expect("Retry-After");
        assert!((1..=65).contains(&ra), "search_crawler Retry-After {ra}");
    }
    // One callout; every later request is a verdict-cache hit.
    assert_counters(
        &s,
        &[
            ("crawlguard.verify.cache_miss", 1),
            ("crawlguard.verify.verified", 1),
            ("crawlguard.verify.cache_hit", 11),
            ("crawlguard.verify.spoofed", 0),
            ("crawlguard.verify.error", 0),
            ("crawlguard.class.search_crawler.allowed", 10),
            ("crawlguard.class.search_crawler.limited", 2),
            ("crawlguard.class.unverified_bot.allowed", 0),
        ],
    )
    .await;
    assert_eq!(
        s.sidecar
            .metric(&verdicts("googlebot", "fcrdns", "verified"))
            .await,
        1.0
    );
    s.envoy.assert_log_clean();
}

/// A Googlebot claim from `ip` that the sidecar must answer `spoofed`: the `spoofed` limit
/// (1) applies, with its long Retry-After.
async fn assert_spoofed_googlebot(ip: &str) {
    let s = Stack::start(
        EnvoyOpts::with_config(config(500)),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");
    let replies = claims(&client(local(2)), &url, UA_GOOGLEBOT, ip, 4).await;

    assert_eq!(statuses(&replies), [200, 429, 429, 429]);
    assert_eq!(classes(&replies), ["spoofed"]);
    for r in &replies[1..] {
        let ra = r.retry_after_s().expect("Retry-After");
        assert!((60..=3720).contains(&ra), "spoofed Retry-After {ra}");
    }
    assert_counters(
        &s,
        &[
            ("crawlguard.verify.cache_miss", 1),
            ("crawlguard.verify.spoofed", 1),
            ("crawlguard.verify.verified", 0),
            ("crawlguard.verify.cache_hit", 3),
            ("crawlguard.class.spoofed.allowed", 1),
            ("crawlguard.class.spoofed.limited", 3),
            ("crawlguard.class.search_crawler.allowed", 0),
        ],
    )
    .await;
    assert_eq!(
        s.sidecar
            .metric(&verdicts("googlebot", "fcrdns", "spoofed"))
            .await,
        1.0
    );
    s.envoy.assert_log_clean();
}

#[tokio::test]
async fn googlebot_ua_from_a_non_google_ptr_is_spoofed() {
    assert_spoofed_googlebot(NOT_GOOGLE_PTR).await;
}

#[tokio::test]
async fn googlebot_ptr_without_forward_confirmation_is_spoofed() {
    assert_spoofed_googlebot(FORWARD_MISMATCH).await;
}

/// A Googlebot claim from `ip` that the sidecar must verify by FCrDNS through `host`.
async fn assert_verified_googlebot(ip: &str) {
    let s = Stack::start(
        EnvoyOpts::with_config(config(500)),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");
    let replies = claims(&client(local(2)), &url, UA_GOOGLEBOT, ip, 11).await;

    assert_eq!(statuses(&replies), cat(&[repeat(200, 10), repeat(429, 1)]));
    assert_eq!(classes(&replies), vec!["search_crawler"; 10]);
    assert_counters(
        &s,
        &[
            ("crawlguard.verify.cache_miss", 1),
            ("crawlguard.verify.verified", 1),
            ("crawlguard.verify.spoofed", 0),
            ("crawlguard.class.search_crawler.allowed", 10),
            ("crawlguard.class.search_crawler.limited", 1),
        ],
    )
    .await;
    assert_eq!(
        s.sidecar
            .metric(&verdicts("googlebot", "fcrdns", "verified"))
            .await,
        1.0
    );
    s.envoy.assert_log_clean();
}

#[tokio::test]
async fn one_passing_ptr_name_among_several_verifies() {
    assert_verified_googlebot(SEVERAL_PTRS).await;
}

#[tokio::test]
async fn ipv6_googlebot_is_verified() {
    assert_verified_googlebot(GOOGLEBOT_V6).await;
}

#[tokio::test]
async fn gptbot_in_its_published_ranges_is_ai_trainer() {
    let sidecar = SidecarOpts {
        config_toml: Some("[[bots]]\nid = \"gptbot\"\nranges = [\"gptbot.json\"]\n".into()),
        files: vec![(
            "gptbot.json".into(),
            r#"{"creationTime": "2025-01-01T00:00:00.000000", "prefixes": [{"ipv4Prefix": "192.0.2.64/26"}, {"ipv6Prefix": "2001:db8:77::/48"}]}"#.into(),
        )],
        ..Default::default()
    };
    let s = Stack::start(EnvoyOpts::with_config(config(500)), &records(), sidecar).await;
    let url = s.envoy.url("/page");
    let c = client(local(2));

    let inside = claims(&c, &url, UA_GPTBOT, GPTBOT_IN_RANGE, 5).await;
    assert_eq!(statuses(&inside), [200, 200, 200, 429, 429]);
    assert_eq!(classes(&inside), ["ai_trainer"; 3]);

    let outside = claims(&c, &url, UA_GPTBOT, GPTBOT_OUT_OF_RANGE, 3).await;
    assert_eq!(statuses(&outside), [200, 429, 429]);
    assert_eq!(classes(&outside), ["spoofed"]);

    assert_counters(
        &s,
        &[
            ("crawlguard.verify.cache_miss", 2),
            ("crawlguard.verify.verified", 1),
            ("crawlguard.verify.spoofed", 1),
            ("crawlguard.class.ai_trainer.allowed", 3),
            ("crawlguard.class.ai_trainer.limited", 2),
            ("crawlguard.class.spoofed.allowed", 1),
            ("crawlguard.class.spoofed.limited", 2),
        ],
    )
    .await;
    assert_eq!(
        s.sidecar
            .metric(&verdicts("gptbot", "ip_range", "verified"))
            .await,
        1.0
    );
    assert_eq!(
        s.sidecar
            .metric(&verdicts("gptbot", "ip_range", "spoofed"))
            .await,
        1.0
    );
    s.envoy.assert_log_clean();
}

/// The slack allowed on top of `timeout_ms` for a request on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1000);

#[tokio::test]
async fn killed_sidecar_never_fails_or_delays_requests() {
    const TIMEOUT_MS: u32 = 500;
    let bound = Duration::from_millis(u64::from(TIMEOUT_MS)) + SLACK;
    let s = Stack::start(
        EnvoyOpts::with_config(config(TIMEOUT_MS)),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");

    // A verified Googlebot before the sidecar dies.
    let c = client(local(2));
    let (first, _) = claim(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await;
    assert_eq!(
        (first.status, first.upstream_class()),
        (200, Some("search_crawler"))
    );

    // A stream of new claims (each from a new address, so each calls out) while the
    // sidecar is killed: every request completes in time, 200 (the first request of every
    // address fits any limit), never a 5xx.
    let done = Arc::new(AtomicUsize::new(0));
    let stream = {
        let (url, done) = (url.clone(), done.clone());
        tokio::spawn(async move {
            let c = client(local(3));
            let mut out = Vec::new();
            for i in 1..=40 {
                out.push(claim(&c, &url, UA_GOOGLEBOT, &spoofer(i)).await);
                done.fetch_add(1, Ordering::SeqCst);
            }
            out
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.load(Ordering::SeqCst) < 8 {
        assert!(
            Instant::now() < deadline,
            "the claim stream made no progress"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.sidecar.kill();
    let streamed = stream.await.expect("claim stream");
    for (i, (r, took)) in streamed.iter().enumerate() {
        assert_eq!(r.status, 200, "claim {i}: {r:?}");
        assert!(*took < bound, "claim {i} took {took:?}");
    }
    let slowest = streamed.iter().map(|(_, t)| *t).max().unwrap_or_default();
    eprintln!("claims while the sidecar was killed: slowest {slowest:?}");
    let stream_classes: Vec<&str> = streamed
        .iter()
        .map(|(r, _)| r.upstream_class().unwrap_or("<none>"))
        .collect();
    assert!(
        stream_classes[..8].iter().all(|c| *c == "spoofed"),
        "{stream_classes:?}"
    );
    assert_eq!(stream_classes[39], "unverified_bot", "{stream_classes:?}");
    assert!(
        stream_classes
            .iter()
            .all(|c| *c == "spoofed" || *c == "unverified_bot"),
        "{stream_classes:?}"
    );

    // Now the sidecar is surely dead: five new claims, three requests each. The first is a
    // verifier error (connection refused), remembered for error_ttl_s: unverified_bot, whose
    // limit (2) applies.
    let errors_before = s.envoy.counter("crawlguard.verify.error").await;
    assert!(errors_before >= 1, "no verifier error counted yet");
    for i in 1..=5 {
        let ip = format!("198.51.100.{i}");
        let mut replies = Vec::new();
        for _ in 0..3 {
            let (r, took) = claim(&c, &url, UA_GOOGLEBOT, &ip).await;
            assert!(took < bound, "{ip} took {took:?}");
            replies.push(r);
        }
        assert_eq!(statuses(&replies), [200, 200, 429], "{ip}");
        assert_eq!(classes(&replies), ["unverified_bot"; 2], "{ip}");
    }
    assert_eq!(
        s.envoy.counter("crawlguard.verify.error").await,
        errors_before + 5
    );

    // The verdict cached before the sidecar died still holds: the rest of the crawler burst.
    let more = claims(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4, 10).await;
    assert_eq!(statuses(&more), cat(&[repeat(200, 9), repeat(429, 1)]));
    assert_eq!(classes(&more), vec!["search_crawler"; 9]);
    assert!(s.envoy.log().contains("verifier error"));
    s.envoy.assert_log_clean();
}

#[tokio::test]
async fn sidecar_killed_with_callouts_pending_releases_them_at_once() {
    // The sidecar would answer only after its 2 s DNS timeout, the filter waits up to 3 s:
    // the requests are paused on open callouts when the sidecar dies.
    const TIMEOUT_MS: u64 = 3000;
    let blackhole = Blackhole::new();
    let sidecar = SidecarOpts {
        nameservers: vec![blackhole.addr()],
        dns_timeout_ms: Some(2000),
        dns_attempts: Some(1),
        ..Default::default()
    };
    let s =
        Stack::start_without_dns(EnvoyOpts::with_config(config(TIMEOUT_MS as u32)), sidecar).await;
    let url = s.envoy.url("/page");
    let mut tasks = Vec::new();
    for i in 1..=3 {
        let (c, url) = (client(local(10 + i as u8)), url.clone());
        tasks.push(tokio::spawn(async move {
            claim(&c, &url, UA_GOOGLEBOT, &spoofer(i)).await
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.envoy.counter("crawlguard.verify.cache_miss").await < 3 {
        assert!(Instant::now() < deadline, "callouts never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let killed = Instant::now();
    s.sidecar.kill();
    for t in tasks {
        let (r, took) = t.await.expect("claim task");
        assert_eq!(
            (r.status, r.upstream_class()),
            (200, Some("unverified_bot"))
        );
        assert!(
            took < Duration::from_millis(TIMEOUT_MS) + SLACK,
            "a paused claim took {took:?}"
        );
    }
    // Released by the connection reset, not by the filter's timeout.
    let released_after = killed.elapsed();
    eprintln!("paused claims released {released_after:?} after the kill");
    assert!(
        released_after < Duration::from_millis(TIMEOUT_MS / 2),
        "{released_after:?}"
    );
    assert_counters(
        &s,
        &[
            ("crawlguard.verify.cache_miss", 3),
            ("crawlguard.verify.error", 3),
            ("crawlguard.verify.unknown", 0),
            ("crawlguard.class.unverified_bot.allowed", 3),
        ],
    )
    .await;
    s.envoy.assert_log_clean();
    drop(blackhole);
}

#[tokio::test]
async fn slow_sidecar_gives_unverified_bot_within_the_timeout() {
    const TIMEOUT_MS: u32 = 300;
    // Every DNS query of the sidecar goes unanswered for 2 s: far longer than the filter
    // waits.
    let blackhole = Blackhole::new();
    let sidecar = SidecarOpts {
        nameservers: vec![blackhole.addr()],
        dns_timeout_ms: Some(2000),
        dns_attempts: Some(1),
        ..Default::default()
    };
    let s = Stack::start_without_dns(EnvoyOpts::with_config(config(TIMEOUT_MS)), sidecar).await;
    let url = s.envoy.url("/page");
    let c = client(local(2));
    let bound = Duration::from_millis(1000);

    // One by one: each waits about timeout_ms, then goes on as unverified_bot.
    for ip in [GOOGLEBOT_V4, NOT_GOOGLE_PTR, GOOGLEBOT_V6, "198.51.100.7"] {
        let (r, took) = claim(&c, &url, UA_GOOGLEBOT, ip).await;
        eprintln!("slow sidecar: {ip} answered after {took:?}");
        assert_eq!(
            (r.status, r.upstream_class()),
            (200, Some("unverified_bot"))
        );
        assert!(
            took >= Duration::from_millis(u64::from(TIMEOUT_MS) - 20) && took < bound,
            "{ip} took {took:?}"
        );
    }
    // Ten at once, from ten new addresses.
    let mut tasks = Vec::new();
    for i in 1..=10 {
        let (c, url) = (client(local(10 + i as u8)), url.clone());
        tasks.push(tokio::spawn(async move {
            claim(&c, &url, UA_GOOGLEBOT, &spoofer(i)).await
        }));
    }
    for t in tasks {
        let (r, took) = t.await.expect("claim task");
        assert_eq!(
            (r.status, r.upstream_class()),
            (200, Some("unverified_bot"))
        );
        assert!(took < bound, "concurrent claim took {took:?}");
    }
    // The timeout is remembered (error_ttl_s): the same claim does not wait again, and the
    // unverified_bot limit (2) applies.
    let (again, took) = claim(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await;
    assert_eq!(
        (again.status, again.upstream_class()),
        (200, Some("unverified_bot"))
    );
    assert!(
        took < Duration::from_millis(u64::from(TIMEOUT_MS)),
        "{took:?}"
    );
    let (third, _) = claim(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await;
    assert_eq!(third.status, 429);

    assert_counters(
        &s,
        &[
            ("crawlguard.verify.cache_miss", 14),
            ("crawlguard.verify.error", 14),
            ("crawlguard.verify.cache_hit", 2),
            ("crawlguard.verify.verified", 0),
            ("crawlguard.verify.spoofed", 0),
            ("crawlguard.class.unverified_bot.allowed", 15),
            ("crawlguard.class.unverified_bot.limited", 1),
        ],
    )
    .await;
    s.envoy.assert_log_clean();
    drop(blackhole);
}

#[tokio::test]
async fn spoofer_flood_leaves_the_verified_googlebot_quota_unchanged() {
    // Two workers share the buckets and verdicts. A generous timeout: this test is about
    // quota, and 50 concurrent callouts on a loaded machine must not turn into timeouts.
    let envoy = EnvoyOpts {
        concurrency: 2,
        ..EnvoyOpts::with_config(config(3000))
    };
    let s = Stack::start(envoy, &records(), SidecarOpts::default()).await;
    let url = s.envoy.url("/page");

    // The flood: 50 addresses, 6 concurrent requests each, all claiming Googlebot.
    const PER_SPOOFER: usize = 6;
    let clients: Vec<reqwest::Client> = (0..50).map(|i| client(local(10 + i))).collect();
    let mut flood = Vec::new();
    for i in 1..=50 {
        for _ in 0..PER_SPOOFER {
            let (c, url) = (clients[i - 1].clone(), url.clone());
            flood.push(tokio::spawn(async move {
                (i, claim(&c, &url, UA_GOOGLEBOT, &spoofer(i)).await.0)
            }));
        }
    }
    // Meanwhile the real Googlebot crawls: 12 requests one after the other.
    let googlebot = claims(&client(local(2)), &url, UA_GOOGLEBOT, GOOGLEBOT_V4, 12).await;
    let mut per_spoofer = vec![Vec::new(); 51];
    for t in flood {
        let (i, r) = t.await.expect("flood task");
        per_spoofer[i].push(r);
    }

    // Exactly what it gets alone (verified_googlebot_gets_the_search_crawler_limit).
    assert_eq!(
        statuses(&googlebot),
        cat(&[repeat(200, 10), repeat(429, 2)])
    );
    assert_eq!(classes(&googlebot), vec!["search_crawler"; 10]);

    // Each scraper is held to its spoofed limit (1); none ever gets crawler quota or a 5xx.
    let mut flood_allowed = 0;
    for (i, replies) in per_spoofer.iter().enumerate().skip(1) {
        assert_eq!(replies.len(), PER_SPOOFER);
        for r in replies {
            assert!(r.status == 200 || r.status == 429, "spoofer {i}: {r:?}");
        }
        let cls = classes(replies);
        let spoofed = cls.iter().filter(|c| **c == "spoofed").count();
        let unverified = cls.iter().filter(|c| **c == "unverified_bot").count();
        assert_eq!(spoofed + unverified, cls.len(), "spoofer {i}: {cls:?}");
        // Requests paused on the pending verdict get it: none slips through unverified.
        assert!(
            spoofed <= 1 && unverified == 0,
            "spoofer {i} got more than its limits: {cls:?}"
        );
        flood_allowed += cls.len();
    }
    let stats = s.envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("crawlguard.class.search_crawler.allowed"), 10);
    assert_eq!(stat("crawlguard.class.search_crawler.limited"), 2);
    assert_eq!(
        stat("crawlguard.class.spoofed.allowed") + stat("crawlguard.class.unverified_bot.allowed"),
        flood_allowed as u64
    );
    assert_eq!(
        stat("crawlguard.class.spoofed.limited") + stat("crawlguard.class.unverified_bot.limited"),
        (50 * PER_SPOOFER - flood_allowed) as u64
    );
    // At most one verification per address and worker.
    let lookups = stat("crawlguard.verify.spoofed");
    assert!(
        (50..=100).contains(&lookups),
        "{lookups} lookups: {stats:?}"
    );
    assert_eq!(stat("crawlguard.verify.verified"), 1, "{stats:?}");
    assert_eq!(stat("crawlguard.verify.error"), 0, "{stats:?}");
    eprintln!(
        "flood: {flood_allowed} of {} scraper requests allowed (spoofed {}, unverified_bot {}), \
         verified Googlebot 10 of 12",
        50 * PER_SPOOFER,
        stat("crawlguard.class.spoofed.allowed"),
        stat("crawlguard.class.unverified_bot.allowed")
    );
    s.envoy.assert_log_clean();
}

/// Sends a request on a fresh connection from `from` and returns the open socket.
async fn start_request(from: u8, port: u16, ua: &str, xff: &str) -> tokio::net::TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind(std::net::SocketAddr::new(local(from).into(), 0))
        .expect("bind client address");
    let mut stream = sock
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connect to Envoy");
    let req = format!(
        "GET /page HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nuser-agent: {ua}\r\n\
         x-forwarded-for: {xff}\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.expect("write");
    stream
}

#[tokio::test]
async fn client_gone_while_paused_on_a_slow_verifier_does_not_break_the_vm() {
    // The sidecar answers `unknown` only after its 1 s DNS timeout; the filter would wait 3 s.
    let blackhole = Blackhole::new();
    let sidecar = SidecarOpts {
        nameservers: vec![blackhole.addr()],
        dns_timeout_ms: Some(1000),
        dns_attempts: Some(1),
        ..Default::default()
    };
    let s = Stack::start_without_dns(EnvoyOpts::with_config(config(3000)), sidecar).await;
    let port = s.envoy.main_port();

    // Five clients claim Googlebot and hang up while their requests are paused.
    let mut socks = Vec::new();
    for i in 1..=5u8 {
        socks.push(start_request(20 + i, port, UA_GOOGLEBOT, &spoofer(usize::from(i))).await);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.envoy.counter("crawlguard.verify.cache_miss").await < 5 {
        assert!(Instant::now() < deadline, "callouts never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for mut sock in socks {
        // Nothing has been answered yet: the requests are paused.
        let mut buf = [0u8; 1];
        let pending = tokio::time::timeout(Duration::from_millis(1), sock.read(&mut buf)).await;
        assert!(pending.is_err(), "a paused request was answered early");
        drop(sock);
    }
    // Wait until every callout has ended, answered or cancelled.
    let active = "cluster.crawlguard_verifier.upstream_rq_active";
    let deadline = Instant::now() + Duration::from_secs(15);
    while s.envoy.stat(active).await.unwrap_or(0) > 0 {
        assert!(Instant::now() < deadline, "verifier callouts still active");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = s.envoy.stats().await;
    eprintln!(
        "after disconnect: verifier rq cancelled={:?} completed={:?} verify.unknown={:?}",
        stats.get("cluster.crawlguard_verifier.upstream_rq_cancelled"),
        stats.get("cluster.crawlguard_verifier.upstream_rq_completed"),
        stats.get("wasmcustom.crawlguard.verify.unknown"),
    );
    s.envoy.assert_log_clean();

    // The filter still runs: a browser is classed, and a new claim is verified (unknown
    // after the sidecar's DNS timeout -> unverified_bot).
    let url = s.envoy.url("/page");
    let c = client(local(2));
    let (human, _) = claim(&c, &url, UA_CHROME, "198.51.100.20").await;
    assert_eq!((human.status, human.upstream_class()), (200, Some("human")));
    let unknown_before = s.envoy.counter("crawlguard.verify.unknown").await;
    let (bot, took) = claim(&c, &url, UA_GOOGLEBOT, "198.51.100.21").await;
    assert_eq!(
        (bot.status, bot.upstream_class()),
        (200, Some("unverified_bot"))
    );
    assert!(took < Duration::from_millis(3000) + SLACK, "{took:?}");
    assert_eq!(
        s.envoy.counter("crawlguard.verify.unknown").await,
        unknown_before + 1
    );
    assert_eq!(s.envoy.counter("crawlguard.verify.cache_miss").await, 6);
    s.envoy.assert_log_clean();
    drop(blackhole);
}
