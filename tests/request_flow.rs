//! Whole requests through the request machine and a worker, on the host: the fake proxy
//! (`crawlguard_testkit::FakeProxy`) plays Envoy's callbacks, the verifier's answers and the clock.
//! One test per promise, exact values.

mod common;

use common::T0;
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                      Gecko) Chrome/124.0.0.0 Safari/537.36";
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// Per-IP limits at 0.001 token/s (nothing refills during a test): search_crawler 50,
/// unverified_bot 2, spoofed 1, human 3.
const LIMITS: &str = r#""limits":[
  {"name":"crawler","class":"search_crawler","route":"*","rate_per_s":0.001,"burst":50,"key":"client_ip"},
  {"name":"unverified","class":"unverified_bot","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip"},
  {"name":"spoofed","class":"spoofed","route":"*","rate_per_s":0.001,"burst":1,"key":"client_ip"},
  {"name":"human","class":"human","route":"*","rate_per_s":0.001,"burst":3,"key":"client_ip"}]"#;

fn proxy(extra: &str) -> FakeProxy {
    let sep = if extra.is_empty() { "" } else { "," };
    FakeProxy::new(&format!("{{{LIMITS}{sep}{extra}}}"), T0)
}

const G: &str = "192.0.2.1:4000";

#[test]
fn browser_is_forwarded_as_human_then_limited_with_a_clean_429() {
    let mut p = proxy("");
    for _ in 0..3 {
        let (ctx, step) = p.get("/page", CHROME, G);
        assert_eq!(step, Step::Continue);
        assert_eq!(p.class_of(ctx).as_deref(), Some("human"));
    }
    let (ctx, step) = p.get("/page", CHROME, G);
    assert_eq!(step, Step::Pause);
    let reply = p.req(ctx).reply.clone().expect("local reply");
    assert_eq!(reply.status, 429);
    assert_eq!(reply.details, "crawlguard_rate_limited");
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(
        reply.body,
        b"429 Too Many Requests: try again after Retry-After\n"
    );
    assert_eq!(p.counter("crawlguard.class.human.allowed"), 3);
    assert_eq!(p.counter("crawlguard.class.human.limited"), 1);
}

#[test]
fn a_client_sent_class_header_never_reaches_upstream() {
    let mut p = proxy("");
    let (ctx, _) = p.request(
        &[
            (":path", "/"),
            ("user-agent", CHROME),
            ("x-crawler-class", "search_crawler"),
            ("x-crawler-class", "search_crawler"),
        ],
        G,
    );
    let sent: Vec<&[u8]> = p
        .req(ctx)
        .request_headers
        .iter()
        .filter(|(k, _)| k == "x-crawler-class")
        .map(|(_, v)| v.as_slice())
        .collect();
    assert_eq!(sent, vec![&b"human"[..]]);
}

#[test]
fn claim_callout_verdict_decide_for_a_verified_crawler() {
    let mut p = proxy("");
    let (ctx, step) = p.get("/page", GOOGLEBOT, G);
    // Paused; the callout is dispatched from the root context on the wake-up.
    assert_eq!(step, Step::Pause);
    assert_eq!(p.host.wakes, 1);
    assert!(p.host.callouts.is_empty());
    p.wake();
    assert_eq!(p.host.callouts.len(), 1);
    let c = p.host.callouts[0].clone();
    assert_eq!(c.cluster, "crawlguard_verifier");
    assert_eq!(c.path, "/v1/verify?ip=192.0.2.1&bot=googlebot");
    assert_eq!(c.timeout_ms, 500);
    p.verdict(c.token, "192.0.2.1", "googlebot", "verified", 3600);
    assert_eq!(p.req(ctx).resumed, 1);
    assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    // The next request is a cache hit: no pause, no callout.
    let (ctx2, step) = p.get("/page", GOOGLEBOT, G);
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(ctx2).as_deref(), Some("search_crawler"));
    assert_eq!(p.host.callouts.len(), 1);
    assert_eq!(p.counter("crawlguard.verify.cache_miss"), 1);
    assert_eq!(p.counter("crawlguard.verify.verified"), 1);
    assert_eq!(p.counter("crawlguard.verify.cache_hit"), 1);
    assert_eq!(p.counter("crawlguard.class.search_crawler.allowed"), 2);
}

#[test]
fn every_request_of_a_claim_in_flight_waits_for_the_one_callout() {
    let mut p = proxy("");
    let ctxs: Vec<u32> = (0..50)
        .map(|_| {
            let (ctx, step) = p.get("/page", GOOGLEBOT, G);
            assert_eq!(step, Step::Pause);
            ctx
        })
        .collect();
    assert_eq!(p.host.wakes, 1);
    p.wake();
    assert_eq!(p.host.callouts.len(), 1);
    let token = p.host.callouts[0].token;
    p.verdict(token, "192.0.2.1", "googlebot", "verified", 3600);
    for ctx in &ctxs {
        assert_eq!(p.req(*ctx).resumed, 1, "context {ctx}");
        assert_eq!(p.class_of(*ctx).as_deref(), Some("search_crawler"));
    }
    assert_eq!(p.counter("crawlguard.class.search_crawler.allowed"), 50);
    assert_eq!(p.counter("crawlguard.class.unverified_bot.allowed"), 0);
    assert_eq!(p.counter("crawlguard.verify.in_flight"), 49);
    assert_eq!(p.counter("crawlguard.verify.cache_miss"), 1);
}

#[test]
fn a_waiter_over_the_limit_gets_its_429_when_the_verdict_comes() {
    let mut p = proxy("");
    let ctxs: Vec<u32> = (0..3).map(|_| p.get("/", GOOGLEBOT, G).0).collect();
    p.wake();
    let token = p.host.callouts[0].token;
    p.verdict(token, "192.0.2.1", "googlebot", "spoofed", 3600);
    // spoofed burst 1: the first continues, the other two are answered 429 (not resumed).
    assert_eq!(p.req(ctxs[0]).resumed, 1);
    assert_eq!(p.class_of(ctxs[0]).as_deref(), Some("spoofed"));
    for ctx in &ctxs[1..] {
        assert_eq!(p.req(*ctx).resumed, 0);
        assert_eq!(p.reply_status(*ctx), Some(429));
    }
}

