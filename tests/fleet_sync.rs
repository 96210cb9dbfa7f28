//! Fleet mode on the host: several fake Envoys (each with two workers sharing one shared
//! store) sync with a model of the sidecar's fleet store, on one fake clock. The model
//! follows the contract (`crawlguard_contract::fleet`): a GCRA tat per key that may go into
//! debt, replicas alive for three intervals. The real store (the sidecar's Lua script in
//! Redis) is tested against real Envoys in `integration/tests/fleet.rs`.

mod common;

use common::T0;
use crawlguard_contract::fleet::{
    overshoot_bound, validate, FleetKeyState, SyncRequest, SyncResponse, PATH,
};
use crawlguard_core::request::Step;
use crawlguard_testkit::FakeProxy;
use crawlguard_testkit::MemStore;
use std::collections::HashMap;
use std::rc::Rc;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                      Gecko) Chrome/124.0.0.0 Safari/537.36";

/// A per-IP limit of 5/s with a burst of `burst` for humans; fleet mode as `fleet`.
fn config(burst: u32, fleet: &str) -> String {
    format!(
        r#"{{"verifier":{{"enabled":false}},"store":{{"hash_seed":4242}},
            "limits":[{{"name":"human","class":"human","route":"*","rate_per_s":5,"burst":{burst},"key":"client_ip"}}],
            "fleet":{fleet}}}"#
    )
}

/// The fleet store as the contract describes it.
#[derive(Default)]
struct ModelFleet {
    tat: HashMap<String, u128>,
    seen: HashMap<String, u64>,
    requests: Vec<SyncRequest>,
}

impl ModelFleet {
    fn apply(&mut self, req: &SyncRequest, now: u64) -> SyncResponse {
        assert_eq!(validate(req), Ok(()));
        self.requests.push(req.clone());
        self.seen.insert(req.replica.clone(), now);
        let alive = u64::from(req.interval_ms) * 3 * MS;
        let replicas = self
            .seen
            .values()
            .filter(|t| now.saturating_sub(**t) <= alive)
            .count() as u32;
        let keys = req
            .keys
            .iter()
            .map(|k| {
                let e = (1e9 / k.rate_per_s).round() as u128;
                let cap = e * u128::from(k.burst);
                let now = u128::from(now);
                let tat = self.tat.entry(k.key.clone()).or_insert(0);
                *tat = (*tat).max(now) + e * u128::from(k.used);
                let used = *tat - now;
                FleetKeyState {
                    available: (cap.saturating_sub(used) / e) as u32,
                    full_in_ns: used as u64,
                }
            })
            .collect();
        SyncResponse { keys, replicas }
    }
}

/// `replicas` fake Envoys of `workers` workers each, on one clock, and the fleet store.
struct Fleet {
    envoys: Vec<Vec<FakeProxy>>,
    store: ModelFleet,
    now: u64,
    /// The fleet store answers (false: every sync gets no response).
    up: bool,
}

impl Fleet {
    fn new(json: &str, replicas: usize, workers: usize) -> Fleet {
        let cfg = crawlguard_core::config::parse(json.as_bytes()).expect("config");
        let envoys = (0..replicas)
            .map(|e| {
                let shm = Rc::new(MemStore::default());
                (0..workers)
                    .map(|_| {
                        let mut p = FakeProxy::with_config(cfg.clone(), T0, shm.clone());
                        p.host.random = e as u32 + 1;
                        p
                    })
                    .collect()
            })
            .collect();
        Fleet {
            envoys,
            store: ModelFleet::default(),
            now: T0,
            up: true,
        }
    }

    fn set_clock(&mut self, now: u64) {
        self.now = now;
        for w in self.envoys.iter_mut().flatten() {
            w.host.now_ns = Some(now);
        }
    }

    /// Ticks worker `w` of Envoy `e` and answers the sync it sent (if any) at once.
    fn tick(&mut self, e: usize, w: usize) {
        let now = self.now;
        let Some(p) = self.envoys.get_mut(e).and_then(|e| e.get_mut(w)) else {
            return;
        };
        let before = p.host.callouts.len();
        p.tick();
        let sent: Vec<_> = p.host.callouts.get(before..).unwrap_or_default().to_vec();
        for c in sent {
            assert_eq!((c.method.as_str(), c.path.as_str()), ("POST", PATH));
            if !self.up {
                p.answer(c.token, None, "");
                continue;
            }
            let req: SyncRequest = serde_json::from_slice(&c.body).expect("a SyncRequest");
            let a = self.store.apply(&req, now);
            p.answer(
                c.token,
                Some("200"),
                &serde_json::to_string(&a).expect("json"),
            );
        }
    }

