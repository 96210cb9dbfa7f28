//! Issue 4, checked in a real Envoy: every rejection that leaves Envoy looks like crawlguard's
//! own, whatever the origin sent. One test per promise, exact values.
//!
//! Each test starts a `crawlguard-test-upstream` (the scriptable origin of this crate) and an
//! Envoy whose main listener routes to it; the query string of each request tells the origin
//! what to answer (status, headers, body size, chunking, DATA frames).

use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crawlguard_integration::{
    assert_clean_rejection, client, get, ip, upstream_path, Envoy, EnvoyOpts, Limit, RawHttp1,
    Reply, Table, TestUpstream, UpstreamProtocol, LOCAL_REPLY_HEADERS, UA_CHROME, UA_CURL,
    UA_GOOGLEBOT,
};
use serde_json::json;

const REWRITE_FIXES: [&str; 5] = [
    "retry_after_added",
    "retry_after_converted",
    "body_replaced",
    "cache_control_replaced",
    "degraded",
];

/// A browser's GET through `envoy` of the path that has the test upstream answer as
/// `params` say (see [`upstream_path`]).
async fn fetch(c: &reqwest::Client, envoy: &Envoy, params: &[(&str, &str)]) -> Reply {
    get(c, &envoy.url(&upstream_path(params)), UA_CHROME, &[]).await
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
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let r = fetch(
        &client(ip(20)),
        &envoy,
        &[("status", "429"), ("header", "retry-after: 120")],
    )
    .await;
    // human: [1, 60].
    assert_eq!(assert_clean_rejection(&r, 429), 60);
    // And a 0 is raised to the class minimum.
    let r = fetch(
        &client(ip(20)),
        &envoy,
        &[("status", "429"), ("header", "retry-after: 0")],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 429), 1);
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[("status_429", 2), ("body_replaced", 2)],
        )
        .await;
}

#[tokio::test]
async fn upstream_429_retry_after_120_is_kept_within_the_class_range() {
    let (envoy, _up) = Envoy::start_with_upstream(
        json!({"classes": {"human": {"retry_after": {"min_s": 1, "max_s": 300, "jitter_s": 2}}}}),
    )
    .await;
    let r = fetch(
        &client(ip(21)),
        &envoy,
        &[("status", "429"), ("header", "retry-after: 120")],
    )
    .await;
    // A kept value gets no jitter.
    assert_eq!(assert_clean_rejection(&r, 429), 120);
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[("status_429", 1), ("body_replaced", 1)],
        )
        .await;
}

#[tokio::test]
async fn upstream_429_http_date_is_converted_to_seconds() {
    let (envoy, _up) = Envoy::start_with_upstream(
        json!({"classes": {"human": {"retry_after": {"min_s": 1, "max_s": 300, "jitter_s": 2}}}}),
    )
    .await;
    let date = http_date(now_s() + 90);
    let r = fetch(
        &client(ip(22)),
        &envoy,
        &[
            ("status", "429"),
            ("header", &format!("retry-after: {date}")),
        ],
    )
    .await;
    let ra = assert_clean_rejection(&r, 429);
    println!("retry-after: {date} -> {ra}");
    assert!((89..=91).contains(&ra), "{date} -> {ra}");
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_429", 1),
                ("body_replaced", 1),
                ("retry_after_converted", 1),
            ],
        )
        .await;
}

#[tokio::test]
async fn upstream_429_http_date_in_the_past_becomes_1() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let date = http_date(now_s() - 3600);
    let r = fetch(
        &client(ip(23)),
        &envoy,
        &[
            ("status", "429"),
            ("header", &format!("retry-after: {date}")),
        ],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 429), 1);
    assert_eq!(
        envoy
            .counter("crawlguard.rewrite.retry_after_converted")
            .await,
        1
    );
}

