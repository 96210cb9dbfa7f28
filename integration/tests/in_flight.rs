//! Requests in flight (`limits[].max_in_flight`) and the exempt paths' own limit in a real
//! Envoy: the test upstream counts the requests it is answering at once, so "never more
//! than N reach the origin" is measured where it matters, with connections spread over 2
//! and 4 workers; a configuration pushed over LDS while requests are in flight loses no
//! count and leaves none stuck; a robots.txt flood is limited while a polite crawler is
//! served; a herd of verified AI retrievers on one URL is held to the per-path limit of
//! `envoy/examples/ai-retriever-herd.json`.

use crawlguard_integration::{
    client, get, ip, poll_until, repo_root, Envoy, EnvoyOpts, Reply, TestUpstream, UA_CHROME,
    UA_CURL, UA_GOOGLEBOT,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHATGPT: &str = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; \
                       ChatGPT-User/1.0; +https://openai.com/bot";

/// Each connection of `tasks` (spread over 8 client addresses, one connection per task)
/// sends GETs of `url` until `target` were admitted in all (or 120 s passed), pausing
/// 20 ms after a refusal; returns (admitted, refused). Every refusal must be a clean 429
/// with a Retry-After within `retry_after`.
async fn hammer(
    url: &str,
    tasks: usize,
    target: u64,
    retry_after: std::ops::RangeInclusive<u64>,
) -> (u64, u64) {
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (url, admitted, refused, ra) = (
            url.to_string(),
            admitted.clone(),
            refused.clone(),
            retry_after.clone(),
        );
        handles.push(tokio::spawn(async move {
            // One client each: its own keep-alive connection, landing on whichever worker
            // the kernel picks.
            let c = client(ip(10 + (t % 8) as u8));
            while admitted.load(Ordering::SeqCst) < target && Instant::now() < deadline {
                let r = get(&c, &url, UA_CHROME, &[]).await;
                match r.status {
                    200 => {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    429 => {
                        let s = r.retry_after_s().expect("Retry-After");
                        assert!(ra.contains(&s), "Retry-After {s}");
                        assert_eq!(r.header("cache-control"), Some("no-store"));
                        refused.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    s => panic!("status {s}: {}", r.body),
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("client task");
    }
    (
        admitted.load(Ordering::SeqCst),
        refused.load(Ordering::SeqCst),
    )
}

/// The connections each of Envoy's workers accepted on the main listener.
async fn connections_per_worker(envoy: &Envoy, workers: u32) -> Vec<u64> {
    let stats = envoy.stats_now().await;
    (0..workers)
        .map(|w| {
            let name = format!(
                "listener.127.0.0.1_{}.worker_{w}.downstream_cx_total",
                envoy.main_port()
            );
            stats.get(&name).copied().unwrap_or(0)
        })
        .collect()
}

async fn never_more_than_n_reach_the_origin(workers: u32) {
    const N: u64 = 5;
    let up = TestUpstream::start().await;
    // A slow origin: 400 ms before every response.
    up.set_mood(400, 0).await;
    let cfg = json!({"limits": [
        {"name": "origin_in_flight", "class": "*", "route": "*", "max_in_flight": N, "key": "global"}]});
    let envoy = Envoy::start(
        EnvoyOpts::with_config(cfg)
            .in_front_of(&up)
            .concurrency(workers),
    )
    .await;
    up.reset_concurrency().await;
    // 40 connections from 8 addresses; humans' Retry-After: 1 s plus 0..=2 s of jitter.
    let (admitted, refused) = hammer(&envoy.url("/page"), 40, 60, 1..=3).await;
    let (in_flight, peak, served) = up.concurrency().await;
    assert_eq!(in_flight, 0);
    assert_eq!(
        peak, N,
        "{workers} workers: the origin saw {peak} at once (max_in_flight {N})"
    );
    assert_eq!(served, admitted);
    assert!(admitted >= 60, "{admitted}");
    assert!(refused > 0, "the cap was never reached: {refused} refused");
    let per_worker = connections_per_worker(&envoy, workers).await;
    assert!(
        per_worker.iter().all(|n| *n > 0),
        "every worker took connections: {per_worker:?}"
    );
    envoy
        .assert_counters(&[
            ("crawlguard.class.human.allowed", admitted),
            ("crawlguard.class.human.limited", refused),
            ("crawlguard.class.human.limited_in_flight", refused),
            ("crawlguard.class.human.fail_open", 0),
        ])
        .await;
    envoy.assert_log_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_under_concurrency_at_2_workers() {
    never_more_than_n_reach_the_origin(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_under_concurrency_at_4_workers() {
    never_more_than_n_reach_the_origin(4).await;
}

/// `n` GETs of `path` from 127.0.0.`last` at once; their replies (a transport error, e.g.
/// a connection closed by a listener being drained, is `None`).
async fn at_once(envoy: &Envoy, path: &str, last: u8, n: usize) -> Vec<Option<Reply>> {
    let c = client(ip(last));
    let futs = (0..n).map(|_| {
        let (c, url) = (c.clone(), envoy.url(path));
        async move {
            let resp = c
                .get(&url)
                .header("user-agent", UA_CURL)
                .send()
                .await
                .ok()?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp.text().await.ok()?;
            Some(Reply {
                status,
                headers,
                body,
            })
        }
    });
    futures_join_all(futs).await
}

async fn futures_join_all<
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
>(
    futs: impl Iterator<Item = F>,
) -> Vec<T> {
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("request task"));
    }
    out
}

/// The replies of 2 requests from 127.0.0.41 sent at once, each checked: a 429 decided by
/// the configuration with RateLimit headers (the one pushed), `when`.
async fn refused_by_the_new_configuration(envoy: &Envoy, when: &str) {
    for r in at_once(envoy, "/fast", 41, 2).await {
        let r = r.unwrap_or_else(|| panic!("{when}: no reply"));
        assert_eq!(r.status, 429, "{when}: past the cap: {r:?}");
        assert_eq!(
            r.header("ratelimit-policy"),
            Some("\"script_in_flight\";q=3;qu=\"concurrent-requests\""),
            "{when}: decided by the new configuration"
        );
    }
}

/// A configuration pushed over LDS while a key is at its cap, the old listener draining (as
/// with Envoy's default drain time): the new configuration sees the places the old one's
/// requests hold, also past the 20 s a place lasts unrenewed (the replaced configuration's
/// workers renew them while their requests live); once those requests end, the key admits
/// `max_in_flight` again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_loses_no_count_and_leaves_none_stuck() {
    let up = TestUpstream::start().await;
    let limit = json!({"name": "script_in_flight", "class": "script", "route": "*",
                       "max_in_flight": 3, "key": "client_ip"});
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({"limits": [limit.clone()]}))
            .in_front_of(&up)
            .concurrency(2)
            .lds()
            .drain_time_s(60)
            .route_timeout_s(60),
    )
    .await;
    up.reset_concurrency().await;
    // Three slow requests (25 s: past two in-flight epochs) hold the address's three places.
    let slow = {
        let url = envoy.url("/slow?delay_ms=25000");
        tokio::spawn(async move {
            // The harness's clients give up after 15 s.
            let c = reqwest::Client::builder()
                .local_address(std::net::IpAddr::V4(ip(41)))
                .no_proxy()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client");
            let futs = (0..3).map(|_| {
                let (c, url) = (c.clone(), url.clone());
                async move {
                    let r = c.get(&url).header("user-agent", UA_CURL).send().await;
                    r.ok().map(|r| r.status().as_u16())
                }
            });
            futures_join_all(futs).await
        })
    };
    let seen = poll_until(Duration::from_secs(20), || async {
        (up.concurrency().await.0 == 3).then_some(())
    })
    .await;
    assert!(seen.is_some(), "the slow requests never reached the origin");
    let admitted_at = Instant::now();
    // Another configuration: the same limit, RateLimit headers on (so each reply says which
    // configuration answered it).
    envoy
        .push_filter_config(json!({"limits": [limit], "ratelimit_headers": true}))
        .await
        .expect("the new configuration is applied");
    refused_by_the_new_configuration(&envoy, "right after the reload").await;
    // 22 s after they were admitted: unrenewed, their places would be forgotten by now.
    tokio::time::sleep(Duration::from_secs(22).saturating_sub(admitted_at.elapsed())).await;
    assert_eq!(up.concurrency().await.0, 3, "the slow requests still live");
    refused_by_the_new_configuration(&envoy, "22 s later").await;
    let ended = slow.await.expect("slow requests");
    assert_eq!(ended, vec![Some(200); 3], "served by the draining listener");
    // Their places are given back when they end: three fit again at once.
    let back = poll_until(Duration::from_secs(25), || async {
        let r = at_once(&envoy, "/slow?delay_ms=300", 41, 3).await;
        r.iter()
            .all(|r| r.as_ref().is_some_and(|r| r.status == 200))
            .then_some(())
    })
    .await;
    assert!(back.is_some(), "the address never got its 3 places back");
    envoy.assert_log_clean();
}

/// The same with the replaced listener closed at once (`--drain-time-s 0`): Envoy resets
/// the requests in flight on it, their streams end (`on_log`), and the address admits
/// `max_in_flight` again without waiting for any bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_that_resets_requests_in_flight_gives_their_places_back() {
    let up = TestUpstream::start().await;
    let limit = json!({"name": "script_in_flight", "class": "script", "route": "*",
                       "max_in_flight": 3, "key": "client_ip"});
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({"limits": [limit.clone()]}))
            .in_front_of(&up)
            .concurrency(2)
            .lds(),
    )
    .await;
    let slow = {
        let url = envoy.url("/slow?delay_ms=25000");
        tokio::spawn(async move {
            let c = crawlguard_integration::client(ip(42));
            let futs = (0..3).map(|_| {
                let (c, url) = (c.clone(), url.clone());
                async move {
                    c.get(&url)
                        .header("user-agent", UA_CURL)
                        .send()
                        .await
                        .is_ok()
                }
            });
            futures_join_all(futs).await
        })
    };
    let seen = poll_until(Duration::from_secs(20), || async {
        (up.concurrency().await.0 == 3).then_some(())
    })
    .await;
    assert!(seen.is_some(), "the slow requests never reached the origin");
    envoy
        .push_filter_config(json!({"limits": [limit], "ratelimit_headers": true}))
        .await
        .expect("the new configuration is applied");
    assert_eq!(
        slow.await.expect("slow requests"),
        vec![false; 3],
        "reset with their listener"
    );
    let reset_at = Instant::now();
    let back = poll_until(Duration::from_secs(25), || async {
        let r = at_once(&envoy, "/slow?delay_ms=300", 42, 3).await;
        r.iter()
            .all(|r| r.as_ref().is_some_and(|r| r.status == 200))
            .then_some(())
    })
    .await;
    assert!(back.is_some(), "the address never got its 3 places back");
    assert!(
        reset_at.elapsed() < Duration::from_secs(10),
        "{:?}: the places waited for the bound instead of coming back with on_log",
        reset_at.elapsed()
    );
    envoy.assert_log_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_robots_txt_flood_is_limited_while_a_polite_crawler_is_served() {
    let up = TestUpstream::start().await;
    // The embedded default configuration.
    let envoy = Envoy::start(EnvoyOpts::default().in_front_of(&up).concurrency(2)).await;
    let started = Instant::now();
    // A client sending 1,000 robots.txt requests with random query strings (20 at a time):
    // not exempt, so the script class's limits; and 1,000 for the exact path.
    let flood = |last: u8, query: bool| {
        let url = envoy.url("/robots.txt");
        tokio::spawn(async move {
            let c = client(ip(last));
            let mut statuses = Vec::new();
            for batch in 0..50u32 {
                let futs = (0..20u32).map(|i| {
                    let n = (batch * 20 + i).wrapping_mul(2_654_435_761);
                    let url = if query {
                        format!("{url}?{n:08x}")
                    } else {
                        url.clone()
                    };
                    let c = c.clone();
                    async move { get(&c, &url, UA_CURL, &[]).await.status }
                });
                statuses.extend(futures_join_all(futs).await);
            }
            statuses
        })
    };
    let with_query = flood(21, true);
    let exact = flood(22, false);
    // A crawler fetching robots.txt politely (once a minute in life; 10 times here, one
    // every 300 ms, while the floods run).
    let polite = client(ip(23));
    for _ in 0..10 {
        let r = get(&polite, &envoy.url("/robots.txt"), UA_GOOGLEBOT, &[]).await;
        assert_eq!((r.status, r.upstream_class()), (200, None), "{r:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let with_query = with_query.await.expect("flood");
    let exact = exact.await.expect("flood");
    let secs = started.elapsed().as_secs() + 1;
    let ok = |v: &[u16]| v.iter().filter(|s| **s == 200).count() as u64;
    let refused = |v: &[u16]| v.iter().filter(|s| **s == 429).count() as u64;
    assert_eq!(ok(&with_query) + refused(&with_query), 1000);
    assert_eq!(ok(&exact) + refused(&exact), 1000);
    // Query strings: script_per_ip's burst of 10 and one a second, no more.
    assert!(
        (10..=10 + secs).contains(&ok(&with_query)),
        "{} of the query-string flood admitted in {secs} s",
        ok(&with_query)
    );
    // The exact path: the exempt limit's burst of 60 and one a second.
    assert!(
        (60..=60 + secs).contains(&ok(&exact)),
        "{} of the robots.txt flood admitted in {secs} s",
        ok(&exact)
    );
    let requests = up.requests().await;
    let reached = |pred: &dyn Fn(&str) -> bool| {
        requests
            .iter()
            .filter(|r| r["path"].as_str().is_some_and(pred))
            .count() as u64
    };
    assert_eq!(reached(&|p| p.starts_with("/robots.txt?")), ok(&with_query));
    assert_eq!(reached(&|p| p == "/robots.txt"), ok(&exact) + 10);
    envoy
        .assert_counters(&[
            ("crawlguard.exempt", 1000 + 10),
            ("crawlguard.exempt_limited", refused(&exact)),
            ("crawlguard.class.script.allowed", ok(&with_query)),
            ("crawlguard.class.script.limited", refused(&with_query)),
        ])
        .await;
    envoy.assert_log_clean();
}

/// `envoy/examples/ai-retriever-herd.json` (the defaults and `ai_retriever_per_path`,
/// `max_in_flight` 4 per path): ten verified ChatGPT-User retrievers from ten addresses
/// fetch one fresh, slow page at once; 4 reach the origin, 6 get ai_retriever's 429; a
/// retriever on another page is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_herd_of_ai_retrievers_on_one_url_is_held_to_the_per_path_limit() {
    let text = std::fs::read_to_string(repo_root().join("envoy/examples/ai-retriever-herd.json"))
        .expect("the example");
    let cfg: Value = serde_json::from_str(&text).expect("JSON");
    let addrs: Vec<u8> = (61..=70).collect();
    let up = TestUpstream::start().await;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(cfg)
            .in_front_of(&up)
            .concurrency(2)
            .fake_verifier(
                addrs
                    .iter()
                    .map(|a| (format!("127.0.0.{a}"), "chatgpt-user", "verified"))
                    .map(|(ip, bot, v)| {
                        crawlguard_integration::FakeVerdict::from((ip.as_str(), bot, v))
                    })
                    .collect(),
            ),
    )
    .await;
    // Each retriever verified once (the verdict is cached).
    for a in &addrs {
        let r = get(&client(ip(*a)), &envoy.url("/warm"), CHATGPT, &[]).await;
        assert_eq!((r.status, r.upstream_class()), (200, Some("ai_retriever")));
    }
    up.reset_concurrency().await;
    let herd: Vec<_> = addrs
        .iter()
        .map(|a| {
            let (c, url) = (client(ip(*a)), envoy.url("/news/fresh?delay_ms=3000"));
            async move { get(&c, &url, CHATGPT, &[]).await }
        })
        .collect();
    let herd = tokio::spawn(async move { futures_join_all(herd.into_iter()).await });
    // While the herd is in flight, another page.
    let seen = poll_until(Duration::from_secs(20), || async {
        (up.concurrency().await.0 == 4).then_some(())
    })
    .await;
    assert!(seen.is_some(), "the herd never reached the origin");
    let other = get(&client(ip(61)), &envoy.url("/news/other"), CHATGPT, &[]).await;
    assert_eq!(other.status, 200);
    let herd = herd.await.expect("herd");
    let served: Vec<&Reply> = herd.iter().filter(|r| r.status == 200).collect();
    let refused: Vec<&Reply> = herd.iter().filter(|r| r.status == 429).collect();
    assert_eq!((served.len(), refused.len()), (4, 6), "{herd:?}");
    for r in &served {
        assert_eq!(r.upstream_class(), Some("ai_retriever"));
    }
    for r in &refused {
        // ai_retriever: 1 s plus 0..=3 s of jitter.
        let s = r.retry_after_s().expect("Retry-After");
        assert!((1..=4).contains(&s), "{s}");
    }
    let (_, peak, _) = up.concurrency().await;
    assert_eq!(peak, 5, "the herd's 4 and the other page");
    envoy
        .assert_counters(&[
            ("crawlguard.class.ai_retriever.limited", 6),
            ("crawlguard.class.ai_retriever.limited_in_flight", 6),
        ])
        .await;
    envoy.assert_log_clean();
}
