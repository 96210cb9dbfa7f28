//! A never-seen real crawler during a sidecar outage (issue 20, item 13): with the sidecar
//! down and a flood of fake Googlebot claims draining the unverified bucket, a real
//! Googlebot from an address inside Google's published ranges, never verified before, keeps
//! its class, because every worker decides range-verifiable claims from the sidecar's
//! published ranges (`GET /v1/ranges`, fetched every `verifier.ranges_refresh_s`) without a
//! callout. Envoy, the real `crawlguard-sidecar` and dnsmasq run as real processes
//! (harness: `crawlguard_integration::Stack`).
//!
//! The sidecar loads Google's real published Googlebot file
//! (`../shared/data/google-crawler-ips/googlebot.json`). As in `verify_under_attack.rs`,
//! clients send the claimed address in `x-forwarded-for`, and limits refill at 0.001
//! token/s so counts are exact.

use std::collections::BTreeSet;
use std::time::Duration;

use crawlguard_integration::{
    claim, claims, client, ip, repo_root, statuses, upstream_classes, EnvoyOpts, Limit,
    SidecarOpts, Stack, UA_GOOGLEBOT,
};
use serde_json::json;

/// Inside Google's published Googlebot range 66.249.66.0/27 (`googlebot.json`).
const GOOGLEBOT_IN_RANGE: &str = "66.249.66.1";
/// A fake claim after the flood: a documentation address, outside Google's ranges.
const FAKE_AFTER: &str = "198.51.100.9";
/// Envoy worker threads.
const WORKERS: u32 = 2;
/// How long the VMs may take to fetch the ranges, or to notice the sidecar is gone, on a
/// loaded 2-core machine (a deadline, not a wait: polling returns as soon as it holds).
const DEADLINE: Duration = Duration::from_secs(30);

/// The flood's addresses: 203.0.113.1..=40, outside Google's ranges.
fn flooder(i: u32) -> String {
    format!("203.0.113.{i}")
}

/// Envoy's thread id of a log line (`[time][thread id][level][logger] ...`).
fn thread_id(line: &str) -> Option<&str> {
    line.split("][").nth(1)
}

/// The distinct Envoy threads that logged a line containing `needle`.
fn threads_logging(log: &str, needle: &str) -> BTreeSet<String> {
    log.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| thread_id(l).map(str::to_string))
        .collect()
}

