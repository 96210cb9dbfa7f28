//! Planned slot collisions, on the host (the fake proxy runs the filter's own code, so keys
//! hash here as they do in it): an attacker who knows `store.hash_seed` picks helper
//! addresses whose buckets take every candidate slot of its own key, and its requests fall
//! to the per-worker fallback, where each worker has the whole limit. With the seed
//! published in the source that works; with a seed nobody published (what an Envoy draws
//! when the configuration sets none) the same helpers collide with nothing.
//!
//! (A real-Envoy version would need the wasm32 build of the key hash: ahash's arithmetic
//! differs between 32- and 64-bit targets, so helpers computed here do not collide there.)

mod common;

use common::T0;
use crawlguard_core::config;
use crawlguard_core::limits::limiter::Limiter;
use crawlguard_core::request::Step;
use crawlguard_core::store::PUBLISHED_HASH_SEED;
use crawlguard_testkit::FakeProxy;
use std::net::{IpAddr, Ipv4Addr};

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                      Gecko) Chrome/124.0.0.0 Safari/537.36";
const ATTACKER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

/// 1,024 slots, one per-address limit of burst 5 that does not refill during the test, and
/// `seed` (`None`: unset).
fn config_json(seed: Option<u64>) -> String {
    let seed = seed.map_or(String::new(), |s| format!(r#","hash_seed":{s}"#));
    format!(
        r#"{{"store":{{"slots":1024{seed}}},"verifier":{{"enabled":false}},"limits":[
        {{"name":"per_ip","class":"*","route":"*","rate_per_s":0.001,"burst":5,"key":"client_ip"}}]}}"#
    )
}

/// The attacker's plan, computed offline with the published seed: one helper address per
/// candidate slot of its key (a fresh key takes its first candidate of an empty table).
fn planned_helpers() -> Vec<Ipv4Addr> {
    let cfg = config::parse(config_json(Some(PUBLISHED_HASH_SEED)).as_bytes()).expect("config");
    let limiter = Limiter::new(&cfg);
    let slots = |a: Ipv4Addr| limiter.client_slots("per_ip", IpAddr::V4(a));
    let mut targets = slots(ATTACKER).to_vec();
    targets.sort_unstable();
    targets.dedup();
    targets
        .iter()
        .map(|t| {
            (0..=u16::MAX)
                .map(|n| Ipv4Addr::new(203, 0, (n >> 8) as u8, n as u8))
                .find(|a| slots(*a).first() == Some(t))
                .expect("a helper per slot (1,024 slots, 65,536 tries)")
        })
        .collect()
}

/// Two workers of one Envoy for `json`: the helpers send one request each, then the attacker
/// sends ten through each worker. Returns (attacker's admitted requests, `fail_open` count).
fn attack(json: &str) -> (usize, u64) {
    let mut a = FakeProxy::new(json, T0);
    let mut b = a.second_worker(T0);
    for h in planned_helpers() {
        let (_, step) = a.get("/", CHROME, &format!("{h}:4000"));
        assert_eq!(step, Step::Continue, "helper {h}");
    }
    let mut admitted = 0;
    for w in [&mut a, &mut b] {
        for _ in 0..10 {
            let (_, step) = w.get("/", CHROME, &format!("{ATTACKER}:4000"));
            admitted += usize::from(step == Step::Continue);
        }
    }
    a.tick();
    b.tick();
    let fail_open = a.counter("crawlguard.class.human.fail_open")
        + b.counter("crawlguard.class.human.fail_open");
    (admitted, fail_open)
}

#[test]
fn with_the_published_seed_planned_helpers_push_a_client_onto_the_fallback() {
    // Each worker's fallback bucket has the whole burst: 5 + 5.
    let (admitted, fail_open) = attack(&config_json(Some(PUBLISHED_HASH_SEED)));
    assert_eq!((admitted, fail_open), (10, 20));
}

#[test]
fn without_a_configured_seed_the_same_plan_collides_with_nothing() {
    // The configuration sets no seed: the workers hash with the one drawn for the Envoy,
    // and the attacker gets the shared bucket's burst, exactly.
    assert_eq!(attack(&config_json(None)), (5, 0));
}