    /// One request from `ip` to worker `w` of Envoy `e`: true if forwarded.
    fn get(&mut self, e: usize, w: usize, ip: &str) -> bool {
        let p = &mut self.envoys[e][w];
        let (_, step) = p.get("/page", CHROME, &format!("{ip}:4000"));
        step == Step::Continue
    }

    /// Runs `secs` seconds: every worker ticks every `interval_ms` (each at its own phase),
    /// and a client at `ip` sends `per_s` requests a second spread round-robin over every
    /// Envoy (and over each Envoy's workers). Returns the requests forwarded.
    fn run(&mut self, secs: u64, per_s: u64, interval_ms: u64, ip: &str) -> u64 {
        self.run_timed(secs, per_s, interval_ms, ip).len() as u64
    }

    /// [`Fleet::run`], returning when each forwarded request was sent, ms from the start.
    fn run_timed(&mut self, secs: u64, per_s: u64, interval_ms: u64, ip: &str) -> Vec<u64> {
        let start = self.now;
        let workers: Vec<(usize, usize)> = (0..self.envoys.len())
            .flat_map(|e| (0..self.envoys[e].len()).map(move |w| (e, w)))
            .collect();
        let gap_ms = 1000 / per_s;
        let mut admitted = Vec::new();
        let mut sent = 0usize;
        for ms in 0..secs * 1000 {
            self.set_clock(start + ms * MS);
            for (i, &(e, w)) in workers.iter().enumerate() {
                // Each worker's timer has its own phase.
                if ms % interval_ms == (i as u64 * 37) % interval_ms {
                    self.tick(e, w);
                }
            }
            if ms % gap_ms == 0 {
                let n = self.envoys.len();
                let e = sent % n;
                let w = (sent / n) % self.envoys[e].len();
                sent += 1;
                if self.get(e, w, ip) {
                    admitted.push(ms);
                }
            }
        }
        self.set_clock(start + secs * S);
        admitted
    }

    fn counter(&self, name: &str) -> u64 {
        self.envoys.iter().flatten().map(|p| p.counter(name)).sum()
    }

    fn gauge(&self, e: usize, w: usize, name: &str) -> Option<u64> {
        self.envoys[e][w].host.gauge(name)
    }
}

const FLEET_ON: &str = r#"{"enabled":true,"sync_interval_ms":500}"#;

