//! `crawlguard replay` agrees with the real Envoy: the repository's real access log
//! (`../shared/data/elastic-apache-logs/apache_logs`, as in `replay.rs`: same lines, same
//! embedded default configuration, same Envoy with two workers and no reachable verifier,
//! each original client as its own `127.w.y.z` address (its /24 one of loopback's, its last byte kept), 16 requests in flight) is sent to
//! Envoy paced by its timestamps compressed `SPEED` times, and replayed offline by the
//! cli's replay with `--speed SPEED`. Per class, the rejections agree within 1% of the
//! class's requests. Envoy's own access log of the run (crawlguard's format from
//! `envoy/envoy.yaml`) is then read by `crawlguard report`, which must find every request
//! with the class and the origin of every rejection.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crawlguard_cli::input;
use crawlguard_cli::logfmt::{self, Format};
use crawlguard_cli::replay::Replay;
use crawlguard_cli::report::Report;
use crawlguard_integration::{client, repo_root, Envoy, EnvoyOpts};
use tokio::sync::Semaphore;

/// Log seconds per real second: one hour of the log per second (the log's 83 hours take
/// 83 s; each hour's traffic, which this log packs into one minute, arrives in ~17 ms).
const SPEED: f64 = 3600.0;
/// In-flight requests, as in replay.rs.
const PARALLEL: usize = 16;

struct Line {
    ts_ms: i64,
    ip: String,
    path: String,
    ua: Option<String>,
}

/// The loopback /24 of the `n`th distinct /24 of the log: `127.w.y.0/24`.
fn mapped_net(n: usize) -> (u8, u8) {
    let y = 1 + (n % 254) as u8;
    let w = 1 + (n / 254) as u8;
    (w, y)
}

/// A client's loopback address: its /24 mapped to one of loopback's (`mapped_net`, in
/// first-seen order), its last byte kept, so clients that share a /24 in the log share one
/// in Envoy too (the default limits' aggregate keys group by /24).
fn mapped_ip(ip: &str, nets: &mut HashMap<[u8; 3], (u8, u8)>) -> Ipv4Addr {
    let octets = ip.parse::<Ipv4Addr>().map_or([0; 4], |a| a.octets());
    let [a, b, c, d] = octets;
    let n = nets.len();
    let (w, y) = *nets.entry([a, b, c]).or_insert_with(|| mapped_net(n));
    Ipv4Addr::new(127, w, y, d)
}

fn log_path() -> PathBuf {
    match std::env::var_os("CRAWLGUARD_APACHE_LOG") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join("../shared/data/elastic-apache-logs/apache_logs"),
    }
}

