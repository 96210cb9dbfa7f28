//! Verified bots end to end: Envoy with the crawlguard filter, the real `crawlguard-sidecar`
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

use std::time::{Duration, Instant};

use crawlguard_integration::{
    claim, claims, client, ip, runs, statuses, timed, upstream_classes, Blackhole, EnvoyOpts,
    Limit, RawHttp1, Record, SidecarOpts, Stack, Table, GOOGLEBOT_V4, UA_CHROME, UA_GOOGLEBOT,
};
use serde_json::{json, Value};

/// GPTBot's User-Agent (OpenAI's documentation): bot id `gptbot`, class `ai_trainer`.
const UA_GPTBOT: &str = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; \
                         GPTBot/1.2; +https://openai.com/gptbot)";

/// PTR `host-2.example.net`: not Google's.
const NOT_GOOGLE_PTR: &str = "192.0.2.2";
/// Four PTR names; only `crawl-3.googlebot.com` resolves back to it.
const SEVERAL_PTRS: &str = "192.0.2.3";
/// PTR `6.2.0.192.bc.googleusercontent.com`, forward-confirmed: the default reverse name of
/// any Google Cloud VM, which anyone can rent.
const GOOGLE_CLOUD_VM: &str = "192.0.2.6";
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
        Record::googlebot(),
        Record::ptr(NOT_GOOGLE_PTR, "host-2.example.net"),
        Record::forward("host-2.example.net", NOT_GOOGLE_PTR),
        Record::ptr(SEVERAL_PTRS, "other.example.net"),
        Record::ptr(SEVERAL_PTRS, "crawl.evilgooglebot.com"),
        Record::ptr(SEVERAL_PTRS, "liar.googlebot.com"),
        Record::ptr(SEVERAL_PTRS, "crawl-3.googlebot.com"),
        Record::forward("crawl-3.googlebot.com", SEVERAL_PTRS),
        Record::host("6.2.0.192.bc.googleusercontent.com", GOOGLE_CLOUD_VM),
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

/// The limits of every scenario: a verified crawler gets 10, an unverified claim 2, a
/// spoofed one 1, GPTBot 3, a browser plenty.
fn limits() -> Vec<Limit> {
    vec![
        Limit::class_per_ip("search_crawler", 10),
        Limit::class_per_ip("ai_trainer", 3),
        Limit::class_per_ip("unverified_bot", 2),
        Limit::class_per_ip("spoofed", 1),
        Limit::class_per_ip("human", 1000),
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

/// Envoy with `filter_config`, the sidecar (`sidecar`) and dnsmasq serving [`records`].
async fn stack(filter_config: Value, sidecar: SidecarOpts) -> Stack {
    Stack::start(EnvoyOpts::with_config(filter_config), &records(), sidecar).await
}

#[tokio::test]
async fn verified_googlebot_gets_the_search_crawler_limit() {
    let s = stack(config(500), SidecarOpts::default()).await;
    let url = s.envoy.url("/page");
    let replies = claims(&client(ip(2)), &url, UA_GOOGLEBOT, GOOGLEBOT_V4, 12).await;

    // The search_crawler burst (10), not the unverified_bot one (2).
    assert_eq!(statuses(&replies), runs(&[(200, 10), (429, 2)]));
    assert_eq!(upstream_classes(&replies), vec!["search_crawler"; 10]);
    for r in &replies[10..] {
        let ra = r.retry_after_s().expect("Retry-After");
        assert!((1..=65).contains(&ra), "search_crawler Retry-After {ra}");
    }
    // One callout; every later request is a verdict-cache hit.
    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.cache_miss", 1),
            ("crawlguard.verify.verified", 1),
            ("crawlguard.verify.cache_hit", 11),
            ("crawlguard.verify.spoofed", 0),
            ("crawlguard.verify.error", 0),
            ("crawlguard.class.search_crawler.allowed", 10),
            ("crawlguard.class.search_crawler.limited", 2),
            ("crawlguard.class.unverified_bot.allowed", 0),
        ])
        .await;
    assert_eq!(
        s.sidecar.verdicts("googlebot", "fcrdns", "verified").await,
        1.0
    );
    s.envoy.assert_log_clean();
}

