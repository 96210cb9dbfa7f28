//! Issue 4, checked in a real Envoy: every rejection that leaves Envoy looks like crawlguard's
//! own, whatever the origin sent. One test per promise, exact values.
//!
//! Each test starts a `crawlguard-test-upstream` (the scriptable origin of this crate) and an
//! Envoy whose main listener routes to it; the query string of each request tells the origin
//! what to answer (status, headers, body size, chunking, DATA frames).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crawlguard_integration::{
    client, get, Envoy, EnvoyOpts, RawHttp1, Reply, TestUpstream, UpstreamProtocol, UA_CHROME,
    UA_GOOGLEBOT,
};
use serde_json::json;

const BODY_429: &str = "429 Too Many Requests: try again after Retry-After\n";
const BODY_503: &str = "503 Service Unavailable: try again after Retry-After\n";
/// Every header a normalised response carries: crawlguard's three, and what Envoy adds to
/// any local reply. Nothing from upstream.
const LOCAL_REPLY_HEADERS: [&str; 6] = [
    "cache-control",
    "content-length",
    "content-type",
    "date",
    "retry-after",
    "server",
];
const REWRITE_FIXES: [&str; 5] = [
    "retry_after_added",
    "retry_after_converted",
    "body_replaced",
    "cache_control_replaced",
    "degraded",
];

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

async fn upstream() -> TestUpstream {
    TestUpstream::start_bin(env!("CARGO_BIN_EXE_crawlguard-test-upstream")).await
}

/// Envoy with `cfg` in front of `up` over HTTP/1.1.
async fn envoy_for(up: &TestUpstream, cfg: serde_json::Value) -> Envoy {
    Envoy::start(EnvoyOpts::with_config(cfg).upstream(up.addr(), UpstreamProtocol::Http1)).await
}

/// `/?k=v&...`, form-encoded.
fn q(params: &[(&str, &str)]) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let qs: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    format!("/?{}", qs.join("&"))
}

/// Every `crawlguard.rewrite.*` counter (0 when undefined).
async fn rewrite_stats(envoy: &Envoy) -> BTreeMap<String, u64> {
    envoy
        .crawlguard_stats()
        .await
        .into_iter()
        .filter(|(k, v)| k.starts_with("crawlguard.rewrite.") && *v > 0)
        .map(|(k, v)| (k["crawlguard.rewrite.".len()..].to_string(), v))
        .collect()
}

fn stats(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The promises every normalised response keeps: status, exactly one delay-seconds
/// Retry-After, `no-store`, the one-line text body with a correct length, no header from
/// upstream. Returns the Retry-After.
fn assert_normalised(r: &Reply, status: u16) -> u64 {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.header_count("retry-after"), 1, "{r:?}");
    let ra = r.header("retry-after").expect("retry-after");
    assert!(
        !ra.is_empty() && ra.bytes().all(|b| b.is_ascii_digit()),
        "retry-after must be delay-seconds: {ra:?}"
    );
    assert_eq!(r.header_count("cache-control"), 1, "{r:?}");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let want = match status {
        503 => BODY_503.to_string(),
        429 => BODY_429.to_string(),
        other => panic!("no expected body for {other}"),
    };
    assert_eq!(r.body, want);
    assert_eq!(
        r.header("content-length"),
        Some(want.len().to_string().as_str())
    );
    assert_eq!(r.header_names(), LOCAL_REPLY_HEADERS, "{r:?}");
    ra.parse().unwrap()
}

