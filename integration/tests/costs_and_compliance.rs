//! Cost-based limits (reserve, then settle from the origin's cost header), Retry-After
//! compliance and escalation, and a single limit in shadow mode, through a real Envoy and
//! the scriptable test upstream (which sends whatever cost header the request asks for).
//!
//! Limits refill at 0.001 token/s so nothing refills while a test runs and counts are exact.
//! Two tests wait on the wall clock on purpose (a client that waits its Retry-After, and
//! escalation decaying): those waits are the behaviour under test, not synchronisation.

use std::time::{Duration, Instant};

use crawlguard_integration::{
    client, get, ip, statuses, Envoy, EnvoyOpts, TestUpstream, UA_CHROME, UA_CURL, UA_GOOGLEBOT,
};
use serde_json::{json, Value};

/// 100 items per client address, 20 reserved per request, settled from `x-crawlguard-cost`.
fn items_limit() -> Value {
    json!({"name": "items", "class": "*", "route": "*", "rate_per_s": 0.001, "burst": 100,
           "key": "client_ip",
           "cost": {"reserve": 20, "from_response_header": "x-crawlguard-cost"}})
}

async fn envoy_with(cfg: Value, up: &TestUpstream) -> Envoy {
    Envoy::start_in_front_of(up, cfg).await
}

/// A page whose origin reports `cost` items (`None`: no cost header).
fn page(envoy: &Envoy, cost: Option<u32>) -> String {
    match cost {
        Some(c) => envoy.url(&format!("/list?header=x-crawlguard-cost:{c}")),
        None => envoy.url("/list"),
    }
}

#[tokio::test]
async fn pages_of_20_and_of_100_items_are_admitted_by_their_cost() {
    let up = TestUpstream::start().await;
    let envoy = envoy_with(json!({"limits": [items_limit()]}), &up).await;
    // Pages of 20: five fit in 100 (each reserves and settles at 20).
    let small = client(ip(2));
    let mut got = Vec::new();
    for _ in 0..7 {
        got.push(get(&small, &page(&envoy, Some(20)), UA_CHROME, &[]).await);
    }
    assert_eq!(statuses(&got), [200, 200, 200, 200, 200, 429, 429]);
    // The origin's cost header never reaches the client.
    for r in &got {
        assert_eq!(r.header("x-crawlguard-cost"), None);
    }
    // Pages of 100: one request reserves 20 and settles at 100; the next does not fit.
    let big = client(ip(3));
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(get(&big, &page(&envoy, Some(100)), UA_CHROME, &[]).await);
    }
    assert_eq!(statuses(&got), [200, 429, 429]);
    assert_eq!(envoy.counter("crawlguard.class.human.allowed").await, 6);
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 4);
}

#[tokio::test]
async fn a_concurrent_burst_cannot_overspend_its_reservations() {
    let up = TestUpstream::start().await;
    // Room for ten in flight: the reservations, not the cap, decide here.
    let mut limit = items_limit();
    limit["cost"]["max_in_flight"] = json!(10);
    let envoy = envoy_with(json!({"limits": [limit]}), &up).await;
    // Ten at once, each held 300 ms at the origin: reservations admit exactly five.
    let url = envoy.url("/list?delay_ms=300&header=x-crawlguard-cost:1");
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (c, url) = (client(ip(4)), url.clone());
        tasks.push(tokio::spawn(
            async move { get(&c, &url, UA_CHROME, &[]).await },
        ));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("request task").status);
    }
    got.sort_unstable();
    assert_eq!(got, [[200; 5].as_slice(), &[429; 5]].concat());
    // Each settled at 1 item: 95 left, so four more reservations of 20 fit.
    let c = client(ip(4));
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(
            get(&c, &page(&envoy, Some(20)), UA_CHROME, &[])
                .await
                .status,
        );
    }
    assert_eq!(after, [200, 200, 200, 200, 429]);
}

/// `n` GETs of `url` at once from `from`: their statuses, sorted.
async fn at_once(from: u8, url: &str, n: usize) -> Vec<u16> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (c, url) = (client(ip(from)), url.to_string());
        tasks.push(tokio::spawn(
            async move { get(&c, &url, UA_CHROME, &[]).await },
        ));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("request task").status);
    }
    got.sort_unstable();
    got
}

