//! Requests in flight (`limits[].max_in_flight`) and the exempt paths' own limit, whole
//! requests through the request machine on the host (`crawlguard_testkit::FakeProxy` plays
//! Envoy's callbacks and the clock; a second worker shares the store as a second Envoy
//! worker does). The real-Envoy side (exactness at 2 and 4 workers against an origin that
//! counts its concurrent requests, a reload) is `integration/tests/in_flight.rs`.

mod common;

use common::T0;
use crawlguard_core::host::ContextId;
use crawlguard_core::limits::in_flight::EPOCH_S;
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const CURL: &str = "curl/8.5.0";
const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                      Gecko) Chrome/124.0.0.0 Safari/537.36";
const CHATGPT: &str = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; \
                       ChatGPT-User/1.0; +https://openai.com/bot";
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
const A: &str = "192.0.2.1:4000";
const B: &str = "192.0.2.2:4000";

/// Scripts: 3 in flight per address, a bucket that never runs dry in a test.
const THREE: &str = r#"{"limits":[
  {"name":"script_per_ip","class":"script","route":"*","rate_per_s":1000,"burst":1000,"max_in_flight":3,"key":"client_ip"}]}"#;

/// The upstream answers `ctx` with a 200 and its stream ends.
fn finish(p: &mut FakeProxy, ctx: ContextId) {
    p.respond(ctx, &[(":status", "200")], true);
    p.end_stream(ctx);
}

/// `n` GETs of `/` as curl from `from`, left in flight: how many were forwarded.
fn open(p: &mut FakeProxy, from: &str, n: usize) -> Vec<ContextId> {
    (0..n)
        .filter_map(|_| {
            let (ctx, step) = p.get("/", CURL, from);
            (step == Step::Continue).then_some(ctx)
        })
        .collect()
}

#[test]
fn at_max_in_flight_the_next_request_gets_the_class_rejection_until_one_ends() {
    let mut p = FakeProxy::new(THREE, T0);
    let first = open(&mut p, A, 3);
    assert_eq!(first.len(), 3);
    let (ctx, step) = p.get("/", CURL, A);
    assert_eq!(step, Step::Pause);
    let reply = p.req(ctx).reply.clone().expect("a rejection");
    assert_eq!(reply.status, 429);
    assert_eq!(reply.details, "crawlguard_rate_limited");
    // A place frees when a request ends, which nobody can tell: the class's shortest wait,
    // script's 1 s, plus its jitter (0..=10 s).
    let ra: u32 = reply
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=11).contains(&ra), "{ra}");
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    // Another address has its own places.
    assert_eq!(open(&mut p, B, 3).len(), 3);
    // One ends: exactly one more fits, the next is refused again.
    finish(&mut p, first[0]);
    assert_eq!(open(&mut p, A, 2).len(), 1);
    p.tick();
    assert_eq!(p.counter("crawlguard.class.script.allowed"), 7);
    assert_eq!(p.counter("crawlguard.class.script.limited"), 2);
    assert_eq!(p.counter("crawlguard.class.script.limited_in_flight"), 2);
    assert_eq!(p.worker.limiter.borrow().places_held(), 6);
}

#[test]
fn a_place_is_given_back_however_the_stream_ends() {
    let mut p = FakeProxy::new(THREE, T0);
    for end in [
        "response",
        "reset before the response",
        "upstream 503",
        "local reply",
    ] {
        let ctxs = open(&mut p, A, 3);
        assert_eq!(ctxs.len(), 3, "{end}");
        assert_eq!(open(&mut p, A, 1).len(), 0, "{end}: full");
        let ctx = ctxs[0];
        match end {
            "response" => finish(&mut p, ctx),
            // The client resets (or the upstream times out) before response headers: Envoy
            // still calls on_log.
            "reset before the response" => p.hang_up(ctx),
            // Envoy's own 503 for an upstream timeout, normalised by crawlguard.
            "upstream 503" => {
                assert_eq!(p.respond(ctx, &[(":status", "503")], false), Step::Pause);
                assert_eq!(p.reply_status(ctx), Some(503));
                p.end_stream(ctx);
            }
            // An upstream 429 replaced by crawlguard's own local reply.
            _ => {
                assert_eq!(p.respond(ctx, &[(":status", "429")], false), Step::Pause);
                p.end_stream(ctx);
            }
        }
        let again = open(&mut p, A, 2);
        assert_eq!(again.len(), 1, "{end}: one place freed");
        for c in ctxs.iter().skip(1).chain(&again) {
            finish(&mut p, *c);
        }
        assert_eq!(p.worker.limiter.borrow().places_held(), 0, "{end}");
    }
}