/// A Googlebot claim from `claimed` that the sidecar must answer `spoofed`: the `spoofed` limit
/// (1) applies, with its long Retry-After.
async fn assert_spoofed_googlebot(claimed: &str) {
    let s = stack(config(500), SidecarOpts::default()).await;
    let url = s.envoy.url("/page");
    let replies = claims(&client(ip(2)), &url, UA_GOOGLEBOT, claimed, 4).await;

    assert_eq!(statuses(&replies), [200, 429, 429, 429]);
    assert_eq!(upstream_classes(&replies), ["spoofed"]);
    for r in &replies[1..] {
        let ra = r.retry_after_s().expect("Retry-After");
        assert!((60..=3720).contains(&ra), "spoofed Retry-After {ra}");
    }
    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.cache_miss", 1),
            ("crawlguard.verify.spoofed", 1),
            ("crawlguard.verify.verified", 0),
            ("crawlguard.verify.cache_hit", 3),
            ("crawlguard.class.spoofed.allowed", 1),
            ("crawlguard.class.spoofed.limited", 3),
            ("crawlguard.class.search_crawler.allowed", 0),
        ])
        .await;
    assert_eq!(
        s.sidecar.verdicts("googlebot", "fcrdns", "spoofed").await,
        1.0
    );
    s.envoy.assert_log_clean();
}

#[tokio::test]
async fn googlebot_ua_from_a_non_google_ptr_is_spoofed() {
    assert_spoofed_googlebot(NOT_GOOGLE_PTR).await;
}

#[tokio::test]
async fn googlebot_ua_from_a_google_cloud_vm_is_spoofed() {
    assert_spoofed_googlebot(GOOGLE_CLOUD_VM).await;
}

#[tokio::test]
async fn googlebot_ptr_without_forward_confirmation_is_spoofed() {
    assert_spoofed_googlebot(FORWARD_MISMATCH).await;
}

