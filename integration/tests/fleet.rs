//! Fleet mode end to end: three real Envoys (two workers each), each with its own sidecar
//! (`--redis`), one real `redis-server`, one test upstream. One client address spreads its
//! requests round-robin over the three Envoys.
//!
//! - With fleet mode, the client gets one limit: within `burst + rate x t` plus the stated
//!   overshoot (`crawlguard_contract::fleet::overshoot_bound`); without, three limits.
//! - A key new to every replica at once gets one burst across the fleet, not three.
//! - Redis slow, Redis killed, a sidecar killed: no 5xx, no request waits on a sync (each
//!   answered well under the sync timeout), limits still enforced by each Envoy alone
//!   (`degraded_share: split`), `fleet.sync_error` and the `fleet.degraded` gauge show it;
//!   when the dependency is back, syncing resumes on its own (`fleet.syncs` moves again).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crawlguard_contract::fleet::overshoot_bound;
use crawlguard_integration::process::poll_until;
use crawlguard_integration::{
    client, get, ip, Envoy, EnvoyOpts, Redis, Sidecar, SidecarOpts, SlowProxy, TestUpstream,
    UA_CHROME,
};
use serde_json::{json, Value};

const REPLICAS: usize = 3;
const SYNC_MS: u32 = 500;
/// The filter's sync timeout: a request that waited on a sync would take at least this.
const SYNC_TIMEOUT_MS: u32 = 400;

/// Humans limited per client address at `rate_per_s` with `burst`; fleet mode on or off.
fn config(fleet: bool, rate_per_s: f64, burst: u32) -> Value {
    json!({
        "limits": [{"name": "human", "class": "human", "route": "*",
                    "rate_per_s": rate_per_s, "burst": burst, "key": "client_ip"}],
        // Fleet mode needs one hash seed on every replica.
        "store": {"hash_seed": 4242},
        "fleet": {"enabled": fleet, "sync_interval_ms": SYNC_MS,
                  "timeout_ms": SYNC_TIMEOUT_MS, "degraded_share": "split"},
    })
}

/// Three Envoys in front of one upstream, each with its own sidecar on one Redis (reached
/// through a relay that can be made slow). Drops Envoys first, then sidecars, relay, Redis.
struct Fleet {
    envoys: Vec<Envoy>,
    sidecars: Vec<Sidecar>,
    relay: SlowProxy,
    redis: Redis,
    _upstream: TestUpstream,
}

impl Fleet {
    async fn start(cfg: Value) -> Fleet {
        let redis = Redis::start().await;
        let relay = SlowProxy::start(redis.addr());
        let upstream = TestUpstream::start().await;
        // No claim is verified here: the sidecars' DNS is a port nobody answers on.
        let no_dns: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let mut sidecars = Vec::new();
        let mut envoys = Vec::new();
        for _ in 0..REPLICAS {
            let sidecar = Sidecar::start(SidecarOpts {
                redis_timeout_ms: Some(200),
                ..SidecarOpts::fleet(no_dns, &relay.url())
            })
            .await;
            let envoy = Envoy::start(
                EnvoyOpts::with_config(cfg.clone())
                    .in_front_of(&upstream)
                    .concurrency(2)
                    .real_verifier(sidecar.addr().port()),
            )
            .await;
            sidecars.push(sidecar);
            envoys.push(envoy);
        }
        let fleet = Fleet {
            envoys,
            sidecars,
            relay,
            redis,
            _upstream: upstream,
        };
        if cfg["fleet"]["enabled"] == true {
            // Every worker has heard of all three replicas before the test's traffic
            // starts: once one has, the others learn it at their next sync; each Envoy's
            // three VMs (main thread and two workers) sync every interval, so six more
            // syncs means each of them synced again.
            for e in &fleet.envoys {
                e.wait_for_stat(
                    "wasmcustom.crawlguard.fleet.replicas",
                    Duration::from_secs(10),
                    "replicas",
                    |v| v == REPLICAS as u64,
                )
                .await;
                let syncs = e.counter("crawlguard.fleet.syncs").await;
                e.wait_for_counter(
                    "crawlguard.fleet.syncs",
                    syncs + 6,
                    Duration::from_secs(10),
                    "syncs",
                )
                .await;
            }
        }
        fleet
    }

    /// A counter summed over the three Envoys.
    async fn counter(&self, name: &str) -> u64 {
        let mut sum = 0;
        for e in &self.envoys {
            sum += e.counter(name).await;
        }
        sum
    }