#[test]
fn three_envoys_admit_one_limit_not_three() {
    // 5/s, burst 10, 20 s at 40 requests/s spread over 3 Envoys x 2 workers.
    let theory = 10 + 5 * 20;
    let bound = theory + overshoot_bound(3, 5.0, 10, 500).floor() as u64;
    let mut fleet = Fleet::new(&config(10, FLEET_ON), 3, 2);
    let with = fleet.run(20, 40, 500, "192.0.2.1");
    let mut alone = Fleet::new(&config(10, r#"{"enabled":false}"#), 3, 2);
    let without = alone.run(20, 40, 500, "192.0.2.1");
    println!("admitted in 20 s: fleet {with}, per Envoy {without}, theory {theory}, bound {bound}");
    assert!(with <= bound, "fleet admitted {with} > bound {bound}");
    // Not stricter than the limit either (a sync per interval, no time lost).
    assert!(with >= 100, "fleet admitted only {with}");
    // Every Envoy alone: its burst and its refill, three times over (less the requests that
    // arrive just before a token does).
    assert!(
        (3 * theory - 6..=3 * theory).contains(&without),
        "{without}"
    );
    assert_eq!(fleet.counter("crawlguard.fleet.sync_error"), 0);
    // Each worker synced once per interval: 40 syncs in 20 s (plus the first at start).
    assert_eq!(fleet.counter("crawlguard.fleet.syncs"), 6 * 40);
    assert_eq!(fleet.gauge(2, 1, "crawlguard.fleet.replicas"), Some(3));
    assert_eq!(fleet.gauge(2, 1, "crawlguard.fleet.degraded"), Some(0));
}

/// The most admissions in any window of `t_ms` less the limit's own `burst + rate x t`:
/// the overshoot over every window of the run.
fn worst_overshoot(admitted: &[u64], rate_per_s: f64, burst: u32) -> f64 {
    let mut worst = f64::MIN;
    for (i, start) in admitted.iter().enumerate() {
        for (j, end) in admitted.iter().enumerate().skip(i) {
            let t_s = (end - start) as f64 / 1000.0;
            let over = (j - i + 1) as f64 - (f64::from(burst) + rate_per_s * t_s);
            worst = worst.max(over);
        }
    }
    worst
}

#[test]
fn the_overshoot_stays_within_the_stated_bound_over_every_window() {
    // Fixed cases, then fleets drawn from a fixed-seed generator: (replicas, workers,
    // rate_per_s, burst, interval_ms, client requests per second).
    let mut cases = vec![
        (3, 2, 5.0, 10, 500, 40),
        (5, 1, 2.0, 20, 1000, 50),
        (2, 4, 50.0, 100, 250, 500),
        (3, 1, 10.0, 93, 100, 250),
        (6, 2, 3.0, 60, 250, 90),
    ];
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..25 {
        cases.push((
            2 + next(7) as usize,
            1 + next(3) as usize,
            [0.5, 1.0, 2.0, 5.0, 10.0, 30.0][next(6) as usize],
            1 + next(100) as u32,
            [100, 250, 500, 1000][next(4) as usize],
            [2, 5, 10, 20, 50, 100, 250][next(7) as usize],
        ));
    }
    let mut worst_share: f64 = 0.0;
    for (replicas, workers, rate, burst, interval_ms, per_s) in cases {
        let json = format!(
            r#"{{"verifier":{{"enabled":false}},"store":{{"hash_seed":4242}},
                "limits":[{{"name":"human","class":"human","route":"*","rate_per_s":{rate},"burst":{burst},"key":"client_ip"}}],
                "fleet":{{"enabled":true,"sync_interval_ms":{interval_ms},"timeout_ms":50}}}}"#
        );
        let mut fleet = Fleet::new(&json, replicas, workers);
        fleet.run(3, 1, interval_ms, "198.51.100.1");
        let admitted = fleet.run_timed(15, per_s, interval_ms, "192.0.2.1");
        let bound = overshoot_bound(replicas as u32, rate, burst, interval_ms as u32);
        let worst = worst_overshoot(&admitted, rate, burst);
        worst_share = worst_share.max(worst / bound);
        let case = format!(
            "{replicas} Envoys x {workers} workers, {rate}/s burst {burst}, sync {interval_ms} \
             ms, client {per_s}/s: {} admitted in 15 s (limit {}), worst window overshoot \
             {worst:.1} (bound {bound:.1})",
            admitted.len(),
            (f64::from(burst) + rate * 15.0).floor()
        );
        println!("{case}");
        assert!(worst <= bound, "{case}");
        // Not stricter than the limit either, when the client asks for more.
        if per_s as f64 > rate * 1.2 {
            assert!(admitted.len() as f64 >= rate * 15.0 * 0.95, "{case}");
        }
    }
    println!("worst overshoot / bound: {worst_share:.2}");
}

#[test]
fn a_fresh_key_hitting_every_replica_at_once_gets_one_burst() {
    let mut fleet = Fleet::new(&config(12, FLEET_ON), 3, 2);
    // Warm up: every worker syncs once and learns there are 3 replicas.
    fleet.run(1, 1, 500, "198.51.100.1");
    let mut admitted = 0;
    for _ in 0..20 {
        for e in 0..3 {
            admitted += u64::from(fleet.get(e, 0, "203.0.113.9"));
        }
    }
    // 12 / 3 replicas = 4 each, not 12 each.
    assert_eq!(admitted, 12);
}