#[test]
fn the_first_client_leaving_does_not_lose_the_verdict() {
    let mut p = proxy("");
    let (first, _) = p.get("/", GOOGLEBOT, G);
    let (second, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    p.hang_up(first);
    let token = p.host.callouts[0].token;
    p.verdict(token, "192.0.2.1", "googlebot", "verified", 3600);
    assert_eq!(p.class_of(second).as_deref(), Some("search_crawler"));
    // Cached although the request that asked first is gone.
    let (third, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(third).as_deref(), Some("search_crawler"));
}

#[test]
fn a_verdict_for_a_stream_already_ended_decides_and_charges_nothing() {
    let mut p = proxy("");
    let (gone, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Pause);
    p.wake();
    // The client went away (on_log), and the answer comes before Envoy deletes the context.
    p.end_stream(gone);
    let token = p.host.callouts[0].token;
    p.verdict(token, "192.0.2.1", "googlebot", "verified", 3600);
    assert_eq!(p.class_of(gone), None);
    assert_eq!(p.counter("crawlguard.class.search_crawler.allowed"), 0);
    // The verdict is cached, and the address still has its whole burst of 50.
    for _ in 0..50 {
        assert_eq!(p.get("/", GOOGLEBOT, G).1, Step::Continue);
    }
    assert_eq!(p.get("/", GOOGLEBOT, G).1, Step::Pause);
}

#[test]
fn a_malformed_key_under_a_shadow_limit_is_forwarded_and_the_enforced_limits_still_charge() {
    // A header-keyed limit on trial in shadow mode, and an enforced one of 2 per address.
    let cfg = r#"{"limits":[
        {"name":"per_key","class":"*","route":"*","rate_per_s":1,"burst":100,"key":"header:x-api-key","mode":"shadow"},
        {"name":"per_ip","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip"}]}"#;
    let mut p = FakeProxy::new(cfg, T0);
    let values: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
    let mut headers = vec![(":path", "/"), ("user-agent", CHROME)];
    headers.extend(values.iter().map(|v| ("x-api-key", v.as_str())));
    // 17 values: the trial would have refused it, so it is counted, never refused (it was
    // a 400), and the enforced limit still charges it: 2 forwarded, then 429.
    let steps: Vec<Step> = (0..3).map(|_| p.request(&headers, G).1).collect();
    assert_eq!(steps, [Step::Continue, Step::Continue, Step::Pause]);
    assert_eq!(p.counter("crawlguard.class.human.malformed"), 2);
    assert_eq!(p.counter("crawlguard.class.human.limited"), 1);
    let (ctx, _) = p.request(&headers, G);
    assert_eq!(p.reply_status(ctx), Some(429));
}

#[test]
fn a_malformed_key_under_a_shadow_limit_settles_its_enforced_costs() {
    // The trial in shadow mode, and an enforced cost limit: 1 listing in flight per address,
    // 1 token/s, so Retry-After tells a debt (20 s) from the flight cap (1 s).
    let cfg = r#"{"classes":{"human":{"retry_after":{"min_s":1,"max_s":100,"jitter_s":0}}},
        "limits":[
        {"name":"per_key","class":"*","route":"*","rate_per_s":1,"burst":100,"key":"header:x-api-key","mode":"shadow"},
        {"name":"items","class":"*","route":"*","rate_per_s":1,"burst":1000,"key":"client_ip",
         "cost":{"reserve":20,"max_in_flight":1,"from_response_header":"x-crawlguard-cost"}}]}"#;
    let mut p = FakeProxy::new(cfg, T0);
    let padded = (0..17)
        .map(|i| format!("k{i}"))
        .collect::<Vec<_>>()
        .join(",");
    let headers = [
        (":path", "/list"),
        ("user-agent", CHROME),
        ("x-api-key", padded.as_str()),
    ];
    let (ctx, step) = p.request(&headers, G);
    assert_eq!(step, Step::Continue);
    assert_eq!(p.req(ctx).reply, None);
    p.respond(
        ctx,
        &[(":status", "200"), ("x-crawlguard-cost", "1000")],
        false,
    );
    // Settled at 1,000 (the whole burst) and its flight ended: the next one waits out the
    // debt (1,000 learned, so 1,000 s at 1/s, capped at max_s), not the cap's 1 s.
    let (ctx, step) = p.request(&headers, G);
    assert_eq!(step, Step::Pause);
    assert_eq!(retry_after(&p, ctx), Some(100));
}

