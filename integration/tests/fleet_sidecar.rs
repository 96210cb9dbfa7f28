//! Fleet mode, sidecar side, with real processes: `crawlguard-sidecar --redis` against a real
//! `redis-server` (Debian's package, on a free loopback port), no Envoy.
//!
//! - `POST /v1/fleet/sync` applies each batch atomically with exact GCRA figures: two
//!   replicas' batches make one fleet bucket, debt, a key's expiry equals its time to full,
//!   100,000 keys leave Redis (and its memory) when full again, heartbeats count replicas.
//! - A dead or slow Redis gives a 503 within `--redis-timeout-ms`, and the sidecar recovers
//!   on its own when Redis is back.
//! - FCrDNS verdicts are shared: the second sidecar's DNS server sees no query.
//! - Bad input gets 400/413 with a JSON error and writes nothing.
//!
//! Timing bounds use the Redis clock's view where they can (the stored TAT); waits are polls
//! of observable state (answers, keys, metrics, log lines) or a key's own expiry.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crawlguard_contract::fleet::{FleetKeyState, KeyUse, SyncRequest, SyncResponse};
use crawlguard_integration::process::{poll_until, temp_dir};
use crawlguard_integration::{
    Blackhole, Dnsmasq, Record, Redis, RedisOpts, RedisReply, Sidecar, SidecarOpts, SlowProxy,
    TestCa, GOOGLEBOT_HOST, GOOGLEBOT_V4,
};
use serde_json::{json, Value};

/// A batch from `replica` with `(key, rate_per_s, burst, used)` entries.
fn batch(replica: &str, interval_ms: u32, keys: &[(&str, f64, u32, u32)]) -> SyncRequest {
    SyncRequest {
        replica: replica.into(),
        interval_ms,
        keys: keys
            .iter()
            .map(|&(key, rate_per_s, burst, used)| KeyUse {
                key: key.into(),
                rate_per_s,
                burst,
                used,
            })
            .collect(),
    }
}

