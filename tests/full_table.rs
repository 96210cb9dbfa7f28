//! A full table must not shut out newcomers (issue 20, item 7), on the host with the
//! filter's own code (the fake proxy): two workers of one Envoy over one shared store, the
//! default `store` settings (65,536 slots, 10,000 fallback keys per worker), and a flood of
//! active keys that leaves no room in the table or in either worker's fallback map.
//!
//! Time stands still during each test, so every flood key stays active throughout (the
//! worst case for a newcomer) and every count is exact. The figures are printed
//! (`cargo test --test full_table -- --nocapture`). The real-Envoy version, scaled down, is
//! `integration/tests/full_table.rs`.

mod common;

use common::T0;
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;
use std::net::{Ipv4Addr, Ipv6Addr};

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                      Gecko) Chrome/124.0.0.0 Safari/537.36";
/// New clients, each from its own /24 (`172.16.0.0/15`, host 1).
const NEWCOMERS: u32 = 300;

/// Two workers of one Envoy for configuration `json`.
fn envoy(json: &str) -> [FakeProxy; 2] {
    let a = FakeProxy::new(json, T0);
    let b = a.second_worker(T0);
    [a, b]
}

/// One Chrome GET of `/` from each address, the workers taking turns: how many were
/// admitted.
fn admitted(workers: &mut [FakeProxy; 2], addrs: impl Iterator<Item = String>) -> usize {
    let mut n = 0;
    for (i, a) in addrs.enumerate() {
        let w = &mut workers[i % 2];
        let (ctx, step) = w.get("/", CHROME, &a);
        n += usize::from(step == Step::Continue);
        w.hang_up(ctx);
    }
    n
}

fn v4(a: Ipv4Addr) -> String {
    format!("{a}:4000")
}

/// Newcomer `k`: host 1 of its own /24.
fn newcomer(k: u32) -> String {
    v4(Ipv4Addr::new(172, 16 + (k / 256) as u8, (k % 256) as u8, 1))
}

/// Flood key `i` in `10.0.0.0/8`, addresses in order (256 per /24).
fn dense(i: u32) -> String {
    v4(Ipv4Addr::from(0x0a00_0000 + i))
}

/// Flood key `i`, each in its own /24 (`11.0.0.0/8` and up, host 1): a botnet.
fn sparse(i: u32) -> String {
    v4(Ipv4Addr::from(0x0b00_0001 + (i << 8)))
}

/// What the newcomers got: admitted, and decided by a worker's fallback (the others found
/// a slot of the table that no flood key had among its candidates).
#[derive(Debug, PartialEq, Eq)]
struct Newcomers {
    admitted: usize,
    fell_back: u64,
}