#[tokio::test]
async fn sixty_costly_listings_at_once_spend_at_most_four_costs() {
    // The hostile review's attack: 60 listings of 1,000 items at once, reserve 20, burst
    // 1,000. Reservations alone admitted 50 (50,000 items); at most 4 (the default
    // max_in_flight) fly now, and what they cost is the next reservation.
    let up = TestUpstream::start().await;
    let limit = json!({"name": "items", "class": "*", "route": "*", "rate_per_s": 0.001,
        "burst": 1000, "key": "client_ip",
        "cost": {"reserve": 20, "from_response_header": "x-crawlguard-cost"}});
    let envoy = envoy_with(json!({"limits": [limit]}), &up).await;
    // The origin holds each for 3 s, so all 60 are decided while the first ones fly.
    let url = envoy.url("/list?delay_ms=3000&header=x-crawlguard-cost:1000");
    let got = at_once(7, &url, 60).await;
    assert_eq!(got, [[200; 4].as_slice(), &[429; 56]].concat());
    assert_eq!(envoy.counter("crawlguard.class.human.allowed").await, 4);
    // 4,000 spent of 1,000: in debt, nothing more is admitted, not even a cheap page.
    let c = client(ip(7));
    let r = get(&c, &page(&envoy, Some(0)), UA_CHROME, &[]).await;
    assert_eq!(r.status, 429);
}