/// IMF-fixdate of Unix time `t` (`Mon, 30 Nov 2026 12:00:00 GMT`).
fn http_date(t: u64) -> String {
    let days = (t / 86_400) as i64;
    let secs = t % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        WD[(days % 7) as usize],
        d,
        MON[(m - 1) as usize],
        y,
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn http_date_helper_formats_imf_fixdate() {
    assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(http_date(1_796_040_000), "Mon, 30 Nov 2026 12:00:00 GMT");
}

#[tokio::test]
async fn upstream_429_retry_after_120_is_clamped_to_the_class_max() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let r = get(
        &client(ip(20)),
        &envoy.url(&q(&[("status", "429"), ("header", "retry-after: 120")])),
        UA_CHROME,
        &[],
    )
    .await;
    // human: [1, 60].
    assert_eq!(assert_normalised(&r, 429), 60);
    // And a 0 is raised to the class minimum.
    let r = get(
        &client(ip(20)),
        &envoy.url(&q(&[("status", "429"), ("header", "retry-after: 0")])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(assert_normalised(&r, 429), 1);
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[("status_429", 2), ("body_replaced", 2)])
    );
}

#[tokio::test]
async fn upstream_429_retry_after_120_is_kept_within_the_class_range() {
    let up = upstream().await;
    let envoy = envoy_for(
        &up,
        json!({"classes": {"human": {"retry_after": {"min_s": 1, "max_s": 300, "jitter_s": 2}}}}),
    )
    .await;
    let r = get(
        &client(ip(21)),
        &envoy.url(&q(&[("status", "429"), ("header", "retry-after: 120")])),
        UA_CHROME,
        &[],
    )
    .await;
    // A kept value gets no jitter.
    assert_eq!(assert_normalised(&r, 429), 120);
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[("status_429", 1), ("body_replaced", 1)])
    );
}

#[tokio::test]
async fn upstream_429_http_date_is_converted_to_seconds() {
    let up = upstream().await;
    let envoy = envoy_for(
        &up,
        json!({"classes": {"human": {"retry_after": {"min_s": 1, "max_s": 300, "jitter_s": 2}}}}),
    )
    .await;
    let date = http_date(now_s() + 90);
    let r = get(
        &client(ip(22)),
        &envoy.url(&q(&[
            ("status", "429"),
            ("header", &format!("retry-after: {date}")),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    let ra = assert_normalised(&r, 429);
    println!("retry-after: {date} -> {ra}");
    assert!((89..=91).contains(&ra), "{date} -> {ra}");
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_429", 1),
            ("body_replaced", 1),
            ("retry_after_converted", 1)
        ])
    );
}

#[tokio::test]
async fn upstream_429_http_date_in_the_past_becomes_1() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let date = http_date(now_s() - 3600);
    let r = get(
        &client(ip(23)),
        &envoy.url(&q(&[
            ("status", "429"),
            ("header", &format!("retry-after: {date}")),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(assert_normalised(&r, 429), 1);
    assert_eq!(
        envoy
            .counter("crawlguard.rewrite.retry_after_converted")
            .await,
        1
    );
}

#[tokio::test]
async fn upstream_429_invalid_retry_after_gets_the_class_default() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let c = client(ip(24));
    let url = envoy.url(&q(&[("status", "429"), ("header", "retry-after: soon")]));
    let mut seen = BTreeSet::new();
    for _ in 0..12 {
        let ra = assert_normalised(&get(&c, &url, UA_CHROME, &[]).await, 429);
        // human: min_s 1 + 0..=2.
        assert!((1..=3).contains(&ra), "{ra}");
        seen.insert(ra);
    }
    println!("retry-after values for `soon`: {seen:?}");
    assert!(seen.len() >= 2, "jitter should spread values: {seen:?}");
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_429", 12),
            ("body_replaced", 12),
            ("retry_after_added", 12)
        ])
    );
}

#[tokio::test]
async fn upstream_429_without_retry_after_gets_the_class_default() {
    let up = upstream().await;
    let envoy = envoy_for(
        &up,
        json!({"classes": {"human": {"retry_after": {"min_s": 10, "max_s": 60, "jitter_s": 5}}}}),
    )
    .await;
    let c = client(ip(25));
    let url = envoy.url(&q(&[("status", "429")]));
    let mut seen = BTreeSet::new();
    for _ in 0..12 {
        let ra = assert_normalised(&get(&c, &url, UA_CHROME, &[]).await, 429);
        assert!((10..=15).contains(&ra), "{ra}");
        seen.insert(ra);
    }
    println!("retry-after values when missing: {seen:?}");
    assert!(seen.len() >= 2, "jitter should spread values: {seen:?}");
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_429", 12),
            ("body_replaced", 12),
            ("retry_after_added", 12)
        ])
    );
}

