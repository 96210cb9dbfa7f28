//! One client cannot shed everyone (README, "Load shedding": `shedding.min_clients`): a
//! browser at one address whose own requests are slow URLs (10% of all traffic) or 500s
//! (25%) makes the route's window unhealthy as a whole, yet the shed level stays 0 and the
//! other browsers get no 503; the same Envoy still sheds, up to humans, once the origin is
//! slow for everyone. Before `min_clients` (one window for all, one client's evidence
//! counted in full) the level reached 7, humans shed, within 16 s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crawlguard_integration::{client, get, ip, Envoy, EnvoyOpts, TestUpstream, UA_CHROME};
use serde_json::json;

/// The attacker's address.
const ATTACKER: u8 = 9;
/// The other browsers' addresses.
const OTHERS: [u8; 4] = [20, 21, 22, 23];
const LEVEL: &str = "wasmcustom.crawlguard.shed.default.level";

/// Judged over 2 s with at least 5 responses; p95 above 150 ms or more than 15% 5xx is
/// unhealthy; one class per second, in the default order (humans last); the default
/// `min_clients` (3). Limits far out of reach.
async fn start() -> (Envoy, TestUpstream) {
    let up = TestUpstream::start().await;
    let cfg = json!({
        "shedding": {"enabled": true, "window_s": 2, "min_requests": 5, "latency_ms": 150,
                     "error_ratio": 0.15, "step_s": 1},
        "limits": [{"name": "all", "class": "*", "route": "*", "rate_per_s": 100000,
                    "burst": 1000000, "key": "client_ip"}],
    });
    let envoy = Envoy::start(EnvoyOpts::with_config(cfg).in_front_of(&up).concurrency(2)).await;
    (envoy, up)
}

/// Statuses by who got them.
#[derive(Debug, Default)]
struct Seen {
    attacker: Vec<u16>,
    others: Vec<u16>,
}

/// Rounds until `stop`, each four lanes at once: the attacker's request to `attack_path`,
/// and `others_per_round` requests to `/page` from one of the other browsers (lane `i`,
/// browser `i`), so the attacker's share of the traffic is 1 in `others_per_round + 1`.
fn rounds(
    envoy: &Envoy,
    attack_path: &str,
    others_per_round: usize,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) -> tokio::task::JoinHandle<()> {
    let (attack_url, page) = (envoy.url(attack_path), envoy.url("/page"));
    tokio::spawn(async move {
        let attacker = client(ip(ATTACKER));
        let others: Vec<reqwest::Client> = OTHERS.iter().map(|a| client(ip(*a))).collect();
        while !stop.load(Ordering::Relaxed) {
            let lane = |i: usize| {
                let (attacker, attack_url, page, other) =
                    (&attacker, &attack_url, &page, &others[i]);
                async move {
                    let attack = async { get(attacker, attack_url, UA_CHROME, &[]).await.status };
                    let normal = async {
                        let mut got = Vec::new();
                        for _ in 0..others_per_round {
                            got.push(get(other, page, UA_CHROME, &[]).await.status);
                        }
                        got
                    };
                    tokio::join!(attack, normal)
                }
            };
            let done = tokio::join!(lane(0), lane(1), lane(2), lane(3));
            let mut s = seen.lock().unwrap();
            for (a, o) in [done.0, done.1, done.2, done.3] {
                s.attacker.push(a);
                s.others.extend(o);
            }
        }
    })
}

/// Runs the attack until the window gauge `gauge` says the window as a whole is unhealthy
/// (above `threshold`), then for 3 s more (three judgements at `step_s` 1): the level must
/// stay 0 at every sample. Returns what each side got.
async fn attack(
    envoy: &Envoy,
    path: &str,
    others_per_round: usize,
    gauge: &str,
    threshold: u64,
) -> Seen {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let task = rounds(envoy, path, others_per_round, stop.clone(), seen.clone());
    let gauge = format!("wasmcustom.crawlguard.origin.default.{gauge}");
    let t0 = Instant::now();
    let mut unhealthy_since: Option<Instant> = None;
    while unhealthy_since.is_none_or(|t| t.elapsed() < Duration::from_secs(3)) {
        let stats = envoy.stats_now().await;
        let level = stats.get(LEVEL).copied().unwrap_or(0);
        assert_eq!(
            level,
            0,
            "{path}: the shed level rose after {:?}",
            t0.elapsed()
        );
        let whole = stats.get(&gauge).copied().unwrap_or(0);
        if unhealthy_since.is_none() && whole > threshold {
            eprintln!(
                "{path}: window unhealthy as a whole ({gauge} {whole}) after {:?}",
                t0.elapsed()
            );
            unhealthy_since = Some(Instant::now());
        }
        assert!(
            unhealthy_since.is_some() || t0.elapsed() < Duration::from_secs(15),
            "{path}: {gauge} never went above {threshold} (the attack did not take)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    task.await.expect("traffic");
    Arc::try_unwrap(seen)
        .expect("traffic done")
        .into_inner()
        .unwrap()
}

#[tokio::test]
async fn one_clients_slow_urls_or_500s_shed_nobody_and_real_trouble_still_sheds_humans() {
    let (envoy, up) = start().await;

    // Slow URLs, 1 request in 10: p95 400 ms as a whole.
    let slow = attack(&envoy, "/page?delay_ms=400", 9, "p95_ms", 150).await;
    assert!(
        slow.attacker.iter().all(|s| *s == 200),
        "{:?}",
        slow.attacker
    );
    assert!(!slow.others.is_empty());
    assert_eq!(
        slow.others.iter().filter(|s| **s != 200).count(),
        0,
        "others got {:?}",
        slow.others
    );
    let line = envoy
        .wait_for_log_line(Duration::from_secs(5), "about the one client", |l| {
            l.contains("shedding route=default: not shedding, the window is unhealthy only")
        })
        .await;
    assert!(
        line.contains("fewer than shedding.min_clients 3 client prefixes; heaviest: 127.0.0.9 ("),
        "{line}"
    );

    // 500s, 1 request in 4: 250 per mille as a whole.
    let failing = attack(&envoy, "/page?status=500", 3, "error_permille", 150).await;
    assert!(
        failing.attacker.iter().all(|s| *s == 500),
        "{:?}",
        failing.attacker
    );
    assert_eq!(
        failing.others.iter().filter(|s| **s != 200).count(),
        0,
        "others got {:?}",
        failing.others
    );
    envoy
        .assert_counters(&[("crawlguard.class.human.shed", 0)])
        .await;

    // The origin slow for everyone: the level climbs class by class up to humans.
    up.set_mood(400, 0).await;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let task = rounds(&envoy, "/page", 3, stop.clone(), seen.clone());
    let t0 = Instant::now();
    let reached = crawlguard_integration::poll_until(Duration::from_secs(30), || async {
        let level = envoy.stat_now(LEVEL).await.unwrap_or(0);
        let human_503 = seen.lock().unwrap().others.contains(&503);
        (level == 8 && human_503).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    task.await.expect("traffic");
    up.set_mood(0, 0).await;
    assert!(
        reached.is_some(),
        "the slow origin did not shed humans within 30 s (level {:?})",
        envoy.stat_now(LEVEL).await
    );
    eprintln!(
        "humans shed {:?} after the origin slowed for everyone",
        t0.elapsed()
    );
    assert!(envoy.counter("crawlguard.class.human.shed").await > 0);
    assert!(envoy
        .log()
        .contains("shedding route=default level 7 -> 8 (shed: [spoofed, unverified_bot, ai_trainer, suspect_browser, script, other_bot, ai_retriever, human])"));
    envoy.assert_log_clean();
}