#[tokio::test]
async fn a_client_gone_ends_its_reservations_flight() {
    // One reservation in flight per address. A client that hangs up while the origin holds
    // its request ends the stream: Envoy's access-log callback settles it, and the next
    // request of that address may fly.
    let up = TestUpstream::start().await;
    let mut limit = items_limit();
    limit["cost"]["max_in_flight"] = json!(1);
    let envoy = envoy_with(json!({"limits": [limit]}), &up).await;
    let slow = envoy.url("/list?delay_ms=10000&header=x-crawlguard-cost:0");
    let quitter = reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(ip(8)))
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let abandoned = quitter.get(&slow).header("user-agent", UA_CHROME).send();
    // While it flies (the origin has it), the address is at its cap.
    let c = client(ip(8));
    let (abandoned, at_cap) = tokio::join!(abandoned, async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while up
            .requests()
            .await
            .iter()
            .all(|r| r["path"] != json!("/list?delay_ms=10000&header=x-crawlguard-cost:0"))
        {
            assert!(
                Instant::now() < deadline,
                "the request never reached the origin"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        get(&c, &page(&envoy, Some(0)), UA_CHROME, &[]).await.status
    });
    assert!(
        abandoned.is_err(),
        "the origin answered before the client gave up"
    );
    assert_eq!(at_cap, 429);
    // Once the stream has ended, a page flies again (polled: the end reaches the worker
    // after the client has gone). Without the stream's end it would wait 300 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(&c, &page(&envoy, Some(0)), UA_CHROME, &[]).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 429);
        assert!(
            Instant::now() < deadline,
            "the abandoned reservation still flies"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_missing_cost_or_a_client_gone_settles_at_the_reservation() {
    let up = TestUpstream::start().await;
    let envoy = envoy_with(json!({"limits": [items_limit()]}), &up).await;
    // No cost header: each request keeps its 20.
    let c = client(ip(5));
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(get(&c, &page(&envoy, None), UA_CHROME, &[]).await.status);
    }
    assert_eq!(got, [200, 200, 200, 200, 200, 429]);

    // Two clients of one address hang up while the origin holds their requests (cost
    // header 0 never arrives): the reservations stand. 100 - 2 x 20 = 3 more pages.
    let slow = envoy.url("/list?delay_ms=2000&header=x-crawlguard-cost:0");
    for _ in 0..2 {
        let c = reqwest::Client::builder()
            .local_address(std::net::IpAddr::V4(ip(6)))
            .timeout(Duration::from_millis(200))
            .build()
            .expect("client");
        let r = c.get(&slow).header("user-agent", UA_CHROME).send().await;
        assert!(r.is_err(), "the origin answered before the client gave up");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while up
        .requests()
        .await
        .iter()
        .filter(|r| r["path"] == json!("/list?delay_ms=2000&header=x-crawlguard-cost:0"))
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "the abandoned requests never reached the origin"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c = client(ip(6));
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(
            get(&c, &page(&envoy, Some(20)), UA_CHROME, &[])
                .await
                .status,
        );
    }
    assert_eq!(got, [200, 200, 200, 429]);
}

/// Scripts: 1 token, Retry-After exactly 1 s (no jitter); escalation after 2 ignored
/// Retry-Afters, doubling up to 8 s, forgotten after 3 s without an ignored request.
fn compliance_config() -> Value {
    json!({
        "classes": {"script": {
            "retry_after": {"min_s": 1, "max_s": 1, "jitter_s": 0},
            "escalation": {"enabled": true, "after_ignored": 2, "factor": 2, "max_s": 8, "decay_s": 3}
        }},
        "limits": [
            {"name": "scripts", "class": "script", "route": "*", "rate_per_s": 0.001,
             "burst": 1, "key": "client_ip"},
            {"name": "crawlers", "class": "search_crawler", "route": "*", "rate_per_s": 0.001,
             "burst": 1, "key": "client_ip"}
        ]
    })
}

#[tokio::test]
async fn a_client_that_waits_its_retry_after_is_honoured_and_one_that_hammers_is_not() {
    let up = TestUpstream::start().await;
    let envoy = envoy_with(compliance_config(), &up).await;
    let url = envoy.url("/");
    // The patient one: limited, waits exactly the Retry-After it got, comes back.
    let patient = client(ip(10));
    assert_eq!(get(&patient, &url, UA_CURL, &[]).await.status, 200);
    let r = get(&patient, &url, UA_CURL, &[]).await;
    assert_eq!((r.status, r.retry_after_s()), (429, Some(1)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(get(&patient, &url, UA_CURL, &[]).await.status, 429);
    assert_eq!(
        envoy
            .counter("crawlguard.class.script.retry_after_honoured")
            .await,
        1
    );
    assert_eq!(
        envoy
            .counter("crawlguard.class.script.retry_after_ignored")
            .await,
        0
    );
    // The impatient one retries at once, twice.
    let hammer = client(ip(11));
    assert_eq!(get(&hammer, &url, UA_CURL, &[]).await.status, 200);
    for _ in 0..3 {
        assert_eq!(get(&hammer, &url, UA_CURL, &[]).await.status, 429);
    }
    assert_eq!(
        envoy
            .counter("crawlguard.class.script.retry_after_ignored")
            .await,
        2
    );
    assert_eq!(
        envoy
            .counter("crawlguard.class.script.retry_after_honoured")
            .await,
        1
    );
}

#[tokio::test]
async fn retrying_at_once_escalates_up_to_max_and_decays_after_waiting() {
    let up = TestUpstream::start().await;
    let envoy = envoy_with(compliance_config(), &up).await;
    let url = envoy.url("/");
    let c = client(ip(12));
    assert_eq!(get(&c, &url, UA_CURL, &[]).await.status, 200);
    let mut seen = Vec::new();
    for _ in 0..6 {
        let r = get(&c, &url, UA_CURL, &[]).await;
        assert_eq!(r.status, 429);
        seen.push(r.retry_after_s().unwrap_or(0));
    }
    assert_eq!(seen, [1, 1, 2, 4, 8, 8]);
    assert_eq!(envoy.counter("crawlguard.class.script.escalated").await, 4);
    // Its last penalty (8 s) served, and so decay_s (3 s) without coming back: it starts
    // over at the class's 1 s. (Back after decay_s but within the penalty, it would still
    // be in it: a penalty lasts what its Retry-After said.)
    tokio::time::sleep(Duration::from_millis(8200)).await;
    let r = get(&c, &url, UA_CURL, &[]).await;
    assert_eq!((r.status, r.retry_after_s()), (429, Some(1)));
    assert_eq!(envoy.counter("crawlguard.class.script.escalated").await, 4);
}

#[tokio::test]
async fn a_verified_crawler_never_escalates() {
    let up = TestUpstream::start().await;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(compliance_config())
            .in_front_of(&up)
            .fake_verifier(vec![("127.0.0.7", "googlebot", "verified")]),
    )
    .await;
    let url = envoy.url("/");
    let c = client(ip(7));
    assert_eq!(
        get(&c, &url, UA_GOOGLEBOT, &[]).await.upstream_class(),
        Some("search_crawler")
    );
    let mut ras = Vec::new();
    for _ in 0..8 {
        let r = get(&c, &url, UA_GOOGLEBOT, &[]).await;
        assert_eq!(r.status, 429);
        ras.push(r.retry_after_s().unwrap_or(0));
    }
    // search_crawler's own range (1..60 +0..5): the wait for a token is 1000 s, clamped.
    assert!(ras.iter().all(|ra| (60..=65).contains(ra)), "{ras:?}");
    assert_eq!(
        envoy
            .counter("crawlguard.class.search_crawler.escalated")
            .await,
        0
    );
    assert_eq!(
        envoy
            .counter("crawlguard.class.search_crawler.retry_after_ignored")
            .await,
        7
    );
}

#[tokio::test]
async fn a_limit_in_shadow_mode_counts_while_the_others_enforce() {
    let up = TestUpstream::start().await;
    let envoy = envoy_with(
        json!({"limits": [
            {"name": "trial", "class": "*", "route": "*", "rate_per_s": 0.001, "burst": 2,
             "key": "client_ip", "mode": "shadow"},
            {"name": "real", "class": "*", "route": "*", "rate_per_s": 0.001, "burst": 4,
             "key": "client_ip"}
        ]}),
        &up,
    )
    .await;
    let c = client(ip(20));
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(get(&c, &envoy.url("/"), UA_CHROME, &[]).await.status);
    }
    assert_eq!(got, [200, 200, 200, 200, 429, 429]);
    assert_eq!(envoy.counter("crawlguard.class.human.allowed").await, 2);
    assert_eq!(
        envoy.counter("crawlguard.class.human.shadow_limited").await,
        2
    );
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 2);
    assert_eq!(up.requests().await.len(), 4);
}

