//! A scraper pool behind Chrome's User-Agent against a real TLS edge
//! (`envoy/envoy-tls.yaml`, every browser check on), while a real headless Chromium browses
//! from another address:
//!
//! - 200 addresses with an HTTP library's handshake, spread over 200 /24s and 20 access
//!   networks: together they get at most `suspect_browser_global` (burst 500 + 50/s);
//! - 200 addresses of one cloud (AS16509) sending every browser header: together at most
//!   `suspect_browser_per_asn` (burst 100 + 10/s);
//! - with shedding on and the scraper's requests slow: the scraper is shed (503), Chromium
//!   is served.
//!
//! Throughout, every request of Chromium reaches the origin as `human`. The scraper is
//! `integration/scripts/scraper.py` (Python's http.client: OpenSSL, no ALPN).

use std::time::Duration;

use crawlguard_integration::browsers::{chrome_user_agent, scrape, Chromium};
use crawlguard_integration::tls_edge::{browser_headers, page, Edge};
use crawlguard_integration::{shipped_filter_config, TLS_TEMPLATE};
use serde_json::{json, Value};

/// Chromium's page loads during a flood.
const CHROMIUM_PAGES: usize = 3;

/// The shipped TLS edge configuration, with RateLimit headers (the 429s name their limit).
fn edge_config() -> Value {
    let mut cfg = shipped_filter_config(TLS_TEMPLATE);
    cfg["ratelimit_headers"] = json!(true);
    cfg
}

/// The scraper's configuration: `addresses`, `per_address` requests each on one
/// connection, Chrome's User-Agent plus `headers`.
fn scraper(
    edge: &Edge,
    addresses: Vec<String>,
    per_address: u32,
    headers: Value,
    path: &str,
) -> Value {
    json!({
        "host": "127.0.0.1",
        "port": edge.envoy.main_port(),
        "ca": edge.ca().display().to_string(),
        "addresses": addresses,
        "per_address": per_address,
        "threads": 16,
        "path": path,
        "headers": headers,
    })
}

/// Runs the scraper and, at the same time, Chromium loading [`CHROMIUM_PAGES`] pages (each
/// with three subresources) marked `who-<n>`; returns the scraper's report.
async fn flood_while_browsing(edge: &Edge, cfg: Value, who: &str) -> Value {
    let flood = tokio::task::spawn_blocking(move || scrape(&cfg));
    let chromium = Chromium::new(edge.ca());
    for n in 0..CHROMIUM_PAGES {
        let url = edge.url(&page(&format!("{who}-{n}")));
        let dom = tokio::task::block_in_place(|| chromium.load(&url, true)).expect("chromium");
        assert!(dom.contains(&format!("{who}-{n}")), "page {n}: {dom}");
    }
    flood.await.expect("scraper thread")
}

/// Every request of Chromium reached the origin, as `human`: page and three subresources,
/// for each page.
async fn assert_chromium_served_as_human(edge: &Edge, who: &str) {
    let seen = edge.seen(&format!("who={who}-")).await;
    assert!(
        seen.len() >= 4 * CHROMIUM_PAGES,
        "chromium: {} requests reached the origin, want {} or more",
        seen.len(),
        4 * CHROMIUM_PAGES
    );
    assert!(seen.iter().all(|(c, _, _)| c == "human"), "{seen:?}");
    assert_eq!(
        edge.envoy.counter("crawlguard.class.human.limited").await,
        0
    );
    assert_eq!(edge.envoy.counter("crawlguard.class.human.shed").await, 0);
}

fn count(report: &Value, status: u16) -> u64 {
    report["statuses"][status.to_string()].as_u64().unwrap_or(0)
}

