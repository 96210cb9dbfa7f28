//! `envoy/envoy-local-ratelimit.yaml`: Envoy's own `local_ratelimit` after crawlguard as a
//! global backstop. Both kinds of rejection leave Envoy looking the same: crawlguard's own
//! 429 and the backstop's 429 (normalised on crawlguard's response path).

use crawlguard_integration::{
    assert_clean_rejection, client, ip, sequential, statuses, Envoy, EnvoyOpts, Limit, Reply,
    UA_CHROME, UA_CURL,
};
use serde_json::json;

/// A clean 429 (see [`assert_clean_rejection`]) whose Retry-After is at most `max_s`.
fn assert_clean_429(r: &Reply, max_s: u64, what: &str) {
    let ra = assert_clean_rejection(r, 429);
    assert!((1..=max_s).contains(&ra), "{what}: retry-after {ra}");
}

#[tokio::test]
async fn backstop_and_crawlguard_rejections_both_come_out_normalised() {
    // crawlguard: humans practically unlimited, scripts 3 per client; the backstop in the
    // shipped example allows a burst of 200 for the whole listener.
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({"limits": [
            Limit::per_ip("human", 1_000_000).class("human").rate_per_s(1e6),
            Limit::per_ip("script", 3).class("script").rate_per_s(0.01),
        ]}))
        .template("envoy/envoy-local-ratelimit.yaml"),
    )
    .await;
    let url = envoy.url("/");

    // crawlguard's own rejection.
    let s = sequential(&client(ip(2)), &url, UA_CURL, 4).await;
    assert_eq!(statuses(&s), [200, 200, 200, 429]);
    // script class: Retry-After clamped to 1..=300, plus jitter 0..=10.
    assert_clean_429(&s[3], 310, "crawlguard's own 429");

    // Drain the backstop (200 tokens, 100/s refill): browsers from another address.
    let h = sequential(&client(ip(3)), &url, UA_CHROME, 400).await;
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