/// AdsBot-Google's User-Agent: bot id `adsbot-google`, class `other_bot` once verified.
const UA_ADSBOT: &str = "AdsBot-Google (+http://www.google.com/adsbot.html)";

/// `other_bot` limited to 1 token per address and escalating after one ignored Retry-After
/// (1 s, doubling to 8 s), `verifier.on_error` as given; the fake verifier verifies
/// AdsBot-Google for 127.0.0.8 only.
async fn other_bot_escalating(on_error: &str, up: &TestUpstream) -> Envoy {
    let cfg = json!({
        "verifier": {"on_error": on_error},
        "classes": {"other_bot": {
            "retry_after": {"min_s": 1, "max_s": 1, "jitter_s": 0},
            "escalation": {"enabled": true, "after_ignored": 1, "factor": 2, "max_s": 8, "decay_s": 60}
        }},
        "limits": [{"name": "bots", "class": "other_bot", "route": "*", "rate_per_s": 0.001,
                    "burst": 1, "key": "client_ip"}]
    });
    Envoy::start(
        EnvoyOpts::with_config(cfg)
            .in_front_of(up)
            .fake_verifier(vec![("127.0.0.8", "adsbot-google", "verified")]),
    )
    .await
}

/// Six requests of `ua` from 127.0.0.`last`, ignoring every Retry-After: the class the
/// first reached the origin with, and each reply's Retry-After.
async fn six_ignoring(envoy: &Envoy, last: u8, ua: &str) -> (Option<String>, Vec<Option<u64>>) {
    let c = client(ip(last));
    let url = envoy.url("/");
    let first = get(&c, &url, ua, &[]).await;
    let mut ras = vec![first.retry_after_s()];
    for _ in 0..5 {
        ras.push(get(&c, &url, ua, &[]).await.retry_after_s());
    }
    (first.upstream_class().map(str::to_string), ras)
}

/// A verified claim whose class is not a crawler class (AdsBot-Google is `other_bot`) does
/// not escalate either, though `other_bot` escalates here; a declared bot of the same class
/// that nobody verified does.
#[tokio::test]
async fn a_verified_other_bot_never_escalates_but_a_declared_one_does() {
    let up = TestUpstream::start().await;
    let envoy = other_bot_escalating("unverified_bot", &up).await;
    let (class, ras) = six_ignoring(&envoy, 8, UA_ADSBOT).await;
    assert_eq!(class.as_deref(), Some("other_bot"));
    assert_eq!(ras, [None, Some(1), Some(1), Some(1), Some(1), Some(1)]);
    assert_eq!(
        envoy.counter("crawlguard.class.other_bot.escalated").await,
        0
    );
    // The control: a declared bot nobody verified, same class, same flood.
    let (class, ras) = six_ignoring(&envoy, 9, "ExampleBot/1.0").await;
    assert_eq!(class.as_deref(), Some("other_bot"));
    assert_eq!(ras, [None, Some(1), Some(2), Some(4), Some(8), Some(8)]);
    assert_eq!(
        envoy.counter("crawlguard.class.other_bot.escalated").await,
        4
    );
}

