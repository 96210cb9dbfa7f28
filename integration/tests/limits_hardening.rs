//! Holes in the limits that a hostile review found (issue 9), closed and checked in a real
//! Envoy: a rate so small that the bucket math saturated into "allow", fallback buckets that
//! anyone could reset by churning addresses, a `Retry-After` clamp shorter than the refill
//! interval, key-header padding, and a store reshape that silently reset every bucket.
//!
//! Every test starts its own Envoy on free ports; clients bind `127.0.0.x` source addresses
//! to play different client IPs. Limits refill at 0.001 token/s or slower, so nothing
//! refills while a test runs and every count is exact.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crawlguard_integration::{
    client, get, sequential, Envoy, EnvoyOpts, Reply, UA_CHROME, UA_CURL,
};
use serde_json::{json, Value};

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status).collect()
}

/// A limit on every class and route, keyed by client IP.
fn per_ip(name: &str, rate_per_s: f64, burst: u32) -> Value {
    json!({"name": name, "class": "*", "route": "*", "rate_per_s": rate_per_s,
           "burst": burst, "key": "client_ip"})
}

/// How many lines of Envoy's log contain `needle`.
fn log_count(envoy: &Envoy, needle: &str) -> usize {
    envoy.log().lines().filter(|l| l.contains(needle)).count()
}

/// Waits (20 s at most: Envoy flushes its access log about every 10 s) until a line of
/// Envoy's log contains every one of `parts`; panics with the log otherwise.
async fn wait_for_log_line(envoy: &Envoy, parts: &[&str]) {
    let found = |log: &str| log.lines().any(|l| parts.iter().all(|p| l.contains(p)));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !found(&envoy.log()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        found(&envoy.log()),
        "no log line with {parts:?}:\n{}",
        envoy.log()
    );
}

// ---------------------------------------------------------------------------------------
// Item 4: a tiny rate is no limit at all
// ---------------------------------------------------------------------------------------

/// `rate_per_s: 1e-10, burst: 5` used to admit 50 of 50 requests (the GCRA times saturated
/// at `u64::MAX` and the over-limit comparison was never true). Such a limit is refused at
/// load with the field path; if a module accepts it, the test measures what it admits.
#[tokio::test]
async fn a_rate_too_small_for_its_burst_is_refused_with_the_field_path() {
    let mut accepted = Vec::new();
    for (rate_per_s, burst, n, window_s) in [
        (1e-10, 5u32, 50usize, "50000000000"),
        (1e-9, 20, 60, "20000000000"),
    ] {
        let opts = EnvoyOpts::with_config(json!({
            "verifier": {"enabled": false},
            "limits": [per_ip("tiny", rate_per_s, burst)]
        }));
        match Envoy::try_start(opts).await {
            Ok(envoy) => {
                let r = sequential(&client(ip(2)), &envoy.url("/"), UA_CHROME, n).await;
                let admitted = r.iter().filter(|r| r.status == 200).count();
                accepted.push(format!(
                    "rate_per_s {rate_per_s}, burst {burst} was accepted and admitted \
                     {admitted} of {n} requests from one address"
                ));
            }
            Err(log) => {
                let want = format!(
                    "invalid configuration: limits[0].rate_per_s: burst / rate_per_s must be \
                     <= 31536000 s (one year), is {window_s} s"
                );
                assert!(log.contains(&want), "no `{want}` in Envoy's log:\n{log}");
            }
        }
    }
    assert!(accepted.is_empty(), "{accepted:#?}");
}