#[tokio::test]
async fn replay_agrees_with_envoy_per_class_within_one_percent() {
    let path = log_path();
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut lines = Vec::new();
    for l in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if let Some(r) = logfmt::parse_combined(l) {
            let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            lines.push(Line {
                ts_ms: r.ts_ms,
                ip: s(r.client.unwrap_or_default()),
                path: s(r.path),
                ua: r.ua.map(s),
            });
        }
    }
    assert_eq!(lines.len(), 9_999);

    // crawlguard replay, offline, with the same compression.
    let cfg = crawlguard_core::config::parse(b"").expect("embedded default");
    let mut rp = Replay::new(cfg, SPEED, None);
    let inputs = input::each_input(&[path.display().to_string()], None, &mut |r| rp.add(r));
    assert_eq!(inputs[0].parsed, 9_999);
    let replayed = serde_json::to_value(rp.json(5)).expect("json");

    // The real Envoy, paced by the log's timestamps.
    let mut ip_map: HashMap<String, Ipv4Addr> = HashMap::new();
    let mut nets = HashMap::new();
    for l in &lines {
        if !ip_map.contains_key(&l.ip) {
            let mapped = mapped_ip(&l.ip, &mut nets);
            ip_map.insert(l.ip.clone(), mapped);
        }
    }
    let clients: HashMap<Ipv4Addr, reqwest::Client> =
        ip_map.values().map(|&ip| (ip, client(ip))).collect();
    let envoy = Envoy::start(EnvoyOpts {
        concurrency: 2,
        ..EnvoyOpts::default()
    })
    .await;
    let base = envoy.base_url();
    let sem = Arc::new(Semaphore::new(PARALLEL));
    let t0 = tokio::time::Instant::now();
    let ts0 = lines[0].ts_ms;
    let mut late_ms = 0f64;
    let mut tasks = Vec::with_capacity(lines.len());
    for l in &lines {
        let off = Duration::from_secs_f64(((l.ts_ms - ts0).max(0) as f64 / 1000.0) / SPEED);
        tokio::time::sleep_until(t0 + off).await;
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        late_ms = late_ms.max((t0.elapsed().as_secs_f64() - off.as_secs_f64()) * 1000.0);
        let c = clients[&ip_map[&l.ip]].clone();
        let url = format!("{base}{}", l.path);
        let ua = l.ua.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let mut req = c.get(&url);
            if let Some(ua) = ua {
                req = req.header("user-agent", ua);
            }
            let resp = req
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {url}: {e}"));
            let status = resp.status().as_u16();
            let _ = resp.bytes().await;
            status
        }));
    }
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for t in tasks {
        *statuses.entry(t.await.expect("task")).or_insert(0) += 1;
    }
    let wall = Instant::now() - t0.into_std();
    println!(
        "sent {} requests in {:.1}s (speed {SPEED}), at most {late_ms:.1} ms behind schedule; \
         statuses {statuses:?}",
        lines.len(),
        wall.as_secs_f64()
    );

    let stats = envoy.crawlguard_stats().await;
    let get = |k: &str| stats.get(k).copied().unwrap_or(0);
    println!(
        "{:<16} {:>15} {:>15} {:>10}",
        "class", "envoy allowed", "replay admitted", "limited"
    );
    let mut checked = 0;
    for c in replayed["classes"].as_array().expect("classes") {
        let class = c["class"].as_str().expect("name");
        let (ra, rr) = (
            c["admitted"].as_u64().unwrap_or(0),
            c["rejected"].as_u64().unwrap_or(0),
        );
        let ea = get(&format!("crawlguard.class.{class}.allowed"));
        let el = get(&format!("crawlguard.class.{class}.limited"));
        println!("{class:<16} {ea:>15} {ra:>15} {el:>5} / {rr:<5}");
        assert_eq!(ea + el, ra + rr, "{class}: both see the same requests");
        // Within 1% of the class's requests (at least one request).
        let tol = ((ra + rr) as f64 * 0.01).ceil().max(1.0) as u64;
        assert!(
            el.abs_diff(rr) <= tol,
            "{class}: Envoy limited {el}, replay rejected {rr} (tolerance {tol})"
        );
        checked += 1;
    }
    assert!(checked >= 4);
    assert_eq!(
        get("crawlguard.exempt"),
        replayed["exempt"].as_u64().unwrap_or(0)
    );
    // The comparison is only meaningful when rejections happened.
    assert!(get("crawlguard.class.unverified_bot.limited") > 100);

    // Envoy's own access log (stdout, flushed periodically) read back by `crawlguard report`.
    let deadline = Instant::now() + Duration::from_secs(30);
    let rep = loop {
        let log = envoy.log();
        let mut rep = Report::new(crawlguard_core::config::parse(b"").expect("default"));
        let st = input::each_record(
            "envoy.log",
            &mut log.as_bytes(),
            Some(Format::Crawlguard),
            &mut |r| rep.add(r),
        );
        if st.parsed >= 9_999 || Instant::now() > deadline {
            rep.inputs = vec![st];
            break rep;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let j = serde_json::to_value(rep.json(5)).expect("json");
    // Envoy writes its own log to the same file as the access log (the harness sends stdout
    // and stderr to one file), so a line can now and then be cut by an interleaved write:
    // each such line may move a count below by one, never more.
    let parsed = j["parsed"].as_u64().unwrap_or(0);
    let lost = 9_999 - parsed.min(9_999);
    if lost > 3 {
        let log = envoy.log();
        let bad: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("\" ") && l.contains(" ua=\""))
            .filter(|l| logfmt::parse_crawlguard(l.as_bytes()).is_none())
            .take(5)
            .collect();
        panic!("only {parsed} access-log lines parsed; unparsable: {bad:#?}");
    }
    let near = |a: u64, b: u64, what: &str| {
        assert!(
            a.abs_diff(b) <= lost,
            "{what}: {a} vs {b} ({lost} lines lost)"
        );
    };
    // Every non-exempt request carries the class crawlguard gave it.
    near(
        j["class_source"]["logged"].as_u64().unwrap_or(0),
        9_999 - get("crawlguard.exempt"),
        "class logged",
    );
    let mut limited_total = 0;
    for c in j["classes"].as_array().expect("classes") {
        let class = c["class"].as_str().expect("class");
        let cg = c["rejections_by_origin"]["crawlguard"]
            .as_u64()
            .unwrap_or(0);
        near(cg, get(&format!("crawlguard.class.{class}.limited")), class);
        limited_total += cg;
        assert_eq!(c["rejections_by_origin"]["upstream"], 0, "{class}");
        // The demo origin answers every forwarded request: a TTFB for each.
        assert_eq!(
            c["ttfb_ms"]["n"].as_u64().unwrap_or(0) + c["status"]["429"].as_u64().unwrap_or(0),
            c["requests"].as_u64().unwrap_or(0),
            "{class}"
        );
    }
    near(
        limited_total,
        statuses.get(&429).copied().unwrap_or(0) as u64,
        "429s",
    );
}
