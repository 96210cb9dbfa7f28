//! Verified crawlers keep their class under the conditions a hostile review tried: many
//! connections at once while the verdict is being fetched, a dead sidecar with a flood of
//! fake claims, copied User-Agents of crawlers nobody can verify, and address churn inside
//! one IPv6 /64. Envoy, the real `crawlguard-verifier` sidecar and dnsmasq run as real
//! processes (harness: `crawlguard_integration::stack`).
//!
//! As in `verify.rs`, clients send the claimed address in `x-forwarded-for` (documentation
//! addresses: hickory answers reverse lookups of loopback itself), and limits refill at
//! 0.001 token/s so counts are exact.

use std::time::{Duration, Instant};

use crawlguard_integration::{
    client, get, Dnsmasq, EnvoyOpts, Record, Reply, SidecarOpts, SlowDns, Stack, UA_GOOGLEBOT,
};
use serde_json::{json, Value};

/// PTR `crawl-192-0-2-1.googlebot.com`, whose A record is 192.0.2.1: a real Googlebot.
const GOOGLEBOT_V4: &str = "192.0.2.1";

fn records() -> Vec<Record> {
    vec![Record::host("crawl-192-0-2-1.googlebot.com", GOOGLEBOT_V4)]
}

fn local(last: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(127, 0, 0, last)
}

/// A per-client-IP limit for one class, 0.001 token/s.
fn per_ip(class: &str, burst: u32) -> Value {
    json!({"name": format!("{class}_per_ip"), "class": class, "route": "*",
           "rate_per_s": 0.001, "burst": burst, "key": "client_ip"})
}

async fn claim(c: &reqwest::Client, url: &str, ua: &str, xff: &str) -> Reply {
    get(c, url, ua, &[("x-forwarded-for", xff)]).await
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status).collect()
}

fn classes(replies: &[Reply]) -> Vec<&str> {
    replies
        .iter()
        .map(|r| r.upstream_class().unwrap_or("<none>"))
        .collect()
}

/// Requests Envoy sent to the verifier cluster (each one a lookup the sidecar sees).
async fn lookups(envoy: &crawlguard_integration::Envoy) -> u64 {
    envoy
        .stat("cluster.crawlguard_verifier.upstream_rq_total")
        .await
        .unwrap_or(0)
}

#[tokio::test]
async fn verified_crawler_opening_many_connections_at_once_keeps_its_class() {
    // The sidecar answers in about 300 ms: each of its two DNS queries (PTR, then A) is
    // answered 150 ms late. The filter waits up to 3 s (a loaded 2-core machine).
    let dns = Dnsmasq::start(&records()).await;
    let slow = SlowDns::start(dns.addr(), Duration::from_millis(150));
    let envoy = EnvoyOpts {
        concurrency: 2,
        ..EnvoyOpts::with_config(json!({
            "client_ip": {"source": "xff"},
            "limits": [per_ip("search_crawler", 60), per_ip("unverified_bot", 2)],
            "verifier": {"timeout_ms": 3000},
        }))
    };
    let s = Stack::start_without_dns(envoy, SidecarOpts::dns(slow.addr())).await;
    let url = s.envoy.url("/page");

    // 50 requests at once, each on its own connection (the kernel spreads the connections
    // over both workers).
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (c, url) = (client(local(2)), url.clone());
        tasks.push(tokio::spawn(async move {
            claim(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await
        }));
    }
    let mut replies = Vec::new();
    for t in tasks {
        replies.push(t.await.expect("request task"));
    }
    let took = started.elapsed();
    let stats = s.envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    let asked = lookups(&s.envoy).await;
    eprintln!(
        "50 concurrent verified Googlebot requests in {took:?}: {:?}; search_crawler {} \
         unverified_bot {} allowed, {} limited; {asked} verifier lookups",
        crawlguard_integration::by_status(&replies),
        stat("crawlguard.class.search_crawler.allowed"),
        stat("crawlguard.class.unverified_bot.allowed"),
        stat("crawlguard.class.unverified_bot.limited"),
    );
    assert_eq!(statuses(&replies), vec![200; 50]);
    assert_eq!(classes(&replies), vec!["search_crawler"; 50]);
    assert_eq!(stat("crawlguard.class.search_crawler.allowed"), 50);
    assert_eq!(stat("crawlguard.class.unverified_bot.allowed"), 0);
    assert_eq!(stat("crawlguard.class.unverified_bot.limited"), 0);
    // At most one lookup per worker for the claim.
    assert!((1..=2).contains(&asked), "{asked} lookups");
    assert_eq!(stat("crawlguard.verify.verified"), asked);
    s.envoy.assert_log_clean();
}