/// An upstream 429 whose Retry-After is not usable (`params`) gets the class default: a
/// Retry-After in `range` (min_s + jitter), spread by the jitter, 12 times out of 12.
async fn assert_class_default_retry_after(
    cfg: serde_json::Value,
    from: u8,
    params: &[(&str, &str)],
    range: RangeInclusive<u64>,
) {
    let (envoy, _up) = Envoy::start_with_upstream(cfg).await;
    let c = client(ip(from));
    let url = envoy.url(&upstream_path(params));
    let mut seen = BTreeSet::new();
    for _ in 0..12 {
        let ra = assert_clean_rejection(&get(&c, &url, UA_CHROME, &[]).await, 429);
        assert!(range.contains(&ra), "{ra} not in {range:?}");
        seen.insert(ra);
    }
    println!("retry-after values for {params:?}: {seen:?}");
    assert!(seen.len() >= 2, "jitter should spread values: {seen:?}");
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_429", 12),
                ("body_replaced", 12),
                ("retry_after_added", 12),
            ],
        )
        .await;
}

#[tokio::test]
async fn upstream_429_invalid_retry_after_gets_the_class_default() {
    // human: min_s 1 + 0..=2.
    let params = [("status", "429"), ("header", "retry-after: soon")];
    assert_class_default_retry_after(json!({}), 24, &params, 1..=3).await;
}

#[tokio::test]
async fn upstream_429_without_retry_after_gets_the_class_default() {
    let cfg =
        json!({"classes": {"human": {"retry_after": {"min_s": 10, "max_s": 60, "jitter_s": 5}}}});
    assert_class_default_retry_after(cfg, 25, &[("status", "429")], 10..=15).await;
}

#[tokio::test]
async fn exactly_one_retry_after_when_upstream_sends_several() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let c = client(ip(26));
    // Two agreeing values: kept (one header).
    let r = fetch(
        &c,
        &envoy,
        &[
            ("status", "503"),
            ("header", "retry-after: 17"),
            ("header", "retry-after: 17"),
        ],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 503), 17);
    // Two differing values: invalid, replaced by a 503's default, shedding.retry_after's
    // 15 + 0..=15 (one header).
    let r = fetch(
        &c,
        &envoy,
        &[
            ("status", "503"),
            ("header", "retry-after: 17"),
            ("header", "retry-after: 40"),
        ],
    )
    .await;
    let ra = assert_clean_rejection(&r, 503);
    assert!((15..=30).contains(&ra), "{ra}");
    assert_eq!(
        envoy.counter("crawlguard.rewrite.retry_after_added").await,
        1
    );
}

#[tokio::test]
async fn upstream_503_cache_control_and_validators_are_replaced() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let r = fetch(
        &client(ip(27)),
        &envoy,
        &[
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
        ],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 503), 30);
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
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_503", 1),
                ("body_replaced", 1),
                ("cache_control_replaced", 1),
            ],
        )
        .await;
}

#[tokio::test]
async fn no_robots_header_and_no_redirect_on_normalised_responses() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let r = fetch(
        &client(ip(28)),
        &envoy,
        &[
            ("status", "503"),
            ("header", "x-robots-tag: noindex"),
            ("header", "location: /error.html"),
            ("header", "refresh: 0; url=/error.html"),
            ("header", "content-type: text/html"),
            (
                "body",
                "<html><head><meta name=\"robots\" content=\"noindex\"></head></html>",
            ),
        ],
    )
    .await;
    assert_clean_rejection(&r, 503);
    assert!(r.header("x-robots-tag").is_none());
    assert!(r.header("location").is_none());
    assert!(r.header("refresh").is_none());
    assert!(!r.body.contains("robots"));
}

#[tokio::test]
async fn ten_megabyte_chunked_503_costs_no_memory() {
    const N: usize = 5;
    let (envoy, up) = Envoy::start_with_upstream(json!({})).await;
    let c = client(ip(29));
    let url = envoy.url(&upstream_path(&[
        ("status", "503"),
        ("body_bytes", "10485760"),
        ("chunk_bytes", "65536"),
        ("chunked", "1"),
    ]));
    // Warm up (connection pools, first-request allocations), then measure.
    assert_clean_rejection(&get(&c, &url, UA_CHROME, &[]).await, 503);
    let before = envoy.memory_allocated().await;
    for _ in 0..N {
        assert_clean_rejection(&get(&c, &url, UA_CHROME, &[]).await, 503);
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
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_503", N as u64 + 1),
                ("body_replaced", N as u64 + 1),
                ("retry_after_added", N as u64 + 1),
            ],
        )
        .await;
}