#[test]
fn workers_of_one_envoy_share_the_count() {
    let mut a = FakeProxy::new(THREE, T0);
    let mut b = a.second_worker(T0);
    let on_a = open(&mut a, A, 2);
    assert_eq!(on_a.len(), 2);
    assert_eq!(
        open(&mut b, A, 3).len(),
        1,
        "one place left for the other worker"
    );
    finish(&mut a, on_a[0]);
    assert_eq!(open(&mut b, A, 3).len(), 1, "the place worker A gave back");
}

#[test]
fn a_later_limit_that_rejects_gives_the_place_back() {
    let mut p = FakeProxy::new(
        r#"{"routes":[{"name":"api","path_prefix":"/api/"}],"limits":[
          {"name":"in_flight","class":"*","route":"*","max_in_flight":2,"key":"client_ip"},
          {"name":"api_rate","class":"*","route":"api","rate_per_s":0.001,"burst":1,"key":"client_ip"}]}"#,
        T0,
    );
    let (first, step) = p.get("/api/a", CURL, A);
    assert_eq!(step, Step::Continue);
    // Refused by the API bucket after taking a place: each gives its place back.
    for _ in 0..5 {
        assert_eq!(p.get("/api/b", CURL, A).1, Step::Pause);
    }
    p.tick();
    assert_eq!(p.counter("crawlguard.class.script.limited"), 5);
    assert_eq!(p.counter("crawlguard.class.script.limited_in_flight"), 0);
    // One place held (the first request), one free.
    assert_eq!(open(&mut p, A, 2).len(), 1);
    finish(&mut p, first);
    assert_eq!(open(&mut p, A, 2).len(), 1);
    assert_eq!(p.worker.limiter.borrow().places_held(), 2);
}

#[test]
fn a_place_nobody_gives_back_is_forgotten_within_two_epochs_and_live_ones_are_renewed() {
    let mut a = FakeProxy::new(THREE, T0);
    let mut b = a.second_worker(T0);
    // Worker B holds one place for a request that lives on; worker A two that will be
    // lost with it (its VM gone: no on_log, no tick ever again).
    let live = open(&mut b, A, 1);
    assert_eq!(open(&mut a, A, 2).len(), 2);
    drop(a);
    let epoch_ns = u64::from(EPOCH_S) * S;
    // B's tick renews its own place every epoch; A's places stay counted for at least one
    // epoch and are forgotten by the end of the second.
    let mut t = 0;
    let mut freed_at = None;
    while t <= 3 * epoch_ns {
        b.advance(250 * MS);
        t += 250 * MS;
        b.tick();
        let got = open(&mut b, A, 1);
        if let Some(ctx) = got.first() {
            freed_at.get_or_insert(t);
            finish(&mut b, *ctx);
        }
    }
    let freed_at = freed_at.expect("the lost places were forgotten");
    assert!(
        (epoch_ns..=2 * epoch_ns + 250 * MS).contains(&freed_at),
        "freed after {} ms",
        freed_at / MS
    );
    // The live request kept its place all along (renewed on B's ticks): 2 more fit, not 3.
    assert_eq!(open(&mut b, A, 3).len(), 2);
    assert_eq!(b.worker.limiter.borrow().places_held(), 3);
    // Minutes later, still counted while it lives.
    for _ in 0..(600 * 4) {
        b.advance(250 * MS);
        b.tick();
    }
    assert_eq!(
        open(&mut b, A, 1).len(),
        0,
        "3 live requests after 10 minutes"
    );
    finish(&mut b, live[0]);
    assert_eq!(open(&mut b, A, 1).len(), 1);
}