#[test]
fn callout_refused_timed_out_or_garbage_is_a_verifier_error() {
    // Refused at dispatch (no such cluster): decided at the wake-up.
    let mut p = proxy("");
    p.host.refuse_dispatch = true;
    let (ctx, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    assert_eq!(p.class_of(ctx).as_deref(), Some("unverified_bot"));
    assert_eq!(p.counter("crawlguard.verify.error"), 1);

    // Timeout / reset: no :status.
    let mut p = proxy("");
    let (ctx, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    p.answer(1, None, "");
    assert_eq!(p.class_of(ctx).as_deref(), Some("unverified_bot"));
    // Remembered for error_ttl_s (10 s): no new callout, same class.
    let (ctx2, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(ctx2).as_deref(), Some("unverified_bot"));
    assert_eq!(p.host.callouts.len(), 1);
    p.advance(10 * S);
    let (_, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Pause);

    // Garbage bodies, wrong claims and non-200 statuses.
    for (status, body) in [
        (Some("200"), "not json"),
        (
            Some("200"),
            r#"{"ip":"192.0.2.9","bot":"googlebot","verdict":"verified","ttl_s":1}"#,
        ),
        (Some("503"), "{}"),
    ] {
        let mut p = proxy("");
        let (ctx, _) = p.get("/", GOOGLEBOT, G);
        p.wake();
        p.answer(1, status, body);
        assert_eq!(p.class_of(ctx).as_deref(), Some("unverified_bot"), "{body}");
        assert_eq!(p.counter("crawlguard.verify.error"), 1, "{body}");
    }

    // on_error: claimed_class trusts the claim while the verifier is broken.
    let mut p = proxy(r#""verifier":{"on_error":"claimed_class"}"#);
    let (ctx, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    p.answer(1, None, "");
    assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
}

#[test]
fn a_stale_verdict_stands_in_when_the_verifier_fails() {
    let mut p = proxy(r#""verifier":{"max_ttl_s":1}"#);
    let (_, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    p.verdict(1, "192.0.2.1", "googlebot", "verified", 3600);
    // The verdict's TTL (clamped to 1 s) passes; the next callout fails. (The worker's copy
    // of the verdict goes by its last clock reading, which Envoy's root tick keeps within
    // 250 ms of the wall clock: read here as the tick would.)
    p.advance(2 * S);
    p.worker.clock.observe(p.host.now_ns.unwrap_or(0));
    let (ctx, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Pause);
    p.wake();
    p.answer(2, None, "");
    assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    // During the backoff every request uses it, without a callout.
    for _ in 0..5 {
        let (ctx, step) = p.get("/", GOOGLEBOT, G);
        assert_eq!(step, Step::Continue);
        assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    }
    assert_eq!(p.host.callouts.len(), 2);
    assert_eq!(p.counter("crawlguard.verify.stale"), 6);
    assert_eq!(p.counter("crawlguard.verify.error"), 1);
    // Past stale_if_error_s (24 h after its TTL) it no longer stands in.
    p.advance(86_400 * S);
    let (ctx, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    p.answer(3, None, "");
    assert_eq!(p.class_of(ctx).as_deref(), Some("unverified_bot"));
}

#[test]
fn after_n_spoofed_verdicts_a_prefix_is_spoofed_without_callouts() {
    let mut p = proxy(r#""verifier":{"max_spoofed_per_prefix":3}"#);
    for i in 1..=3u32 {
        let (ctx, _) = p.get("/", GOOGLEBOT, &format!("[2001:db8:1:2::{i}]:4000"));
        p.wake();
        assert!(p.verdict_for(&format!("2001:db8:1:2::{i}"), "googlebot", "spoofed"));
        assert_eq!(p.class_of(ctx).as_deref(), Some("spoofed"));
    }
    for i in 4..=200u32 {
        // Decided at once (the /64 shares one spoofed bucket of 1, so these are 429s).
        let (ctx, _) = p.get("/", GOOGLEBOT, &format!("[2001:db8:1:2::{i:x}]:4000"));
        assert_eq!(p.class_of(ctx).as_deref(), Some("spoofed"));
        assert_eq!(p.reply_status(ctx), Some(429));
    }
    assert_eq!(p.host.callouts.len(), 3);
    assert_eq!(p.counter("crawlguard.verify.prefix_spoofed"), 197);
    // Another /64 is asked; the block ends with the latest spoofed verdict (3600 s).
    let (_, step) = p.get("/", GOOGLEBOT, "[2001:db8:1:3::1]:4000");
    assert_eq!(step, Step::Pause);
    p.advance(3600 * S);
    let (_, step) = p.get("/", GOOGLEBOT, "[2001:db8:1:2::999]:4000");
    assert_eq!(step, Step::Pause);
}

#[test]
fn callouts_per_prefix_in_flight_are_bounded_and_the_rest_wait() {
    let mut p = proxy(r#""verifier":{"max_spoofed_per_prefix":2}"#);
    let ctxs: Vec<u32> = (1..=5u32)
        .map(|i| {
            p.get("/", GOOGLEBOT, &format!("[2001:db8:1:2::{i}]:4000"))
                .0
        })
        .collect();
    p.wake();
    // Two dispatched (first come, first served), three queued behind them.
    assert_eq!(p.host.callouts.len(), 2);
    assert!(p.verdict_for("2001:db8:1:2::1", "googlebot", "spoofed"));
    // One slot freed: the next is dispatched.
    assert_eq!(p.host.callouts.len(), 3);
    assert!(p.callout_for("2001:db8:1:2::3").is_some());
    assert!(p.verdict_for("2001:db8:1:2::2", "googlebot", "spoofed"));
    // Two spoofed verdicts: the queued claims are spoofed without their own callout.
    assert_eq!(p.host.callouts.len(), 3);
    for ctx in &ctxs[3..] {
        assert_eq!(p.class_of(*ctx).as_deref(), Some("spoofed"));
    }
    assert!(p.verdict_for("2001:db8:1:2::3", "googlebot", "spoofed"));
    assert!(ctxs
        .iter()
        .all(|c| p.class_of(*c).as_deref() == Some("spoofed")));
}

#[test]
fn a_real_crawler_prefix_is_never_blocked() {
    let mut p = proxy(r#""verifier":{"max_spoofed_per_prefix":2}"#);
    for i in 1..=10u32 {
        let (ctx, _) = p.get("/", GOOGLEBOT, &format!("[2001:db8:66::{i}]:4000"));
        p.wake();
        let token = p.host.callouts.last().map_or(0, |c| c.token);
        p.verdict(
            token,
            &format!("2001:db8:66::{i}"),
            "googlebot",
            "verified",
            3600,
        );
        assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    }
    assert_eq!(p.host.callouts.len(), 10);
}

#[test]
fn paused_requests_past_their_deadline_are_released_by_the_tick() {
    let mut p = proxy(r#""verifier":{"max_spoofed_per_prefix":1,"timeout_ms":300}"#);
    let (a, _) = p.get("/", GOOGLEBOT, "[2001:db8:1:2::1]:1");
    let (b, _) = p.get("/", GOOGLEBOT, "[2001:db8:1:2::2]:1");
    p.wake();
    // One callout; the second claim waits for a prefix slot that never frees in time.
    assert_eq!(p.host.callouts.len(), 1);
    p.advance(300 * MS);
    p.tick();
    for ctx in [a, b] {
        assert_eq!(p.class_of(ctx).as_deref(), Some("unverified_bot"));
        assert_eq!(p.req(ctx).resumed, 1);
    }
    // One error: the queued claim, dropped before its callout. The dispatched claim's
    // callout counts its own outcome (its timeout would be the second error).
    assert_eq!(p.counter("crawlguard.verify.error"), 1);
    // The callout's own (late) answer still lands in the cache, and resumes nobody twice.
    p.verdict(1, "2001:db8:1:2::1", "googlebot", "verified", 3600);
    assert_eq!(p.counter("crawlguard.verify.error"), 1);
    assert_eq!(p.req(a).resumed, 1);
    let (c, step) = p.get("/", GOOGLEBOT, "[2001:db8:1:2::1]:2");
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(c).as_deref(), Some("search_crawler"));
}

#[test]
fn nothing_stays_paused_when_the_root_goes_away() {
    let mut p = proxy("");
    let (a, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    let (b, _) = p.get("/", GOOGLEBOT, "192.0.2.2:1");
    p.root_done();
    assert_eq!(p.req(a).resumed, 1);
    assert_eq!(p.req(b).resumed, 1);
    assert_eq!(p.class_of(a).as_deref(), Some("unverified_bot"));
    // Two claims ended without a verdict: one error each.
    assert_eq!(p.counter("crawlguard.verify.error"), 2);
}

#[test]
fn a_refused_wake_up_decides_at_once_as_an_error() {
    let mut p = proxy("");
    p.host.refuse_wake = true;
    let (ctx, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(ctx).as_deref(), Some("unverified_bot"));
    assert_eq!(p.counter("crawlguard.verify.error"), 1);
}

#[test]
fn exempt_paths_are_decided_before_classification_and_verification() {
    let mut p = proxy("");
    for path in ["/robots.txt", "/sitemap.xml", "/sitemap_index.xml"] {
        let (ctx, step) = p.get(path, GOOGLEBOT, G);
        assert_eq!(step, Step::Continue);
        assert_eq!(p.class_of(ctx), None);
    }
    assert_eq!(p.host.wakes, 0);
    assert_eq!(p.counter("crawlguard.exempt"), 3);
    assert_eq!(p.counter("crawlguard.verify.cache_miss"), 0);
}

#[test]
fn only_reads_of_exempt_paths_are_exempt() {
    let mut p = proxy("");
    for method in ["GET", "HEAD"] {
        let (ctx, step) = p.request(
            &[
                (":method", method),
                (":path", "/robots.txt"),
                ("user-agent", "curl/8.0"),
            ],
            G,
        );
        assert_eq!(step, Step::Continue);
        assert_eq!(p.class_of(ctx), None, "{method}");
    }
    for method in ["POST", "PUT", "DELETE", "PURGE"] {
        let (ctx, step) = p.request(
            &[
                (":method", method),
                (":path", "/robots.txt"),
                ("user-agent", "curl/8.0"),
            ],
            G,
        );
        assert_eq!(step, Step::Continue);
        assert_eq!(p.class_of(ctx).as_deref(), Some("script"), "{method}");
    }
    assert_eq!(p.counter("crawlguard.exempt"), 2);
}

#[test]
fn upstream_429_is_normalised_and_our_own_reply_is_not_rewritten() {
    let mut p = proxy("");
    let (ctx, _) = p.get("/", CHROME, G);
    let step = p.respond(
        ctx,
        &[
            (":status", "429"),
            ("retry-after", "120"),
            ("cache-control", "public"),
        ],
        false,
    );
    assert_eq!(step, Step::Pause);
    let r = p.req(ctx).reply.clone().expect("normalised");
    assert_eq!(r.status, 429);
    assert_eq!(r.details, "crawlguard_normalised_upstream");
    // human: clamped to max_s 60, plus jitter 0..=2.
    let ra: u32 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!((60..=62).contains(&ra), "{ra}");
    assert_eq!(p.counter("crawlguard.rewrite.status_429"), 1);

    for _ in 0..3 {
        let _ = p.get("/", CHROME, G);
    }
    let (own, _) = p.get("/", CHROME, G);
    assert_eq!(p.reply_status(own), Some(429));
    assert_eq!(p.respond(own, &[(":status", "429")], true), Step::Continue);
    assert_eq!(p.counter("crawlguard.rewrite.status_429"), 1);
}

#[test]
fn upstream_503_retry_after_is_the_shedding_range_or_the_origins_longer_one() {
    let mut p = FakeProxy::new(r#"{"shedding":{"retry_after":{"jitter_s":0}}}"#, T0);
    let mut got = Vec::new();
    for headers in [
        &[(":status", "503")][..],
        &[(":status", "503"), ("retry-after", "2")],
        &[(":status", "503"), ("retry-after", "300")],
        &[(":status", "503"), ("retry-after", "99999")],
    ] {
        let (ctx, _) = p.get("/", CHROME, G);
        assert_eq!(p.respond(ctx, headers, false), Step::Pause);
        let r = p.req(ctx).reply.clone().expect("normalised");
        assert_eq!(r.status, 503);
        got.push(r.header("retry-after").map(str::to_string));
    }
    // shedding.retry_after.min_s (15, no jitter), raised to 15, kept, cut at
    // rewrite.max_retry_after_s (3600).
    assert_eq!(
        got,
        [Some("15"), Some("15"), Some("300"), Some("3600")].map(|v| v.map(String::from))
    );
    assert_eq!(p.counter("crawlguard.rewrite.status_503"), 4);
    assert_eq!(p.counter("crawlguard.rewrite.retry_after_added"), 1);
}

#[test]
fn a_200_passes_untouched_and_a_refused_reply_fails_open() {
    let mut p = proxy("");
    let (ctx, _) = p.get("/", CHROME, G);
    assert_eq!(p.respond(ctx, &[(":status", "200")], false), Step::Continue);
    assert!(p.req(ctx).reply.is_none());
    for _ in 0..2 {
        let _ = p.get("/", CHROME, G);
    }
    p.host.refuse_reply = true;
    let (ctx, step) = p.get("/", CHROME, G);
    assert_eq!(step, Step::Continue);
    assert_eq!(p.class_of(ctx).as_deref(), Some("human"));
}

/// One cost-based limit: 100 items per client, refilling 0.001/s; 20 reserved per request.
const COST: &str = r#""limits":[{"name":"items","class":"*","route":"*","rate_per_s":0.001,"burst":100,
    "key":"client_ip","cost":{"reserve":20,"from_response_header":"x-crawlguard-cost"}}]"#;

#[test]
fn cost_limits_reserve_then_settle_from_the_origin_header() {
    let mut p = FakeProxy::new(&format!("{{{COST}}}"), T0);
    // Pages of 20 items: 5 pages fit in 100.
    let mut admitted = 0;
    for _ in 0..7 {
        let (ctx, step) = p.get("/list", CHROME, G);
        if step == Step::Continue {
            admitted += 1;
            p.respond(
                ctx,
                &[(":status", "200"), ("x-crawlguard-cost", "20")],
                false,
            );
            // The cost header never reaches the client.
            assert!(p
                .req(ctx)
                .response_headers
                .iter()
                .all(|(k, _)| k != "x-crawlguard-cost"));
        }
    }
    assert_eq!(admitted, 5);

    // Pages of 100 items from another client: reserve 20, settle 100 (80 of debt past the
    // reservation): the second request no longer fits.
    let b = "192.0.2.9:1";
    let (ctx, step) = p.get("/list", CHROME, b);
    assert_eq!(step, Step::Continue);
    p.respond(
        ctx,
        &[(":status", "200"), ("x-crawlguard-cost", "100")],
        false,
    );
    let (_, step) = p.get("/list", CHROME, b);
    assert_eq!(step, Step::Pause);
}

#[test]
fn concurrent_requests_cannot_overspend_and_missing_or_bad_costs_settle_at_the_reservation() {
    // Room for ten in flight: the reservations, not the cap, decide here.
    let cfg =
        format!("{{{COST}}}").replace(r#""reserve":20,"#, r#""reserve":20,"max_in_flight":10,"#);
    let mut p = FakeProxy::new(&cfg, T0);
    // Five requests in flight at once have reserved 100: the sixth is rejected before any
    // of them is settled.
    let ctxs: Vec<u32> = (0..5).map(|_| p.get("/list", CHROME, G).0).collect();
    let (_, step) = p.get("/list", CHROME, G);
    assert_eq!(step, Step::Pause);
    // Settled at 0, 0, missing, garbage, and a disconnect (never settled): 60 still used.
    p.respond(
        ctxs[0],
        &[(":status", "200"), ("x-crawlguard-cost", "0")],
        false,
    );
    p.respond(
        ctxs[1],
        &[(":status", "200"), ("x-crawlguard-cost", "0")],
        false,
    );
    p.respond(ctxs[2], &[(":status", "200")], false);
    p.respond(
        ctxs[3],
        &[(":status", "200"), ("x-crawlguard-cost", "lots")],
        false,
    );
    p.hang_up(ctxs[4]);
    // 40 free: exactly two more reservations of 20.
    let steps: Vec<Step> = (0..3).map(|_| p.get("/list", CHROME, G).1).collect();
    assert_eq!(steps, [Step::Continue, Step::Continue, Step::Pause]);
}

/// 1,000 items per client, refilling 50/s, 20 reserved, at most 4 in flight (the default);
/// humans told exactly how long to wait, up to 100 s.
const COSTLY: &str = r#""classes":{"human":{"retry_after":{"min_s":1,"max_s":100,"jitter_s":0}}},
    "limits":[{"name":"items","class":"*","route":"*","rate_per_s":50,"burst":1000,
    "key":"client_ip","cost":{"reserve":20,"from_response_header":"x-crawlguard-cost"}}]"#;

#[test]
fn a_concurrent_burst_of_costly_listings_overspends_by_at_most_max_in_flight_costs() {
    let mut p = FakeProxy::new(&format!("{{{COSTLY}}}"), T0);
    // 60 listings of 1,000 items at once: 4 reservations of 20 fly, the rest is refused
    // (reservations alone would have let 50 through: 50,000 items against a burst of 1,000).
    let mut flying = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..60 {
        match p.get("/list", CHROME, G) {
            (ctx, Step::Continue) => flying.push(ctx),
            (ctx, _) => refused.push(ctx),
        }
    }
    assert_eq!((flying.len(), refused.len()), (4, 56));
    // Refused at the cap: the class's shortest wait, 1 s.
    assert_eq!(retry_after(&p, refused[0]), Some(1));
    for ctx in flying {
        p.respond(
            ctx,
            &[(":status", "200"), ("x-crawlguard-cost", "1000")],
            false,
        );
    }
    // 4,000 spent of 1,000: 3,000 in debt, and the next listing reserves what the last one
    // cost (1,000). Retry-After covers the debt: 4,000 tokens at 50/s, 80 s.
    let (ctx, step) = p.get("/list", CHROME, G);
    assert_eq!(step, Step::Pause);
    assert_eq!(retry_after(&p, ctx), Some(80));
    p.advance(79 * S);
    assert_eq!(p.get("/list", CHROME, G).1, Step::Pause);
    p.advance(S);
    // A client that waited what it was told is admitted, and only one listing at a time
    // fits now: the reservation is the learned 1,000.
    let (ctx, step) = p.get("/list", CHROME, G);
    assert_eq!(step, Step::Continue);
    assert_eq!(p.get("/list", CHROME, G).1, Step::Pause);
    // A cheap page teaches the cheaper cost: 20 reserved again.
    p.respond(
        ctx,
        &[(":status", "200"), ("x-crawlguard-cost", "0")],
        false,
    );
    assert_eq!(p.get("/list", CHROME, G).1, Step::Continue);
}

#[test]
fn a_reservation_refused_by_another_limit_or_hung_up_leaves_no_flight_behind() {
    // One reservation in flight per address; a second limit, one request per API key.
    let cfg = r#"{"limits":[
        {"name":"items","class":"*","route":"*","rate_per_s":0.001,"burst":100,"key":"client_ip",
         "cost":{"reserve":20,"max_in_flight":1,"from_response_header":"x-crawlguard-cost"}},
        {"name":"per_key","class":"*","route":"*","rate_per_s":0.001,"burst":1,"key":"header:x-api-key"}]}"#;
    let mut p = FakeProxy::new(cfg, T0);
    let get = |p: &mut FakeProxy, key: &str| {
        p.request(
            &[
                (":path", "/list"),
                ("user-agent", CHROME),
                ("x-api-key", key),
            ],
            G,
        )
    };
    let (ctx, step) = get(&mut p, "a");
    assert_eq!(step, Step::Continue);
    // In flight: the cap refuses a second one.
    assert_eq!(get(&mut p, "b").1, Step::Pause);
    p.respond(
        ctx,
        &[(":status", "200"), ("x-crawlguard-cost", "20")],
        false,
    );
    // Key "a" is spent: the cost limit reserved, per_key refused, and the reservation's
    // flight ended with the refusal.
    assert_eq!(get(&mut p, "a").1, Step::Pause);
    let (ctx, step) = get(&mut p, "b");
    assert_eq!(step, Step::Continue);
    // The client hangs up before the origin answers: the stream's end settles it.
    p.hang_up(ctx);
    assert_eq!(get(&mut p, "c").1, Step::Continue);
}

#[test]
fn places_in_flight_belong_to_the_client_address_whatever_the_key() {
    // One reservation in flight per address, for an account header and for one global key.
    for key in ["header:x-account", "global"] {
        let cfg = format!(
            r#"{{"limits":[{{"name":"items","class":"*","route":"*","rate_per_s":50,"burst":1000,
            "key":"{key}","cost":{{"reserve":20,"max_in_flight":1,"from_response_header":"x-crawlguard-cost"}}}}]}}"#
        );
        let mut p = FakeProxy::new(&cfg, T0);
        let get = |p: &mut FakeProxy, account: Option<&str>, from: &str| {
            let mut h = vec![(":path", "/list"), ("user-agent", CHROME)];
            h.extend(account.map(|a| ("x-account", a)));
            p.request(&h, from)
        };
        // Five anonymous listings from five addresses stall (their origin never answers):
        // each holds only its own address's place, not the shared key's.
        for from in [
            "192.0.2.1:1",
            "192.0.2.2:1",
            "192.0.2.3:1",
            "192.0.2.4:1",
            "192.0.2.5:1",
        ] {
            assert_eq!(
                get(&mut p, None, from).1,
                Step::Continue,
                "{key} from {from}"
            );
        }
        let (ctx, step) = get(&mut p, None, "192.0.2.1:2");
        assert_eq!(step, Step::Pause, "{key}: the address is at its cap");
        assert_eq!(p.req(ctx).reply.as_ref().map(|r| r.status), Some(429));
        // A named account: the same address at its cap, another address free.
        assert_eq!(get(&mut p, Some("a-1"), "192.0.2.9:1").1, Step::Continue);
        assert_eq!(get(&mut p, Some("a-1"), "192.0.2.9:2").1, Step::Pause);
        assert_eq!(get(&mut p, Some("a-1"), "192.0.2.10:1").1, Step::Continue);
    }
}

#[test]
fn sixty_costly_listings_at_once_on_a_shared_key_fly_four_at_a_time() {
    // The hostile review's attack on a shared cost key: one address, 60 listings of 1,000
    // items at once. Without a cap 50 flew (49,000 tokens of debt for everyone sharing the
    // key); the address's places bound it to the default 4.
    let cfg = r#"{"limits":[{"name":"items","class":"*","route":"*","rate_per_s":1,"burst":1000,
        "key":"global","cost":{"reserve":20,"from_response_header":"x-crawlguard-cost"}}]}"#;
    let mut p = FakeProxy::new(cfg, T0);
    let steps: Vec<Step> = (0..60).map(|_| p.get("/list", CHROME, G).1).collect();
    assert_eq!(steps.iter().filter(|s| **s == Step::Continue).count(), 4);
    // Another address still has its own places (and the tokens left: 920).
    assert_eq!(p.get("/list", CHROME, "192.0.2.77:1").1, Step::Continue);
}

#[test]
fn an_ipv6_site_holds_one_set_of_places_however_many_64s_it_sends_from() {
    // The hostile review's attack: 15 /64s of one /48, 4 listings each, on a global cost
    // key. Places per /64 let 50 of 60 fly (49,000 tokens of debt for everyone); the /48
    // holds the default 4. Another site still has its own.
    for key in ["global", "client_ip"] {
        let cfg = format!(
            r#"{{"limits":[{{"name":"items","class":"*","route":"*","rate_per_s":1,"burst":1000,
            "key":"{key}","cost":{{"reserve":20,"from_response_header":"x-crawlguard-cost"}}}}]}}"#
        );
        let mut p = FakeProxy::new(&cfg, T0);
        let mut flying = 0;
        for n in 0..15 {
            for _ in 0..4 {
                let from = format!("[2001:db8:7:{n:x}::1]:4000");
                flying += usize::from(p.get("/list", CHROME, &from).1 == Step::Continue);
            }
        }
        assert_eq!(flying, 4, "{key}");
        assert_eq!(
            p.get("/list", CHROME, "[2001:db8:8::1]:4000").1,
            Step::Continue,
            "{key}"
        );
    }
}

