//! The wire contract of the crawlguard filter, checked in a real Envoy: one test per promise.
//!
//! Every test starts its own Envoy on free ports; clients bind `127.0.0.x` source addresses
//! to play different client IPs. Most tests use a tiny refill rate (0.01 token/s) so that
//! nothing refills while the test runs and the counts are exact.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crawlguard_integration::{
    burst, by_status, client, get, ip, sequential, statuses, Envoy, EnvoyOpts, FilterConfig, Limit,
    Table, UA_CHROME, UA_CURL, UA_GOOGLEBOT,
};
use serde_json::json;

/// The refill rate of most limits here: one token in 100 s.
const SLOW: f64 = 0.01;

/// `burst` tokens per client IP for every class and route, refilled at [`SLOW`].
fn per_ip(name: &str, burst: u32) -> Limit {
    Limit::per_ip(name, burst).rate_per_s(SLOW)
}

#[tokio::test]
async fn per_ip_isolation() {
    let envoy = Envoy::start(EnvoyOpts::with_config(
        json!({"limits": [per_ip("per_ip", 5)]}),
    ))
    .await;
    let url = envoy.url("/");

    let a = sequential(&client(ip(2)), &url, UA_CHROME, 8).await;
    assert_eq!(statuses(&a), [200, 200, 200, 200, 200, 429, 429, 429]);

    // Another IP has its own full bucket.
    let b = sequential(&client(ip(3)), &url, UA_CHROME, 6).await;
    assert_eq!(statuses(&b), [200, 200, 200, 200, 200, 429]);

    assert_eq!(envoy.counter("crawlguard.class.human.allowed").await, 10);
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 4);
}

#[tokio::test]
async fn class_isolation() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({"limits": [
        per_ip("script", 5).class("script"),
        per_ip("human", 5).class("human"),
        per_ip("unverified_bot", 5).class("unverified_bot"),
    ]})))
    .await;
    let url = envoy.url("/page");
    let (c2, c3) = (client(ip(2)), client(ip(3)));

    // A script flood from 127.0.0.2 empties the script bucket of that IP...
    let flood = sequential(&c2, &url, UA_CURL, 20).await;
    assert_eq!(by_status(&flood).get(&200), Some(&5));
    assert_eq!(by_status(&flood).get(&429), Some(&15));

    // ...but a browser and a Googlebot UA from the same IP are untouched,
    let human = sequential(&c2, &url, UA_CHROME, 5).await;
    assert_eq!(statuses(&human), [200; 5]);
    assert!(human.iter().all(|r| r.upstream_class() == Some("human")));
    let bot = sequential(&c2, &url, UA_GOOGLEBOT, 5).await;
    assert_eq!(statuses(&bot), [200; 5]);
    assert!(bot
        .iter()
        .all(|r| r.upstream_class() == Some("unverified_bot")));

    // and so is every class from another IP.
    for ua in [UA_CHROME, UA_GOOGLEBOT, UA_CURL] {
        assert_eq!(get(&c3, &url, ua, &[]).await.status, 200, "{ua}");
    }

    assert_eq!(envoy.counter("crawlguard.class.script.limited").await, 15);
    assert_eq!(envoy.counter("crawlguard.class.script.allowed").await, 6);
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 0);
    assert_eq!(envoy.counter("crawlguard.class.human.allowed").await, 6);
    assert_eq!(
        envoy
            .counter("crawlguard.class.unverified_bot.allowed")
            .await,
        6
    );
}

#[tokio::test]
async fn default_config_script_flood_spares_humans_and_crawlers() {
    // The embedded default configuration (empty `configuration`).
    let envoy = Envoy::start(EnvoyOpts::default()).await;
    let url = envoy.url("/");
    let c = client(ip(4));

    let mut first_429 = None;
    for i in 0..300 {
        if get(&c, &url, UA_CURL, &[]).await.status == 429 {
            first_429 = Some(i);
            break;
        }
    }
    assert!(
        first_429.is_some(),
        "300 back-to-back curl requests from one IP were never limited"
    );
    let human = get(&c, &url, UA_CHROME, &[]).await;
    assert_eq!(human.status, 200);
    assert_eq!(human.upstream_class(), Some("human"));
    let bot = get(&c, &url, UA_GOOGLEBOT, &[]).await;
    assert_eq!(bot.status, 200);
    assert_eq!(bot.upstream_class(), Some("unverified_bot"));
}