/// The most a limit of `burst`, refilling `rate_per_s`, admits over `elapsed_s`, plus the
/// tokens a worker may hold on lease (README, "Leases": `burst / 64`, at most 16).
fn bound(burst: u64, rate_per_s: f64, elapsed_s: f64) -> u64 {
    burst + (rate_per_s * elapsed_s).ceil() as u64 + (burst / 64).min(16)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_of_200_addresses_behind_a_library_handshake_gets_the_global_share() {
    let edge = Edge::with_test_networks(Some(edge_config())).await;
    // 200 addresses in 200 /24s of 20 access networks: no per-address, per-/24 or per-ASN
    // limit is reached, the class's global one is.
    let addresses: Vec<String> = (0..200).map(|i| format!("127.1.{i}.1")).collect();
    let ua = chrome_user_agent();
    let headers = json!({"user-agent": ua, "accept": "*/*"});
    let cfg = scraper(&edge, addresses, 10, headers, "/scrape");
    let report = flood_while_browsing(&edge, cfg, "pool").await;
    assert_eq!(report["errors"], json!([]), "{report}");
    let (admitted, refused) = (count(&report, 200), count(&report, 429));
    assert_eq!(admitted + refused, 2000, "{report}");
    let elapsed = report["elapsed_s"].as_f64().unwrap_or(0.0);
    let most = bound(500, 50.0, elapsed);
    println!("pool: {admitted} admitted, {refused} refused in {elapsed:.1} s (at most {most})");
    assert!(
        (500..=most).contains(&admitted),
        "the pool got {admitted} in {elapsed:.1} s: suspect_browser_global allows 500 + 50/s, \
         at most {most}"
    );
    // Every refusal came from the class's global limit.
    let policies = report["policies"].as_object().cloned().unwrap_or_default();
    assert_eq!(
        policies.keys().collect::<Vec<_>>(),
        ["\"suspect_browser_global\";q=500;w=10"],
        "{report}"
    );
    // What reached the origin of the pool came as suspect_browser.
    let seen = edge.seen("/scrape").await;
    assert_eq!(seen.len() as u64, admitted);
    assert!(seen.iter().all(|(c, _, _)| c == "suspect_browser"));
    assert_chromium_served_as_human(&edge, "pool").await;
    edge.envoy.assert_log_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_of_200_cloud_addresses_with_every_browser_header_gets_one_networks_share() {
    let edge = Edge::with_test_networks(Some(edge_config())).await;
    let addresses: Vec<String> = (0..200).map(|i| format!("127.16.{i}.1")).collect();
    let ua = chrome_user_agent();
    let headers: serde_json::Map<String, Value> = browser_headers(&ua)
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let cfg = scraper(&edge, addresses, 5, Value::Object(headers), "/scrape");
    let report = flood_while_browsing(&edge, cfg, "cloud").await;
    assert_eq!(report["errors"], json!([]), "{report}");
    let (admitted, refused) = (count(&report, 200), count(&report, 429));
    assert_eq!(admitted + refused, 1000, "{report}");
    let elapsed = report["elapsed_s"].as_f64().unwrap_or(0.0);
    let most = bound(100, 10.0, elapsed);
    println!("cloud: {admitted} admitted, {refused} refused in {elapsed:.1} s (at most {most})");
    assert!(
        (100..=most).contains(&admitted),
        "the cloud got {admitted} in {elapsed:.1} s: suspect_browser_per_asn allows 100 + \
         10/s, at most {most}"
    );
    let policies = report["policies"].as_object().cloned().unwrap_or_default();
    assert_eq!(
        policies.keys().collect::<Vec<_>>(),
        ["\"suspect_browser_per_asn\";q=100;w=10"],
        "{report}"
    );
    // The requests came as Amazon's, and failed the network and handshake checks only.
    let seen = edge.seen("/scrape").await;
    assert!(seen
        .iter()
        .all(|(c, _, asn)| c == "suspect_browser" && asn == "16509"));
    let failed = edge.failed_checks().await;
    assert_eq!(
        failed.keys().collect::<Vec<_>>(),
        ["http_version", "network", "tls_fingerprint"]
    );
    assert_chromium_served_as_human(&edge, "cloud").await;
    edge.envoy.assert_log_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_shedding_on_the_scraper_is_shed_and_chromium_is_served() {
    let mut cfg = edge_config();
    // A quick judgement: a 2 s window, a class a second.
    cfg["shedding"] = json!({"enabled": true, "latency_ms": 250, "window_s": 2,
        "min_requests": 10, "step_s": 1});
    let edge = Edge::with_test_networks(Some(cfg)).await;
    let addresses: Vec<String> = (0..200).map(|i| format!("127.1.{i}.1")).collect();
    let ua = chrome_user_agent();
    // The origin is slow for what the scraper asks for (a herd on expensive pages).
    let mut scrape_cfg = scraper(
        &edge,
        addresses,
        2,
        json!({"user-agent": ua}),
        "/scrape?delay_ms=700",
    );
    scrape_cfg["duration_s"] = json!(12);
    let flood = tokio::task::spawn_blocking(move || scrape(&scrape_cfg));
    // Chromium browses while the level rises (one class a second: suspect_browser is the
    // fourth) and after.
    let chromium = Chromium::new(edge.ca());
    let mut n = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let url = edge.url(&page(&format!("shed-{n}")));
        let dom = tokio::task::block_in_place(|| chromium.load(&url, true)).expect("chromium");
        assert!(dom.contains(&format!("shed-{n}")));
        n += 1;
    }
    let report = flood.await.expect("scraper thread");
    assert_eq!(report["errors"], json!([]), "{report}");
    let shed = count(&report, 503);
    println!(
        "shedding: scraper {} x 200, {} x 429, {shed} x 503; chromium {n} pages",
        count(&report, 200),
        count(&report, 429)
    );
    assert!(shed > 0, "the scraper was never shed: {report}");
    // A shed request's Retry-After: step_s clamped to shedding.retry_after [15, 60], plus
    // up to 15 s of jitter.
    let retry_after: Vec<i64> = report["retry_after"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    assert!(retry_after.iter().all(|s| *s >= 1), "{retry_after:?}");
    assert!(
        edge.envoy
            .counter("crawlguard.class.suspect_browser.shed")
            .await
            >= shed,
        "{report}"
    );
    let level_line = edge
        .envoy
        .wait_for_log_line(
            Duration::from_secs(10),
            "the level reaching suspect_browser",
            |l| l.contains("shed: [spoofed, unverified_bot, ai_trainer, suspect_browser]"),
        )
        .await;
    assert!(level_line.contains("level 3 -> 4"), "{level_line}");
    assert_chromium_served_as_human(&edge, "shed").await;
    // Chromium's pages: every one loaded, every request human, none shed.
    let seen = edge.seen("who=shed-").await;
    assert!(seen.len() >= 4 * n, "{} of {} requests", seen.len(), 4 * n);
    edge.envoy.assert_log_clean();
}