#[test]
fn refusals_at_the_flight_cap_tell_the_client_nothing_to_ignore() {
    // A curl client, escalation after 2 ignored Retry-Afters; one listing in flight per address.
    let cfg = r#"{"classes":{"script":{"retry_after":{"min_s":2,"max_s":2,"jitter_s":0},
        "escalation":{"enabled":true,"after_ignored":2,"factor":3,"max_s":54,"decay_s":100}}},
        "limits":[{"name":"items","class":"*","route":"*","rate_per_s":50,"burst":1000,"key":"client_ip",
        "cost":{"reserve":20,"max_in_flight":1,"from_response_header":"x-crawlguard-cost"}}]}"#;
    let mut p = FakeProxy::new(cfg, T0);
    let (first, step) = p.get("/list", "curl/8", G);
    assert_eq!(step, Step::Continue);
    // Ten parallel listings meet the cap: each told the shortest wait, none escalated.
    let mut seen = Vec::new();
    for _ in 0..10 {
        let (ctx, step) = p.get("/list", "curl/8", G);
        assert_eq!(step, Step::Pause);
        seen.push(retry_after(&p, ctx));
    }
    assert_eq!(seen, [Some(2); 10]);
    assert_eq!(p.counter("crawlguard.class.script.retry_after_ignored"), 0);
    assert_eq!(p.counter("crawlguard.class.script.escalated"), 0);
    // Once the first settles, the very next one is admitted: no penalty was earned.
    p.respond(
        first,
        &[(":status", "200"), ("x-crawlguard-cost", "20")],
        false,
    );
    assert_eq!(p.get("/list", "curl/8", G).1, Step::Continue);
}