#[tokio::test]
async fn h2c_upstream_503_in_four_data_frames() {
    let up = TestUpstream::start().await;
    let envoy =
        Envoy::start(EnvoyOpts::with_config(json!({})).upstream(up.addr(), UpstreamProtocol::H2c))
            .await;
    let r = fetch(
        &client(ip(30)),
        &envoy,
        &[
            ("status", "503"),
            ("header", "retry-after: 19"),
            ("header", "cache-control: max-age=60"),
            ("body_bytes", "65536"),
            ("frames", "4"),
            ("chunk_delay_ms", "20"),
        ],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 503), 19);
    // The reset h2 stream leaves the upstream usable: a 200 still streams through.
    let ok = fetch(
        &client(ip(30)),
        &envoy,
        &[("body_bytes", "65536"), ("frames", "4")],
    )
    .await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.body.len(), 65536);
    let reqs = up.requests().await;
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r["version"] == "HTTP/2.0"), "{reqs:?}");
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_503", 1),
                ("body_replaced", 1),
                ("cache_control_replaced", 1),
            ],
        )
        .await;
}

#[tokio::test]
async fn empty_body_503_is_normalised() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let c = client(ip(31));
    let r = fetch(&c, &envoy, &[("status", "503"), ("body_bytes", "0")]).await;
    let ra = assert_clean_rejection(&r, 503);
    assert!((15..=30).contains(&ra), "{ra}");
    // The headers ended the stream: no body came, so none was replaced.
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[("status_503", 1), ("retry_after_added", 1)],
        )
        .await;
}

#[tokio::test]
async fn empty_body_503_from_h2c_upstream_is_normalised() {
    let up = TestUpstream::start().await;
    let envoy =
        Envoy::start(EnvoyOpts::with_config(json!({})).upstream(up.addr(), UpstreamProtocol::H2c))
            .await;
    let r = fetch(
        &client(ip(32)),
        &envoy,
        &[
            ("status", "503"),
            ("header", "retry-after: 25"),
            ("body_bytes", "0"),
        ],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 503), 25);
    envoy
        .assert_nonzero_counters("crawlguard.rewrite.", &[("status_503", 1)])
        .await;
}

#[tokio::test]
async fn body_larger_than_the_buffer_limit_is_still_a_clean_503() {
    const LIMIT: u32 = 32 * 1024;
    let up = TestUpstream::start().await;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({}))
            .upstream(up.addr(), UpstreamProtocol::Http1)
            .buffer_limit(LIMIT),
    )
    .await;
    let c = client(ip(33));
    for chunked in ["0", "1"] {
        let r = fetch(
            &c,
            &envoy,
            &[
                ("status", "503"),
                ("body_bytes", "1048576"),
                ("chunked", chunked),
            ],
        )
        .await;
        assert_clean_rejection(&r, 503);
    }
    // The limit is real: a 1 MiB 200 still streams through untouched.
    let r = fetch(&c, &envoy, &[("status", "200"), ("body_bytes", "1048576")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 1_048_576);
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_503", 2),
                ("body_replaced", 2),
                ("retry_after_added", 2),
            ],
        )
        .await;
}