/// The flood of `keys` keys, then the newcomers.
fn flood_then_newcomers(keys: u32, flood: fn(u32) -> String, what: &str) -> Newcomers {
    let mut w = envoy(r#"{"verifier":{"enabled":false}}"#);
    let flooded = admitted(&mut w, (0..keys).map(flood));
    let fail_open = |w: &mut [FakeProxy; 2]| -> u64 {
        w.iter_mut()
            .map(|p| {
                p.tick();
                p.counter("crawlguard.class.human.fail_open")
            })
            .sum()
    };
    let before = fail_open(&mut w);
    let admitted = admitted(&mut w, (0..NEWCOMERS).map(newcomer));
    let fell_back = fail_open(&mut w) - before;
    println!(
        "flood of {keys} keys ({what}): {flooded} admitted; newcomers: {admitted} of \
         {NEWCOMERS} admitted, {fell_back} decided by the fallback"
    );
    Newcomers {
        admitted,
        fell_back,
    }
}

/// 90,000 flood keys from consecutive addresses: the table's slots, 2 x 10,000 fallback
/// keys, and about 4,700 that find no room. Those used to drain the one overflow bucket per
/// worker (burst 100), which every newcomer decided by the fallback then shared. Now each is
/// charged to its /24's bucket: the flood's leftovers are in a few dozen /24s, every
/// newcomer's /24 is its own.
#[test]
fn a_flood_past_the_default_table_leaves_each_newcomer_its_first_request() {
    let got = flood_then_newcomers(90_000, dense, "consecutive addresses");
    assert_eq!(got.admitted, NEWCOMERS as usize, "{got:?}");
}

/// What a botnet can still force. 90,000 keys, each in its own /24: about 2,350 per worker
/// find no room, fewer than its 10,000 group entries, and every newcomer is admitted.
/// 110,000 such keys: about 12,270 per worker, 10,000 of them fill its group map and the
/// rest drain its overflow bucket, which the newcomers then share: every newcomer decided
/// by the fallback is rejected.
#[test]
fn newcomers_are_shut_out_only_past_the_table_the_keys_and_the_groups() {
    let got = flood_then_newcomers(90_000, sparse, "one per /24");
    assert_eq!(got.admitted, NEWCOMERS as usize, "{got:?}");
    let got = flood_then_newcomers(110_000, sparse, "one per /24");
    assert_eq!(
        got.admitted as u64,
        u64::from(NEWCOMERS) - got.fell_back,
        "{got:?}"
    );
    assert!(got.fell_back > 0, "{got:?}");
}

/// With one slot and a fallback of two keys and two groups per worker: an IPv6 churner's /64s
/// in one /48 share its group's bucket (burst 3), a client of another /48 is not charged
/// for them, and a third /48 (no group room left) shares the worker's overflow bucket.
#[test]
fn ipv6_clients_without_room_share_their_48() {
    let mut w = envoy(
        r#"{"verifier":{"enabled":false},"store":{"slots":1,"fallback_buckets":2,"hash_seed":7},
        "limits":[{"name":"per_ip","class":"*","route":"*","rate_per_s":0.001,"burst":3,"key":"client_ip"}]}"#,
    );
    let one = |w: &mut FakeProxy, a: Ipv6Addr| {
        let (ctx, step) = w.get("/", CHROME, &format!("[{a}]:4000"));
        w.hang_up(ctx);
        step == Step::Continue
    };
    let [a, _] = &mut w;
    let net = |n48: u16, n64: u16| Ipv6Addr::new(0x2001, 0xdb8, n48, n64, 0, 0, 0, 1);
    // The slot, then the worker's two fallback keys.
    assert!((0..3).all(|n| one(a, net(1, n))));
    // 100 more /64s of 2001:db8:1::/48: one bucket, burst 3.
    let churn = (3..103).filter(|n| one(a, net(1, *n))).count();
    assert_eq!(churn, 3);
    // Another /48: its own group bucket.
    let other: Vec<bool> = (0..5).map(|n| one(a, net(2, n))).collect();
    assert_eq!(other, [true, true, true, false, false]);
    // A third and a fourth /48 find no group room: they share the overflow bucket.
    let rest: Vec<bool> = (0..5).map(|n| one(a, net(3 + n % 2, n))).collect();
    assert_eq!(rest, [true, true, true, false, false]);
}

/// A client that falls to its address group's shared bucket (table and fallback map full)
/// keeps no Retry-After compliance there: its penalty would land on every neighbour of its
/// /24. Scaled down: 16 slots and 16 fallback keys, filled by 200 browsers of one /24 whose
/// buckets stay empty; then a curl client of another /24 ignores Retry-After.
#[test]
fn a_penalty_never_lands_on_an_address_group_neighbour() {
    let cfg = r#"{"verifier":{"enabled":false},
        "store":{"slots":16,"cas_retries":4,"fallback_buckets":16},
        "classes":{"script":{"retry_after":{"min_s":2,"max_s":2,"jitter_s":0},
          "escalation":{"enabled":true,"after_ignored":2,"factor":3,"max_s":54,"decay_s":100}}},
        "limits":[
          {"name":"h","class":"human","route":"*","rate_per_s":0.001,"burst":1,"key":"client_ip"},
          {"name":"s","class":"script","route":"*","rate_per_s":1,"burst":1,"key":"client_ip"}]}"#;
    let mut p = FakeProxy::new(cfg, T0);
    for i in 0..200 {
        let (ctx, _) = p.get("/", CHROME, &dense(i));
        p.hang_up(ctx);
    }
    let attacker = v4(Ipv4Addr::new(172, 16, 0, 1));
    let neighbour = v4(Ipv4Addr::new(172, 16, 0, 2));
    assert_eq!(p.get("/", "curl/8", &attacker).1, Step::Continue);
    let mut seen = Vec::new();
    for _ in 0..7 {
        let (ctx, step) = p.get("/", "curl/8", &attacker);
        assert_eq!(step, Step::Pause);
        seen.push(
            p.req(ctx)
                .reply
                .as_ref()
                .and_then(|r| r.header("retry-after"))
                .and_then(|v| v.parse::<u32>().ok()),
        );
        p.advance(100_000_000);
    }
    // Shared bucket, no compliance: never escalated (a key of its own would reach 54 s).
    assert_eq!(seen, [Some(2); 7]);
    assert_eq!(p.counter("crawlguard.class.script.escalated"), 0);
    // All eight were decided by the worker's fallback (counted as fail_open).
    p.tick();
    assert_eq!(p.counter("crawlguard.class.script.fail_open"), 8);
    // 3 s later the shared bucket has refilled: the neighbour's first request is admitted.
    p.advance(3_000_000_000);
    assert_eq!(p.get("/", "curl/8", &neighbour).1, Step::Continue);
}