/// Script limit 1 token, no refill to speak of; Retry-After exactly 2 s (no jitter);
/// escalation after 2 ignored, x3 per step, up to 54 s, forgotten after 100 s.
const ESC: &str = r#""classes":{"script":{"retry_after":{"min_s":2,"max_s":2,"jitter_s":0},
    "escalation":{"enabled":true,"after_ignored":2,"factor":3,"max_s":54,"decay_s":100}}},
    "limits":[{"name":"s","class":"script","route":"*","rate_per_s":0.001,"burst":1,"key":"client_ip"}]"#;

fn retry_after(p: &FakeProxy, ctx: u32) -> Option<u32> {
    p.req(ctx)
        .reply
        .as_ref()
        .and_then(|r| r.header("retry-after"))
        .and_then(|v| v.parse().ok())
}

#[test]
fn a_client_that_hammers_escalates_and_one_that_waits_is_counted_honoured() {
    let mut p = FakeProxy::new(&format!("{{{ESC}}}"), T0);
    assert_eq!(p.get("/", "curl/8", G).1, Step::Continue);
    let mut seen = Vec::new();
    for _ in 0..7 {
        let (ctx, step) = p.get("/", "curl/8", G);
        assert_eq!(step, Step::Pause);
        seen.push(retry_after(&p, ctx));
        p.advance(100 * MS);
    }
    // 2, then two ignored Retry-Afters: x3 per step up to 54.
    assert_eq!(
        seen,
        [
            Some(2),
            Some(2),
            Some(6),
            Some(18),
            Some(54),
            Some(54),
            Some(54)
        ]
    );
    assert_eq!(p.counter("crawlguard.class.script.retry_after_ignored"), 6);
    assert_eq!(p.counter("crawlguard.class.script.escalated"), 5);
    // It waits out its penalty: honoured (counted once), still limited (no token), and
    // still escalated: what it ignored is remembered for decay_s.
    p.advance(54 * S);
    let (ctx, _) = p.get("/", "curl/8", G);
    assert_eq!(p.counter("crawlguard.class.script.retry_after_honoured"), 1);
    assert_eq!(retry_after(&p, ctx), Some(54));
    // After decay_s without ignoring, it starts over at 2.
    p.advance(120 * S);
    let (ctx, _) = p.get("/", "curl/8", G);
    assert_eq!(retry_after(&p, ctx), Some(2));
}

