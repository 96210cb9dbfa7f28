//! Verified crawlers keep their class under the conditions a hostile review tried: many
//! connections at once while the verdict is being fetched, a dead sidecar with a flood of
//! fake claims, copied User-Agents of crawlers nobody can verify, and address churn inside
//! one IPv6 /64. Envoy, the real `crawlguard-sidecar` sidecar and dnsmasq run as real
//! processes (harness: `crawlguard_integration::Stack`).
//!
//! As in `verify.rs`, clients send the claimed address in `x-forwarded-for` (documentation
//! addresses: hickory answers reverse lookups of loopback itself), and limits refill at
//! 0.001 token/s so counts are exact.

use std::time::{Duration, Instant};

use crawlguard_integration::{
    by_status, claim, client, get, ip, statuses, timed, upstream_classes, Dnsmasq, Envoy,
    EnvoyOpts, Limit, Record, SidecarOpts, SlowDns, Stack, Table, TestUpstream, GOOGLEBOT_V4,
    UA_GOOGLEBOT,
};
use serde_json::json;

fn records() -> Vec<Record> {
    vec![Record::googlebot()]
}

#[tokio::test]
async fn verified_crawler_opening_many_connections_at_once_keeps_its_class() {
    // The sidecar answers in about 300 ms: each of its two DNS queries (PTR, then A) is
    // answered 150 ms late. The filter waits up to 3 s (a loaded 2-core machine).
    let dns = Dnsmasq::start(&records()).await;
    let slow = SlowDns::start(dns.addr(), Duration::from_millis(150));
    let envoy = EnvoyOpts::with_config(json!({
        "client_ip": {"source": "xff"},
        "limits": [
            Limit::class_per_ip("search_crawler", 60),
            Limit::class_per_ip("unverified_bot", 2),
        ],
        // ranges_refresh_s 0: each VM's `GET /v1/ranges` would count in the cluster's
        // requests (verifier_lookups) too; published_ranges.rs covers the ranges.
        "verifier": {"timeout_ms": 3000, "ranges_refresh_s": 0},
    }))
    .concurrency(2);
    let s = Stack::start_without_dns(envoy, SidecarOpts::dns(slow.addr())).await;
    let url = s.envoy.url("/page");

    // 50 requests at once, each on its own connection (the kernel spreads the connections
    // over both workers).
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (c, url) = (client(ip(2)), url.clone());
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
    let asked = s.envoy.verifier_lookups().await;
    eprintln!(
        "50 concurrent verified Googlebot requests in {took:?}: {:?}; search_crawler {} \
         unverified_bot {} allowed, {} limited; {asked} verifier lookups",
        by_status(&replies),
        stat("crawlguard.class.search_crawler.allowed"),
        stat("crawlguard.class.unverified_bot.allowed"),
        stat("crawlguard.class.unverified_bot.limited"),
    );
    assert_eq!(statuses(&replies), vec![200; 50]);
    assert_eq!(upstream_classes(&replies), vec!["search_crawler"; 50]);
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
                Limit::class_per_ip("search_crawler", 20),
                Limit::class_per_ip("unverified_bot", 2),
                Limit::global("unverified_bot_global", 20).class("unverified_bot"),
                Limit::class_per_ip("spoofed", 1),
            ],
            "verifier": {"timeout_ms": 2000, "max_ttl_s": 1},
        })),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");
    let googlebot = client(ip(2));
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
    let flood = client(ip(3));
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
        upstream_classes(&crawl)
    );
    assert_eq!(statuses(&crawl), vec![200; 10]);
    assert_eq!(upstream_classes(&crawl), vec!["search_crawler"; 10]);
    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.stale", 10),
            ("crawlguard.class.search_crawler.allowed", 11),
            ("crawlguard.class.search_crawler.limited", 0),
            ("crawlguard.class.unverified_bot.allowed", 20),
        ])
        .await;
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
    let up = TestUpstream::start().await;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({
            "degraded": "x-degraded",
            "limits": [
                Limit::class_per_ip("search_crawler", 50),
                Limit::class_per_ip("ai_trainer", 50),
                Limit::class_per_ip("other_bot", 2),
            ],
        }))
        .in_front_of(&up),
    )
    .await;
    // The origin serves a degraded page (a 200 marked x-degraded).
    let url = envoy.url("/page?status=200&header=x-degraded:1&body=fallback");
    let mut t = Table::new("unverifiable crawler claims");
    for (from, ua) in [(20, UA_MOJEEKBOT), (21, UA_BYTESPIDER)] {
        let c = client(ip(from));
        let mut replies = Vec::new();
        for _ in 0..3 {
            replies.push(get(&c, &url, ua, &[]).await);
        }
        eprintln!(
            "{ua}: {:?} as {:?}, bodies {:?}",
            statuses(&replies),
            upstream_classes(&replies),
            replies.iter().map(|r| r.body.as_str()).collect::<Vec<_>>()
        );
        // other_bot quota, not a crawler's; the degraded page is served as it is (the
        // soft-404 guard is for verified crawlers only).
        t.eq(ua, "statuses", statuses(&replies), [200, 200, 429]);
        t.eq(
            ua,
            "classes upstream",
            upstream_classes(&replies),
            ["other_bot", "other_bot"],
        );
        t.eq(ua, "first body", replies[0].body.as_str(), "fallback");
    }
    t.finish();
    envoy
        .assert_counters(&[
            ("crawlguard.class.other_bot.allowed", 4),
            ("crawlguard.class.other_bot.limited", 2),
            ("crawlguard.class.search_crawler.allowed", 0),
            ("crawlguard.class.ai_trainer.allowed", 0),
            ("crawlguard.rewrite.degraded", 0),
        ])
        .await;
}

