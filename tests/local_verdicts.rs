//! A worker's copy of warm verified verdicts (`core/src/identity/local_verdicts.rs`) on the
//! fake proxy: a verified crawler's request reads no shared data and no clock, and every
//! promise of the shared verdict cache holds: the verdict's TTL, a verdict turned `spoofed`
//! reaching every worker within 1 s, one callout per claim per worker, stale-if-error.

mod common;

use common::T0;
use crawlguard_core::identity::verifier_answer::Verdict;
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
const GOOGLEBOT: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
const G: &str = "192.0.2.1:4000";

/// No limit matches a crawler: the store and the clock are touched only by verification.
const CFG: &str = r#"{"limits":[
  {"name":"human","class":"human","route":"*","rate_per_s":1,"burst":10,"key":"client_ip"}]"#;

fn proxy(extra: &str) -> FakeProxy {
    FakeProxy::new(&format!("{CFG}{extra}}}"), T0)
}

/// Moves the clock to `T0 + ns`, and the worker's last reading with it, as Envoy's root
/// tick does every 250 ms (a tick in the fake would also fetch published ranges: one more
/// callout, which these tests count).
fn at(p: &mut FakeProxy, ns: u64) {
    p.host.now_ns = Some(T0 + ns);
    p.worker.clock.observe(T0 + ns);
}

/// A request from G claiming Googlebot: its step and class header.
fn crawl(p: &mut FakeProxy) -> (Step, Option<String>) {
    let (ctx, step) = p.get("/", GOOGLEBOT, G);
    (step, p.class_of(ctx))
}

/// Host calls and shared-data calls of one request.
fn calls_of_one(p: &mut FakeProxy) -> (Option<String>, Vec<String>, u64) {
    p.host.host_calls.clear();
    p.host.store.calls.set(0);
    let (step, class) = crawl(p);
    assert_eq!(step, Step::Continue);
    (class, p.host.host_calls.clone(), p.host.store.calls.get())
}

/// Verified by worker `p`'s first callout (token 1), fresh for `ttl_s`.
fn verified(p: &mut FakeProxy, ttl_s: u64) {
    let (step, _) = crawl(p);
    assert_eq!(step, Step::Pause);
    p.wake();
    p.verdict(1, "192.0.2.1", "googlebot", "verified", ttl_s);
}

#[test]
fn a_copied_verdict_serves_without_shared_data_or_a_clock_read() {
    let mut a = proxy("");
    verified(&mut a, 3600);
    // The worker that called out holds a copy from its own answer.
    let want = vec![
        "get request headers".to_string(),
        "get property source.address".to_string(),
        "replace request header x-crawler-class".to_string(),
    ];
    let (class, calls, store) = calls_of_one(&mut a);
    assert_eq!(class.as_deref(), Some("search_crawler"));
    assert_eq!((calls, store), (want.clone(), 0));
    // Another worker copies it from the shared cache on its first request (one read, one
    // clock read), then reads nothing.
    let mut b = a.second_worker(T0);
    let (class, calls, store) = calls_of_one(&mut b);
    assert_eq!(class.as_deref(), Some("search_crawler"));
    assert_eq!(calls.iter().filter(|c| *c == "now").count(), 1);
    assert_eq!(store, 1);
    for _ in 0..3 {
        let (class, calls, store) = calls_of_one(&mut b);
        assert_eq!(class.as_deref(), Some("search_crawler"));
        assert_eq!((calls, store), (want.clone(), 0));
    }
    assert_eq!(b.counter("crawlguard.verify.cache_hit"), 4);
    assert_eq!(b.host.callouts.len(), 0);
}

#[test]
fn a_copy_is_read_again_every_second_and_ends_with_the_verdicts_ttl() {
    let mut p = proxy("");
    verified(&mut p, 10);
    at(&mut p, 900 * MS);
    assert_eq!(calls_of_one(&mut p).2, 0);
    // 1 s after it was copied: read from the shared cache again (still fresh: copied again).
    at(&mut p, 1000 * MS);
    let (class, _, store) = calls_of_one(&mut p);
    assert_eq!((class.as_deref(), store), (Some("search_crawler"), 1));
    assert_eq!(calls_of_one(&mut p).2, 0);
    at(&mut p, 9999 * MS);
    assert_eq!(calls_of_one(&mut p).0.as_deref(), Some("search_crawler"));
    // The TTL ends: no copy, no fresh shared verdict, a new callout.
    at(&mut p, 10 * S);
    assert_eq!(crawl(&mut p).0, Step::Pause);
    p.wake();
    assert_eq!(p.host.callouts.len(), 2);
}

