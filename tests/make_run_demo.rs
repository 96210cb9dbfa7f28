//! `make run`'s configuration (`envoy/examples/make-run.json`, what scripts/run.sh gives
//! Envoy) under the demo's own curl flood: escalation shows, and running the documented
//! commands again after `decay_s` works again instead of getting an hour of 429s.

mod common;

use common::T0;
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
const LOOPBACK: &str = "127.0.0.1:40000";

/// The demo configuration, with the script class's jitter off so Retry-Afters are exact.
fn demo_without_jitter() -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/envoy/examples/make-run.json"
    ))
    .expect("read envoy/examples/make-run.json");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    v["classes"]["script"]["retry_after"] = serde_json::json!({"jitter_s": 0});
    v.to_string()
}

/// The README's flood: 20 curl requests 5 ms apart, one after the other (each ends before
/// the next starts); (status, Retry-After) of each.
fn flood(p: &mut FakeProxy) -> Vec<(u16, Option<String>)> {
    (0..20)
        .map(|_| {
            let (ctx, step) = p.get("/", "curl/7.88.1", LOOPBACK);
            p.advance(5 * MS);
            let out = match step {
                Step::Continue => (200, None),
                _ => {
                    let r = p.req(ctx).reply.clone().expect("local reply");
                    (r.status, r.header("retry-after").map(str::to_string))
                }
            };
            p.hang_up(ctx);
            out
        })
        .collect()
}

#[test]
fn the_demo_flood_escalates_to_16_s_and_the_next_run_30_s_later_is_admitted_again() {
    let cfg = crawlguard_core::config::parse(demo_without_jitter().as_bytes()).expect("valid");
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    let mut p = FakeProxy::new(&demo_without_jitter(), T0);
    let first = flood(&mut p);
    let ra: Vec<&str> = first.iter().filter_map(|(_, r)| r.as_deref()).collect();
    assert!(first[..10].iter().all(|r| *r == (200, None)), "{first:?}");
    assert!(first[10..].iter().all(|(s, _)| *s == 429), "{first:?}");
    // Three at the class's 1 s, then 2, 4, 8, 16 s and the demo's cap.
    assert_eq!(ra, ["1", "1", "1", "2", "4", "8", "16", "16", "16", "16"]);
    assert_eq!(p.counter("crawlguard.class.script.escalated"), 7);
    // decay_s (30 s) after the last ignored request the key starts over: the same commands
    // get the same answers.
    p.advance(30 * S);
    assert_eq!(flood(&mut p), first);
}