/// Posts `req`, expects 200 and returns the parsed answer.
async fn sync_ok(sc: &Sidecar, req: &SyncRequest) -> SyncResponse {
    let (status, body) = sc.fleet_sync(req).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn state(available: u32, full_in_ns: u64) -> FleetKeyState {
    FleetKeyState {
        available,
        full_in_ns,
    }
}

/// The stored TAT of a bucket (`"<s>:<ns>"`) in ns.
fn tat_ns(redis: &Redis, key: &str) -> i128 {
    let v = redis
        .get(key)
        .unwrap_or_else(|| panic!("{key} is not in Redis"));
    let (s, n) = v.split_once(':').unwrap_or_else(|| panic!("{key} = {v:?}"));
    let (s, n): (i128, i128) = (s.parse().unwrap(), n.parse().unwrap());
    assert!((0..1_000_000_000).contains(&n), "{key} = {v:?}");
    s * 1_000_000_000 + n
}

/// The sum of every series whose text starts with `prefix` (e.g. a name and some labels).
async fn metric_sum(sc: &Sidecar, prefix: &str) -> f64 {
    sc.metrics()
        .await
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The key's expiry (`PEXPIRETIME`, Redis's clock, unix ms) is its stored TAT (the moment
/// the bucket is full again) within 5 ms (the script reads `TIME` before it writes; on a
/// loaded machine Redis can be preempted in between).
fn assert_expires_when_full(redis: &Redis, key: &str) {
    let expires_ms = i128::from(redis.cmd(&["PEXPIRETIME", key]).int());
    let full_ms = tat_ns(redis, key) / 1_000_000;
    assert!(
        (expires_ms - full_ms).abs() <= 5,
        "{key} expires at {expires_ms} ms, full again at {full_ms} ms"
    );
}

fn opts(dns: &Blackhole, redis_url: &str, timeout_ms: u32) -> SidecarOpts {
    SidecarOpts {
        redis_timeout_ms: Some(timeout_ms),
        ..SidecarOpts::fleet(dns.addr(), redis_url)
    }
}

const BUCKET: &str = "crawlguard:bucket:";

#[tokio::test]
async fn two_replicas_batches_make_one_fleet_bucket_with_exact_figures() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let a = Sidecar::start(opts(&dns, &redis.url(), 2000)).await;
    let b = Sidecar::start(opts(&dns, &redis.url(), 2000)).await;
    let key = format!("{BUCKET}0000000000c0ffee");

    // 0.1 token/s (one every 10 s), burst 10. Replica A used 3: 7 left, full in 30 s.
    let t0 = Instant::now();
    let ra = sync_ok(&a, &batch("envoy-a", 1000, &[("c0ffee", 0.1, 10, 3)])).await;
    assert_eq!(
        ra,
        SyncResponse {
            keys: vec![state(7, 30_000_000_000)],
            replicas: 1
        }
    );
    let tat_a = tat_ns(&redis, &key);
    assert_expires_when_full(&redis, &key);
    let pttl = redis.pttl(&key);
    assert!((1..=30_000).contains(&pttl), "PTTL {pttl}");

    // Replica B used 4 of the same bucket (another spelling of the same fingerprint): the
    // TAT moves exactly 4 emission intervals, 3 tokens are left fleet-wide.
    let rb = sync_ok(&b, &batch("envoy-b", 1000, &[("0000C0FFEE", 0.1, 10, 4)])).await;
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    assert_eq!(tat_ns(&redis, &key) - tat_a, 40_000_000_000);
    assert_eq!((rb.replicas, rb.keys[0].available), (2, 3));
    let full = rb.keys[0].full_in_ns;
    assert!(
        (70_000_000_000 - elapsed_ns..70_000_000_000).contains(&full),
        "full_in_ns {full}"
    );
    // The key expires when the bucket is full again.
    assert_expires_when_full(&redis, &key);
    let pttl = redis.pttl(&key);
    let full_ms = full.div_ceil(1_000_000) as i64;
    assert!(
        (1..=full_ms).contains(&pttl),
        "PTTL {pttl}, full in {full_ms} ms"
    );

    // A asks without using anything: the same fleet state, nothing written.
    let ra = sync_ok(&a, &batch("envoy-a", 1000, &[("c0ffee", 0.1, 10, 0)])).await;
    assert_eq!((ra.replicas, ra.keys[0].available), (2, 3));
    assert_eq!(tat_ns(&redis, &key) - tat_a, 40_000_000_000);

    // One batch, several keys, one key twice: applied in order at one instant, so exact.
    let r = sync_ok(
        &a,
        &batch(
            "envoy-a",
            1000,
            &[
                ("a1", 2.0, 5, 1),
                ("a2", 3.0, 4, 2),
                ("a1", 2.0, 5, 3),
                ("a3", 1.0, 1, 0),
            ],
        ),
    )
    .await;
    assert_eq!(
        r.keys,
        vec![
            state(4, 500_000_000),
            state(2, 666_666_666),
            state(1, 2_000_000_000),
            state(1, 0),
        ]
    );
    // The unused fresh key was not written; the others were.
    assert_eq!(redis.get(&format!("{BUCKET}00000000000000a3")), None);
    assert_eq!(redis.dbsize(), 4, "replicas, c0ffee, a1, a2");
    assert_eq!(
        a.metric("crawlguard_sidecar_fleet_sync_batches_total{result=\"ok\"}")
            .await,
        3.0
    );
    assert_eq!(
        a.metric("crawlguard_sidecar_fleet_sync_batch_keys_sum")
            .await,
        6.0
    );
    assert_eq!(a.metric("crawlguard_sidecar_fleet_replicas").await, 2.0);
}

#[tokio::test]
async fn a_bucket_goes_into_debt_and_expires_when_full_again() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let a = Sidecar::start(opts(&dns, &redis.url(), 2000)).await;
    let key = format!("{BUCKET}00000000000000de");

    // 2 tokens/s, burst 4: 10 used (the filter admitted them locally) is 6 tokens of debt.
    let r = sync_ok(&a, &batch("r", 1000, &[("de", 2.0, 4, 10)])).await;
    assert_eq!(r.keys, vec![state(0, 5_000_000_000)]);
    let tat0 = tat_ns(&redis, &key);
    // Debt delays everyone: 2 more move the TAT by exactly 1 s, nothing is available.
    let r = sync_ok(&a, &batch("r", 1000, &[("de", 2.0, 4, 2)])).await;
    assert_eq!(tat_ns(&redis, &key) - tat0, 1_000_000_000);
    assert_expires_when_full(&redis, &key);
    assert_eq!(r.keys[0].available, 0);
    assert!(r.keys[0].full_in_ns > 5_000_000_000 && r.keys[0].full_in_ns <= 6_000_000_000);

    // A short bucket: 10 tokens/s, burst 5, 2 used: full in 200 ms, and gone then.
    let short = format!("{BUCKET}00000000000000ab");
    let t0 = Instant::now();
    let r = sync_ok(&a, &batch("r", 1000, &[("ab", 10.0, 5, 2)])).await;
    assert_eq!(r.keys, vec![state(3, 200_000_000)]);
    assert_expires_when_full(&redis, &short);
    // Waiting for the key's own expiry.
    let gone = poll_until(Duration::from_secs(5), || async {
        (redis.pttl(&short) == -2).then_some(t0.elapsed())
    })
    .await
    .expect("the bucket key never expired");
    assert!(gone >= Duration::from_millis(200), "expired after {gone:?}");
    // Full again, and reading it writes nothing.
    let r = sync_ok(&a, &batch("r", 1000, &[("ab", 10.0, 5, 0)])).await;
    assert_eq!(r.keys, vec![state(5, 0)]);
    assert_eq!(redis.pttl(&short), -2);
}