#[tokio::test]
async fn exactly_one_retry_after_when_upstream_sends_several() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let c = client(ip(26));
    // Two agreeing values: kept (one header).
    let r = get(
        &c,
        &envoy.url(&q(&[
            ("status", "503"),
            ("header", "retry-after: 7"),
            ("header", "retry-after: 7"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(assert_normalised(&r, 503), 7);
    // Two differing values: invalid, replaced by the class default (one header).
    let r = get(
        &c,
        &envoy.url(&q(&[
            ("status", "503"),
            ("header", "retry-after: 7"),
            ("header", "retry-after: 40"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    let ra = assert_normalised(&r, 503);
    assert!((1..=3).contains(&ra), "{ra}");
    assert_eq!(
        envoy.counter("crawlguard.rewrite.retry_after_added").await,
        1
    );
}

#[tokio::test]
async fn upstream_503_cache_control_and_validators_are_replaced() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let r = get(
        &client(ip(27)),
        &envoy.url(&q(&[
            ("status", "503"),
            ("header", "retry-after: 30"),
            ("header", "cache-control: public, max-age=600"),
            ("header", "etag: \"v1\""),
            ("header", "expires: Thu, 01 Dec 2099 16:00:00 GMT"),
            ("header", "last-modified: Mon, 02 Nov 2026 10:00:00 GMT"),
            ("header", "age: 12"),
            ("header", "vary: accept-encoding"),
            ("header", "set-cookie: sid=1"),
            ("body", "<html><body>maintenance</body></html>"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(assert_normalised(&r, 503), 30);
    for h in [
        "etag",
        "expires",
        "last-modified",
        "age",
        "vary",
        "set-cookie",
    ] {
        assert!(r.header(h).is_none(), "{h} survived: {r:?}");
    }
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_503", 1),
            ("body_replaced", 1),
            ("cache_control_replaced", 1)
        ])
    );
}

#[tokio::test]
async fn no_robots_header_and_no_redirect_on_normalised_responses() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let r = get(
        &client(ip(28)),
        &envoy.url(&q(&[
            ("status", "503"),
            ("header", "x-robots-tag: noindex"),
            ("header", "location: /error.html"),
            ("header", "refresh: 0; url=/error.html"),
            ("header", "content-type: text/html"),
            (
                "body",
                "<html><head><meta name=\"robots\" content=\"noindex\"></head></html>",
            ),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_normalised(&r, 503);
    assert!(r.header("x-robots-tag").is_none());
    assert!(r.header("location").is_none());
    assert!(r.header("refresh").is_none());
    assert!(!r.body.contains("robots"));
}

#[tokio::test]
async fn ten_megabyte_chunked_503_costs_no_memory() {
    const N: usize = 5;
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let c = client(ip(29));
    let url = envoy.url(&q(&[
        ("status", "503"),
        ("body_bytes", "10485760"),
        ("chunk_bytes", "65536"),
        ("chunked", "1"),
    ]));
    // Warm up (connection pools, first-request allocations), then measure.
    assert_normalised(&get(&c, &url, UA_CHROME, &[]).await, 503);
    let before = envoy.memory_allocated().await;
    for _ in 0..N {
        assert_normalised(&get(&c, &url, UA_CHROME, &[]).await, 503);
    }
    let after = envoy.memory_allocated().await;
    let growth = after as i64 - before as i64;
    let sent: Vec<u64> = up
        .requests()
        .await
        .iter()
        .map(|r| r["body_bytes_sent"].as_u64().unwrap())
        .collect();
    println!(
        "envoy allocated before {before} after {after} (growth {growth} bytes over {N} \
         x 10 MiB); upstream body bytes handed to the socket per request: {sent:?}"
    );
    assert!(
        growth < 5 * 1024 * 1024,
        "Envoy's heap grew by {growth} bytes"
    );
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_503", N as u64 + 1),
            ("body_replaced", N as u64 + 1),
            ("retry_after_added", N as u64 + 1)
        ])
    );
}

#[tokio::test]
async fn h2c_upstream_503_in_four_data_frames() {
    let up = upstream().await;
    let envoy =
        Envoy::start(EnvoyOpts::with_config(json!({})).upstream(up.addr(), UpstreamProtocol::H2c))
            .await;
    let r = get(
        &client(ip(30)),
        &envoy.url(&q(&[
            ("status", "503"),
            ("header", "retry-after: 9"),
            ("header", "cache-control: max-age=60"),
            ("body_bytes", "65536"),
            ("frames", "4"),
            ("chunk_delay_ms", "20"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(assert_normalised(&r, 503), 9);
    // The reset h2 stream leaves the upstream usable: a 200 still streams through.
    let ok = get(
        &client(ip(30)),
        &envoy.url(&q(&[("body_bytes", "65536"), ("frames", "4")])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.body.len(), 65536);
    let reqs = up.requests().await;
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r["version"] == "HTTP/2.0"), "{reqs:?}");
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_503", 1),
            ("body_replaced", 1),
            ("cache_control_replaced", 1)
        ])
    );
}

#[tokio::test]
async fn empty_body_503_is_normalised() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let c = client(ip(31));
    let r = get(
        &c,
        &envoy.url(&q(&[("status", "503"), ("body_bytes", "0")])),
        UA_CHROME,
        &[],
    )
    .await;
    let ra = assert_normalised(&r, 503);
    assert!((1..=3).contains(&ra), "{ra}");
    // The headers ended the stream: no body came, so none was replaced.
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[("status_503", 1), ("retry_after_added", 1)])
    );
}

#[tokio::test]
async fn empty_body_503_from_h2c_upstream_is_normalised() {
    let up = upstream().await;
    let envoy =
        Envoy::start(EnvoyOpts::with_config(json!({})).upstream(up.addr(), UpstreamProtocol::H2c))
            .await;
    let r = get(
        &client(ip(32)),
        &envoy.url(&q(&[
            ("status", "503"),
            ("header", "retry-after: 5"),
            ("body_bytes", "0"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(assert_normalised(&r, 503), 5);
    assert_eq!(rewrite_stats(&envoy).await, stats(&[("status_503", 1)]));
}

#[tokio::test]
async fn body_larger_than_the_buffer_limit_is_still_a_clean_503() {
    const LIMIT: u32 = 32 * 1024;
    let up = upstream().await;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({}))
            .upstream(up.addr(), UpstreamProtocol::Http1)
            .buffer_limit(LIMIT),
    )
    .await;
    let c = client(ip(33));
    for chunked in ["0", "1"] {
        let r = get(
            &c,
            &envoy.url(&q(&[
                ("status", "503"),
                ("body_bytes", "1048576"),
                ("chunked", chunked),
            ])),
            UA_CHROME,
            &[],
        )
        .await;
        assert_normalised(&r, 503);
    }
    // The limit is real: a 1 MiB 200 still streams through untouched.
    let r = get(
        &c,
        &envoy.url(&q(&[("status", "200"), ("body_bytes", "1048576")])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 1_048_576);
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_503", 2),
            ("body_replaced", 2),
            ("retry_after_added", 2)
        ])
    );
}

#[tokio::test]
async fn keep_alive_connection_survives_a_normalised_reply() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let addr = format!("127.0.0.1:{}", envoy.main_port()).parse().unwrap();
    let mut conn = RawHttp1::connect(ip(34), addr).await;
    let first = conn
        .get(
            &q(&[
                ("status", "503"),
                ("header", "retry-after: 4"),
                ("body_bytes", "200000"),
                ("chunked", "1"),
            ]),
            UA_CHROME,
        )
        .await;
    assert_eq!(assert_normalised(&first, 503), 4);
    assert!(first.header("connection").is_none(), "{first:?}");
    let second = conn.get("/?status=200&body=second", UA_CHROME).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body, "second");
    let third = conn.get("/?status=429", UA_CHROME).await;
    assert_normalised(&third, 429);
    let s = envoy.stats().await;
    assert_eq!(
        s.get("http.main.downstream_cx_total"),
        Some(&1),
        "one connection"
    );
    assert_eq!(s.get("http.main.downstream_rq_total"), Some(&3));
}

#[tokio::test]
async fn other_statuses_pass_through_untouched_by_default() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let c = client(ip(35));
    for status in ["404", "500", "502"] {
        let body = format!("origin {status} page\n");
        let r = get(
            &c,
            &envoy.url(&q(&[
                ("status", status),
                ("header", "retry-after: soon"),
                ("header", "cache-control: public, max-age=600"),
                ("header", "etag: \"e\""),
                ("body", &body),
            ])),
            UA_CHROME,
            &[],
        )
        .await;
        assert_eq!(r.status.to_string(), status);
        assert_eq!(r.body, body);
        assert_eq!(r.header("retry-after"), Some("soon"));
        assert_eq!(r.header("cache-control"), Some("public, max-age=600"));
        assert_eq!(r.header("etag"), Some("\"e\""));
        assert_eq!(r.upstream_class(), Some("human"));
    }
    assert_eq!(rewrite_stats(&envoy).await, stats(&[]));
}

#[tokio::test]
async fn status_502_is_normalised_when_configured() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({"rewrite": {"statuses": [429, 502, 503]}})).await;
    let r = get(
        &client(ip(36)),
        &envoy.url(&q(&[
            ("status", "502"),
            ("header", "retry-after: 20"),
            ("header", "etag: \"e\""),
            ("body", "<html>bad gateway</html>"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(r.status, 502, "{r:?}");
    assert_eq!(r.header_count("retry-after"), 1);
    assert_eq!(r.header("retry-after"), Some("20"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header_names(), LOCAL_REPLY_HEADERS, "{r:?}");
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    // One short line that names the status actually sent.
    assert!(
        r.body.len() <= 64 && r.body.ends_with('\n') && !r.body.trim_end().contains('\n'),
        "{:?}",
        r.body
    );
    assert!(
        r.body.starts_with("502 "),
        "a 502 must not carry a body that says another status: {:?}",
        r.body
    );
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[("status_502", 1), ("body_replaced", 1)])
    );
}

#[tokio::test]
async fn rewrite_disabled_passes_upstream_rejections_through() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({"rewrite": {"enabled": false}})).await;
    let r = get(
        &client(ip(37)),
        &envoy.url(&q(&[
            ("status", "429"),
            ("header", "cache-control: public, max-age=600"),
            ("body", "origin says slow down\n"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, "origin says slow down\n");
    assert!(r.header("retry-after").is_none());
    assert_eq!(r.header("cache-control"), Some("public, max-age=600"));
    assert_eq!(rewrite_stats(&envoy).await, stats(&[]));
}

#[tokio::test]
async fn crawlguard_own_429_is_not_rewritten_again() {
    let up = upstream().await;
    let envoy = envoy_for(
        &up,
        json!({"limits": [{"name": "all", "class": "*", "route": "*", "rate_per_s": 0.01,
                           "burst": 1, "key": "client_ip"}]}),
    )
    .await;
    let c = client(ip(38));
    let url = envoy.url(&q(&[("status", "200"), ("body", "ok")]));
    assert_eq!(get(&c, &url, UA_CHROME, &[]).await.status, 200);
    let r = get(&c, &url, UA_CHROME, &[]).await;
    let ra = assert_normalised(&r, 429);
    // Bucket deficit ~100 s, clamped to human max 60, + 0..=2 jitter.
    assert!((60..=62).contains(&ra), "{ra}");
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 1);
    assert_eq!(rewrite_stats(&envoy).await, stats(&[]));
    for f in REWRITE_FIXES {
        assert_eq!(envoy.counter(&format!("crawlguard.rewrite.{f}")).await, 0);
    }
    assert_eq!(
        up.requests().await.len(),
        1,
        "the rejection never reached upstream"
    );
}

#[tokio::test]
async fn degraded_200_is_a_503_for_a_verified_crawler_only() {
    let up = upstream().await;
    let envoy = Envoy::start(
        // A generous callout timeout: the machine may be busy.
        EnvoyOpts::with_config(json!({"degraded": "x-degraded", "verifier": {"timeout_ms": 5000}}))
            .upstream(up.addr(), UpstreamProtocol::Http1)
            .fake_verifier(vec![("127.0.0.7", "googlebot", "verified")]),
    )
    .await;
    let url = envoy.url(&q(&[
        ("status", "200"),
        ("header", "x-degraded: 1"),
        ("header", "cache-control: public, max-age=60"),
        ("body", "fallback page\n"),
    ]));

    // A browser gets the degraded page as it is.
    let human = get(&client(ip(40)), &url, UA_CHROME, &[]).await;
    assert_eq!(human.status, 200);
    assert_eq!(human.body, "fallback page\n");
    assert_eq!(human.header("x-degraded"), Some("1"));
    assert_eq!(human.upstream_class(), Some("human"));

    // A verified Googlebot gets a 503 + Retry-After instead (search_crawler: 1 + 0..=5).
    let bot = get(&client(ip(7)), &url, UA_GOOGLEBOT, &[]).await;
    let ra = assert_normalised(&bot, 503);
    assert!((1..=6).contains(&ra), "{ra}");
    assert_eq!(envoy.counter("crawlguard.verify.verified").await, 1);
    let reqs = up.requests().await;
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[1]["headers"]["x-crawler-class"],
        json!(["search_crawler"])
    );

    // An unverified Googlebot claim is not a crawler: it gets the page too.
    let unverified = get(&client(ip(8)), &url, UA_GOOGLEBOT, &[]).await;
    assert_eq!(unverified.status, 200);
    assert_eq!(unverified.upstream_class(), Some("unverified_bot"));

    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_503", 1),
            ("degraded", 1),
            ("body_replaced", 1),
            ("retry_after_added", 1),
            ("cache_control_replaced", 1)
        ])
    );
}

#[tokio::test]
async fn envoy_router_503_for_an_unreachable_upstream_is_normalised() {
    // A port nobody listens on: the router answers 503 "upstream connect error ...".
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let envoy =
        Envoy::start(EnvoyOpts::with_config(json!({})).upstream(dead, UpstreamProtocol::Http1))
            .await;
    let r = get(&client(ip(42)), &envoy.url("/"), UA_CHROME, &[]).await;
    let ra = assert_normalised(&r, 503);
    assert!((1..=3).contains(&ra), "{ra}");
    assert_eq!(
        rewrite_stats(&envoy).await,
        stats(&[
            ("status_503", 1),
            ("body_replaced", 1),
            ("retry_after_added", 1)
        ])
    );
}

#[tokio::test]
async fn slow_upstream_503_is_normalised() {
    let up = upstream().await;
    let envoy = envoy_for(&up, json!({})).await;
    let t0 = std::time::Instant::now();
    let r = get(
        &client(ip(41)),
        &envoy.url(&q(&[
            ("status", "503"),
            ("delay_ms", "300"),
            ("header", "retry-after: 3"),
            ("body_bytes", "819200"),
            ("chunk_delay_ms", "100"),
            ("chunk_bytes", "16384"),
        ])),
        UA_CHROME,
        &[],
    )
    .await;
    assert_eq!(assert_normalised(&r, 503), 3);
    // Answered when the headers came, not after the ~5 s the whole body would take.
    let elapsed = t0.elapsed();
    println!("answered after {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}