/// The default script policy and limit (Retry-After 1..300 s, escalation after 3 ignored,
/// x2 per step up to 3600 s; 1 token/s, burst 10), without jitter.
const SCRIPT_DEFAULTS: &str = r#"{"classes":{"script":{"retry_after":{"jitter_s":0}}}}"#;

/// A GET of `/` as `make run`'s curl loop sends it: its stream ends before the next one
/// starts (the default script limit also bounds its requests in flight, to 8).
fn curl(p: &mut FakeProxy) -> (u32, Step) {
    let (ctx, step) = p.get("/", "curl/8", G);
    p.end_stream(ctx);
    (ctx, step)
}

#[test]
fn a_flood_escalates_one_factor_per_step_from_the_class_base_never_compounding() {
    let mut p = FakeProxy::new(SCRIPT_DEFAULTS, T0);
    for _ in 0..10 {
        assert_eq!(curl(&mut p).1, Step::Continue);
    }
    let mut seen = Vec::new();
    for _ in 0..16 {
        let (ctx, step) = curl(&mut p);
        assert_eq!(step, Step::Pause);
        seen.push(retry_after(&p, ctx).unwrap_or(0));
        // `make run`'s curl loop: one request every 5 ms.
        p.advance(5 * MS);
    }
    // 1 s three times (the first told, two ignored), then step n waits 1 x 2^n s: steps 1
    // to 5 are 2, 4, 8, 16, 32; the cap is reached at step 12.
    assert_eq!(
        seen,
        [1, 1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600]
    );
    assert_eq!(p.counter("crawlguard.class.script.escalated"), 13);
}

#[test]
fn a_penalty_lasts_what_its_retry_after_said_not_decay_s() {
    let flooded = || {
        let mut p = FakeProxy::new(SCRIPT_DEFAULTS, T0);
        for _ in 0..26 {
            let _ = curl(&mut p);
            p.advance(5 * MS);
        }
        p
    };
    // Told 3600 s; back after decay_s (600 s): still in its penalty, so ignored again.
    let mut p = flooded();
    p.advance(601 * S);
    let (ctx, step) = curl(&mut p);
    assert_eq!(step, Step::Pause);
    assert_eq!(retry_after(&p, ctx), Some(3600));
    // Back after the 3600 s it was told: honoured, admitted, and it starts over at 1 s.
    let mut p = flooded();
    p.advance(3600 * S);
    for _ in 0..10 {
        assert_eq!(curl(&mut p).1, Step::Continue);
    }
    let (ctx, _) = curl(&mut p);
    assert_eq!(retry_after(&p, ctx), Some(1));
    assert_eq!(p.counter("crawlguard.class.script.retry_after_honoured"), 1);
}

#[test]
fn a_verified_crawler_never_escalates() {
    let mut p = proxy("");
    let (ctx, _) = p.get("/", GOOGLEBOT, G);
    p.wake();
    assert!(p.verdict_for("192.0.2.1", "googlebot", "verified"));
    assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    for _ in 0..60 {
        let _ = p.get("/", GOOGLEBOT, G);
    }
    assert_eq!(p.counter("crawlguard.class.search_crawler.limited"), 11);
    assert_eq!(p.counter("crawlguard.class.search_crawler.escalated"), 0);
    assert_eq!(
        p.counter("crawlguard.class.search_crawler.retry_after_ignored"),
        10
    );
}

#[test]
fn a_limit_in_shadow_mode_counts_while_the_others_enforce() {
    let mut p = FakeProxy::new(
        r#"{"limits":[
          {"name":"trial","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip","mode":"shadow"},
          {"name":"real","class":"*","route":"*","rate_per_s":0.001,"burst":4,"key":"client_ip"}]}"#,
        T0,
    );
    let steps: Vec<Step> = (0..6).map(|_| p.get("/", CHROME, G).1).collect();
    // The trial limit (2) only counts; the real one (4) rejects.
    assert_eq!(
        steps,
        [
            Step::Continue,
            Step::Continue,
            Step::Continue,
            Step::Continue,
            Step::Pause,
            Step::Pause
        ]
    );
    assert_eq!(p.counter("crawlguard.class.human.allowed"), 2);
    assert_eq!(p.counter("crawlguard.class.human.shadow_limited"), 2);
    assert_eq!(p.counter("crawlguard.class.human.limited"), 2);
}

/// Shedding over a 2 s window, at least 5 responses, p95 above 100 ms is unhealthy, one
/// class per second: other_bot first, then script; humans never (not in the order).
const SHED: &str = r#""shedding":{"enabled":true,"window_s":2,"min_requests":5,"latency_ms":100,
    "step_s":1,"order":["other_bot","script"],"retry_after":{"min_s":15,"max_s":60,"jitter_s":0}},
    "limits":[]"#;

const BOT: &str = "AcmeCrawler/1.0 (+http://acme.example/bot)";

/// The browsers' addresses: origin trouble reaches all of them (`shedding.min_clients` is
/// 3 by default: fewer clients cannot carry the evidence).
const BROWSERS: [&str; 5] = [
    "192.0.2.1:4000",
    "192.0.2.2:4000",
    "192.0.2.3:4000",
    "192.0.2.4:4000",
    "192.0.2.5:4000",
];