#[test]
fn shadow_mode_counts_and_forwards_without_taking_a_place() {
    let cfg = THREE.replace(
        r#""max_in_flight":3,"#,
        r#""max_in_flight":3,"mode":"shadow","#,
    );
    let mut p = FakeProxy::new(&cfg, T0);
    let ctxs = open(&mut p, A, 5);
    assert_eq!(ctxs.len(), 5, "shadow mode forwards every one");
    p.tick();
    assert_eq!(p.counter("crawlguard.class.script.shadow_limited"), 2);
    assert_eq!(
        p.counter("crawlguard.class.script.shadow_limited_in_flight"),
        2
    );
    assert_eq!(p.counter("crawlguard.class.script.limited"), 0);
    // The two over the cap were not counted in flight (enforcing would have refused them).
    assert_eq!(p.worker.limiter.borrow().places_held(), 3);
    for c in ctxs {
        finish(&mut p, c);
    }
    assert_eq!(p.worker.limiter.borrow().places_held(), 0);
}

#[test]
fn ratelimit_headers_state_a_concurrency_limit_as_concurrent_requests() {
    let cfg = THREE.replace("]}", r#"],"ratelimit_headers":true}"#);
    let mut p = FakeProxy::new(&cfg, T0);
    assert_eq!(open(&mut p, A, 3).len(), 3);
    let (ctx, _) = p.get("/", CURL, A);
    let reply = p.req(ctx).reply.clone().expect("a rejection");
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some("\"script_per_ip\";q=3;qu=\"concurrent-requests\"")
    );
}

#[test]
fn a_herd_on_one_url_is_held_to_a_per_path_concurrency_limit() {
    // Verified AI retrievers from many addresses on one fresh page: 4 at once per path,
    // whoever sends them; another page has its own 4.
    let mut p = FakeProxy::new(
        r#"{"limits":[
          {"name":"ai_retriever_per_path","class":"ai_retriever","route":"*","max_in_flight":4,"key":"path"}]}"#,
        T0,
    );
    let mut forwarded = Vec::new();
    let mut refused = 0;
    for i in 1..=10 {
        let from = format!("192.0.2.{i}:4000");
        let (ctx, step) = p.get("/news/fresh?utm=x", CHATGPT, &from);
        assert_eq!(step, Step::Pause, "waits for its verdict");
        p.wake();
        assert!(p.verdict_for(&format!("192.0.2.{i}"), "chatgpt-user", "verified"));
        match p.reply_status(ctx) {
            None => forwarded.push(ctx),
            Some(429) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((forwarded.len(), refused), (4, 6));
    for c in &forwarded {
        assert_eq!(p.class_of(*c).as_deref(), Some("ai_retriever"));
    }
    // The query string is not part of the path key; another page is another key.
    let (_, step) = p.get("/news/fresh", CHATGPT, "192.0.2.1:4000");
    assert_eq!(step, Step::Pause);
    let (_, step) = p.get("/news/other", CHATGPT, "192.0.2.1:4000");
    assert_eq!(step, Step::Continue);
    finish(&mut p, forwarded[0]);
    let (_, step) = p.get("/news/fresh", CHATGPT, "192.0.2.1:4000");
    assert_eq!(step, Step::Continue);
    p.tick();
    assert_eq!(
        p.counter("crawlguard.class.ai_retriever.limited_in_flight"),
        7
    );
}

/// The allow path of a concurrency limit: (shared-data calls at admission, at the stream's
/// end, on the next tick) for a script request under a per-address limit with a bucket and
/// `max_in_flight` `max`, once the key is warm.
fn calls_of_one_request(max: u32) -> (u64, u64, u64) {
    let mut p = FakeProxy::new(
        &format!(
            r#"{{"limits":[
          {{"name":"script_per_ip","class":"script","route":"*","rate_per_s":1000,"burst":1000,"max_in_flight":{max},"key":"client_ip"}}]}}"#
        ),
        T0,
    );
    let warm = open(&mut p, A, 1);
    finish(&mut p, warm[0]);
    p.tick();
    p.host.store.calls.set(0);
    let (ctx, step) = p.get("/", CURL, A);
    assert_eq!(step, Step::Continue);
    let admission = p.host.store.calls.get();
    p.respond(ctx, &[(":status", "200")], true);
    assert_eq!(
        p.host.store.calls.get(),
        admission,
        "response headers: nothing"
    );
    p.end_stream(ctx);
    let end = p.host.store.calls.get() - admission;
    p.tick();
    let tick = p.host.store.calls.get() - admission - end;
    (admission, end, tick)
}