#[tokio::test]
async fn concurrent_batches_from_two_replicas_are_applied_atomically() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let a = Arc::new(Sidecar::start(opts(&dns, &redis.url(), 5000)).await);
    let b = Arc::new(Sidecar::start(opts(&dns, &redis.url(), 5000)).await);
    // One token per 1000 s: time passing during the test changes nothing below.
    const N: u32 = 40;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..N {
        let sc = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.spawn(async move {
            let replica = if i % 2 == 0 { "envoy-a" } else { "envoy-b" };
            sync_ok(
                &sc,
                &batch(
                    replica,
                    1000,
                    &[("f1", 0.001, 100, 1), ("f2", 0.001, 100, 1)],
                ),
            )
            .await
        });
    }
    let mut seen = BTreeSet::new();
    while let Some(r) = tasks.join_next().await {
        let r = r.expect("task");
        // Both keys of a batch moved together: no other batch came in between.
        assert_eq!(r.keys[0].available, r.keys[1].available, "{r:?}");
        assert_eq!(r.keys[0].full_in_ns, r.keys[1].full_in_ns, "{r:?}");
        // Each batch saw the one before it: every count from 99 down to 60 exactly once.
        assert!(seen.insert(r.keys[0].available), "{r:?}");
    }
    assert_eq!(seen, (100 - N..100).collect::<BTreeSet<u32>>());
    assert_eq!(
        tat_ns(&redis, &format!("{BUCKET}00000000000000f1")),
        tat_ns(&redis, &format!("{BUCKET}00000000000000f2"))
    );
    let r = sync_ok(&a, &batch("envoy-a", 1000, &[("f1", 0.001, 100, 0)])).await;
    assert_eq!((r.keys[0].available, r.replicas), (100 - N, 2));
}

/// Redis's clock, unix ms (`TIME`).
fn redis_now_ms(redis: &Redis) -> i64 {
    let RedisReply::Array(t) = redis.cmd(&["TIME"]) else {
        panic!("TIME did not answer an array");
    };
    let part = |i: usize| -> i64 {
        t.get(i)
            .and_then(RedisReply::text)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("TIME answered {t:?}"))
    };
    part(0) * 1000 + part(1) / 1000
}

/// How long after Redis's now `member` of the replicas set counts as alive, ms.
fn alive_for_ms(redis: &Redis, member: &str) -> i64 {
    let score = redis
        .cmd(&["ZSCORE", "crawlguard:replicas", member])
        .text()
        .unwrap_or_else(|| panic!("{member} is not in the replicas set"));
    score
        .parse::<i64>()
        .unwrap_or_else(|e| panic!("{score}: {e}"))
        - redis_now_ms(redis)
}

#[tokio::test]
async fn made_up_replicas_cannot_stay_alive_for_long() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let sc = Sidecar::start(opts(&dns, &redis.url(), 2000)).await;

    // An interval the filter's configuration never allows is refused, and writes nothing.
    for interval_ms in [4_294_967_295, 60_001, 99, 0] {
        let (status, body) = sc.fleet_sync(&batch("made-up-1", interval_ms, &[])).await;
        assert_eq!(
            (status, body.as_str()),
            (400, r#"{"error":"interval_ms: must be 100..=60000"}"#),
            "interval_ms {interval_ms}"
        );
    }
    assert_eq!(redis.dbsize(), 0);

    // The longest allowed interval: alive for 3 of them, 3 minutes, no more.
    assert_eq!(
        sync_ok(&sc, &batch("made-up-2", 60_000, &[]))
            .await
            .replicas,
        1
    );
    let alive = alive_for_ms(&redis, "made-up-2");
    assert!((179_000..=180_000).contains(&alive), "alive for {alive} ms");
    let pttl = redis.pttl("crawlguard:replicas");
    assert!((179_000..=180_000).contains(&pttl), "PTTL {pttl}");

    // A member left by a sidecar that took any interval (149 days, as the issue saw) is
    // dropped by the next sync, and the set expires with its last real member.
    let far = (redis_now_ms(&redis) + 149 * 86_400_000).to_string();
    assert_eq!(
        redis
            .cmd(&["ZADD", "crawlguard:replicas", &far, "made-up-3"])
            .int(),
        1
    );
    assert_eq!(
        redis
            .cmd(&["PEXPIRE", "crawlguard:replicas", "12873600000"])
            .int(),
        1
    );
    assert_eq!(sync_ok(&sc, &batch("envoy-a", 200, &[])).await.replicas, 2);
    let RedisReply::Array(members) = redis.cmd(&["ZRANGE", "crawlguard:replicas", "0", "-1"])
    else {
        panic!("ZRANGE did not answer an array");
    };
    assert_eq!(
        members,
        vec![
            RedisReply::Bulk("envoy-a".into()),
            RedisReply::Bulk("made-up-2".into())
        ]
    );
    let pttl = redis.pttl("crawlguard:replicas");
    assert!((1..=180_000).contains(&pttl), "PTTL {pttl}");
}