/// `n` human requests answered after `ms` each (with `status`), from the five browsers in
/// turn.
fn traffic(p: &mut FakeProxy, n: usize, ms: u64, status: &str) {
    for i in 0..n {
        from(p, BROWSERS[i % BROWSERS.len()], ms, status);
    }
}

/// One human request from `client` answered after `ms` with `status`.
fn from(p: &mut FakeProxy, client: &str, ms: u64, status: &str) {
    let (ctx, step) = p.get("/", CHROME, client);
    assert_eq!(step, Step::Continue);
    p.advance(ms * MS);
    p.respond(ctx, &[(":status", status)], true);
}

/// One browser's slow URLs (2 of 20 responses: p95 500 ms) or its 500s (5 of 20) among
/// four others' fast 2xx: the window as a whole is unhealthy, but only through one client,
/// so nothing is shed (README, "Load shedding": `shedding.min_clients`). With
/// `min_clients` 1 the same traffic sheds.
#[test]
fn one_clients_slow_or_failed_responses_shed_nobody() {
    for (min_clients, level) in [(3, 0), (1, 1)] {
        for (ms, status) in [(500, "200"), (5, "500")] {
            let json = format!(
                "{{{}}}",
                SHED.replace(
                    r#""step_s":1"#,
                    &format!(r#""step_s":1,"min_clients":{min_clients}"#)
                )
            );
            let mut p = FakeProxy::new(&json, T0);
            let n = if status == "500" { 5 } else { 2 };
            for i in 0..20 {
                // The attacker, 192.0.2.9, sends every fourth request.
                if i % 4 == 0 && i / 4 < n {
                    from(&mut p, "192.0.2.9:4000", ms, status);
                } else {
                    from(&mut p, BROWSERS[i % 4], 5, "200");
                }
            }
            p.advance(S);
            p.tick();
            let what = format!("min_clients {min_clients}, {ms} ms {status}");
            let as_a_whole = if status == "500" {
                p.host.gauge("crawlguard.origin.default.error_permille") == Some(250)
            } else {
                p.host.gauge("crawlguard.origin.default.p95_ms") == Some(500)
            };
            assert!(as_a_whole, "{what}: the window is unhealthy as a whole");
            assert_eq!(
                p.host.gauge("crawlguard.shed.default.level"),
                Some(level),
                "{what}"
            );
            assert_eq!(shed_now(&mut p).0, level == 1, "{what}");
        }
    }
}

/// What each class gets now: (other_bot, script, human) shed?
fn shed_now(p: &mut FakeProxy) -> (bool, bool, bool) {
    let mut shed = |ua: &str| {
        let (ctx, _) = p.get("/", ua, "192.0.2.50:1");
        p.reply_status(ctx) == Some(503)
    };
    (shed(BOT), shed("curl/8"), shed(CHROME))
}

#[test]
fn a_slow_origin_sheds_class_by_class_and_recovers_level_by_level() {
    let mut p = FakeProxy::new(&format!("{{{SHED}}}"), T0);
    let level = |p: &FakeProxy| p.host.gauge("crawlguard.shed.default.level");
    traffic(&mut p, 10, 10, "200");
    p.tick();
    assert_eq!(level(&p), Some(0));
    assert_eq!(shed_now(&mut p), (false, false, false));
    // The origin slows down: p95 500 ms.
    traffic(&mut p, 10, 500, "200");
    p.advance(S);
    p.tick();
    assert_eq!(level(&p), Some(1));
    let (ctx, _) = p.get("/", BOT, "192.0.2.50:1");
    let r = p.req(ctx).reply.clone().expect("shed");
    assert_eq!((r.status, r.details.as_str()), (503, "crawlguard_shed"));
    assert_eq!(r.header("retry-after"), Some("15"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(shed_now(&mut p), (true, false, false));
    // Still slow one step later: scripts go too; humans stay.
    traffic(&mut p, 5, 500, "200");
    p.advance(S);
    p.tick();
    assert_eq!(level(&p), Some(2));
    assert_eq!(shed_now(&mut p), (true, true, false));
    assert_eq!(p.host.gauge("crawlguard.origin.default.p95_ms"), Some(500));
    // Still slow a step later, but both classes are already shed: the level stays at 2.
    // Recovered: once the slow second has left the 2 s window, one class back per second.
    let mut timeline = Vec::new();
    for _ in 0..4 {
        traffic(&mut p, 10, 5, "200");
        p.advance(S);
        p.tick();
        timeline.push(level(&p).unwrap_or(99));
    }
    assert_eq!(timeline, [2, 1, 0, 0]);
    assert_eq!(shed_now(&mut p), (false, false, false));
    assert_eq!(p.counter("crawlguard.class.other_bot.shed"), 3);
    assert_eq!(p.counter("crawlguard.class.script.shed"), 1);
    assert_eq!(p.counter("crawlguard.class.human.shed"), 0);
}

#[test]
fn a_failing_origin_sheds_too_and_shadow_mode_only_counts() {
    let mut p = FakeProxy::new(&format!("{{{SHED}}}"), T0);
    traffic(&mut p, 6, 5, "200");
    traffic(&mut p, 4, 5, "503");
    p.advance(S);
    p.tick();
    assert_eq!(
        p.host.gauge("crawlguard.origin.default.error_permille"),
        Some(400)
    );
    assert_eq!(shed_now(&mut p), (true, false, false));

    let mut p = FakeProxy::new(&format!("{{\"mode\":\"shadow\",{SHED}}}"), T0);
    traffic(&mut p, 10, 500, "200");
    p.advance(S);
    p.tick();
    assert_eq!(p.host.gauge("crawlguard.shed.default.level"), Some(1));
    assert_eq!(shed_now(&mut p), (false, false, false));
    assert_eq!(p.counter("crawlguard.class.other_bot.shadow_shed"), 1);
    assert_eq!(p.counter("crawlguard.class.other_bot.shed"), 0);
}

#[test]
fn two_workers_share_one_level() {
    let cfg = crawlguard_core::config::parse(format!("{{{SHED}}}").as_bytes()).expect("valid");
    let store = std::rc::Rc::new(crawlguard_testkit::MemStore::default());
    let mut a = FakeProxy::with_config(cfg.clone(), T0, store.clone());
    let mut b = FakeProxy::with_config(cfg, T0, store);
    // Worker a sees the slow responses; worker b sees none.
    traffic(&mut a, 10, 500, "200");
    a.advance(S);
    b.advance(S);
    a.tick();
    b.tick();
    assert_eq!(shed_now(&mut a), (true, false, false));
    assert_eq!(shed_now(&mut b), (true, false, false));
}

/// README, "Shedding": every worker sheds within one root tick (250 ms) of the level
/// changing. Worker b judged its second just before worker a moved the level; its next
/// tick, 250 ms later and not a judgement, applies a's level.
#[test]
fn every_worker_applies_a_new_level_on_its_next_tick() {
    let mut a = FakeProxy::new(&format!("{{{SHED}}}"), T0);
    let mut b = a.second_worker(T0);
    traffic(&mut a, 10, 500, "200");
    a.advance(S);
    b.advance(S);
    b.tick();
    a.tick();
    assert_eq!(shed_now(&mut a), (true, false, false));
    // Between b's tick and a's step: b still has level 0.
    assert_eq!(shed_now(&mut b), (false, false, false));
    b.advance(250 * MS);
    b.tick();
    assert_eq!(shed_now(&mut b), (true, false, false));
    assert_eq!(b.host.gauge("crawlguard.shed.default.level"), Some(1));
}

/// The bench's cg_allow layout: a per-IP limit and a global one, both matching a browser,
/// both far from empty.
const ALLOW_LAYOUT: &str = r#"{"limits":[
  {"name":"human_per_ip","class":"human","route":"*","rate_per_s":1000000,"burst":1000000,"key":"client_ip"},
  {"name":"all_global","class":"*","route":"*","rate_per_s":1000000,"burst":1000000,"key":"global"}]}"#;

/// The allow path's host calls (bench/profile.md). Each call listed here is one proxy-wasm
/// crossing in the module: every request header comes with one call (the path, the
/// User-Agent, the browser checks' headers), counters make none (they are flushed on the
/// root tick), the class header is set with one replace call, and while both buckets are far
/// from empty the worker spends leased tokens: one read + one compare-and-swap write per
/// limit once every 17 requests (1 charged + a lease of 16), none in between, and the clock
/// is read only for those (a leased token goes by the worker's last reading). A Chrome
/// User-Agent adds the browser checks: its fetch metadata header is missing here, so the
/// TLS attribute is read (plain HTTP: no check can fail, and the client hints check reads
/// nothing more).
#[test]
fn the_allow_path_host_calls_and_a_shared_round_trip_every_17_requests() {
    // The browser checks read the TLS attribute here; signed agents (on by default) read
    // Signature-Input, which comes with the other request headers.
    for (checks, extra) in [
        ("", &["get property connection.tls_version"][..]),
        (
            r#","browser_checks":{"fetch_metadata":"off","client_hints":"off"}"#,
            &[][..],
        ),
        (
            r#","browser_checks":{"fetch_metadata":"off","client_hints":"off"},"signed_agents":{"mode":"off"}"#,
            &[][..],
        ),
    ] {
        let layout = ALLOW_LAYOUT.replacen("]}", &format!("]{checks}}}"), 1);
        let mut p = FakeProxy::new(&layout, T0);
        // A first request puts both buckets in their slots and takes the first leases.
        let (ctx, _) = p.get("/page", CHROME, G);
        p.respond(ctx, &[(":status", "200")], false);
        p.host.host_calls.clear();
        p.host.store.calls.set(0);
        let (ctx, step) = p.get("/page", CHROME, G);
        assert_eq!(step, Step::Continue);
        p.respond(ctx, &[(":status", "200")], false);
        let want: Vec<&str> = [
            &["get request headers", "get property source.address"][..],
            extra,
            &[
                "replace request header x-crawler-class",
                "get response header :status",
            ][..],
        ]
        .concat();
        assert_eq!(p.host.host_calls, want, "{layout}");
        assert_eq!(p.worker.clock.coarse_ns(), Some(T0));
        // Requests 2..=35: leases run out at requests 18 and 35, each time one read and one
        // write per limit.
        assert_eq!(p.host.store.calls.get(), 0);
        for _ in 3..=35 {
            let (ctx, step) = p.get("/page", CHROME, G);
            assert_eq!(step, Step::Continue);
            p.respond(ctx, &[(":status", "200")], false);
        }
        assert_eq!(p.host.store.calls.get(), 2 * 4);
        // The clock only for the requests that went to the shared buckets (18 and 35).
        let clock_reads = p.host.host_calls.iter().filter(|c| *c == "now").count();
        assert_eq!(clock_reads, 2, "{layout}");
        assert_eq!(p.counter("crawlguard.class.human.allowed"), 35);
    }
}

/// The host calls that return a buffer (each about 11,000 Envoy instructions per request,
/// bench/profile.md) are made only for what needs them: the response's `:status` only with
/// `rewrite` on (the default) or under shedding, and the downstream address only when
/// `x-forwarded-for` does not give the client (`client_ip.source: xff`).
#[test]
fn the_status_and_the_downstream_address_are_read_only_when_needed() {
    let quiet = r#","browser_checks":{"fetch_metadata":"off","client_hints":"off"}"#;
    let run = |extra: &str, headers: &[(&str, &str)]| {
        let layout = ALLOW_LAYOUT.replacen("]}", &format!("]{quiet}{extra}}}"), 1);
        let mut p = FakeProxy::new(&layout, T0);
        let mut calls = Vec::new();
        for _ in 0..2 {
            p.host.host_calls.clear();
            let (ctx, step) = p.request(headers, G);
            assert_eq!(step, Step::Continue);
            p.respond(ctx, &[(":status", "200")], false);
            calls = p.host.host_calls.clone();
        }
        // The second request: its buckets are leased, so no clock or shared data.
        (calls, p.counter("crawlguard.class.human.allowed"))
    };
    let chrome = [(":path", "/"), ("user-agent", CHROME)];
    let with_xff = [
        (":path", "/"),
        ("user-agent", CHROME),
        ("x-forwarded-for", "203.0.113.7"),
    ];
    let address = "get property source.address";
    let class = "replace request header x-crawler-class";
    let status = "get response header :status";
    // (configuration added, request headers, host calls after reading the headers)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 5] = [
        ("", &chrome, &[address, class, status]),
        (
            r#","rewrite":{"enabled":false}"#,
            &chrome,
            &[address, class],
        ),
        (
            r#","rewrite":{"enabled":false},"client_ip":{"source":"xff"}"#,
            &with_xff,
            &[class],
        ),
        // No forwarded address: the downstream one.
        (
            r#","rewrite":{"enabled":false},"client_ip":{"source":"xff"}"#,
            &chrome,
            &[address, class],
        ),
        // A forwarded address under `source: remote_address` changes nothing.
        ("", &with_xff, &[address, class, status]),
    ];
    for (extra, headers, want) in cases {
        let (calls, allowed) = run(extra, headers);
        let want: Vec<&str> = [&["get request headers"][..], want].concat();
        assert_eq!(calls, want, "{extra} {headers:?}");
        assert_eq!(allowed, 2, "{extra}");
    }
}

