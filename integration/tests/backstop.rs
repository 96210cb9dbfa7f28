//! `envoy/envoy-local-ratelimit.yaml`: Envoy's own `local_ratelimit` after crawlguard as a
//! global backstop. Both kinds of rejection leave Envoy looking the same: crawlguard's own
//! 429 and the backstop's 429 (normalised on crawlguard's response path).

use crawlguard_integration::{client, sequential, Envoy, EnvoyOpts, UA_CHROME, UA_CURL};
use serde_json::json;
use std::net::Ipv4Addr;

fn assert_clean_429(r: &crawlguard_integration::Reply, max_retry_after: u32, what: &str) {
    assert_eq!(r.status, 429, "{what}");
    let ra: u32 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: retry-after in seconds"));
    assert!(
        (1..=max_retry_after).contains(&ra),
        "{what}: retry-after {ra}"
    );
    assert_eq!(r.header("cache-control"), Some("no-store"), "{what}");
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; charset=utf-8"),
        "{what}"
    );
    assert_eq!(
        r.body, "429 Too Many Requests: try again after Retry-After\n",
        "{what}"
    );
}

#[tokio::test]
async fn backstop_and_crawlguard_rejections_both_come_out_normalised() {
    // crawlguard: humans practically unlimited, scripts 3 per client; the backstop in the
    // shipped example allows a burst of 200 for the whole listener.
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({"limits": [
            {"name": "human", "class": "human", "route": "*", "rate_per_s": 1000000,
             "burst": 1000000, "key": "client_ip"},
            {"name": "script", "class": "script", "route": "*", "rate_per_s": 0.01,
             "burst": 3, "key": "client_ip"}]}))
        .template("envoy/envoy-local-ratelimit.yaml"),
    )
    .await;
    let url = envoy.url("/");

    // crawlguard's own rejection.
    let s = sequential(&client(Ipv4Addr::new(127, 0, 0, 2)), &url, UA_CURL, 4).await;
    assert_eq!(
        s.iter().map(|r| r.status).collect::<Vec<_>>(),
        [200, 200, 200, 429]
    );
    // script class: Retry-After clamped to 1..=300, plus jitter 0..=10.
    assert_clean_429(&s[3], 310, "crawlguard's own 429");

    // Drain the backstop (200 tokens, 100/s refill): browsers from another address.
    let h = sequential(&client(Ipv4Addr::new(127, 0, 0, 3)), &url, UA_CHROME, 400).await;
    let first_429 = h
        .iter()
        .position(|r| r.status == 429)
        .expect("the backstop rejects once its bucket is empty");
    assert!(
        first_429 >= 190,
        "backstop burst is 200, first 429 at {first_429}"
    );
    assert!(h.iter().all(|r| r.status == 200 || r.status == 429));
    // human class: 1..=60, plus jitter 0..=2.
    assert_clean_429(&h[first_429], 62, "backstop 429");

    // The backstop did the rejecting, crawlguard normalised it and never limited a human.
    assert!(
        envoy
            .stat("backstop.http_local_rate_limit.rate_limited")
            .await
            .unwrap_or(0)
            >= 1
    );
    let normalised = envoy.counter("crawlguard.rewrite.status_429").await;
    let backstop_429s = h.iter().filter(|r| r.status == 429).count() as u64;
    assert_eq!(normalised, backstop_429s);
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 0);
    assert_eq!(envoy.counter("crawlguard.class.script.limited").await, 1);
}