/// The smallest valid rate for a burst of 5 (5 / 31536000 s, rounded up a little) admits
/// exactly the burst, and its `RateLimit-Policy` window is the whole year.
#[tokio::test]
async fn the_smallest_valid_rate_admits_exactly_burst() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "ratelimit_headers": true,
        "classes": {"human": {"retry_after": {"min_s": 1, "max_s": 60, "jitter_s": 0}}},
        "limits": [per_ip("yearly", 1.5855e-7, 5)]
    })))
    .await;
    let r = sequential(&client(ip(3)), &envoy.url("/"), UA_CHROME, 20).await;
    let mut want = vec![200; 5];
    want.extend([429; 15]);
    assert_eq!(statuses(&r), want);
    let last = r.last().expect("20 replies");
    assert_eq!(last.header("retry-after"), Some("60"));
    // ceil(5 / 1.5855e-7) = 31535794 s: just under one year.
    assert_eq!(
        last.header("ratelimit-policy"),
        Some("\"yearly\";q=5;w=31535794")
    );
    assert_eq!(envoy.counter("crawlguard.class.human.allowed").await, 5);
    assert_eq!(envoy.counter("crawlguard.class.human.limited").await, 15);
}

// ---------------------------------------------------------------------------------------
// Item 5: nobody can reset the per-worker fallback buckets
// ---------------------------------------------------------------------------------------

/// With one shared slot, every client but the slot's owner is decided by the per-worker
/// fallback map (capacity 4 here). A client exhausts its fallback bucket; 20 other
/// addresses then churn past the map's capacity. The map used to be cleared wholesale
/// when full, handing the exhausted client a fresh bucket; now only buckets that are full
/// again may go, and new keys that find no room share one strict overflow bucket per limit.
#[tokio::test]
async fn churn_past_the_fallback_capacity_cannot_reset_an_exhausted_client() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "store": {"slots": 1, "fallback_buckets": 4},
        "limits": [per_ip("per_ip", 0.001, 2)]
    })))
    .await;
    let url = envoy.url("/");
    // 127.0.0.9 takes the only slot (its bucket stays active for 1000 s).
    assert_eq!(get(&client(ip(9)), &url, UA_CHROME, &[]).await.status, 200);
    // The victim collides with it and is decided by its own fallback bucket.
    let victim = client(ip(2));
    let v = sequential(&victim, &url, UA_CHROME, 3).await;
    assert_eq!(statuses(&v), [200, 200, 429]);

    // 20 other addresses, one request each: 3 get the rest of the map (capacity 4, the
    // victim holds one), 2 pass through the overflow bucket (burst 2), 15 are limited.
    let mut churn = Vec::new();
    for last in 10..30 {
        churn.push(get(&client(ip(last)), &url, UA_CHROME, &[]).await.status);
    }
    // The victim's bucket survived the churn.
    let after = get(&victim, &url, UA_CHROME, &[]).await.status;
    let mut want = vec![200; 5];
    want.extend([429; 15]);
    assert_eq!(
        (churn, after),
        (want, 429),
        "(churn statuses, the exhausted client's status after the churn)"
    );

    let s = envoy.crawlguard_stats().await;
    assert_eq!(s["crawlguard.class.human.allowed"], 1 + 2 + 5);
    assert_eq!(s["crawlguard.class.human.limited"], 1 + 15 + 1);
    // Every request but the slot owner's was decided by the fallback (a collision).
    assert_eq!(s["crawlguard.class.human.fail_open"], 3 + 20 + 1);
    assert_eq!(s["crawlguard.store.collision"], 3 + 20 + 1);
}

// ---------------------------------------------------------------------------------------
// Item 7: a Retry-After clamp shorter than the refill interval is warned about at load
// ---------------------------------------------------------------------------------------

const WARN_SCRIPT: &str = "configuration warning: limits[0].rate_per_s: limit \"slow_scripts\" \
    refills one token every 100 s (1 / rate_per_s), longer than \
    classes.script.retry_after.max_s (30 s): a client of class script that waits Retry-After \
    can be rejected again";
const WARN_ALL_AI: &str = "configuration warning: limits[1].rate_per_s: limit \"all_slow\" \
    refills one token every 50 s (1 / rate_per_s), longer than \
    classes.ai_retriever.retry_after.max_s (30 s): a client of class ai_retriever that waits \
    Retry-After can be rejected again";