/// Leases never admit more than the shared bucket holds: two workers of one Envoy take
/// turns on one global bucket (burst 1280: leases of 16 while at least 656 tokens stay)
/// until both reject; exactly 1280 are admitted, and a tick gives unspent leases back.
#[test]
fn leased_tokens_come_out_of_the_shared_bucket_so_the_limit_stays_exact() {
    let cfg = r#"{"limits":[{"name":"one","class":"*","route":"*","rate_per_s":0.001,"burst":1280,"key":"global"}]}"#;
    let mut a = FakeProxy::new(cfg, T0);
    let mut b = a.second_worker(T0);
    let mut admitted = 0;
    let mut rejected_in_a_row = 0;
    for i in 0.. {
        let p = if i % 3 == 0 { &mut b } else { &mut a };
        let (_, step) = p.get("/", CHROME, G);
        if step == Step::Continue {
            admitted += 1;
            rejected_in_a_row = 0;
        } else {
            rejected_in_a_row += 1;
            if rejected_in_a_row > 4 {
                break;
            }
        }
        assert!(i < 5000, "never stopped admitting");
    }
    assert_eq!(admitted, 1280);

    // A lease left unspent goes back on the tick: one request takes 1 + 16 tokens; after
    // the tick the other worker sees every token but that one.
    let mut a = FakeProxy::new(cfg, T0);
    let mut b = a.second_worker(T0);
    assert_eq!(a.get("/", CHROME, G).1, Step::Continue);
    a.tick();
    let mut n = 0;
    while b.get("/", CHROME, G).1 == Step::Continue {
        n += 1;
        assert!(n <= 1280, "over the limit");
    }
    assert_eq!(n, 1279);
}