/// With `on_error: claimed_class`, an AdsBot-Google claim the verifier could not check (the
/// fake verifier knows nothing of 127.0.0.12: a verifier error) gets `other_bot` as
/// claimed, but nothing proves it verified, so it escalates like any `other_bot`: anyone can
/// make their own lookup fail.
#[tokio::test]
async fn a_claim_trusted_on_a_verifier_error_is_no_verified_claim() {
    let up = TestUpstream::start().await;
    let envoy = other_bot_escalating("claimed_class", &up).await;
    let (class, ras) = six_ignoring(&envoy, 12, UA_ADSBOT).await;
    assert_eq!(class.as_deref(), Some("other_bot"));
    assert_eq!(ras, [None, Some(1), Some(2), Some(4), Some(8), Some(8)]);
    envoy
        .assert_counters(&[
            ("crawlguard.class.other_bot.escalated", 4),
            ("crawlguard.verify.verified", 0),
        ])
        .await;
}

#[tokio::test]
async fn stalled_requests_hold_only_their_own_addresss_places() {
    // One reservation in flight per address under an account limit. The hostile reviews'
    // attacks: a few stalled requests held every request without an account at the cap;
    // without the cap, 60 at once from one address put the shared key deep in debt.
    let up = TestUpstream::start().await;
    let limit = json!({"name": "details", "class": "*", "route": "*", "rate_per_s": 0.001,
        "burst": 1000, "key": "header:x-account",
        "cost": {"reserve": 20, "max_in_flight": 1, "from_response_header": "x-crawlguard-cost"}});
    let human = json!({"retry_after": {"min_s": 1, "max_s": 100, "jitter_s": 0}});
    let envoy = envoy_with(json!({"classes": {"human": human}, "limits": [limit]}), &up).await;
    let slow = "/list?delay_ms=8000&header=x-crawlguard-cost:0";
    let mut held = Vec::new();
    for (n, account) in [(10, None), (11, None), (12, None), (13, Some("acct-1"))] {
        let (c, url) = (client(ip(n)), envoy.url(slow));
        held.push(tokio::spawn(async move {
            let extra: Vec<(&str, &str)> = account.map(|a| ("x-account", a)).into_iter().collect();
            get(&c, &url, UA_CHROME, &extra).await.status
        }));
    }
    // Wait until the origin holds all four.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = up
            .requests()
            .await
            .iter()
            .filter(|r| r["path"] == json!(slow))
            .count();
        if seen == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "the origin got {seen} of 4");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another address, with or without the account, is admitted; an address in flight is at
    // its cap (the shortest Retry-After).
    let other = get(&client(ip(14)), &page(&envoy, Some(0)), UA_CHROME, &[]).await;
    assert_eq!(other.status, 200);
    let acct = [("x-account", "acct-1")];
    let elsewhere = get(&client(ip(15)), &page(&envoy, Some(0)), UA_CHROME, &acct).await;
    assert_eq!(elsewhere.status, 200);
    for (n, extra) in [(10, &[][..]), (13, &acct[..])] {
        let same = get(&client(ip(n)), &page(&envoy, Some(0)), UA_CHROME, extra).await;
        assert_eq!(
            (same.status, same.retry_after_s()),
            (429, Some(1)),
            "ip {n}"
        );
    }
    for h in held {
        assert_eq!(h.await.expect("request task"), 200);
    }
    // Sixty at once from one address without an account: one flies, 59 are refused.
    let got = at_once(
        16,
        &envoy.url("/list?delay_ms=2000&header=x-crawlguard-cost:1"),
        60,
    )
    .await;
    assert_eq!(got, [[200; 1].as_slice(), &[429; 59]].concat());
}