#[test]
fn a_failing_sidecar_degrades_to_the_split_share_and_recovers() {
    let mut fleet = Fleet::new(&config(12, FLEET_ON), 3, 1);
    fleet.run(1, 1, 500, "198.51.100.1");
    fleet.up = false;
    // 10 s at 30/s over 3 Envoys, every sync failing: each Envoy keeps a third of the
    // limit: 4 tokens, then 5/3 per second.
    let admitted = fleet.run(10, 30, 500, "192.0.2.7");
    println!("degraded (split) admitted {admitted} in 10 s");
    assert!(
        (12 + 50 - 3..=12 + 50 + 3).contains(&admitted),
        "{admitted}"
    );
    assert_eq!(fleet.counter("crawlguard.fleet.sync_error"), 3 * 20);
    assert_eq!(fleet.gauge(0, 0, "crawlguard.fleet.degraded"), Some(1));
    let degraded_ms = fleet.counter("crawlguard.fleet.degraded_ms");
    assert!(
        (3 * 9_500..=3 * 10_000).contains(&degraded_ms),
        "{degraded_ms}"
    );
    // Back: the first tick syncs and the view is fleet-wide again. What went out in the
    // failed syncs is not sent again (at most once: a sync that left may have reached
    // Redis), so only the use since each worker's last failed sync goes out.
    fleet.up = true;
    let syncs = fleet.counter("crawlguard.fleet.syncs");
    fleet.run(1, 1, 500, "198.51.100.1");
    assert_eq!(fleet.counter("crawlguard.fleet.syncs"), syncs + 3 * 2);
    assert_eq!(fleet.gauge(0, 0, "crawlguard.fleet.degraded"), Some(0));
    let resent: u32 = fleet
        .store
        .requests
        .iter()
        .rev()
        .take(6)
        .flat_map(|r| r.keys.iter())
        .map(|k| k.used)
        .sum();
    // At 5/3 tokens a second per Envoy, at most one token since its last failed sync; and
    // the probe client's one request. (Sent again, it would be 3 x 12 + 1 or more.)
    println!(
        "sent after recovery: {resent} tokens; keys given up: {}",
        fleet.counter("crawlguard.fleet.keys_dropped")
    );
    assert!((1..=3 + 1).contains(&resent), "{resent}");
    // Every failed sync that carried the client's key gave it up, counted.
    let given_up = fleet.counter("crawlguard.fleet.keys_dropped");
    assert!((3 * 10..=3 * 20).contains(&given_up), "{given_up}");
}

#[test]
fn degraded_full_share_decides_with_the_whole_limit() {
    let full = r#"{"enabled":true,"sync_interval_ms":500,"degraded_share":"full"}"#;
    let mut fleet = Fleet::new(&config(12, full), 3, 1);
    fleet.run(1, 1, 500, "198.51.100.1");
    fleet.up = false;
    let admitted = fleet.run(10, 30, 500, "192.0.2.7");
    // The first failed sync comes within one interval; until then the share holds.
    println!("degraded (full) admitted {admitted} in 10 s");
    assert!(admitted >= 3 * (12 + 50) - 30, "{admitted}");
    assert!(admitted <= 3 * (12 + 50), "{admitted}");
}