#[tokio::test]
async fn route_limit() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "routes": [{"name": "api", "path_prefix": "/api/"}],
        "limits": [
            per_ip("api", 3).route("api"),
            Limit::per_ip("site", 1000).rate_per_s(1000.0),
        ]
    })))
    .await;
    let c = client(ip(5));

    let api = sequential(&c, &envoy.url("/api/items"), UA_CHROME, 6).await;
    assert_eq!(statuses(&api), [200, 200, 200, 429, 429, 429]);
    let site = sequential(&c, &envoy.url("/"), UA_CHROME, 10).await;
    assert_eq!(statuses(&site), [200; 10]);
    assert_eq!(
        get(&c, &envoy.url("/apifoo"), UA_CHROME, &[]).await.status,
        200,
        "/apifoo is not under the /api/ prefix"
    );

    assert_eq!(envoy.counter("crawlguard.route.api.limited").await, 3);
    assert_eq!(envoy.counter("crawlguard.route.default.limited").await, 0);
}

#[tokio::test]
async fn exact_burst_across_two_workers() {
    const BURST: u64 = 20;
    const N: usize = 200;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({"limits": [per_ip("all", BURST as u32)]})).concurrency(2),
    )
    .await;
    let c = client(ip(6));

    let t0 = Instant::now();
    let replies = burst(&c, &envoy.url("/"), UA_CHROME, N, 50).await;
    let elapsed = t0.elapsed().as_secs_f64();

    let counts = by_status(&replies);
    let allowed = *counts.get(&200).unwrap_or(&0) as u64;
    let limited = *counts.get(&429).unwrap_or(&0) as u64;
    let expected = BURST + (elapsed * SLOW).floor() as u64;
    println!("{N} requests in {elapsed:.3}s: {counts:?}, expected {expected} allowed");
    assert_eq!(
        allowed + limited,
        N as u64,
        "only 200/429 expected: {counts:?}"
    );
    assert_eq!(allowed, expected);

    // Both workers served connections, so the bucket really was shared.
    let stats = envoy.stats().await;
    let listener = format!("listener.127.0.0.1_{}", envoy.main_port());
    for w in 0..2 {
        let cx = stats
            .get(&format!("{listener}.worker_{w}.downstream_cx_total"))
            .copied()
            .unwrap_or(0);
        assert!(cx > 0, "worker {w} got no connection");
    }
    assert_eq!(
        envoy.counter("crawlguard.class.human.allowed").await,
        allowed
    );
    assert_eq!(
        envoy.counter("crawlguard.class.human.limited").await,
        limited
    );
}

#[tokio::test]
async fn rejection_is_clean_and_honest() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "classes": {"script": {"reject_status": 503}},
        "limits": [per_ip("all", 1)]
    })))
    .await;
    let url = envoy.url("/some/page");
    for (ua, want) in [(UA_CHROME, 429), (UA_CURL, 503)] {
        let c = client(ip(if want == 429 { 7 } else { 8 }));
        assert_eq!(get(&c, &url, ua, &[]).await.status, 200);
        let r = get(&c, &url, ua, &[]).await;
        assert_eq!(r.status, want, "{ua}");
        let ra = r.header("retry-after").expect("retry-after");
        assert!(
            ra.bytes().all(|b| b.is_ascii_digit()) && ra.parse::<u64>().unwrap() >= 1,
            "retry-after must be delay-seconds >= 1, got {ra:?}"
        );
        assert_eq!(r.header("cache-control"), Some("no-store"));
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert!(r.body.len() <= 64, "body too long: {:?}", r.body);
        assert!(!r.body.trim_end_matches('\n').is_empty(), "empty body");
        assert!(
            !r.body.trim_end_matches('\n').contains('\n'),
            "body must be one line: {:?}",
            r.body
        );
        assert!(!r.body.contains('<'), "no HTML: {:?}", r.body);
        assert!(r.header("location").is_none());
        assert!(r.header("x-robots-tag").is_none());
        assert!(
            r.header("x-upstream-saw-class").is_none(),
            "must not reach upstream"
        );

        // One debug line per rejection names class, route, limit, key kind and Retry-After.
        let class = if want == 429 { "human" } else { "script" };
        let want_fields = [
            format!("class={class}"),
            "route=default".to_string(),
            "limit=all".to_string(),
            "key=client_ip".to_string(),
            format!("retry_after_s={ra}"),
        ];
        envoy
            .wait_for_log_line(
                Duration::from_secs(5),
                &format!("with {want_fields:?}"),
                |l| want_fields.iter().all(|f| l.contains(f.as_str())),
            )
            .await;
    }
}