#[test]
fn the_allow_path_of_a_concurrency_limit_costs_one_round_trip_far_from_its_cap() {
    // The token and the place in one compare-and-swap (one get, one set) at admission.
    // Under a cap below 16, the place goes back at the stream's end: one more each.
    assert_eq!(calls_of_one_request(8), (2, 2, 0));
    // Far from a cap of 16 or more, the give-back is held back and written on the tick.
    assert_eq!(calls_of_one_request(30), (2, 0, 2));
    // A key far from a large cap: one round trip per request (its admission), and one
    // write per tick for all the give-backs held back (at most cap / 16, 64 at most).
    let mut p = FakeProxy::new(
        r#"{"limits":[
          {"name":"human_in_flight","class":"human","route":"*","max_in_flight":10000,"key":"client_ip"},
          {"name":"human_per_ip","class":"human","route":"*","rate_per_s":1000000,"burst":1000000,"key":"client_ip"}]}"#,
        T0,
    );
    let (c, _) = p.get("/", CHROME, B);
    finish(&mut p, c);
    p.tick();
    p.host.store.calls.set(0);
    for _ in 0..34 {
        let (c, step) = p.get("/", CHROME, B);
        assert_eq!(step, Step::Continue);
        finish(&mut p, c);
    }
    // 34 admissions (a get and a set each), the per-IP bucket's leases run out twice (a get
    // and a set each time), no give-back written before the tick...
    assert_eq!(p.host.store.calls.get(), 34 * 2 + 2 * 2);
    assert_eq!(p.worker.limiter.borrow().places_owed(), 34);
    p.tick();
    // ...and one write for all 34 on it.
    assert_eq!(p.host.store.calls.get(), 34 * 2 + 2 * 2 + 2);
    assert_eq!(p.worker.limiter.borrow().places_owed(), 0);
    // A request no limit applies to (a script here) touches no shared data at all.
    p.host.store.calls.set(0);
    let (c, _) = p.get("/", CURL, A);
    finish(&mut p, c);
    p.tick();
    assert_eq!(p.host.store.calls.get(), 0);
}

#[test]
fn held_back_give_backs_never_let_more_in_and_go_out_on_the_tick() {
    // A cap of 32: a worker holds back at most 2 give-backs, and only while it last saw at
    // most 16 in flight.
    let cfg = r#"{"limits":[
      {"name":"all","class":"*","route":"*","max_in_flight":32,"key":"global"}]}"#;
    let mut a = FakeProxy::new(cfg, T0);
    let mut b = a.second_worker(T0);
    let on_a = open(&mut a, A, 10);
    assert_eq!(on_a.len(), 10);
    for c in on_a {
        finish(&mut a, c);
    }
    // Written in threes (2 held back, the third writes them), one left held back.
    assert_eq!(a.worker.limiter.borrow().places_owed(), 1);
    // Worker B sees that one still taken: 31 fit, not 32, and never more.
    let on_b = open(&mut b, B, 40);
    assert_eq!(on_b.len(), 31);
    a.tick();
    assert_eq!(open(&mut b, B, 5).len(), 1);
    // Near the cap (B saw 32 in flight), B writes every give-back at once.
    finish(&mut b, on_b[0]);
    assert_eq!(b.worker.limiter.borrow().places_owed(), 0);
    assert_eq!(open(&mut a, A, 3).len(), 1);
}