#[tokio::test]
async fn keep_alive_connection_survives_a_normalised_reply() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let mut conn = RawHttp1::connect(ip(34), envoy.main_addr()).await;
    let first = conn
        .get(
            &upstream_path(&[
                ("status", "503"),
                ("header", "retry-after: 24"),
                ("body_bytes", "200000"),
                ("chunked", "1"),
            ]),
            UA_CHROME,
        )
        .await;
    assert_eq!(assert_clean_rejection(&first, 503), 24);
    assert!(first.header("connection").is_none(), "{first:?}");
    let second = conn.get("/?status=200&body=second", UA_CHROME).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body, "second");
    let third = conn.get("/?status=429", UA_CHROME).await;
    assert_clean_rejection(&third, 429);
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
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let c = client(ip(35));
    let mut t = Table::new("statuses passed through");
    for status in ["404", "500", "502"] {
        let body = format!("origin {status} page\n");
        let r = fetch(
            &c,
            &envoy,
            &[
                ("status", status),
                ("header", "retry-after: soon"),
                ("header", "cache-control: public, max-age=600"),
                ("header", "etag: \"e\""),
                ("body", &body),
            ],
        )
        .await;
        t.eq(status, "status", r.status.to_string(), status);
        t.eq(status, "body", &r.body, &body);
        t.eq(status, "retry-after", r.header("retry-after"), Some("soon"));
        t.eq(
            status,
            "cache-control",
            r.header("cache-control"),
            Some("public, max-age=600"),
        );
        t.eq(status, "etag", r.header("etag"), Some("\"e\""));
        t.eq(status, "class upstream", r.upstream_class(), Some("human"));
    }
    t.finish();
    envoy
        .assert_nonzero_counters("crawlguard.rewrite.", &[])
        .await;
}

#[tokio::test]
async fn status_502_is_normalised_when_configured() {
    let up = TestUpstream::start().await;
    let envoy =
        Envoy::start_in_front_of(&up, json!({"rewrite": {"statuses": [429, 502, 503]}})).await;
    let r = fetch(
        &client(ip(36)),
        &envoy,
        &[
            ("status", "502"),
            ("header", "retry-after: 20"),
            ("header", "etag: \"e\""),
            ("body", "<html>bad gateway</html>"),
        ],
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
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[("status_502", 1), ("body_replaced", 1)],
        )
        .await;
}

#[tokio::test]
async fn rewrite_disabled_passes_upstream_rejections_through() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({"rewrite": {"enabled": false}})).await;
    let r = fetch(
        &client(ip(37)),
        &envoy,
        &[
            ("status", "429"),
            ("header", "cache-control: public, max-age=600"),
            ("body", "origin says slow down\n"),
        ],
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, "origin says slow down\n");
    assert!(r.header("retry-after").is_none());
    assert_eq!(r.header("cache-control"), Some("public, max-age=600"));
    envoy
        .assert_nonzero_counters("crawlguard.rewrite.", &[])
        .await;
}

#[tokio::test]
async fn crawlguard_own_429_is_not_rewritten_again() {
    let (envoy, up) =
        Envoy::start_with_upstream(json!({"limits": [Limit::per_ip("all", 1).rate_per_s(0.01)]}))
            .await;
    let c = client(ip(38));
    let url = envoy.url(&upstream_path(&[("status", "200"), ("body", "ok")]));
    assert_eq!(get(&c, &url, UA_CHROME, &[]).await.status, 200);
    let r = get(&c, &url, UA_CHROME, &[]).await;
    let ra = assert_clean_rejection(&r, 429);
    // Bucket deficit ~100 s, clamped to human max 60, + 0..=2 jitter.
    assert!((60..=62).contains(&ra), "{ra}");
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 1);
    envoy
        .assert_nonzero_counters("crawlguard.rewrite.", &[])
        .await;
    let fixes = REWRITE_FIXES.map(|f| format!("crawlguard.rewrite.{f}"));
    let zeros: Vec<(&str, u64)> = fixes.iter().map(|f| (f.as_str(), 0)).collect();
    envoy.assert_counters(&zeros).await;
    assert_eq!(
        up.requests().await.len(),
        1,
        "the rejection never reached upstream"
    );
}