#[tokio::test]
async fn heartbeats_count_live_replicas_each_for_three_of_its_intervals() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let sc = Sidecar::start(opts(&dns, &redis.url(), 2000)).await;
    let beat = |replica: &'static str, interval_ms: u32| batch(replica, interval_ms, &[]);

    assert_eq!(sync_ok(&sc, &beat("r1", 200)).await.replicas, 1);
    assert_eq!(sync_ok(&sc, &beat("r1", 200)).await.replicas, 1);
    assert_eq!(sync_ok(&sc, &beat("slow-one", 5_000)).await.replicas, 2);
    assert_eq!(sync_ok(&sc, &beat("r2", 200)).await.replicas, 3);
    let t0 = Instant::now();
    assert_eq!(sync_ok(&sc, &beat("r3", 200)).await.replicas, 4);
    // The set lives as long as its longest-lived member.
    let pttl = redis.pttl("crawlguard:replicas");
    assert!((14_000..=15_000).contains(&pttl), "PTTL {pttl}");

    // r1 keeps syncing; r2 and r3 stop. They count for 3 x 200 ms after their last sync;
    // the replica with a 5 s interval still counts.
    let dropped = poll_until(Duration::from_secs(5), || async {
        let n = sync_ok(&sc, &beat("r1", 200)).await.replicas;
        assert!(n == 4 || n == 3 || n == 2, "{n} replicas");
        (n == 2).then_some(t0.elapsed())
    })
    .await
    .expect("r2 and r3 never stopped counting");
    assert!(dropped >= Duration::from_millis(600), "after {dropped:?}");
    assert_eq!(sc.metric("crawlguard_sidecar_fleet_replicas").await, 2.0);
    let RedisReply::Array(members) = redis.cmd(&["ZRANGE", "crawlguard:replicas", "0", "-1"])
    else {
        panic!("ZRANGE did not answer an array");
    };
    assert_eq!(
        members,
        vec![
            RedisReply::Bulk("r1".into()),
            RedisReply::Bulk("slow-one".into())
        ]
    );
}

#[tokio::test]
async fn redis_killed_gives_503_within_the_timeout_and_the_sidecar_recovers_alone() {
    let mut redis = Redis::start().await;
    let dns = Blackhole::new();
    let sc = Sidecar::start(opts(&dns, &redis.url(), 200)).await;
    let pid = sc.pid();
    sync_ok(&sc, &batch("r", 1000, &[("1", 1.0, 10, 1)])).await;

    redis.kill();
    for i in 0..5 {
        let t = Instant::now();
        let (status, body) = sc.fleet_sync(&batch("r", 1000, &[("1", 1.0, 10, 1)])).await;
        let took = t.elapsed();
        assert_eq!(status, 503, "{body}");
        assert!(
            body.starts_with(r#"{"error":"redis unavailable: "#),
            "{body}"
        );
        // 200 ms timeout, and room for HTTP on a loaded machine: what this rules out is a
        // sync that waits for a dead Redis (seconds of connect retries).
        assert!(took < Duration::from_millis(1000), "attempt {i}: {took:?}");
    }
    assert_eq!(
        sc.metric("crawlguard_sidecar_fleet_sync_batches_total{result=\"unavailable\"}")
            .await,
        5.0
    );
    assert_eq!(
        metric_sum(&sc, "crawlguard_sidecar_redis_errors_total{op=\"sync\"").await,
        5.0
    );
    assert!(sc.log().contains("redis command failed"), "{}", sc.log());

    // Redis back (empty): syncing resumes without restarting the sidecar.
    redis.restart().await;
    let t = Instant::now();
    let recovered = poll_until(Duration::from_secs(10), || async {
        let started = Instant::now();
        let (status, body) = sc.fleet_sync(&batch("r", 1000, &[])).await;
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "{status} {body} after {:?}",
            started.elapsed()
        );
        (status == 200).then_some(t.elapsed())
    })
    .await
    .expect("syncing never resumed after Redis came back");
    eprintln!("syncing resumed {recovered:?} after Redis was back");
    assert_eq!(sc.pid(), pid, "the sidecar was not restarted");
    // The new Redis starts empty: a fresh bucket, exact figures.
    let r = sync_ok(&sc, &batch("r", 1000, &[("1", 1.0, 10, 1)])).await;
    assert_eq!(r.keys, vec![state(9, 1_000_000_000)]);
    let log = sc.log();
    assert!(log.contains("redis reachable again"), "{log}");
}

#[tokio::test]
async fn slow_redis_gives_503_within_the_timeout() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let sc = Sidecar::start(opts(&dns, &redis.url(), 200)).await;
    sync_ok(&sc, &batch("r", 1000, &[("2", 1.0, 10, 1)])).await;

    // Every client's commands held for 1.5 s.
    redis.pause(Duration::from_millis(1500));
    let t = Instant::now();
    let (status, body) = sc.fleet_sync(&batch("r", 1000, &[("2", 1.0, 10, 1)])).await;
    let took = t.elapsed();
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"error":"redis unavailable: timeout"}"#)
    );
    // At least the 200 ms timeout, well short of the 1.5 s stall (room for a loaded machine).
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(1200),
        "{took:?}"
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_redis_errors_total{op=\"sync\",kind=\"timeout\"}")
            .await,
        1.0
    );
    poll_until(Duration::from_secs(10), || async {
        (sc.fleet_sync(&batch("r", 1000, &[])).await.0 == 200).then_some(())
    })
    .await
    .expect("syncing never resumed after the pause");

    // Slow for one sidecar only: through a relay that holds its commands.
    let proxy = SlowProxy::start(redis.addr());
    let slow = Sidecar::start(opts(&dns, &proxy.url(), 200)).await;
    sync_ok(&slow, &batch("s", 1000, &[])).await;
    proxy.set_delay(Duration::from_secs(1));
    let t = Instant::now();
    let (status, body) = slow.fleet_sync(&batch("s", 1000, &[])).await;
    let took = t.elapsed();
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"error":"redis unavailable: timeout"}"#)
    );
    // At least the 200 ms timeout, short of the relay's 1 s delay.
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(900),
        "{took:?}"
    );
    // The other sidecar does not notice.
    sync_ok(&sc, &batch("r", 1000, &[])).await;
    proxy.set_delay(Duration::ZERO);
    poll_until(Duration::from_secs(10), || async {
        (slow.fleet_sync(&batch("s", 1000, &[])).await.0 == 200).then_some(())
    })
    .await
    .expect("the slow sidecar never recovered");
}