#[tokio::test]
async fn never_seen_googlebot_in_published_ranges_keeps_its_class_while_the_sidecar_is_down() {
    let googlebot_json = repo_root().join("../shared/data/google-crawler-ips/googlebot.json");
    assert!(
        googlebot_json.is_file(),
        "{} is missing",
        googlebot_json.display()
    );
    let sidecar = SidecarOpts {
        // Googlebot keeps its built-in FCrDNS domain; its ranges come from Google's file.
        config_toml: Some(format!(
            "[[bots]]\nid = \"googlebot\"\nranges = [{:?}]\n",
            googlebot_json.display().to_string()
        )),
        ..Default::default()
    };
    let s = Stack::start(
        EnvoyOpts::with_config(json!({
            "client_ip": {"source": "xff"},
            "limits": [
                Limit::class_per_ip("search_crawler", 20),
                Limit::class_per_ip("unverified_bot", 2),
                Limit::global("unverified_bot_global", 20).class("unverified_bot"),
                Limit::class_per_ip("spoofed", 1),
            ],
            // 1 s: the smallest refresh (0 turns the fetch off), so the test is quick.
            "verifier": {"timeout_ms": 2000, "ranges_refresh_s": 1},
        }))
        .concurrency(WORKERS),
        &[],
        sidecar,
    )
    .await;
    let url = s.envoy.url("/page");

    // The sidecar hands out Googlebot's set; a Googlebot outside it goes to FCrDNS.
    let (status, doc) = s.sidecar.get("/v1/ranges").await;
    assert_eq!(status, 200, "{doc}");
    let generation = doc
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("crawlguard-ranges 1 "))
        .unwrap_or_else(|| panic!("no header line: {doc}"))
        .to_string();
    assert!(doc.lines().any(|l| l == "bot googlebot fcrdns 0"), "{doc}");

    // Every VM (the main thread's and each worker's) has the ranges: each logs
    // `published ranges <generation> in use` when it puts them in use, whether fetched
    // itself or taken from shared data (then its own fetch gets a 304, so
    // `verify.ranges_updated` alone does not say which VMs have them).
    let in_use = format!("published ranges {generation} in use");
    let vms = WORKERS as usize + 1;
    let got = crawlguard_integration::poll_until(DEADLINE, || async {
        let t = threads_logging(&s.envoy.log(), &in_use);
        (t.len() >= vms).then_some(t)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every VM logged `{in_use}` within {DEADLINE:?}: {:?}",
            threads_logging(&s.envoy.log(), &in_use)
        )
    });
    assert_eq!(got.len(), vms, "{got:?}");

    // The sidecar dies: its port refuses connections.
    let sidecar_addr = s.sidecar.addr();
    let log_before_kill = s.envoy.log().len();
    s.sidecar.kill();
    let refused = std::net::TcpStream::connect_timeout(&sidecar_addr, Duration::from_secs(5));
    assert_eq!(
        refused.as_ref().map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionRefused),
        "the sidecar's port {sidecar_addr} still answers: {refused:?}"
    );
    // Every VM has since tried to refresh and failed, and keeps the ranges it had.
    poll_until_threads(&s, log_before_kill, "; the ranges in use stay", vms).await;

    // The flood: 200 fake Googlebot claims from 40 addresses, 5 each. Each is a verifier
    // error (Googlebot outside its ranges goes to FCrDNS, and the sidecar is down), classed
    // unverified_bot (`verifier.on_error`): 2 per address until the global unverified
    // bucket's 20 are gone.
    let flood = client(ip(3));
    let mut flood_statuses = Vec::new();
    for i in 1..=40 {
        let replies = claims(&flood, &url, UA_GOOGLEBOT, &flooder(i), 5).await;
        flood_statuses.extend(statuses(&replies));
    }
    let mut want = Vec::new();
    for i in 1..=40 {
        want.extend(if i <= 10 {
            [200, 200, 429, 429, 429]
        } else {
            [429; 5]
        });
    }
    assert_eq!(flood_statuses, want);

    // A real Googlebot from Google's published ranges, never seen before: its class, 3 times.
    let googlebot = client(ip(2));
    let crawl = claims(&googlebot, &url, UA_GOOGLEBOT, GOOGLEBOT_IN_RANGE, 3).await;
    eprintln!(
        "Googlebot {GOOGLEBOT_IN_RANGE} after the outage and the flood: {:?} as {:?}",
        statuses(&crawl),
        upstream_classes(&crawl)
    );
    assert_eq!(statuses(&crawl), [200; 3]);
    assert_eq!(upstream_classes(&crawl), ["search_crawler"; 3]);

    // A fake from outside the ranges is still a verifier error: unverified_bot, whose
    // global bucket the flood drained: 429.
    let fake = claim(&client(ip(4)), &url, UA_GOOGLEBOT, FAKE_AFTER).await;
    assert_eq!((fake.status, fake.upstream_class()), (429, None));

    let stats = s.envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    // Every fake claim was a failed callout or a remembered error (`error_ttl_s`).
    assert_eq!(
        stat("crawlguard.verify.error") + stat("crawlguard.verify.cache_hit"),
        201,
        "{stats:?}"
    );
    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.range_verified", 3),
            ("crawlguard.verify.range_spoofed", 0),
            ("crawlguard.verify.verified", 0),
            ("crawlguard.verify.stale", 0),
            ("crawlguard.class.search_crawler.allowed", 3),
            ("crawlguard.class.search_crawler.limited", 0),
            ("crawlguard.class.unverified_bot.allowed", 20),
            ("crawlguard.class.unverified_bot.limited", 181),
        ])
        .await;
    s.envoy.assert_log_clean();
}

/// Polls Envoy's log, from byte `from` on, until `n` distinct threads logged a line
/// containing `needle`.
async fn poll_until_threads(s: &Stack, from: usize, needle: &str, n: usize) {
    let since = || s.envoy.log().get(from..).unwrap_or_default().to_string();
    let got = crawlguard_integration::poll_until(DEADLINE, || async {
        let t = threads_logging(&since(), needle);
        (t.len() >= n).then_some(())
    })
    .await;
    assert!(
        got.is_some(),
        "not {n} threads logged `{needle}` within {DEADLINE:?}: {:?}",
        threads_logging(&since(), needle)
    );
}