#[tokio::test]
async fn ratelimit_headers_on_rejection_when_enabled() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "ratelimit_headers": true,
        "limits": [per_ip("all", 1)]
    })))
    .await;
    let c = client(ip(9));
    let url = envoy.url("/");
    assert_eq!(get(&c, &url, UA_CHROME, &[]).await.status, 200);
    let r = get(&c, &url, UA_CHROME, &[]).await;
    assert_eq!(r.status, 429);
    assert!(r.header("ratelimit-policy").is_some(), "{:?}", r.headers);
    assert!(r.header("ratelimit").is_some(), "{:?}", r.headers);
}

#[tokio::test]
async fn retry_after_bounds_and_jitter_spread() {
    let (min_s, max_s, jitter_s) = (5u64, 30u64, 10u64);
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "classes": {"human": {"retry_after": {"min_s": min_s, "max_s": max_s,
                                              "jitter_s": jitter_s}}},
        "routes": [{"name": "slow", "path_prefix": "/slow/"},
                   {"name": "fast", "path_prefix": "/fast/"}],
        "limits": [
            // Next token in ~100 s: clamped down to max_s.
            per_ip("slow", 1).route("slow"),
            // Next token in <= 0.2 s: ceil = 1 s, clamped up to min_s.
            Limit::per_ip("fast", 1).route("fast").rate_per_s(5.0),
        ]
    })))
    .await;
    let c = client(ip(10));

    for (path, lo) in [("/slow/x", max_s), ("/fast/x", min_s)] {
        let mut seen = Vec::new();
        let mut sent = 0;
        while seen.len() < 60 && sent < 2000 {
            sent += 1;
            let r = get(&c, &envoy.url(path), UA_CHROME, &[]).await;
            if r.status == 429 {
                seen.push(r.retry_after_s().expect("integer retry-after"));
            }
        }
        assert_eq!(seen.len(), 60, "{path}: not enough rejections");
        let distinct: BTreeSet<u64> = seen.iter().copied().collect();
        println!("{path}: retry-after values {distinct:?}");
        for v in &seen {
            assert!(
                (lo..=lo + jitter_s).contains(v),
                "{path}: retry-after {v} outside [{lo}, {}]",
                lo + jitter_s
            );
            assert!((min_s..=max_s + jitter_s).contains(v));
        }
        assert!(
            distinct.len() >= 4,
            "{path}: jitter should spread values, saw {distinct:?}"
        );
    }
}

#[tokio::test]
async fn shadow_mode_counts_but_never_rejects() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "mode": "shadow",
        "limits": [per_ip("all", 2)]
    })))
    .await;
    let replies = sequential(&client(ip(11)), &envoy.url("/"), UA_CHROME, 10).await;
    assert_eq!(statuses(&replies), [200; 10]);
    assert!(replies.iter().all(|r| r.upstream_class() == Some("human")));
    assert_eq!(
        envoy.counter("crawlguard.class.human.shadow_limited").await,
        8
    );
    assert_eq!(envoy.counter("crawlguard.class.human.allowed").await, 2);
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 0);
}