#[tokio::test]
async fn a_batch_redis_runs_after_the_sidecar_gave_up_on_it_changes_nothing() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let sc = Sidecar::start(opts(&dns, &redis.url(), 200)).await;
    let key = format!("{BUCKET}0000000000000d0e");
    // An answered sync: the sidecar learns Redis's clock (a read: nothing is written).
    sync_ok(&sc, &batch("r", 1000, &[("d0e", 1.0, 10, 0)])).await;
    // Redis holds every command for 1.5 s; the sidecar gives up after 200 ms (503), and
    // the filter never sends that batch again.
    redis.pause(Duration::from_millis(1500));
    let (status, _) = sc
        .fleet_sync(&batch("r", 1000, &[("d0e", 1.0, 10, 6)]))
        .await;
    assert_eq!(status, 503);
    poll_until(Duration::from_secs(10), || async {
        (sc.fleet_sync(&batch("r", 1000, &[])).await.0 == 200).then_some(())
    })
    .await
    .expect("syncing never resumed after the pause");
    // Redis ran the queued script when the pause ended, past its deadline: it wrote
    // nothing (applied late, the 6 tokens would leave 4; a stall's whole use charged at
    // once is what put verified crawlers under their limit in debt).
    assert_eq!(redis.get(&key), None);
    let a = sync_ok(&sc, &batch("r", 1000, &[("d0e", 1.0, 10, 0)])).await;
    assert_eq!(a.keys, vec![state(10, 0)]);
    // A batch in time is applied as before.
    let a = sync_ok(&sc, &batch("r", 1000, &[("d0e", 1.0, 10, 6)])).await;
    assert_eq!(a.keys[0].available, 4);
}

#[tokio::test]
async fn a_hundred_thousand_keys_expire_and_redis_memory_comes_back_down() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let sc = Sidecar::start(opts(&dns, &redis.url(), 10_000)).await;
    let baseline = redis.used_memory();

    // 10 batches of 10,000 fresh keys, each full again (and so expired) 32 s after its
    // batch: far longer than sending them takes on a loaded machine, so every key is still
    // there when they are counted below.
    for b in 0..10u32 {
        let keys: Vec<String> = (0..10_000u32)
            .map(|i| format!("{:x}", 0x5_0000_0000u64 + u64::from(b * 10_000 + i)))
            .collect();
        let entries: Vec<(&str, f64, u32, u32)> =
            keys.iter().map(|k| (k.as_str(), 0.25, 20, 8)).collect();
        let r = sync_ok(&sc, &batch("mem", 1000, &entries)).await;
        assert_eq!(r.keys.len(), 10_000);
        assert!(
            r.keys.iter().all(|k| *k == state(12, 32_000_000_000)),
            "batch {b}"
        );
    }
    assert_eq!(redis.dbsize(), 100_001);
    // Every key carries a TTL.
    let keyspace = redis.cmd(&["INFO", "keyspace"]).text().unwrap_or_default();
    assert!(
        keyspace.contains("db0:keys=100001,expires=100001,"),
        "{keyspace}"
    );
    let filled = redis.used_memory();
    eprintln!("used_memory: {baseline} before, {filled} with 100,001 keys");
    assert!(filled - baseline > 5_000_000, "{baseline} -> {filled}");

    // Waiting for the keys' own expiry (32 s; the replicas set 3 s after the last batch).
    poll_until(Duration::from_secs(60), || async {
        (redis.dbsize() == 0).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("{} keys left", redis.dbsize()));
    let after = redis.used_memory();
    eprintln!("used_memory: {after} after expiry");
    assert!(
        after < baseline + 1_000_000,
        "{baseline} -> {filled} -> {after}"
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_fleet_sync_batch_keys_sum")
            .await,
        100_000.0
    );
}