const WARN_ALL_SCRIPT: &str = "configuration warning: limits[1].rate_per_s: limit \"all_slow\" \
    refills one token every 50 s (1 / rate_per_s), longer than \
    classes.script.retry_after.max_s (30 s): a client of class script that waits Retry-After \
    can be rejected again";

/// The clamp is the operator's choice and is kept, but a limit whose refill interval
/// (1 / rate_per_s) is longer than a matching class's `retry_after.max_s` sends obedient
/// clients back too early: each such (limit, class) pair is logged at warn level at load,
/// and the configuration is still accepted.
#[tokio::test]
async fn a_retry_after_max_below_the_refill_interval_is_warned_about_at_load() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "classes": {"script": {"retry_after": {"min_s": 1, "max_s": 30, "jitter_s": 0}}},
        "limits": [
            {"name": "slow_scripts", "class": "script", "route": "*", "rate_per_s": 0.01,
             "burst": 1, "key": "client_ip"},
            // 50 s: longer than ai_retriever's default max_s (30) and script's (30 here);
            // shorter than every other class's.
            {"name": "all_slow", "class": "*", "route": "*", "rate_per_s": 0.02,
             "burst": 3, "key": "client_ip"},
        ]
    })))
    .await;
    // Envoy configures the plugin in several VMs (the main thread's and each worker's:
    // three with one worker); each logs the warnings with its `configured:` line.
    let loads = log_count(&envoy, "configured: mode");
    assert!(loads >= 1, "no `configured:` line:\n{}", envoy.log());
    for w in [WARN_SCRIPT, WARN_ALL_AI, WARN_ALL_SCRIPT] {
        let lines: Vec<String> = envoy
            .log()
            .lines()
            .filter(|l| l.contains(w))
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), loads, "`{w}` once per load:\n{}", envoy.log());
        assert!(
            lines.iter().all(|l| l.contains("][warning][")),
            "{lines:#?}"
        );
    }
    assert_eq!(log_count(&envoy, "configuration warning:"), 3 * loads);

    // Still enforced, and the clamp is kept: Retry-After 30, not the 100 s the bucket needs.
    let r = sequential(&client(ip(4)), &envoy.url("/"), UA_CURL, 3).await;
    assert_eq!(statuses(&r), [200, 429, 429]);
    assert_eq!(r[1].header("retry-after"), Some("30"));
}

// ---------------------------------------------------------------------------------------
// Item 8: key-header padding
// ---------------------------------------------------------------------------------------

const MALFORMED_BODY: &str = "400 Bad Request: too many values in a rate-limit key header\n";

