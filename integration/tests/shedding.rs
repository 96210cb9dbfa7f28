//! Load shedding by class through a real Envoy: the test upstream is made slow or failing
//! while a steady mixed traffic runs (`TestUpstream::set_mood`), and the shed level moves
//! class by class, then back. The timeline is read from the filter's own gauge
//! (`crawlguard.shed.default.level`) and from what each class got.
//!
//! Traffic: a browser (`human`), curl (`script`), a verified Googlebot (`search_crawler`)
//! and a verified GPTBot (`ai_trainer`) from their own addresses (the fake verifier answers
//! `verified` for 127.0.0.7 / 127.0.0.8). Shed order `ai_trainer`, `script`: humans and
//! verified search crawlers are never shed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crawlguard_integration::{
    client, get, ip, Envoy, EnvoyOpts, RawHttp1, TestUpstream, UA_CHROME, UA_CURL, UA_GOOGLEBOT,
};
use serde_json::{json, Value};

const UA_GPTBOT: &str = "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; \
                         GPTBot/1.2; +https://openai.com/gptbot)";

/// Judged over 2 s with at least 5 responses; p95 above 150 ms or more than 30% 5xx is
/// unhealthy; one class per second. Limits far out of reach.
fn config(mode: &str) -> Value {
    json!({
        "mode": mode,
        "shedding": {"enabled": true, "window_s": 2, "min_requests": 5, "latency_ms": 150,
                     "error_ratio": 0.3, "step_s": 1, "order": ["ai_trainer", "script"],
                     "retry_after": {"min_s": 15, "max_s": 60, "jitter_s": 5}},
        "limits": [{"name": "all", "class": "*", "route": "*", "rate_per_s": 100000,
                    "burst": 1000000, "key": "client_ip"}],
        "verifier": {"timeout_ms": 5000},
    })
}

async fn start(mode: &str, concurrency: u32) -> (Envoy, TestUpstream) {
    let up = TestUpstream::start().await;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(config(mode))
            .in_front_of(&up)
            .concurrency(concurrency)
            .fake_verifier(vec![
                ("127.0.0.7", "googlebot", "verified"),
                ("127.0.0.8", "gptbot", "verified"),
            ]),
    )
    .await;
    (envoy, up)
}

/// The four kinds of client.
const KINDS: [(&str, &str, u8); 4] = [
    ("human", UA_CHROME, 10),
    ("script", UA_CURL, 11),
    ("search_crawler", UA_GOOGLEBOT, 7),
    ("ai_trainer", UA_GPTBOT, 8),
];

/// The last status each kind got, updated by the traffic.
type Last = Arc<Mutex<[u16; 4]>>;

/// Steady traffic: every kind, one request after the other, 4 parallel lanes, until `stop`.
fn traffic(url: String, stop: Arc<AtomicBool>, last: Last) -> Vec<tokio::task::JoinHandle<usize>> {
    (0..4)
        .map(|lane| {
            let (url, stop, last) = (url.clone(), stop.clone(), last.clone());
            tokio::spawn(async move {
                let clients: Vec<reqwest::Client> =
                    KINDS.iter().map(|(_, _, a)| client(ip(*a))).collect();
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) {
                    let k = (sent + lane) % KINDS.len();
                    let r = get(&clients[k], &url, KINDS[k].1, &[]).await;
                    last.lock().unwrap()[k] = r.status;
                    sent += 1;
                }
                sent
            })
        })
        .collect()
}