#[test]
fn an_exempt_path_with_a_query_string_is_an_ordinary_request() {
    let mut p = FakeProxy::new(
        r#"{"limits":[{"name":"s","class":"script","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip"}]}"#,
        T0,
    );
    for path in [
        "/robots.txt?x=1",
        "/robots.txt?",
        "/robots.txt#top",
        "/sitemap.xml?page=2",
    ] {
        let (ctx, _) = p.get(path, CURL, A);
        assert_eq!(p.class_of(ctx).as_deref(), Some("script"), "{path}");
    }
    // The script's two tokens went to the first two; the rest were refused by its limit.
    p.tick();
    assert_eq!(p.counter("crawlguard.class.script.allowed"), 2);
    assert_eq!(p.counter("crawlguard.class.script.limited"), 2);
    assert_eq!(p.counter("crawlguard.exempt"), 0);
    // The exact path stays exempt, whatever the class's limit says.
    let (ctx, step) = p.get("/robots.txt", CURL, A);
    assert_eq!((step, p.class_of(ctx)), (Step::Continue, None));
}

#[test]
fn a_polite_crawler_is_never_refused_robots_txt_while_a_flood_is_limited() {
    let mut p = FakeProxy::new("", T0);
    // The flood: 1,000 requests for /robots.txt as fast as it can, half of them with a
    // random query string (which is not exempt: the script class's own limits).
    let mut exempt_forwarded = 0;
    let mut query_forwarded = 0;
    let mut refused = 0;
    for i in 0..1000u32 {
        let path = if i % 2 == 0 {
            "/robots.txt".to_string()
        } else {
            format!("/robots.txt?{:08x}", i.wrapping_mul(2_654_435_761))
        };
        let (ctx, step) = p.get(&path, CURL, A);
        match (step, i % 2) {
            (Step::Continue, 0) => exempt_forwarded += 1,
            (Step::Continue, _) => query_forwarded += 1,
            _ => refused += 1,
        }
        finish(&mut p, ctx);
        p.advance(MS);
    }
    // 1 s of flood: the exempt limit's burst of 60 (its next token is due at 1 s); the
    // query strings got script_per_ip's burst of 10 and nothing after.
    assert_eq!(exempt_forwarded, 60);
    assert_eq!(query_forwarded, 10);
    assert_eq!(refused, 1000 - 60 - 10);
    // A polite crawler from another address fetches robots.txt once a minute all day.
    let mut polite = 0;
    for _ in 0..(24 * 60) {
        let (ctx, step) = p.get("/robots.txt", GOOGLEBOT, B);
        assert_eq!(step, Step::Continue);
        assert_eq!(p.class_of(ctx), None);
        finish(&mut p, ctx);
        polite += 1;
        p.advance(60 * S);
    }
    assert_eq!(polite, 1440);
    p.tick();
    assert_eq!(p.counter("crawlguard.exempt"), 500 + 1440);
    assert_eq!(p.counter("crawlguard.exempt_limited"), 500 - 60);
}

#[test]
fn the_exempt_limit_in_shadow_mode_only_counts_and_off_limits_nothing() {
    let mut p = FakeProxy::new(r#"{"exempt_limit":{"mode":"shadow","burst":5}}"#, T0);
    for _ in 0..20 {
        assert_eq!(p.get("/robots.txt", CURL, A).1, Step::Continue);
    }
    p.tick();
    assert_eq!(p.counter("crawlguard.exempt_shadow_limited"), 15);
    assert_eq!(p.counter("crawlguard.exempt_limited"), 0);
    let mut p = FakeProxy::new(r#"{"exempt_limit":{"enabled":false}}"#, T0);
    for _ in 0..200 {
        assert_eq!(p.get("/robots.txt", CURL, A).1, Step::Continue);
    }
}