#[tokio::test]
async fn verdicts_are_shared_so_the_second_sidecar_asks_no_dns() {
    let redis = Redis::start().await;
    let records = [
        Record::googlebot(),
        // A Googlebot claim from an address whose PTR is not Google's.
        Record::ptr("192.0.2.66", "host-66.example.net"),
    ];
    let dns_a = Dnsmasq::start(&records).await;
    let dns_b = Dnsmasq::start(&records).await;
    let a = Sidecar::start(SidecarOpts::fleet(dns_a.addr(), &redis.url())).await;
    let b = Sidecar::start(SidecarOpts::fleet(dns_b.addr(), &redis.url())).await;
    let spoofer_key = "crawlguard:verdict:googlebot:192.0.2.66";
    let ptr_query = "query[PTR] 66.2.0.192.in-addr.arpa";

    let spoofed = json!({"ip": "192.0.2.66", "bot": "googlebot", "verdict": "spoofed",
        "method": "fcrdns", "host": "", "ttl_s": 3600});
    let (status, body) = a.verify("192.0.2.66", "googlebot").await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), spoofed);
    // The verdict reaches Redis (stored in the background), with its lifetime.
    let stored = poll_until(Duration::from_secs(5), || async { redis.get(spoofer_key) })
        .await
        .expect("the verdict never reached Redis");
    assert_eq!(
        stored,
        r#"{"verdict":"spoofed","method":"fcrdns","host":""}"#
    );
    let pttl = redis.pttl(spoofer_key);
    assert!((3_590_000..=3_600_000).contains(&pttl), "PTTL {pttl}");

    let (status, body) = b.verify("192.0.2.66", "googlebot").await;
    assert_eq!(status, 200);
    let mut answer: Value = serde_json::from_str(&body).unwrap();
    let ttl = answer["ttl_s"].as_u64().unwrap();
    assert!(ttl == 3600 || ttl == 3599, "{answer}");
    answer["ttl_s"] = json!(3600);
    assert_eq!(answer, spoofed);
    // Resolved once for the fleet: A's DNS server saw the query, B's saw none.
    assert_eq!(dns_a.log().matches(ptr_query).count(), 1);
    assert_eq!(dns_b.log().matches(ptr_query).count(), 0);
    assert_eq!(
        b.metric("crawlguard_sidecar_dns_queries_total{type=\"ptr\"}")
            .await,
        0.0
    );
    assert_eq!(
        b.metric("crawlguard_sidecar_redis_verdict_hits_total")
            .await,
        1.0
    );
    assert_eq!(
        a.metric("crawlguard_sidecar_redis_verdict_misses_total")
            .await,
        1.0
    );

    // The other way round, for a verified crawler: B resolves, A reuses host and verdict.
    let (status, body) = b.verify(GOOGLEBOT_V4, "googlebot").await;
    assert_eq!(status, 200);
    let verified: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        verified,
        json!({"ip": GOOGLEBOT_V4, "bot": "googlebot", "verdict": "verified",
            "method": "fcrdns", "host": GOOGLEBOT_HOST, "ttl_s": 86400})
    );
    let key = format!("crawlguard:verdict:googlebot:{GOOGLEBOT_V4}");
    poll_until(Duration::from_secs(5), || async { redis.get(&key) })
        .await
        .expect("the verified verdict never reached Redis");
    let (_, body) = a.verify(GOOGLEBOT_V4, "googlebot").await;
    let mut answer: Value = serde_json::from_str(&body).unwrap();
    assert!(answer["ttl_s"].as_u64().unwrap() >= 86_399, "{answer}");
    answer["ttl_s"] = json!(86400);
    assert_eq!(answer, verified);
    let fwd = format!("query[A] {GOOGLEBOT_HOST}");
    assert_eq!(dns_a.log().matches(&fwd).count(), 0);
    assert_eq!(dns_b.log().matches(&fwd).count(), 1);
    assert_eq!(
        a.metric("crawlguard_sidecar_redis_verdict_hits_total")
            .await,
        1.0
    );
}

/// Verifies a Googlebot claim from `ip`, expects `verified` by FCrDNS, returns the time taken.
async fn timed_verify(sc: &Sidecar, ip: &str) -> Duration {
    let t = Instant::now();
    let (status, body) = sc.verify(ip, "googlebot").await;
    let took = t.elapsed();
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(
        (status, &v["verdict"], &v["method"]),
        (200, &json!("verified"), &json!("fcrdns")),
        "{ip}: {body}"
    );
    took
}

#[tokio::test]
async fn verification_falls_back_to_dns_when_redis_is_slow_or_gone() {
    let redis = Redis::start().await;
    let records: Vec<Record> = (1..=4)
        .map(|i| {
            Record::host(
                &format!("crawl-192-0-2-{i}.googlebot.com"),
                &format!("192.0.2.{i}"),
            )
        })
        .collect();
    let dns = Dnsmasq::start(&records).await;
    let fleet = || SidecarOpts {
        redis_timeout_ms: Some(1000),
        ..SidecarOpts::fleet(dns.addr(), &redis.url())
    };
    let slow = Sidecar::start(fleet()).await;
    let gone = Sidecar::start(fleet()).await;
    // Slow Redis: the first lookup waits out the timeout (1 s here), then DNS decides; for
    // the next second verdict lookups skip Redis, so the next verification does not wait.
    redis.pause(Duration::from_millis(3000));
    let took = timed_verify(&slow, "192.0.2.1").await;
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    // Not waiting for Redis again (that would take its 1 s timeout).
    let took = timed_verify(&slow, "192.0.2.2").await;
    assert!(took < Duration::from_millis(900), "{took:?}");
    assert_eq!(
        slow.metric("crawlguard_sidecar_redis_errors_total{op=\"verdict_get\",kind=\"timeout\"}")
            .await,
        1.0
    );

    // Redis gone: verification answers from DNS, within the timeout.
    redis.kill();
    let took = timed_verify(&gone, "192.0.2.3").await;
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let took = timed_verify(&gone, "192.0.2.4").await;
    assert!(took < Duration::from_millis(900), "{took:?}");
    assert_eq!(
        metric_sum(
            &gone,
            "crawlguard_sidecar_redis_errors_total{op=\"verdict_get\""
        )
        .await,
        1.0
    );
    for sc in [&slow, &gone] {
        assert_eq!(
            sc.metric(
                "crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"verified\"}"
            )
            .await,
            2.0
        );
        assert_eq!(
            sc.metric("crawlguard_sidecar_redis_verdict_hits_total")
                .await,
            0.0
        );
    }
}

