//! A full table must not shut out newcomers (issue 20, item 7), in a real Envoy scaled down
//! from the defaults: 256 shared slots and a per-worker fallback of 512 keys, one worker.
//!
//! An attacker fills the slot table and the fallback map with 1,000 active keys from
//! `127.1.0.0/22`; the keys that found no room used to share one overflow bucket per limit,
//! which they drained, so every new client was rejected on its first request. A key without
//! room now shares the bucket of its address group (its /24): the attacker drains its own
//! groups, and a newcomer from another /24 gets its group's bucket, shared with the rest of
//! that /24 (so a /24 cannot churn addresses into fresh buckets).
//!
//! The limit refills one token per 1000 s, so nothing refills while the test runs and every
//! count is exact; the hash seed is fixed, so every run places the keys alike.

use std::net::Ipv4Addr;

use crawlguard_integration::{raw, raw_request, Envoy, EnvoyOpts, UA_CHROME};
use serde_json::json;

/// Shared slots, and keys (and address groups) per worker in the fallback.
const SLOTS: u32 = 256;
const FALLBACK: u32 = 512;
/// Attacker keys: every slot, every fallback key, and 232 more that find no room.
const ATTACKERS: u32 = 1_000;
/// New clients, each from its own /24.
const NEWCOMERS: u32 = 300;
/// The limit's burst.
const BURST: usize = 2;

/// Attacker key `i`: 250 addresses per /24 in `127.1.0.0/22`.
fn attacker(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// Newcomer `k`: host 1 of its own /24 (`127.2.0.0/16`, then `127.3.0.0/16`).
fn newcomer(k: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 2 + (k / 256) as u8, (k % 256) as u8, 1)
}

/// One GET of `/` from `from` on its own connection: its status.
async fn status(envoy: &Envoy, from: Ipv4Addr) -> u16 {
    let req = raw_request(b"/", &[(b"user-agent", UA_CHROME.as_bytes())]);
    raw(from, envoy.main_addr(), &req).await.status
}

/// How many of these addresses' first requests were admitted.
async fn admitted(envoy: &Envoy, addrs: impl Iterator<Item = Ipv4Addr>) -> usize {
    let mut n = 0;
    for a in addrs {
        n += usize::from(status(envoy, a).await == 200);
    }
    n
}

#[tokio::test]
async fn newcomers_are_not_shut_out_by_a_table_full_of_active_keys() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "store": {"slots": SLOTS, "fallback_buckets": FALLBACK, "hash_seed": 7},
        "limits": [{"name": "per_ip", "class": "*", "route": "*", "rate_per_s": 0.001,
                    "burst": BURST, "key": "client_ip"}]
    })))
    .await;
    // The flood: one request per attacker key, each key active for 1000 s afterwards. More
    // keys than slots + fallback: the last ones find no room and drain what they share.
    admitted(&envoy, (0..ATTACKERS).map(attacker)).await;
    // 20 more attacker addresses from one fresh /24 of its own: they share that group's
    // bucket (burst 2). They used to find the one overflow bucket already drained.
    let more = admitted(&envoy, (1..=20).map(|h| Ipv4Addr::new(127, 1, 200, h))).await;
    // 300 new clients, each from a /24 the attacker has no key in: each first request is
    // admitted. They used to share the attacker's drained overflow bucket.
    let newcomers = admitted(&envoy, (0..NEWCOMERS).map(newcomer)).await;
    assert_eq!(
        (more, newcomers),
        (BURST, NEWCOMERS as usize),
        "(admitted of 20 fresh attacker addresses in one /24, admitted of {NEWCOMERS} \
         newcomers from other /24s)"
    );
    // A newcomer's /24 shares one bucket: its first address took one token, a second
    // address takes the other, then the /24 is exhausted for every address in it, the
    // first one included.
    let mut same = Vec::new();
    for h in [2, 3, 1] {
        same.push(status(&envoy, Ipv4Addr::new(127, 2, 0, h)).await);
    }
    assert_eq!(
        same,
        [200, 429, 429],
        "127.2.0.2, .3, .1 after 127.2.0.1's first request"
    );
}