#[tokio::test]
async fn degraded_200_is_a_503_for_a_verified_crawler_only() {
    let up = TestUpstream::start().await;
    let envoy = Envoy::start(
        // A generous callout timeout: the machine may be busy.
        EnvoyOpts::with_config(json!({"degraded": "x-degraded", "verifier": {"timeout_ms": 5000}}))
            .upstream(up.addr(), UpstreamProtocol::Http1)
            .fake_verifier(vec![("127.0.0.7", "googlebot", "verified")]),
    )
    .await;
    let url = envoy.url(&upstream_path(&[
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

    // A verified Googlebot gets a 503 + Retry-After instead (a 503: shedding.retry_after,
    // 15 + 0..=15).
    let bot = get(&client(ip(7)), &url, UA_GOOGLEBOT, &[]).await;
    let ra = assert_clean_rejection(&bot, 503);
    assert!((15..=30).contains(&ra), "{ra}");
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

    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_503", 1),
                ("degraded", 1),
                ("body_replaced", 1),
                ("retry_after_added", 1),
                ("cache_control_replaced", 1),
            ],
        )
        .await;
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
    let ra = assert_clean_rejection(&r, 503);
    assert!((15..=30).contains(&ra), "{ra}");
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_503", 1),
                ("body_replaced", 1),
                ("retry_after_added", 1),
            ],
        )
        .await;
}

#[tokio::test]
async fn slow_upstream_503_is_normalised() {
    let (envoy, _up) = Envoy::start_with_upstream(json!({})).await;
    let t0 = std::time::Instant::now();
    let r = fetch(
        &client(ip(41)),
        &envoy,
        &[
            ("status", "503"),
            ("delay_ms", "300"),
            ("header", "retry-after: 23"),
            ("body_bytes", "819200"),
            ("chunk_delay_ms", "100"),
            ("chunk_bytes", "16384"),
        ],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 503), 23);
    // Answered when the headers came, not after the ~5 s the whole body would take.
    let elapsed = t0.elapsed();
    println!("answered after {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

/// Shedding's Retry-After without jitter, so every value below is exact.
fn shed_retry_after_without_jitter() -> serde_json::Value {
    json!({"shedding": {"retry_after": {"jitter_s": 0}}})
}

#[tokio::test]
async fn a_503_gets_the_shedding_retry_after_and_keeps_the_origins_longer_one_up_to_the_cap() {
    let (envoy, _up) = Envoy::start_with_upstream(shed_retry_after_without_jitter()).await;
    let c = client(ip(43));
    let mut got = Vec::new();
    for ra in [None, Some("2"), Some("300"), Some("86400")] {
        let header = ra.map(|v| format!("retry-after: {v}"));
        let mut params = vec![("status", "503")];
        if let Some(h) = &header {
            params.push(("header", h.as_str()));
        }
        got.push(assert_clean_rejection(
            &fetch(&c, &envoy, &params).await,
            503,
        ));
    }
    // A browser (class range 1..60): none -> shedding.retry_after.min_s, 2 -> raised to 15,
    // 300 kept, a day cut at rewrite.max_retry_after_s.
    assert_eq!(got, [15, 15, 300, 3600]);
    // A 429 keeps the class range: a browser's 300 is cut to 60.
    let r = fetch(
        &c,
        &envoy,
        &[("status", "429"), ("header", "retry-after: 300")],
    )
    .await;
    assert_eq!(assert_clean_rejection(&r, 429), 60);
    envoy
        .assert_nonzero_counters(
            "crawlguard.rewrite.",
            &[
                ("status_503", 4),
                ("status_429", 1),
                ("retry_after_added", 1),
                ("body_replaced", 5),
            ],
        )
        .await;
}

#[tokio::test]
async fn envoy_own_503_gets_the_shedding_retry_after() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let envoy = Envoy::start(
        EnvoyOpts::with_config(json!({
            "shedding": {"retry_after": {"min_s": 20, "max_s": 90, "jitter_s": 0}}
        }))
        .upstream(dead, UpstreamProtocol::Http1),
    )
    .await;
    let r = get(&client(ip(44)), &envoy.url("/"), UA_CURL, &[]).await;
    // script's own range would be 1..300 + 0..=10; a 503 gets shedding's min_s exactly.
    assert_eq!(assert_clean_rejection(&r, 503), 20);
}