/// `n` fresh key values, comma-separated on one line.
fn fresh_keys(n: usize) -> String {
    (0..n)
        .map(|i| format!("fresh-{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn key_limit() -> Value {
    json!({"name": "per_key", "class": "*", "route": "*", "rate_per_s": 0.001, "burst": 2,
           "key": "header:x-api-key"})
}

/// An exhausted key sent with more than 16 (MAX_KEY_VALUES) fresh values used to escape its
/// bucket (the request only charged one shared overflow bucket). Now such a request is
/// rejected as malformed (400, no Retry-After); with at most 16 values every one is charged.
#[tokio::test]
async fn an_exhausted_key_padded_with_17_fresh_values_is_rejected_as_malformed() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "limits": [key_limit()]
    })))
    .await;
    let c = client(ip(5));
    let url = envoy.url("/");
    let real = [("x-api-key", "real-key")];
    let r: Vec<u16> = [
        get(&c, &url, UA_CHROME, &real).await.status,
        get(&c, &url, UA_CHROME, &real).await.status,
        get(&c, &url, UA_CHROME, &real).await.status,
    ]
    .to_vec();
    assert_eq!(r, [200, 200, 429]);

    // The exhausted key + 17 fresh values (18 distinct, over 16): rejected as malformed.
    let padded17 = fresh_keys(17);
    let padded = [("x-api-key", "real-key"), ("x-api-key", padded17.as_str())];
    let r = get(&c, &url, UA_CHROME, &padded).await;
    assert_eq!(r.status, 400, "{r:?}");
    // No retry-after. Envoy closes an HTTP/1.1 connection after any local 400 (it cannot
    // be sure of the stream any more), hence `connection: close`.
    assert_eq!(
        r.header_names(),
        [
            "cache-control",
            "connection",
            "content-length",
            "content-type",
            "date",
            "server"
        ]
    );
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.body, MALFORMED_BODY);
    assert_eq!(r.upstream_class(), None, "must not reach upstream");

    // 17 fresh values alone are just as malformed.
    let only17 = [("x-api-key", padded17.as_str())];
    assert_eq!(get(&c, &url, UA_CHROME, &only17).await.status, 400);

    // The exhausted key + 15 fresh values (16 distinct): every key is charged, so the
    // exhausted one rejects the request, and the fresh ones keep their tokens.
    let padded15 = fresh_keys(15);
    let fifteen = [("x-api-key", "real-key"), ("x-api-key", padded15.as_str())];
    let r = get(&c, &url, UA_CHROME, &fifteen).await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    let f0 = [("x-api-key", "fresh-0")];
    let r: Vec<u16> = [
        get(&c, &url, UA_CHROME, &f0).await.status,
        get(&c, &url, UA_CHROME, &f0).await.status,
        get(&c, &url, UA_CHROME, &f0).await.status,
    ]
    .to_vec();
    assert_eq!(r, [200, 200, 429]);

    let s = envoy.crawlguard_stats().await;
    assert_eq!(s["crawlguard.class.human.malformed"], 2);
    assert_eq!(s["crawlguard.class.human.limited"], 3);
    assert_eq!(s["crawlguard.class.human.allowed"], 4);
    assert_eq!(s["crawlguard.route.default.limited"], 3);
    wait_for_log_line(
        &envoy,
        &["\"GET /\" 400 crawlguard_malformed_key class=human"],
    )
    .await;
}

/// In shadow mode a malformed key is counted (`malformed`) and the request forwarded.
#[tokio::test]
async fn shadow_mode_counts_a_malformed_key_and_forwards_it() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "mode": "shadow",
        "verifier": {"enabled": false},
        "limits": [key_limit()]
    })))
    .await;
    let c = client(ip(6));
    let padded17 = fresh_keys(17);
    let r = get(
        &c,
        &envoy.url("/"),
        UA_CHROME,
        &[("x-api-key", "real-key"), ("x-api-key", padded17.as_str())],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.upstream_class(), Some("human"));
    let s = envoy.crawlguard_stats().await;
    assert_eq!(s["crawlguard.class.human.malformed"], 1);
    assert_eq!(s["crawlguard.class.human.allowed"], 0);
    assert_eq!(s["crawlguard.class.human.shadow_limited"], 0);
    assert_eq!(s["crawlguard.class.human.limited"], 0);
}

// ---------------------------------------------------------------------------------------
// Item 9: a store reshape resets every bucket, and says so
// ---------------------------------------------------------------------------------------

/// The configuration pushed in `store_change_resets_every_bucket_and_says_so`.
fn store_config(slots: u32, hash_seed: u64, ratelimit_headers: bool) -> Value {
    json!({
        "verifier": {"enabled": false},
        "ratelimit_headers": ratelimit_headers,
        "store": {"slots": slots, "hash_seed": hash_seed},
        "limits": [per_ip("per_ip", 0.001, 2)]
    })
}

/// Each of five clients sends three requests; their statuses.
async fn five_clients(envoy: &Envoy) -> Vec<Vec<u16>> {
    let mut out = Vec::new();
    for last in 20..25 {
        out.push(statuses(
            &sequential(&client(ip(last)), &envoy.url("/"), UA_CHROME, 3).await,
        ));
    }
    out
}