/// A Googlebot claim from `claimed` that the sidecar must verify by FCrDNS through `host`.
async fn assert_verified_googlebot(claimed: &str) {
    let s = stack(config(500), SidecarOpts::default()).await;
    let url = s.envoy.url("/page");
    let replies = claims(&client(ip(2)), &url, UA_GOOGLEBOT, claimed, 11).await;

    assert_eq!(statuses(&replies), runs(&[(200, 10), (429, 1)]));
    assert_eq!(upstream_classes(&replies), vec!["search_crawler"; 10]);
    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.cache_miss", 1),
            ("crawlguard.verify.verified", 1),
            ("crawlguard.verify.spoofed", 0),
            ("crawlguard.class.search_crawler.allowed", 10),
            ("crawlguard.class.search_crawler.limited", 1),
        ])
        .await;
    assert_eq!(
        s.sidecar.verdicts("googlebot", "fcrdns", "verified").await,
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
    let s = stack(config(500), sidecar).await;
    let url = s.envoy.url("/page");
    let c = client(ip(2));

    let inside = claims(&c, &url, UA_GPTBOT, GPTBOT_IN_RANGE, 5).await;
    assert_eq!(statuses(&inside), [200, 200, 200, 429, 429]);
    assert_eq!(upstream_classes(&inside), ["ai_trainer"; 3]);

    let outside = claims(&c, &url, UA_GPTBOT, GPTBOT_OUT_OF_RANGE, 3).await;
    assert_eq!(statuses(&outside), [200, 429, 429]);
    assert_eq!(upstream_classes(&outside), ["spoofed"]);

    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.cache_miss", 2),
            ("crawlguard.verify.verified", 1),
            ("crawlguard.verify.spoofed", 1),
            ("crawlguard.class.ai_trainer.allowed", 3),
            ("crawlguard.class.ai_trainer.limited", 2),
            ("crawlguard.class.spoofed.allowed", 1),
            ("crawlguard.class.spoofed.limited", 2),
        ])
        .await;
    assert_eq!(
        s.sidecar.verdicts("gptbot", "ip_range", "verified").await,
        1.0
    );
    assert_eq!(
        s.sidecar.verdicts("gptbot", "ip_range", "spoofed").await,
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
    let s = stack(config(TIMEOUT_MS), SidecarOpts::default()).await;
    let url = s.envoy.url("/page");

    // A verified Googlebot before the sidecar dies.
    let c = client(ip(2));
    let first = claim(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await;
    assert_eq!(
        (first.status, first.upstream_class()),
        (200, Some("search_crawler"))
    );

    // A stream of new claims (each from a new address, so each calls out) while the
    // sidecar is killed: every request completes in time, 200 (the first request of every
    // address fits any limit), never a 5xx.
    let (progress, mut done) = tokio::sync::watch::channel(0);
    let stream = {
        let url = url.clone();
        tokio::spawn(async move {
            let c = client(ip(3));
            let mut out = Vec::new();
            for i in 1..=40 {
                out.push(timed(claim(&c, &url, UA_GOOGLEBOT, &spoofer(i))).await);
                progress.send_replace(i);
            }
            out
        })
    };
    // The sidecar dies after the 8th answer.
    tokio::time::timeout(Duration::from_secs(30), done.wait_for(|n| *n >= 8))
        .await
        .expect("the claim stream made no progress")
        .expect("the claim stream ended early");
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
    let mut t = Table::new("new claims with the sidecar dead");
    for i in 1..=5 {
        let xff = format!("198.51.100.{i}");
        let mut replies = Vec::new();
        for _ in 0..3 {
            let (r, took) = timed(claim(&c, &url, UA_GOOGLEBOT, &xff)).await;
            t.check(&xff, took < bound, format_args!("took {took:?}"));
            replies.push(r);
        }
        t.eq(&xff, "statuses", statuses(&replies), [200, 200, 429]);
        t.eq(
            &xff,
            "classes upstream",
            upstream_classes(&replies),
            ["unverified_bot"; 2],
        );
    }
    t.finish();
    assert_eq!(
        s.envoy.counter("crawlguard.verify.error").await,
        errors_before + 5
    );

    // The verdict cached before the sidecar died still holds: the rest of the crawler burst.
    let more = claims(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4, 10).await;
    assert_eq!(statuses(&more), runs(&[(200, 9), (429, 1)]));
    assert_eq!(upstream_classes(&more), vec!["search_crawler"; 9]);
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
        let (c, url) = (client(ip(10 + i as u8)), url.clone());
        tasks.push(tokio::spawn(async move {
            timed(claim(&c, &url, UA_GOOGLEBOT, &spoofer(i))).await
        }));
    }
    s.envoy
        .wait_for_counter(
            "crawlguard.verify.cache_miss",
            3,
            Duration::from_secs(10),
            "callouts started",
        )
        .await;
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
    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.cache_miss", 3),
            ("crawlguard.verify.error", 3),
            ("crawlguard.verify.unknown", 0),
            ("crawlguard.class.unverified_bot.allowed", 3),
        ])
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
    let c = client(ip(2));
    let bound = Duration::from_millis(1000);

    // One by one: each waits about timeout_ms, then goes on as unverified_bot.
    let mut t = Table::new("claims one by one with a slow sidecar");
    for xff in [GOOGLEBOT_V4, NOT_GOOGLE_PTR, GOOGLEBOT_V6, "198.51.100.7"] {
        let (r, took) = timed(claim(&c, &url, UA_GOOGLEBOT, xff)).await;
        eprintln!("slow sidecar: {xff} answered after {took:?}");
        t.eq(
            xff,
            "status and class upstream",
            (r.status, r.upstream_class()),
            (200, Some("unverified_bot")),
        );
        t.check(
            xff,
            took >= Duration::from_millis(u64::from(TIMEOUT_MS) - 20) && took < bound,
            format_args!("took {took:?}"),
        );
    }
    t.finish();
    // Ten at once, from ten new addresses.
    let mut tasks = Vec::new();
    for i in 1..=10 {
        let (c, url) = (client(ip(10 + i as u8)), url.clone());
        tasks.push(tokio::spawn(async move {
            timed(claim(&c, &url, UA_GOOGLEBOT, &spoofer(i))).await
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
    let (again, took) = timed(claim(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4)).await;
    assert_eq!(
        (again.status, again.upstream_class()),
        (200, Some("unverified_bot"))
    );
    assert!(
        took < Duration::from_millis(u64::from(TIMEOUT_MS)),
        "{took:?}"
    );
    let third = claim(&c, &url, UA_GOOGLEBOT, GOOGLEBOT_V4).await;
    assert_eq!(third.status, 429);

    s.envoy
        .assert_counters(&[
            ("crawlguard.verify.cache_miss", 14),
            ("crawlguard.verify.error", 14),
            ("crawlguard.verify.cache_hit", 2),
            ("crawlguard.verify.verified", 0),
            ("crawlguard.verify.spoofed", 0),
            ("crawlguard.class.unverified_bot.allowed", 15),
            ("crawlguard.class.unverified_bot.limited", 1),
        ])
        .await;
    s.envoy.assert_log_clean();
    drop(blackhole);
}

#[tokio::test]
async fn spoofer_flood_leaves_the_verified_googlebot_quota_unchanged() {
    // Two workers share the buckets and verdicts. A generous timeout: this test is about
    // quota, and 50 concurrent callouts on a loaded machine must not turn into timeouts.
    let envoy = EnvoyOpts::with_config(config(3000)).concurrency(2);
    let s = Stack::start(envoy, &records(), SidecarOpts::default()).await;
    let url = s.envoy.url("/page");

    // The flood: 50 addresses, 6 concurrent requests each, all claiming Googlebot.
    const PER_SPOOFER: usize = 6;
    let clients: Vec<reqwest::Client> = (0..50).map(|i| client(ip(10 + i))).collect();
    let mut flood = Vec::new();
    for i in 1..=50 {
        for _ in 0..PER_SPOOFER {
            let (c, url) = (clients[i - 1].clone(), url.clone());
            flood.push(tokio::spawn(async move {
                (i, claim(&c, &url, UA_GOOGLEBOT, &spoofer(i)).await)
            }));
        }
    }
    // Meanwhile the real Googlebot crawls: 12 requests one after the other.
    let googlebot = claims(&client(ip(2)), &url, UA_GOOGLEBOT, GOOGLEBOT_V4, 12).await;
    let mut per_spoofer = vec![Vec::new(); 51];
    for t in flood {
        let (i, r) = t.await.expect("flood task");
        per_spoofer[i].push(r);
    }

    // Exactly what it gets alone (verified_googlebot_gets_the_search_crawler_limit).
    assert_eq!(statuses(&googlebot), runs(&[(200, 10), (429, 2)]));
    assert_eq!(upstream_classes(&googlebot), vec!["search_crawler"; 10]);

    // Each scraper is held to its spoofed limit (1); none ever gets crawler quota or a 5xx.
    let mut flood_allowed = 0;
    for (i, replies) in per_spoofer.iter().enumerate().skip(1) {
        assert_eq!(replies.len(), PER_SPOOFER);
        for r in replies {
            assert!(r.status == 200 || r.status == 429, "spoofer {i}: {r:?}");
        }
        let cls = upstream_classes(replies);
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

#[tokio::test]
async fn client_gone_while_paused_on_a_slow_verifier_does_not_break_the_vm() {
    // The sidecar answers (503) only after its 1 s DNS timeout; the filter would wait 3 s.
    let blackhole = Blackhole::new();
    let sidecar = SidecarOpts {
        nameservers: vec![blackhole.addr()],
        dns_timeout_ms: Some(1000),
        dns_attempts: Some(1),
        ..Default::default()
    };
    let s = Stack::start_without_dns(EnvoyOpts::with_config(config(3000)), sidecar).await;

    // Five clients claim Googlebot and hang up while their requests are paused.
    let mut conns = Vec::new();
    for i in 1..=5u8 {
        let mut conn = RawHttp1::connect(ip(20 + i), s.envoy.main_addr()).await;
        let xff = spoofer(usize::from(i));
        conn.send_get(
            "/page",
            &[("user-agent", UA_GOOGLEBOT), ("x-forwarded-for", &xff)],
        )
        .await;
        conns.push(conn);
    }
    s.envoy
        .wait_for_counter(
            "crawlguard.verify.cache_miss",
            5,
            Duration::from_secs(10),
            "callouts started",
        )
        .await;
    for mut conn in conns {
        // Nothing has been answered yet: the requests are paused.
        let answered = conn.answered_within(Duration::from_millis(1)).await;
        assert!(!answered, "a paused request was answered early");
        drop(conn);
    }
    // Wait until every callout has ended, answered or cancelled.
    s.envoy
        .wait_for_stat(
            "cluster.crawlguard_verifier.upstream_rq_active",
            Duration::from_secs(15),
            "verifier callouts ended",
            |active| active == 0,
        )
        .await;
    let stats = s.envoy.stats().await;
    eprintln!(
        "after disconnect: verifier rq cancelled={:?} completed={:?} verify.unknown={:?}",
        stats.get("cluster.crawlguard_verifier.upstream_rq_cancelled"),
        stats.get("cluster.crawlguard_verifier.upstream_rq_completed"),
        stats.get("wasmcustom.crawlguard.verify.unknown"),
    );
    s.envoy.assert_log_clean();

    // The filter still runs: a browser is classed, and a new claim is verified (a verifier
    // error, 503 after the sidecar's DNS timeout -> unverified_bot).
    let url = s.envoy.url("/page");
    let c = client(ip(2));
    let human = claim(&c, &url, UA_CHROME, "198.51.100.20").await;
    assert_eq!((human.status, human.upstream_class()), (200, Some("human")));
    let errors_before = s.envoy.counter("crawlguard.verify.error").await;
    let (bot, took) = timed(claim(&c, &url, UA_GOOGLEBOT, "198.51.100.21")).await;
    assert_eq!(
        (bot.status, bot.upstream_class()),
        (200, Some("unverified_bot"))
    );
    assert!(took < Duration::from_millis(3000) + SLACK, "{took:?}");
    assert_eq!(
        s.envoy.counter("crawlguard.verify.error").await,
        errors_before + 1
    );
    assert_eq!(s.envoy.counter("crawlguard.verify.unknown").await, 0);
    assert_eq!(s.envoy.counter("crawlguard.verify.cache_miss").await, 6);
    s.envoy.assert_log_clean();
    drop(blackhole);
}

/// YandexBot's User-Agent: bot id `yandexbot`, class `search_crawler`, verified by FCrDNS
/// alone (Yandex publishes no IP ranges).
const UA_YANDEXBOT: &str = "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)";
/// PTR `spider-192-0-2-9.yandex.com`, which resolves back to it.
const YANDEXBOT_V4: &str = "192.0.2.9";

#[tokio::test]
async fn a_dns_outage_keeps_a_verified_crawler_verified() {
    // Verdicts live 1 s in the filter (max_ttl_s) and in the sidecar (ttl.verified_s), so
    // the claim is asked again during the outage; a verdict may stand in for an hour after
    // a failed callout, and a failed callout is not retried for an hour (one error, exact).
    let cfg = json!({
        "client_ip": {"source": "xff", "xff_trusted_hops": 1},
        "limits": [
            Limit::class_per_ip("search_crawler", 1000),
            Limit::class_per_ip("unverified_bot", 2),
            Limit::class_per_ip("spoofed", 1),
        ],
        "verifier": {"timeout_ms": 3000, "max_ttl_s": 1, "stale_if_error_s": 3600,
                     "error_ttl_s": 3600},
    });
    let mut records = records();
    records.push(Record::host("spider-192-0-2-9.yandex.com", YANDEXBOT_V4));
    // A resolver that dies answers in well under the filter's 3 s: 300 ms, one attempt.
    let sidecar = SidecarOpts {
        dns_timeout_ms: Some(300),
        dns_attempts: Some(1),
        config_toml: Some("[ttl]\nverified_s = 1\n".into()),
        ..Default::default()
    };
    let s = Stack::start(EnvoyOpts::with_config(cfg), &records, sidecar).await;
    let url = s.envoy.url("/page");
    let c = client(ip(2));
    let mut replies = vec![claim(&c, &url, UA_YANDEXBOT, YANDEXBOT_V4).await];
    assert_eq!(replies[0].upstream_class(), Some("search_crawler"));

    // The resolver stops. The crawler keeps crawling until its verdict has expired and the
    // sidecar has answered the new callout, then three more requests.
    s.dns.as_ref().expect("dnsmasq").kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    while s
        .sidecar
        .metric("crawlguard_sidecar_verify_errors_total")
        .await
        < 1.0
    {
        assert!(
            Instant::now() < deadline,
            "the sidecar never failed a lookup"
        );
        let r = claim(&c, &url, UA_YANDEXBOT, YANDEXBOT_V4).await;
        // An `unknown` answer would make this unverified_bot at once.
        assert_eq!(
            (r.status, r.upstream_class()),
            (200, Some("search_crawler")),
            "request {} after the resolver stopped",
            replies.len()
        );
        replies.push(r);
    }
    replies.extend(claims(&c, &url, UA_YANDEXBOT, YANDEXBOT_V4, 3).await);

    // Every request of the crawler kept its verified class: stale-if-error, because the
    // sidecar's answer was an error (503), not `unknown`.
    let n = replies.len();
    assert_eq!(statuses(&replies), vec![200; n]);
    assert_eq!(upstream_classes(&replies), vec!["search_crawler"; n]);
    assert_eq!(
        s.sidecar
            .metric("crawlguard_sidecar_verify_errors_total")
            .await,
        1.0
    );
    let stats = s.envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert_eq!(stat("crawlguard.verify.error"), 1, "{stats:?}");
    assert_eq!(stat("crawlguard.verify.unknown"), 0, "{stats:?}");
    assert_eq!(stat("crawlguard.class.search_crawler.allowed"), n as u64);
    assert_eq!(stat("crawlguard.class.unverified_bot.allowed"), 0);
    // The failed callout's request and the three after it had the stale verdict.
    assert_eq!(stat("crawlguard.verify.stale"), 4, "{stats:?}");
    assert_eq!(
        s.sidecar.verdicts("yandexbot", "fcrdns", "unknown").await,
        0.0
    );
    s.envoy.assert_log_clean();
}