#[tokio::test]
async fn address_churn_inside_one_ipv6_64_costs_a_bounded_number_of_lookups() {
    // No PTR for 2001:db8:1:2::/64: every Googlebot claim from it is spoofed. The filter
    // groups IPv6 clients by /64 (the default) and, by default, stops calling out for a
    // prefix after 4 spoofed verdicts.
    let s = Stack::start(
        EnvoyOpts::with_config(json!({
            "client_ip": {"source": "xff"},
            "limits": [
                Limit::class_per_ip("spoofed", 1000),
                Limit::class_per_ip("unverified_bot", 1000),
            ],
            // ranges_refresh_s 0: each VM's `GET /v1/ranges` would count in the
            // cluster's requests (verifier_lookups) too.
            "verifier": {"timeout_ms": 3000, "ranges_refresh_s": 0},
        })),
        &records(),
        SidecarOpts::default(),
    )
    .await;
    let url = s.envoy.url("/page");
    let c = client(ip(2));
    let mut replies = Vec::new();
    for i in 1..=200 {
        replies.push(claim(&c, &url, UA_GOOGLEBOT, &format!("2001:db8:1:2::{i:x}")).await);
    }
    let asked = s.envoy.verifier_lookups().await;
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
    assert_eq!(upstream_classes(&replies), vec!["spoofed"; 200]);
    assert_eq!(stat("crawlguard.verify.spoofed"), 4);
    assert_eq!(stat("crawlguard.verify.prefix_spoofed"), 196);
    // Another /64 is not affected: its first claim is looked up.
    let other = claim(&c, &url, UA_GOOGLEBOT, "2001:db8:1:3::1").await;
    assert_eq!(other.upstream_class(), Some("spoofed"));
    assert_eq!(s.envoy.verifier_lookups().await, 5);
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
    let envoy = Envoy::start(
        // ranges_refresh_s 0: each VM's `GET /v1/ranges` would count in the cluster's
        // requests (verifier_lookups) too.
        EnvoyOpts::with_config(json!({"verifier": {"timeout_ms": 5000, "ranges_refresh_s": 0}}))
            .real_verifier(port),
    )
    .await;
    let c = client(ip(30));
    let mut t = Table::new("exempt paths for a fresh claim");
    for path in ["/robots.txt", "/sitemap.xml"] {
        let (r, took) = timed(get(&c, &envoy.url(path), UA_GOOGLEBOT, &[])).await;
        eprintln!(
            "{path} for a fresh Googlebot claim: {} in {took:?}",
            r.status
        );
        t.eq(path, "status", r.status, 200);
        t.check(
            path,
            took < Duration::from_millis(1000),
            format_args!("waited {took:?}"),
        );
        // Forwarded before classification: no class header upstream.
        t.eq(path, "class upstream", r.upstream_class(), None);
    }
    t.finish();
    assert_eq!(envoy.verifier_lookups().await, 0);
    envoy
        .assert_counters(&[
            ("crawlguard.exempt", 2),
            ("crawlguard.verify.cache_miss", 0),
        ])
        .await;
}