const SLOTS_CHANGED: &str =
    "store.slots changed 64 -> 128: every rate-limit bucket starts full again";
const SEED_CHANGED: &str = "store.hash_seed changed: every rate-limit bucket starts full again";

/// Buckets live in shared data under hashed keys, so a configuration that changes
/// `store.slots` or `store.hash_seed` cannot carry them over: every bucket starts full
/// again, and the load logs it once, at warn level. Any other change keeps the buckets.
/// Configurations are pushed to the running Envoy over LDS (a watched file).
#[tokio::test]
async fn store_change_resets_every_bucket_and_says_so() {
    let envoy = Envoy::start(EnvoyOpts::with_config(store_config(64, 1, false)).lds()).await;
    let fresh = vec![vec![200, 200, 429]; 5];
    let exhausted = vec![vec![429, 429, 429]; 5];
    assert_eq!(five_clients(&envoy).await, fresh);

    // Another field changes: the buckets are kept, nothing about the store is logged.
    envoy
        .push_filter_config(store_config(64, 1, true))
        .await
        .expect("config with ratelimit headers accepted");
    assert_eq!(five_clients(&envoy).await, exhausted);
    assert_eq!(log_count(&envoy, "every rate-limit bucket starts full"), 0);

    // store.slots changes: every bucket starts full again, said once.
    envoy
        .push_filter_config(store_config(128, 1, true))
        .await
        .expect("config with 128 slots accepted");
    let after_slots = five_clients(&envoy).await;
    let log = envoy.log();
    assert_eq!(
        log.lines().filter(|l| l.contains(SLOTS_CHANGED)).count(),
        1,
        "`{SLOTS_CHANGED}` once; statuses after the change {after_slots:?}; log:\n{log}"
    );
    assert!(log
        .lines()
        .any(|l| l.contains(SLOTS_CHANGED) && l.contains("][warning][")));
    assert_eq!(after_slots, fresh);

    // store.hash_seed changes (its values are not logged: the seed is a secret).
    envoy
        .push_filter_config(store_config(128, 2, true))
        .await
        .expect("config with another seed accepted");
    let after_seed = five_clients(&envoy).await;
    assert_eq!(
        log_count(&envoy, SEED_CHANGED),
        1,
        "statuses after the change {after_seed:?}"
    );
    assert_eq!(after_seed, fresh);
    assert_eq!(log_count(&envoy, "every rate-limit bucket starts full"), 2);
}

// ---------------------------------------------------------------------------------------
// An unset hash seed is drawn once per Envoy and kept
// ---------------------------------------------------------------------------------------

/// Without `store.hash_seed` each Envoy draws a secret seed at its first load (planned
/// collisions: tests/planned_collisions.rs). It is kept in shared data, so every worker
/// hashes alike (the exact counts of five clients over two workers) and a reload keeps it:
/// the buckets survive, and nothing about the seed is logged.
#[tokio::test]
async fn a_drawn_hash_seed_is_kept_across_reloads() {
    let cfg = |ratelimit_headers: bool| {
        json!({
            "verifier": {"enabled": false},
            "ratelimit_headers": ratelimit_headers,
            "store": {"slots": 64},
            "limits": [per_ip("per_ip", 0.001, 2)]
        })
    };
    let envoy = Envoy::start(EnvoyOpts::with_config(cfg(false)).lds()).await;
    assert_eq!(five_clients(&envoy).await, vec![vec![200, 200, 429]; 5]);
    envoy
        .push_filter_config(cfg(true))
        .await
        .expect("config with ratelimit headers accepted");
    assert_eq!(five_clients(&envoy).await, vec![vec![429, 429, 429]; 5]);
    assert_eq!(log_count(&envoy, "store.hash_seed"), 0);
    assert_eq!(log_count(&envoy, "every rate-limit bucket starts full"), 0);
}