#[tokio::test]
async fn exempt_robots_txt_and_sitemaps() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "limits": [per_ip("all", 2)]
    })))
    .await;
    let c = client(ip(12));
    let page = sequential(&c, &envoy.url("/"), UA_GOOGLEBOT, 3).await;
    assert_eq!(statuses(&page), [200, 200, 429]);
    let mut t = Table::new("exempt paths");
    for path in ["/robots.txt", "/sitemap.xml", "/sitemap_index.xml"] {
        let r = get(&c, &envoy.url(path), UA_GOOGLEBOT, &[]).await;
        t.eq(path, "status", r.status, 200);
        t.eq(
            path,
            "body",
            r.body.as_str(),
            "hello from the demo origin\n",
        );
    }
    t.finish();
    // Still empty: exempt requests neither refill nor bypass the bucket for other paths.
    assert_eq!(
        get(&c, &envoy.url("/"), UA_GOOGLEBOT, &[]).await.status,
        429
    );
    // Exempt paths are decided before classification: one class-less counter.
    assert_eq!(envoy.counter("crawlguard.exempt").await, 3);
    assert_eq!(
        envoy
            .counter("crawlguard.class.unverified_bot.limited")
            .await,
        2
    );
}

#[tokio::test]
async fn client_supplied_class_header_is_replaced() {
    let envoy = Envoy::start(EnvoyOpts::default()).await;
    let c = client(ip(13));
    let url = envoy.url("/");
    let mut t = Table::new("forged class headers");
    for (ua, forged, real) in [
        (UA_CHROME, "search_crawler", "human"),
        (UA_CURL, "human", "script"),
        (UA_GOOGLEBOT, "search_crawler", "unverified_bot"),
    ] {
        let r = get(&c, &url, ua, &[("x-crawler-class", forged)]).await;
        t.eq(ua, "status", r.status, 200);
        t.eq(ua, "class upstream", r.upstream_class(), Some(real));
    }
    t.finish();
    // Two forged values are both removed.
    let r = get(
        &c,
        &url,
        UA_CHROME,
        &[
            ("x-crawler-class", "search_crawler"),
            ("x-crawler-class", "ai_retriever"),
        ],
    )
    .await;
    assert_eq!(r.upstream_class(), Some("human"));
}

#[tokio::test]
async fn invalid_configuration_is_refused_with_field_path() {
    // (configuration, what Envoy's log must name)
    let cases: [(FilterConfig, &str); 3] = [
        (
            json!({"limits": [
                {"name": "a", "class": "*", "route": "*", "rate_per_s": 0, "burst": 1,
                 "key": "client_ip"}
            ]})
            .into(),
            "limits[0].rate_per_s",
        ),
        (json!({"bogus": 1}).into(), "bogus"),
        ("{not json".into(), "Unable to create Wasm plugin"),
    ];
    let mut t = Table::new("refused configurations");
    for (cfg, named) in cases {
        let shown = cfg.as_string();
        let log = Envoy::start_expect_failure(EnvoyOpts::with_config(cfg)).await;
        t.check(
            &shown,
            log.contains(named),
            format_args!("log does not name `{named}`:\n{log}"),
        );
    }
    t.finish();
}

#[tokio::test]
async fn xff_trusted_hops_keys_by_forwarded_client() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "client_ip": {"source": "xff", "xff_trusted_hops": 1},
        "limits": [per_ip("all", 2)]
    })))
    .await;
    // One socket address for everything: only x-forwarded-for tells the clients apart.
    let c = client(ip(14));
    let url = envoy.url("/");
    let xff = |v: &'static str| [("x-forwarded-for", v)];

    let mut a = Vec::new();
    for _ in 0..3 {
        a.push(get(&c, &url, UA_CHROME, &xff("203.0.113.7")).await.status);
    }
    assert_eq!(a, [200, 200, 429]);
    // A different forwarded client has its own bucket.
    assert_eq!(
        get(&c, &url, UA_CHROME, &xff("203.0.113.8")).await.status,
        200
    );
    // With one trusted hop the rightmost entry is the client; what the client prepended
    // itself does not give it a fresh bucket.
    assert_eq!(
        get(&c, &url, UA_CHROME, &xff("198.51.100.1, 203.0.113.7"))
            .await
            .status,
        429
    );
    // No x-forwarded-for: falls back to the socket address, another bucket again.
    assert_eq!(get(&c, &url, UA_CHROME, &[]).await.status, 200);
}