    /// `name` on every Envoy.
    async fn each(&self, name: &str) -> Vec<u64> {
        let mut out = Vec::new();
        for e in &self.envoys {
            // Polled (wait_resumed) and timed: read as Envoy has it now (the root context
            // flushes its counters when a sync answer arrives).
            out.push(e.stat_now(&format!("wasmcustom.{name}")).await.unwrap_or(0));
        }
        out
    }

    /// Waits until every Envoy answered a sync after now; returns how long that took.
    async fn wait_resumed(&self, what: &str) -> Duration {
        let before = self.each("crawlguard.fleet.syncs").await;
        let started = Instant::now();
        let done = poll_until(Duration::from_secs(10), || async {
            let now = self.each("crawlguard.fleet.syncs").await;
            now.iter().zip(&before).all(|(n, b)| n > b).then_some(())
        })
        .await;
        assert!(done.is_some(), "{what}: syncing did not resume within 10 s");
        started.elapsed()
    }
}

/// What one paced run of requests got.
#[derive(Debug, Default)]
struct Run {
    statuses: Vec<u16>,
    slowest: Duration,
}

impl Run {
    fn count(&self, status: u16) -> usize {
        self.statuses.iter().filter(|s| **s == status).count()
    }
}

/// `per_s` GETs a second for `secs` seconds from client address `who`, round-robin over
/// the Envoys (requests are paced, not waited on: each is sent on its own schedule).
async fn run(envoys: &[Envoy], who: u8, per_s: u32, secs: u32) -> Run {
    let c = client(ip(who));
    let urls: Vec<String> = envoys.iter().map(|e| e.url("/page")).collect();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_s);
    let mut tasks = Vec::new();
    for i in 0..(per_s * secs) as usize {
        tick.tick().await;
        let (c, url) = (c.clone(), urls[i % urls.len()].clone());
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let r = get(&c, &url, UA_CHROME, &[]).await;
            (r.status, started.elapsed())
        }));
    }
    let mut out = Run::default();
    for t in tasks {
        let (status, took) = t.await.expect("request task");
        out.statuses.push(status);
        out.slowest = out.slowest.max(took);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_envoys_admit_one_limit_with_fleet_mode_and_three_without() {
    let (rate, burst, secs, per_s) = (5.0, 10, 10, 40);
    let limit = burst as f64 + rate * f64::from(secs);
    let bound = limit + overshoot_bound(REPLICAS as u32, rate, burst, SYNC_MS);

    let fleet = Fleet::start(config(true, rate, burst)).await;
    let with = run(&fleet.envoys, 20, per_s, secs).await;
    let admitted = with.count(200);
    let synced = fleet.counter("crawlguard.fleet.keys_synced").await;
    let errors = fleet.counter("crawlguard.fleet.sync_error").await;
    drop(fleet);

    let alone = Fleet::start(config(false, rate, burst)).await;
    let without = run(&alone.envoys, 20, per_s, secs).await;
    let admitted_alone = without.count(200);
    drop(alone);

    println!(
        "{per_s} req/s for {secs} s over {REPLICAS} Envoys, limit {rate}/s burst {burst}: \
         fleet mode admitted {admitted} (limit {limit}, stated bound {bound:.1}), \
         without {admitted_alone}; {synced} keys synced, {errors} sync errors"
    );
    assert!(
        admitted as f64 <= bound,
        "fleet admitted {admitted} > {bound}"
    );
    assert!(
        admitted as f64 >= 0.9 * limit,
        "fleet admitted only {admitted}"
    );
    assert_eq!(with.count(200) + with.count(429), with.statuses.len());
    assert_eq!(errors, 0);
    assert!(synced > 0);
    // Each Envoy alone gives the client its own burst and refill.
    assert!(
        admitted_alone as f64 >= 3.0 * limit - 6.0 && admitted_alone as f64 <= 3.0 * limit,
        "without fleet mode: {admitted_alone}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_new_to_every_replica_at_once_gets_one_burst_not_three() {
    // Nothing refills during the test: the counts are exact.
    let burst = 12;
    let fleet = Fleet::start(config(true, 0.001, burst)).await;
    let c = client(ip(21));
    let mut tasks = Vec::new();
    for e in &fleet.envoys {
        for _ in 0..10 {
            let (c, url) = (c.clone(), e.url("/page"));
            tasks.push(tokio::spawn(async move {
                get(&c, &url, UA_CHROME, &[]).await.status
            }));
        }
    }
    let mut per_envoy = vec![0; REPLICAS];
    for (i, t) in tasks.into_iter().enumerate() {
        if t.await.expect("task") == 200 {
            per_envoy[i / 10] += 1;
        }
    }
    println!("a fresh key, 10 requests at once to each Envoy: admitted {per_envoy:?}");
    // Each Envoy holds its share of the burst (12 / 3 replicas), shared by its workers.
    assert_eq!(per_envoy, vec![4, 4, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_slow_redis_killed_or_a_sidecar_killed_never_fails_a_request() {
    let (rate, burst) = (5.0, 10);
    let mut fleet = Fleet::start(config(true, rate, burst)).await;
    let mut table = Vec::new();
    // Each phase: a fresh client at 30 req/s for 3 s, over the three Envoys.
    let mut who = 30;

    table.push(("healthy", run(&fleet.envoys, who, 30, 3).await));

    // Redis slow: every sync takes longer than the sidecar's Redis timeout.
    fleet.relay.set_delay(Duration::from_millis(1_000));
    let errors = fleet.counter("crawlguard.fleet.sync_error").await;
    who += 1;
    table.push(("redis slow", run(&fleet.envoys, who, 30, 3).await));
    assert!(fleet.counter("crawlguard.fleet.sync_error").await > errors);
    assert_eq!(fleet.each("crawlguard.fleet.degraded").await, vec![1, 1, 1]);
    fleet.relay.set_delay(Duration::ZERO);
    let resumed_slow = fleet.wait_resumed("redis fast again").await;

    // Redis killed, then restarted (empty).
    fleet.redis.kill();
    who += 1;
    table.push(("redis killed", run(&fleet.envoys, who, 30, 3).await));
    assert_eq!(fleet.each("crawlguard.fleet.degraded").await, vec![1, 1, 1]);
    fleet.redis.restart().await;
    let resumed_redis = fleet.wait_resumed("redis restarted").await;

    // One sidecar killed: its Envoy degrades, the others keep syncing.
    fleet.sidecars[0].kill();
    who += 1;
    table.push(("sidecar killed", run(&fleet.envoys, who, 30, 3).await));
    assert_eq!(fleet.each("crawlguard.fleet.degraded").await, vec![1, 0, 0]);
    fleet.sidecars[0].restart().await;
    let resumed_sidecar = fleet.wait_resumed("sidecar restarted").await;
    assert_eq!(fleet.each("crawlguard.fleet.degraded").await, vec![0, 0, 0]);

    let limit = burst as f64 + rate * 3.0;
    let overshoot = overshoot_bound(REPLICAS as u32, rate, burst, SYNC_MS);
    let n = REPLICAS as f64;
    // What each phase may admit: one limit plus the stated overshoot while all sync, and
    // while none can (each Envoy keeps a third of the limit; until its first sync fails it
    // decides as a synced one would); while one Envoy cannot, its third on top of what the
    // other two share.
    let bounds = [
        limit + overshoot,
        limit + overshoot,
        limit + overshoot,
        limit * (1.0 + 1.0 / n) + overshoot,
    ];
    for (name, r) in &table {
        println!(
            "{name:>15}: {} x 200, {} x 429, other {}, slowest {} ms",
            r.count(200),
            r.count(429),
            r.statuses.len() - r.count(200) - r.count(429),
            r.slowest.as_millis()
        );
    }
    println!(
        "syncing resumed {} ms after Redis was fast again, {} ms after it restarted, {} ms \
         after the sidecar restarted (interval {SYNC_MS} ms)",
        resumed_slow.as_millis(),
        resumed_redis.as_millis(),
        resumed_sidecar.as_millis()
    );
    for ((name, r), bound) in table.iter().zip(bounds) {
        // Only 200s and 429s: no 5xx, whatever broke.
        assert_eq!(r.count(200) + r.count(429), r.statuses.len(), "{name}");
        // No request waited on a sync (one that did would take the sync timeout).
        assert!(
            r.slowest < Duration::from_millis(u64::from(SYNC_TIMEOUT_MS) / 2),
            "{name}: a request took {:?}",
            r.slowest
        );
        // Still limited: each Envoy alone keeps its share of the limit.
        assert!(r.count(429) > 0, "{name}: nothing limited");
        assert!(
            r.count(200) as f64 <= bound,
            "{name}: {} admitted > {bound:.1}",
            r.count(200)
        );
    }
    // Back within two intervals of the first sync that could succeed (the Redis client
    // reconnects with a backoff of up to 1 s).
    for d in [resumed_slow, resumed_sidecar] {
        assert!(
            d <= Duration::from_millis(2 * u64::from(SYNC_MS) + 300),
            "{d:?}"
        );
    }
    assert!(resumed_redis <= Duration::from_millis(2 * u64::from(SYNC_MS) + 1_300));
    for e in &fleet.envoys {
        e.assert_log_clean();
    }
}
