//! The replay's one-request host ([`ReplayProxy`]) decides exactly like the filter crate's
//! own in-memory proxy ([`FakeProxy`]), request by request, on the repository's real access
//! log: same reply (or none), same class, and at the end every counter equal. `FakeProxy`
//! runs the full response path for every forwarded request (as Envoy does); the replay host
//! skips it unless the status is one the filter rewrites, and this shows that changes
//! nothing, cost-based limits included.

mod common;

use common::APACHE_LOG;

use crawlguard_cli::host::{ReplayProxy, Request};
use crawlguard_cli::input;
use crawlguard_cli::offline;
use crawlguard_core::config::{self, Config};
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;
use crawlguard_testkit::MemStore;
use std::rc::Rc;

/// The verifier's answer to a callout path: `unknown`, as replay without `--ranges` gives.
fn unknown(path: &str) -> String {
    offline::answer(None, path).0
}

/// Replays the log through both proxies; returns (requests, replies by the replay host,
/// shadow-limited by the replay host).
fn agree(json: &str) -> (u64, u64, u64) {
    agree_with(json, |_| {})
}

/// [`agree`], with the replay host's copy of the configuration changed by `change` (as
/// replay changes it).
fn agree_with(json: &str, change: impl Fn(&mut Config)) -> (u64, u64, u64) {
    let cfg = config::parse(json.as_bytes()).expect("valid config");
    let mut mine = cfg.clone();
    change(&mut mine);
    let mut replay = ReplayProxy::new(mine);
    let mut fake = FakeProxy::with_config(cfg, 0, Rc::new(MemStore::default()));
    let mut answered = 0;
    let (mut n, mut replies, mut shadow) = (0u64, 0u64, 0u64);
    input::each_input(&[APACHE_LOG.to_string()], None, &mut |r| {
        n += 1;
        // The log's seconds, never backwards (as replay's clock; lines within a minute are
        // not in order in this log).
        let now = (u64::try_from(r.ts_ms).expect("time") * 1_000_000).max(replay.host.now_ns);
        replay.host.now_ns = now;
        fake.host.now_ns = Some(now);
        let client = r.client.map(|c| String::from_utf8_lossy(c).into_owned());
        let req = Request {
            path: r.path,
            method: r.method,
            ua: r.ua,
            xff: r.xff,
            downstream: client.as_deref().map(str::as_bytes),
            signals: r.signals,
        };
        let out = replay.run(&req, r.status, &mut |p| (200, unknown(p)));
        replies += u64::from(out.reply.is_some());
        shadow += u64::from(out.shadow_limit.is_some());

        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut headers = vec![
            (":path".to_string(), text(r.path)),
            (":method".to_string(), text(r.method)),
        ];
        if let Some(ua) = r.ua {
            headers.push(("user-agent".into(), text(ua)));
        }
        let h: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (ctx, step) = fake.request(&h, client.as_deref().unwrap_or(""));
        if step == Step::Pause && fake.host.requests[&ctx].reply.is_none() {
            fake.wake();
            while answered < fake.host.callouts.len() {
                let c = fake.host.callouts[answered].clone();
                answered += 1;
                fake.answer(c.token, Some("200"), &unknown(&c.path));
            }
        }
        let before = fake.host.requests[&ctx].reply.as_ref().map(|x| x.status);
        if before.is_none() {
            // Envoy runs the response path for every forwarded request.
            fake.respond(ctx, &[(":status", &r.status.to_string())], false);
        }
        let got = fake.host.requests[&ctx].reply.as_ref().map(|x| x.status);
        assert_eq!(out.reply, got, "line {n}: {:?}", text(r.path));
        let class = fake.host.requests[&ctx]
            .request_header("x-crawler-class")
            .map(text);
        assert_eq!(out.class.map(|c| c.as_str().to_string()), class, "line {n}");
        fake.hang_up(ctx);
    });
    let names: Vec<String> = fake.host.metric_names.values().cloned().collect();
    assert!(names.len() > 50, "{}", names.len());
    // What the replay host reports per request adds up to the filter's class counters.
    let sum = |suffix: &str| -> u64 {
        names
            .iter()
            .filter(|n| n.starts_with("crawlguard.class.") && n.ends_with(suffix))
            .map(|n| replay.counter(n))
            .sum()
    };
    assert_eq!(sum(".limited"), replies);
    assert_eq!(sum(".shadow_limited"), shadow);
    for name in names {
        assert_eq!(
            replay.counter(&name),
            fake.host.counter(&name),
            "counter {name}"
        );
    }
    (n, replies, shadow)
}

#[test]
fn embedded_default() {
    assert_eq!(agree(""), (9_999, 345, 0));
}

#[test]
fn shadow_mode_and_a_shadow_limit() {
    assert_eq!(agree(r#"{"mode":"shadow"}"#), (9_999, 0, 327));
    let mixed = r#"{"limits":[
        {"name":"per_ip","class":"*","route":"*","rate_per_s":1,"burst":20,"key":"client_ip"},
        {"name":"trial","class":"*","route":"*","rate_per_s":0.5,"burst":10,"key":"client_ip","mode":"shadow"}
    ]}"#;
    assert_eq!(agree(mixed), (9_999, 787, 779));
}

#[test]
fn cost_limits_settle_at_the_reservation() {
    let costs = r#"{"limits":[
        {"name":"items","class":"*","route":"*","rate_per_s":5,"burst":60,"key":"client_ip",
         "cost":{"reserve":3,"from_response_header":"x-crawlguard-cost"}}
    ]}"#;
    assert_eq!(agree(costs), (9_999, 752, 0));
}

#[test]
fn fleet_mode_off_in_the_replay_decides_like_a_replica_that_never_synced() {
    // Replay turns fleet mode off; a replica that has not synced yet (one replica known)
    // holds each limit whole, so it decides the same.
    let fleet = r#"{"fleet":{"enabled":true},"store":{"hash_seed":4242}}"#;
    assert_eq!(
        agree_with(fleet, |c| c.fleet.enabled = false),
        (9_999, 345, 0)
    );
}