#[test]
fn the_sync_request_is_the_contract_and_bad_answers_are_errors() {
    let mut p = FakeProxy::new(&config(10, FLEET_ON), T0);
    for _ in 0..3 {
        p.get("/page", CHROME, "192.0.2.1:1");
    }
    p.get("/page", CHROME, "192.0.2.2:1");
    p.tick();
    let c = p.host.callouts.last().cloned().expect("a sync");
    assert_eq!(
        (
            c.method.as_str(),
            c.cluster.as_str(),
            c.path.as_str(),
            c.timeout_ms
        ),
        ("POST", "crawlguard_verifier", "/v1/fleet/sync", 200)
    );
    let req: SyncRequest = serde_json::from_slice(&c.body).expect("SyncRequest");
    assert_eq!(validate(&req), Ok(()));
    assert_eq!(req.interval_ms, 500);
    assert!(req.replica.starts_with("envoy-"), "{}", req.replica);
    let used: Vec<u32> = req.keys.iter().map(|k| k.used).collect();
    assert_eq!(used, [3, 1]);
    assert!(req
        .keys
        .iter()
        .all(|k| k.rate_per_s == 5.0 && k.burst == 10));
    // Every bad answer is a sync error, never a panic. The first failed sync carried both
    // keys: they are given up (counted), not sent again, since a sync that left may have
    // reached Redis; the later ones carried nothing.
    let bad = [
        (Some("200"), r#"{"keys":[],"replicas":1}"#.to_string()),
        (Some("503"), String::new()),
        (None, String::new()),
        (Some("200"), "x".repeat(10_000)),
        (Some("200"), r#"{"keys":[{"available":0,"full_in_ns":1},{"available":0,"full_in_ns":-1}],"replicas":1}"#.into()),
    ];
    for (i, (status, body)) in bad.iter().enumerate() {
        p.advance(500 * MS);
        if i > 0 {
            p.tick();
        }
        let token = p.host.callouts.last().map(|c| c.token).expect("a sync");
        p.answer(token, *status, body);
        assert_eq!(p.counter("crawlguard.fleet.sync_error"), i as u64 + 1);
    }
    p.advance(500 * MS);
    p.tick();
    assert_eq!(p.counter("crawlguard.fleet.keys_dropped"), 2);
    let c = p.host.callouts.last().cloned().expect("a sync");
    let req: SyncRequest = serde_json::from_slice(&c.body).expect("SyncRequest");
    assert_eq!(req.keys.len(), 0, "{req:?}");
    p.answer(c.token, Some("200"), r#"{"keys":[],"replicas":1}"#);
    p.get("/page", CHROME, "192.0.2.1:1");
    p.get("/page", CHROME, "192.0.2.2:1");
    p.advance(500 * MS);
    p.tick();
    let c = p.host.callouts.last().cloned().expect("a sync");
    let req: SyncRequest = serde_json::from_slice(&c.body).expect("SyncRequest");
    let used: Vec<u32> = req.keys.iter().map(|k| k.used).collect();
    assert_eq!(used, [1, 1]);
    // A hostile answer (a debt of u64::MAX ns) blocks the key for at most 16 refills.
    let a = r#"{"keys":[{"available":0,"full_in_ns":18446744073709551615},{"available":10,"full_in_ns":0}],"replicas":1}"#;
    p.answer(c.token, Some("200"), a);
    assert_eq!(p.counter("crawlguard.fleet.syncs"), 2);
    let (ctx, step) = p.get("/page", CHROME, "192.0.2.1:1");
    assert_eq!(step, Step::Pause);
    let retry: u64 = p
        .req(ctx)
        .reply
        .as_ref()
        .and_then(|r| r.header("retry-after"))
        .and_then(|v| v.parse().ok())
        .expect("retry-after");
    // 16 refills of 2 s = 32 s, clamped to the human class's max of 60 s, plus jitter.
    assert!((31..=34).contains(&retry), "{retry}");
    let (_, step) = p.get("/page", CHROME, "192.0.2.2:1");
    assert_eq!(step, Step::Continue);
}

#[test]
fn a_full_ledger_counts_the_keys_it_drops() {
    let fleet = r#"{"enabled":true,"sync_interval_ms":500,"max_keys_per_sync":2}"#;
    let mut p = FakeProxy::new(&config(10, fleet), T0);
    // The ledger holds 4 batches of 2 keys: 8; 12 clients, 4 dropped.
    for i in 0..12 {
        p.get("/page", CHROME, &format!("192.0.2.{i}:1"));
    }
    p.tick();
    assert_eq!(p.counter("crawlguard.fleet.keys_dropped"), 4);
    let c = p.host.callouts.last().cloned().expect("a sync");
    let req: SyncRequest = serde_json::from_slice(&c.body).expect("SyncRequest");
    assert_eq!(req.keys.len(), 2);
    let a = r#"{"keys":[{"available":9,"full_in_ns":200000000},{"available":9,"full_in_ns":200000000}],"replicas":1}"#;
    p.answer(c.token, Some("200"), a);
    assert_eq!(p.counter("crawlguard.fleet.keys_synced"), 2);
}

#[test]
fn a_replica_count_past_max_replicas_is_taken_as_max_replicas() {
    // Burst 128 split over at most 4 replicas: 32 tokens each, whatever the answer says.
    let fleet = r#"{"enabled":true,"sync_interval_ms":500,"max_replicas":4}"#;
    let mut p = FakeProxy::new(&config(128, fleet), T0);
    p.tick();
    let c = p.host.callouts.last().cloned().expect("a sync");
    // A broken sidecar, or made-up replica ids posted to it: 4,294,967,295 live replicas.
    p.answer(c.token, Some("200"), r#"{"keys":[],"replicas":4294967295}"#);
    assert_eq!(p.host.gauge("crawlguard.fleet.replicas"), Some(4));
    let forwarded = (0..40)
        .filter(|_| p.get("/page", CHROME, "192.0.2.9:1").1 == Step::Continue)
        .count();
    // Taken at face value, the share would be 1 token (burst / replicas, at least 1).
    assert_eq!(forwarded, 32);
}