#[tokio::test]
async fn bad_sync_requests_get_a_json_error_and_write_nothing() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    // Without Redis: fleet mode is off.
    let off = Sidecar::start(SidecarOpts::dns(dns.addr())).await;
    let (status, body) = off.fleet_sync(&batch("r", 1000, &[])).await;
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            r#"{"error":"fleet mode is off: this sidecar has no Redis (--redis)"}"#
        )
    );
    assert_eq!(
        off.metric("crawlguard_sidecar_fleet_sync_batches_total{result=\"off\"}")
            .await,
        1.0
    );
    // Verification works as before without Redis.
    assert_eq!(off.verify("127.0.0.1", "googlebot").await.0, 200);

    let sc = Sidecar::start(SidecarOpts {
        redis_prefix: Some("t1:".into()),
        ..opts(&dns, &redis.url(), 2000)
    })
    .await;
    let key = |k: &str, rate: Value, burst: Value, used: Value| {
        json!({"replica": "r", "interval_ms": 1000,
            "keys": [{"key": k, "rate_per_s": rate, "burst": burst, "used": used}]})
        .to_string()
    };
    let too_many =
        serde_json::to_string(&batch("r", 1000, &vec![("1", 1.0, 1, 1); 10_001])).unwrap();
    let cases: Vec<(String, u16, &str)> = vec![
        (
            "not json".into(),
            400,
            "invalid sync request: expected ident",
        ),
        ("{}".into(), 400, "invalid sync request: missing field"),
        (
            r#"{"replica":"r","interval_ms":1,"keys":[],"extra":1}"#.into(),
            400,
            "invalid sync request: unknown field `extra`",
        ),
        (
            r#"{"replica":"a b","interval_ms":1,"keys":[]}"#.into(),
            400,
            "replica: must be 1..=64 chars of [A-Za-z0-9._-]",
        ),
        (
            key("xyz", json!(1), json!(1), json!(1)),
            400,
            "keys[0].key: must be 1..=16 hex digits",
        ),
        (
            key("12345678901234567", json!(1), json!(1), json!(1)),
            400,
            "keys[0].key: must be 1..=16 hex digits",
        ),
        (
            key("ab", json!(0), json!(1), json!(1)),
            400,
            "keys[0].rate_per_s: must be > 0",
        ),
        (
            key("ab", json!(-1.5), json!(1), json!(1)),
            400,
            "keys[0].rate_per_s: must be > 0",
        ),
        (
            key("ab", json!(1), json!(0), json!(1)),
            400,
            "keys[0].burst: must be >= 1",
        ),
        (
            key("ab", json!(1), json!(1), json!(-1)),
            400,
            "invalid sync request: invalid value",
        ),
        (
            key("ab", json!(1), json!(1), json!(4_294_967_296u64)),
            400,
            "invalid sync request",
        ),
        (
            key("ab", json!("1"), json!(1), json!(1)),
            400,
            "invalid sync request: invalid type",
        ),
        (too_many, 400, "keys: at most 10000"),
        (
            "x".repeat(2 * 1024 * 1024 + 1),
            413,
            "body too large: at most 2097152 bytes",
        ),
    ];
    for (body, want_status, want) in &cases {
        let (status, text) = sc.post("/v1/fleet/sync", body.clone()).await;
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let msg = v["error"].as_str().unwrap_or_else(|| panic!("{text}"));
        assert_eq!(status, *want_status, "{msg}");
        assert!(
            msg.starts_with(want),
            "{msg:?} does not start with {want:?}"
        );
        assert!(msg.len() <= 300, "{msg}");
    }
    assert_eq!(sc.get("/v1/fleet/sync").await.0, 405);
    assert_eq!(redis.dbsize(), 0, "an invalid request wrote to Redis");
    assert_eq!(
        sc.metric("crawlguard_sidecar_fleet_sync_batches_total{result=\"invalid\"}")
            .await,
        cases.len() as f64
    );
    // Still serving; keys carry the configured prefix.
    sync_ok(&sc, &batch("r", 1000, &[("ab", 1.0, 1, 1)])).await;
    assert!(redis.get("t1:bucket:00000000000000ab").is_some());
    assert!(redis.pttl("t1:replicas") > 0);
    assert_eq!(redis.dbsize(), 2);
}