#[tokio::test]
async fn verified_crawler_keeps_its_class_through_a_verifier_outage() {
    // Verdicts live 1 s (max_ttl_s), so the Googlebot verdict is stale by the time the
    // sidecar dies; stale_if_error_s keeps its default (24 h).
    let s = Stack::start(
        EnvoyOpts::with_config(json!({
            "client_ip": {"source": "xff"},
            "limits": [
                per_ip("search_crawler", 20),
                per_ip("unverified_bot", 2),
                {"name": "unverified_bot_global", "class": "unverified_bot", "route": "*",
                 "rate_per_s": 0.001, "burst": 20, "key": "global"},
                per_ip("spoofed", 1),
            ],
            "verifier": {"timeout_ms": 2000, "max_ttl_s": 1},
        })),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");
    let googlebot = client(local(2));
    let first = claim(&googlebot, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await;
    assert_eq!(
        (first.status, first.upstream_class()),
        (200, Some("search_crawler"))
    );
    assert_eq!(s.envoy.counter("crawlguard.verify.verified").await, 1);

    // Let the verdict's 1 s TTL run out (wall-clock expiry, not a synchronisation), then
    // kill the sidecar.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    s.sidecar.kill();

    // A cheap flood of fake Googlebot claims from 40 addresses: every one is a verifier
    // error, classed unverified_bot, and together they drain the global unverified bucket.
    let flood = client(local(3));
    let mut flood_statuses = Vec::new();
    for i in 1..=40 {
        for _ in 0..3 {
            let r = claim(&flood, &url, UA_GOOGLEBOT, &format!("203.0.113.{i}")).await;
            flood_statuses.push(r.status);
        }
    }
    let flood_allowed = flood_statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(flood_allowed, 20, "{flood_statuses:?}");
    assert!(flood_statuses.iter().all(|s| *s == 200 || *s == 429));

    // The real Googlebot, seen and verified before, keeps its class: 0 rejections.
    let mut crawl = Vec::new();
    for _ in 0..10 {
        crawl.push(claim(&googlebot, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await);
    }
    eprintln!(
        "after the outage and the flood: Googlebot {:?} as {:?}",
        statuses(&crawl),
        classes(&crawl)
    );
    assert_eq!(statuses(&crawl), vec![200; 10]);
    assert_eq!(classes(&crawl), vec!["search_crawler"; 10]);
    let stats = s.envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("crawlguard.verify.stale"), 10, "{stats:?}");
    assert_eq!(stat("crawlguard.class.search_crawler.allowed"), 11);
    assert_eq!(stat("crawlguard.class.search_crawler.limited"), 0);
    assert_eq!(stat("crawlguard.class.unverified_bot.allowed"), 20);
    s.envoy.assert_log_clean();
}

/// MojeekBot: a search engine that publishes no verification method.
const UA_MOJEEKBOT: &str = "MojeekBot/0.11 (archi; mojeek.com/bot.html)";
/// Bytespider: ByteDance's AI crawler, no verification method published.
const UA_BYTESPIDER: &str = "Mozilla/5.0 (Linux; Android 5.0) AppleWebKit/537.36 (KHTML, \
                             like Gecko) Mobile Safari/537.36 (compatible; Bytespider; \
                             spider-feedback@bytedance.com)";

#[tokio::test]
async fn unverifiable_crawler_claims_get_no_crawler_quota() {
    // Generous crawler limits, a tight other_bot limit, and the degraded-page guard on.
    let up = crawlguard_integration::TestUpstream::start().await;
    let envoy = crawlguard_integration::Envoy::start(
        EnvoyOpts::with_config(json!({
            "degraded": "x-degraded",
            "limits": [
                per_ip("search_crawler", 50),
                per_ip("ai_trainer", 50),
                per_ip("other_bot", 2),
            ],
        }))
        .upstream(up.addr(), crawlguard_integration::UpstreamProtocol::Http1),
    )
    .await;
    // The origin serves a degraded page (a 200 marked x-degraded).
    let url = envoy.url("/page?status=200&header=x-degraded:1&body=fallback");
    for (from, ua) in [(20, UA_MOJEEKBOT), (21, UA_BYTESPIDER)] {
        let c = client(local(from));
        let mut replies = Vec::new();
        for _ in 0..3 {
            replies.push(get(&c, &url, ua, &[]).await);
        }
        eprintln!(
            "{ua}: {:?} as {:?}, bodies {:?}",
            statuses(&replies),
            classes(&replies),
            replies.iter().map(|r| r.body.as_str()).collect::<Vec<_>>()
        );
        // other_bot quota, not a crawler's; the degraded page is served as it is (the
        // soft-404 guard is for verified crawlers only).
        assert_eq!(statuses(&replies), [200, 200, 429], "{ua}");
        assert_eq!(classes(&replies)[..2], ["other_bot", "other_bot"], "{ua}");
        assert_eq!(replies[0].body, "fallback", "{ua}");
    }
    let stats = envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("crawlguard.class.other_bot.allowed"), 4);
    assert_eq!(stat("crawlguard.class.other_bot.limited"), 2);
    assert_eq!(stat("crawlguard.class.search_crawler.allowed"), 0);
    assert_eq!(stat("crawlguard.class.ai_trainer.allowed"), 0);
    assert_eq!(stat("crawlguard.rewrite.degraded"), 0);
}

#[tokio::test]
async fn address_churn_inside_one_ipv6_64_costs_a_bounded_number_of_lookups() {
    // No PTR for 2001:db8:1:2::/64: every Googlebot claim from it is spoofed. The filter
    // groups IPv6 clients by /64 (the default) and, by default, stops calling out for a
    // prefix after 4 spoofed verdicts.
    let s = Stack::start(
        EnvoyOpts::with_config(json!({
            "client_ip": {"source": "xff"},
            "limits": [per_ip("spoofed", 1000), per_ip("unverified_bot", 1000)],
            "verifier": {"timeout_ms": 3000},
        })),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");
    let c = client(local(2));
    let mut replies = Vec::new();
    for i in 1..=200 {
        replies.push(claim(&c, &url, UA_GOOGLEBOT, &format!("2001:db8:1:2::{i:x}")).await);
    }
    let asked = lookups(&s.envoy).await;
    let stats = s.envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    eprintln!(
        "200 Googlebot claims from one /64: {asked} verifier lookups; spoofed {} \
         (by verdict {}, by prefix {}), unverified_bot {}",
        stat("crawlguard.class.spoofed.allowed"),
        stat("crawlguard.verify.spoofed"),
        stat("crawlguard.verify.prefix_spoofed"),
        stat("crawlguard.class.unverified_bot.allowed"),
    );
    assert_eq!(asked, 4);
    assert_eq!(statuses(&replies), vec![200; 200]);
    assert_eq!(classes(&replies), vec!["spoofed"; 200]);
    assert_eq!(stat("crawlguard.verify.spoofed"), 4);
    assert_eq!(stat("crawlguard.verify.prefix_spoofed"), 196);
    // Another /64 is not affected: its first claim is looked up.
    let other = claim(&c, &url, UA_GOOGLEBOT, "2001:db8:1:3::1").await;
    assert_eq!(other.upstream_class(), Some("spoofed"));
    assert_eq!(lookups(&s.envoy).await, 5);
    s.envoy.assert_log_clean();
}

#[tokio::test]
async fn robots_txt_from_a_fresh_claim_is_served_without_waiting_for_the_verifier() {
    // A verifier that accepts connections and never answers; the filter would wait 5 s.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in silent.incoming().flatten() {
            held.push(conn);
        }
    });
    let envoy = crawlguard_integration::Envoy::start(
        EnvoyOpts::with_config(json!({"verifier": {"timeout_ms": 5000}})).real_verifier(port),
    )
    .await;
    let c = client(local(30));
    for path in ["/robots.txt", "/sitemap.xml"] {
        let started = Instant::now();
        let r = get(&c, &envoy.url(path), UA_GOOGLEBOT, &[]).await;
        let took = started.elapsed();
        eprintln!(
            "{path} for a fresh Googlebot claim: {} in {took:?}",
            r.status
        );
        assert_eq!(r.status, 200);
        assert!(took < Duration::from_millis(1000), "{path} waited {took:?}");
        // Forwarded before classification: no class header upstream.
        assert_eq!(r.upstream_class(), None);
    }
    assert_eq!(lookups(&envoy).await, 0);
    assert_eq!(envoy.counter("crawlguard.exempt").await, 2);
    assert_eq!(envoy.counter("crawlguard.verify.cache_miss").await, 0);
}