#[test]
fn a_verdict_turned_spoofed_reaches_a_worker_holding_a_copy_within_one_second() {
    let mut a = proxy("");
    verified(&mut a, 3600);
    let mut b = a.second_worker(T0);
    assert_eq!(crawl(&mut b).1.as_deref(), Some("search_crawler")); // copied at T0
                                                                    // 100 ms later the shared verdict turns spoofed (another worker's or Envoy's answer).
    at(&mut b, 100 * MS);
    let fp = b
        .worker
        .limiter
        .borrow()
        .claim_fingerprint("192.0.2.1".parse().expect("ip"), "googlebot");
    let now = T0 + 100 * MS;
    let written = b.worker.verifier.verdicts.put_verdict(
        &*b.host.store,
        fp,
        Verdict::Spoofed,
        now,
        now + 3600 * S,
        0,
    );
    assert_eq!(written, Ok(()));
    // Until the copy's second is over it still serves (the stated bound)...
    at(&mut b, 999 * MS);
    assert_eq!(crawl(&mut b).1.as_deref(), Some("search_crawler"));
    // ...then the shared verdict decides, on both workers.
    at(&mut b, 1000 * MS);
    assert_eq!(crawl(&mut b).1.as_deref(), Some("spoofed"));
    at(&mut a, 1000 * MS);
    assert_eq!(crawl(&mut a).1.as_deref(), Some("spoofed"));
    assert_eq!(a.host.callouts.len() + b.host.callouts.len(), 1);
}

#[test]
fn a_callout_answered_spoofed_replaces_the_workers_copy_at_once() {
    let mut p = proxy(r#","verifier":{"max_ttl_s":1}"#);
    verified(&mut p, 3600);
    // TTL over (clamped to 1 s): the copy ends, the next request calls out.
    at(&mut p, 1500 * MS);
    let (ctx, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Pause);
    p.wake();
    p.verdict(2, "192.0.2.1", "googlebot", "spoofed", 3600);
    assert_eq!(p.class_of(ctx).as_deref(), Some("spoofed"));
    assert_eq!(crawl(&mut p).1.as_deref(), Some("spoofed"));
}

#[test]
fn one_callout_per_claim_per_worker_when_copies_expire() {
    let mut a = proxy(r#","verifier":{"max_ttl_s":1}"#);
    verified(&mut a, 3600);
    let mut b = a.second_worker(T0);
    assert_eq!(crawl(&mut b).1.as_deref(), Some("search_crawler"));
    at(&mut a, 2 * S);
    at(&mut b, 2 * S);
    // Three requests on each worker while the verdict is expired: one callout per worker.
    let mut waiting = Vec::new();
    for p in [&mut a, &mut b] {
        for _ in 0..3 {
            let (ctx, step) = p.get("/", GOOGLEBOT, G);
            assert_eq!(step, Step::Pause);
            waiting.push(ctx);
        }
        p.wake();
    }
    assert_eq!((a.host.callouts.len(), b.host.callouts.len()), (2, 1));
    a.verdict(2, "192.0.2.1", "googlebot", "verified", 3600);
    b.verdict(1, "192.0.2.1", "googlebot", "verified", 3600);
    let classes: Vec<_> = waiting
        .iter()
        .enumerate()
        .map(|(i, ctx)| {
            if i < 3 {
                a.class_of(*ctx)
            } else {
                b.class_of(*ctx)
            }
        })
        .collect();
    assert_eq!(classes, vec![Some("search_crawler".to_string()); 6]);
    assert_eq!(a.counter("crawlguard.verify.in_flight"), 2);
    assert_eq!(b.counter("crawlguard.verify.in_flight"), 2);
}

#[test]
fn a_stale_verdict_still_stands_in_once_the_copy_expired() {
    let mut p = proxy(r#","verifier":{"max_ttl_s":1}"#);
    verified(&mut p, 3600);
    at(&mut p, 2 * S);
    let (ctx, step) = p.get("/", GOOGLEBOT, G);
    assert_eq!(step, Step::Pause);
    p.wake();
    p.answer(2, None, "");
    assert_eq!(p.class_of(ctx).as_deref(), Some("search_crawler"));
    assert_eq!(p.counter("crawlguard.verify.stale"), 1);
    assert_eq!(p.counter("crawlguard.verify.error"), 1);
    // A stale verdict is never copied: the backoff's requests read the shared cache.
    let (class, _, store) = calls_of_one(&mut p);
    assert_eq!((class.as_deref(), store), (Some("search_crawler"), 1));
    assert_eq!(p.counter("crawlguard.verify.stale"), 2);
}