#[tokio::test]
async fn rediss_with_a_password_in_the_url_and_the_password_never_logged() {
    let certs = temp_dir("redis-tls");
    let tls = TestCa::generate(certs.path());
    let redis = Redis::start_with(RedisOpts {
        password: Some("s3cret-pw".into()),
        tls: Some(tls.clone()),
    })
    .await;
    let dns = Blackhole::new();
    let url = redis.tls_url().expect("a TLS port");
    assert!(url.starts_with("rediss://:s3cret-pw@127.0.0.1:"), "{url}");
    let trusting = SidecarOpts {
        env: vec![("SSL_CERT_FILE".into(), tls.ca.display().to_string())],
        ..opts(&dns, &url, 2000)
    };
    let sc = Sidecar::start(trusting.clone()).await;
    let r = sync_ok(&sc, &batch("tls", 1000, &[("7", 4.0, 8, 3)])).await;
    assert_eq!(r.keys, vec![state(5, 750_000_000)]);
    assert!(redis.get(&format!("{BUCKET}0000000000000007")).is_some());

    // A wrong password, or a server certificate nobody vouches for: 503, never a hang.
    let wrong = url.replace("s3cret-pw", "wrong-pw");
    let bad_auth = Sidecar::start(SidecarOpts {
        redis: Some(wrong),
        ..trusting.clone()
    })
    .await;
    let (status, body) = bad_auth.fleet_sync(&batch("tls", 1000, &[])).await;
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"error":"redis unavailable: auth"}"#)
    );
    let untrusted = Sidecar::start(opts(&dns, &url, 2000)).await;
    let (status, body) = untrusted.fleet_sync(&batch("tls", 1000, &[])).await;
    assert_eq!(
        (status, body.as_str()),
        (503, r#"{"error":"redis unavailable: connection"}"#)
    );
    assert_eq!(
        untrusted
            .metric("crawlguard_sidecar_redis_errors_total{op=\"sync\",kind=\"connection\"}")
            .await,
        1.0
    );
    for (name, sc) in [
        ("ok", &sc),
        ("bad auth", &bad_auth),
        ("untrusted", &untrusted),
    ] {
        let log = sc.log();
        assert!(log.contains("fleet mode on"), "{name}: {log}");
        assert!(!log.contains("pw"), "{name} logged a password:\n{log}");
    }
}

#[tokio::test]
async fn foreign_keys_under_the_prefix_do_not_break_a_batch_half_way() {
    let redis = Redis::start().await;
    let dns = Blackhole::new();
    let sc = Sidecar::start(opts(&dns, &redis.url(), 2000)).await;
    let hash = format!("{BUCKET}00000000000000b2");
    let junk = format!("{BUCKET}00000000000000b3");
    assert_eq!(redis.cmd(&["HSET", &hash, "f", "v"]), RedisReply::Int(1));
    assert_eq!(
        redis.cmd(&["SET", &junk, "not a tat"]),
        RedisReply::Status("OK".into())
    );
    let r = sync_ok(
        &sc,
        &batch(
            "r",
            1000,
            &[
                ("b1", 1.0, 3, 1),
                ("b2", 1.0, 3, 1),
                ("b3", 1.0, 3, 0),
                ("b4", 1.0, 3, 2),
            ],
        ),
    )
    .await;
    // Every key applied: the hash counted as no state and was replaced; the junk string
    // (used 0) reads as full and is left alone.
    assert_eq!(
        r.keys,
        vec![
            state(2, 1_000_000_000),
            state(2, 1_000_000_000),
            state(3, 0),
            state(1, 2_000_000_000),
        ]
    );
    assert!(redis.pttl(&hash) > 0);
    assert_eq!(redis.get(&junk), Some("not a tat".into()));
}

/// A sidecar of an older catalog stored a Google Cloud VM (`<ip>.bc.googleusercontent.com`)
/// in Redis as a verified Googlebot. This sidecar checks a shared verified verdict's PTR
/// name against its own domains: it resolves the claim again, answers `spoofed`, and
/// replaces the stored verdict.
#[tokio::test]
async fn a_verified_verdict_stored_under_an_older_catalog_is_checked_again() {
    let redis = Redis::start().await;
    let vm = "192.0.2.77";
    let vm_host = "77.2.0.192.bc.googleusercontent.com";
    let dns = Dnsmasq::start(&[Record::host(vm_host, vm)]).await;
    let key = format!("crawlguard:verdict:googlebot:{vm}");
    let old = format!(r#"{{"verdict":"verified","method":"fcrdns","host":"{vm_host}"}}"#);
    assert_eq!(
        redis
            .cmd(&["SET", &key, &old, "PX", "86400000"])
            .text()
            .as_deref(),
        Some("OK")
    );
    let sc = Sidecar::start(SidecarOpts::fleet(dns.addr(), &redis.url())).await;
    let (status, body) = sc.verify(vm, "googlebot").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"ip": vm, "bot": "googlebot", "verdict": "spoofed", "method": "fcrdns",
               "host": "", "ttl_s": 3600})
    );
    let replaced = poll_until(Duration::from_secs(5), || async {
        redis.get(&key).filter(|v| *v != old)
    })
    .await
    .expect("the stale verdict was never replaced");
    assert_eq!(
        replaced,
        r#"{"verdict":"spoofed","method":"fcrdns","host":""}"#
    );
}