/// Polls until `cond` holds for the shed level gauge and the last statuses; returns the time
/// it took. Panics after `within`.
async fn until(
    envoy: &Envoy,
    last: &Last,
    within: Duration,
    what: &str,
    cond: impl Fn(u64, [u16; 4]) -> bool,
) -> Duration {
    let t0 = Instant::now();
    loop {
        // A gauge (never buffered), polled and timed: read it as Envoy has it now.
        let level = envoy
            .stat_now("wasmcustom.crawlguard.shed.default.level")
            .await
            .unwrap_or(0);
        let statuses = *last.lock().unwrap();
        if cond(level, statuses) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "{what}: not within {within:?} (level {level}, last statuses {statuses:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_slow_origin_sheds_ai_trainers_then_scripts_and_recovers_level_by_level() {
    let (envoy, up) = start("enforce", 1).await;
    let stop = Arc::new(AtomicBool::new(false));
    let last: Last = Arc::default();
    let lanes = traffic(envoy.url("/page"), stop.clone(), last.clone());
    // Healthy: nothing shed.
    until(
        &envoy,
        &last,
        Duration::from_secs(10),
        "healthy traffic",
        |l, s| l == 0 && s == [200; 4],
    )
    .await;

    // The origin slows to 400 ms: ai_trainer goes within window_s + step_s (+ a tick).
    up.set_mood(400, 0).await;
    let took = until(
        &envoy,
        &last,
        Duration::from_secs(6),
        "ai_trainer shed",
        |l, s| l >= 1 && s[3] == 503,
    )
    .await;
    eprintln!("ai_trainer shed {took:?} after the origin slowed down");
    // Kept slow: scripts go next; humans and the verified crawler are still served.
    until(
        &envoy,
        &last,
        Duration::from_secs(6),
        "script shed",
        |l, s| l == 2 && s[1] == 503 && s[3] == 503,
    )
    .await;
    let s = *last.lock().unwrap();
    assert_eq!((s[0], s[2]), (200, 200), "human, search_crawler: {s:?}");
    // What a shed request gets.
    let shed = get(&client(ip(8)), &envoy.url("/page"), UA_GPTBOT, &[]).await;
    assert_eq!(shed.status, 503);
    assert_eq!(
        shed.body,
        "503 Service Unavailable: try again after Retry-After\n"
    );
    assert_eq!(shed.header("cache-control"), Some("no-store"));
    let ra = shed.retry_after_s().expect("Retry-After");
    assert!((15..=20).contains(&ra), "{ra}");

    // Restored: one class back per step, scripts first.
    up.set_mood(0, 0).await;
    until(
        &envoy,
        &last,
        Duration::from_secs(8),
        "scripts served again",
        |l, s| l == 1 && s[1] == 200 && s[3] == 503,
    )
    .await;
    until(
        &envoy,
        &last,
        Duration::from_secs(6),
        "ai_trainer served again",
        |l, s| l == 0 && s == [200; 4],
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for l in lanes {
        l.await.expect("traffic lane");
    }
    let stats = envoy.crawlguard_stats().await;
    let stat = |n: &str| stats.get(n).copied().unwrap_or(0);
    assert!(stat("crawlguard.class.ai_trainer.shed") > 0);
    assert!(stat("crawlguard.class.script.shed") > 0);
    assert_eq!(stat("crawlguard.class.human.shed"), 0);
    assert_eq!(stat("crawlguard.class.search_crawler.shed"), 0);
    // Shed requests never reached the origin, and took no tokens (nothing was limited).
    assert_eq!(stat("crawlguard.class.ai_trainer.limited"), 0);
    envoy.assert_log_clean();
    assert!(envoy
        .log()
        .contains("shedding route=default level 0 -> 1 (shed: [ai_trainer])"));
    assert!(envoy.log().contains("shedding route=default level 2 -> 1"));
}

/// The debug line each worker's VM logs when it starts applying a shed level (README,
/// "Shedding": every worker sheds within one root tick of the level changing).
const APPLIES: &str = "shedding route=default: this worker applies level ";

/// Envoy's default log line `[time][thread][level][logger] ...`: the thread id and the time.
fn thread_and_time(line: &str) -> Option<(&str, &str)> {
    let mut fields = line.split(']').map(|f| f.trim_start_matches('['));
    let time = fields.next()?;
    let thread = fields.next()?;
    Some((thread, time))
}

#[tokio::test]
async fn an_origin_answering_5xx_sheds_too_and_both_workers_see_one_level() {
    let (envoy, up) = start("enforce", 2).await;
    let stop = Arc::new(AtomicBool::new(false));
    let last: Last = Arc::default();
    let lanes = traffic(envoy.url("/page"), stop.clone(), last.clone());
    // Every second answer a 500: 50% > 30%.
    up.set_mood(0, 2).await;
    until(
        &envoy,
        &last,
        Duration::from_secs(8),
        "ai_trainer shed",
        |l, s| l >= 1 && s[3] == 503,
    )
    .await;
    // The first worker's 503 says nothing of the other's: wait until every VM (two workers
    // and the main thread's) has logged that it applies a level that sheds ai_trainer. The
    // origin keeps failing meanwhile, so the level cannot fall back however slowly this
    // machine runs (it can only rise, and a higher level still sheds ai_trainer).
    let vms = 3;
    let applied = crawlguard_integration::poll_until(Duration::from_secs(10), || async {
        let log = envoy.log();
        let mut threads: Vec<(String, String)> = Vec::new();
        for line in log.lines().filter(|l| l.contains(APPLIES)) {
            let level_ok = line.rsplit(APPLIES).next().is_some_and(|l| l.trim() != "0");
            if let (true, Some((thread, time))) = (level_ok, thread_and_time(line)) {
                if !threads.iter().any(|(t, _)| t == thread) {
                    threads.push((thread.to_string(), time.to_string()));
                }
            }
        }
        (threads.len() >= vms).then_some(threads)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every VM applied the level within 10 s:\n{}",
            envoy.log()
        )
    });
    eprintln!("each VM's first shedding line (thread, time): {applied:?}");
    // Ten GPTBot requests on ten connections (spread over both workers): all shed.
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let url = envoy.url("/page");
        tasks.push(tokio::spawn(async move {
            get(&client(ip(8)), &url, UA_GPTBOT, &[]).await.status
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.expect("request"));
    }
    assert_eq!(got, vec![503; 10]);
    up.set_mood(0, 0).await;
    stop.store(true, Ordering::Relaxed);
    for l in lanes {
        l.await.expect("traffic lane");
    }
    envoy.assert_log_clean();
}

#[tokio::test]
async fn shadow_mode_counts_would_be_sheds_and_sheds_nothing() {
    let (envoy, up) = start("shadow", 1).await;
    let stop = Arc::new(AtomicBool::new(false));
    let last: Last = Arc::default();
    let lanes = traffic(envoy.url("/page"), stop.clone(), last.clone());
    up.set_mood(400, 0).await;
    until(&envoy, &last, Duration::from_secs(8), "level 2", |l, _| {
        l == 2
    })
    .await;
    let would = envoy
        .counter("crawlguard.class.ai_trainer.shadow_shed")
        .await;
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for l in lanes {
        sent += l.await.expect("traffic lane");
    }
    assert!(would > 0, "no would-be sheds counted");
    assert_eq!(envoy.counter("crawlguard.class.ai_trainer.shed").await, 0);
    assert_eq!(envoy.counter("crawlguard.class.script.shed").await, 0);
    // Every request reached the origin.
    assert_eq!(up.requests().await.len(), sent);
    envoy.assert_log_clean();
}

/// One client sends 16-byte POST bodies one byte per 100 ms to an origin that reads the
/// body and then answers at once. The origin is fast: its latency counts from the end of
/// the request body, so nothing is shed. (Counted from the request headers, the trickle's
/// 1.6 s made the origin look slow and shed everyone.)
#[tokio::test]
async fn a_client_trickling_its_body_does_not_make_a_fast_origin_look_slow() {
    let (envoy, _up) = start("enforce", 2).await;
    let to = envoy.main_addr();
    let post = format!(
        "POST /form?read_body=1 HTTP/1.1\r\nhost: shed.test\r\nuser-agent: {UA_CHROME}\r\n\
         content-length: 16\r\n\r\n"
    );
    // Three waves of eight trickled POSTs: 24 responses, each after 1.6 s of body.
    let clients = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let mut wave = Vec::new();
            for c in 0..8u8 {
                let post = post.clone();
                wave.push(tokio::spawn(async move {
                    let mut conn = RawHttp1::connect(ip(20 + c), to).await;
                    conn.send(post.as_bytes()).await;
                    for _ in 0..16 {
                        // The trickle is the behaviour under test, not a synchronisation.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        conn.send(b"x").await;
                    }
                    conn.read_response().await.status
                }));
            }
            for w in wave {
                statuses.push(w.await.expect("client"));
            }
        }
        statuses
    });
    // The level, sampled while the clients run and for one more judgement (window_s 2,
    // step_s 1) after the last response.
    let level = || async {
        envoy
            .stat_now("wasmcustom.crawlguard.shed.default.level")
            .await
            .unwrap_or(0)
    };
    let mut max_level = 0;
    while !clients.is_finished() {
        max_level = max_level.max(level().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = Instant::now();
    while after.elapsed() < Duration::from_secs(3) {
        max_level = max_level.max(level().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(clients.await.expect("clients"), vec![200; 24]);
    assert_eq!(max_level, 0, "the shed level rose");
    envoy
        .assert_counters(&[("crawlguard.class.human.shed", 0)])
        .await;
}
