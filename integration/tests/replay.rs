//! Replays a real access log through Envoy with the embedded default configuration.
//!
//! `../shared/data/elastic-apache-logs/apache_logs` (10,000 combined-format lines, one of
//! them malformed) is sent in order, time compressed (bounded concurrency, no pauses): each
//! line's path and User-Agent, from a `127.w.y.z` source address that stands for the line's
//! original client IP. The per-class table of decisions comes from crawlguard's own stats.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crawlguard_cli::logfmt::parse_combined;
use crawlguard_integration::{client, repo_root, Envoy, EnvoyOpts};
use tokio::sync::Semaphore;

/// In-flight requests during the replay.
const PARALLEL: usize = 16;

/// One usable log line.
struct Line {
    ip: String,
    path: String,
    ua: String,
}

/// A combined-format line as the `crawlguard` command reads it
/// (`crawlguard_cli::logfmt::parse_combined`, the one Apache log parser); `None` for a
/// line it cannot parse. An absent User-Agent is sent as the `-` the log holds.
fn parse(line: &str) -> Option<Line> {
    let r = parse_combined(line.as_bytes())?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Some(Line {
        ip: text(r.client?),
        path: text(r.path),
        ua: r.ua.map_or_else(|| "-".to_string(), text),
    })
}

/// The n-th distinct client (0-based, in order of first appearance) -> `127.w.y.z` with every
/// octet in 1..=254 (so never 127.0.0.1, never a .0 or .255 octet).
fn mapped_ip(n: usize) -> Ipv4Addr {
    let z = 1 + (n % 254) as u8;
    let y = 1 + ((n / 254) % 254) as u8;
    let w = 1 + (n / (254 * 254)) as u8;
    Ipv4Addr::new(127, w, y, z)
}

fn log_path() -> PathBuf {
    match std::env::var_os("CRAWLGUARD_APACHE_LOG") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join("../shared/data/elastic-apache-logs/apache_logs"),
    }
}

#[tokio::test]
async fn replay_apache_log_with_default_config() {
    let path = log_path();
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let text = String::from_utf8_lossy(&text);
    let mut lines = Vec::new();
    let mut malformed = 0usize;
    for l in text.lines() {
        match parse(l) {
            Some(line) => lines.push(line),
            None => malformed += 1,
        }
    }
    println!(
        "{} lines parsed, {malformed} malformed (skipped)",
        lines.len()
    );
    assert_eq!(malformed, 1, "the data set has exactly one malformed line");
    assert_eq!(lines.len(), 9_999);

    let mut ip_map: HashMap<String, Ipv4Addr> = HashMap::new();
    for l in &lines {
        let n = ip_map.len();
        ip_map.entry(l.ip.clone()).or_insert_with(|| mapped_ip(n));
    }
    let clients: HashMap<Ipv4Addr, reqwest::Client> =
        ip_map.values().map(|&ip| (ip, client(ip))).collect();

    let envoy = Envoy::start(EnvoyOpts::default().concurrency(2)).await;
    let base = envoy.base_url();

    let sem = Arc::new(Semaphore::new(PARALLEL));
    let mut tasks = Vec::with_capacity(lines.len());
    let t0 = Instant::now();
    for l in &lines {
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        let c = clients[&ip_map[&l.ip]].clone();
        let url = format!("{base}{}", l.path);
        let ua = l.ua.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let mut req = c.get(&url);
            // Apache logs a missing User-Agent as "-": send none.
            if ua != "-" {
                req = req.header("user-agent", ua);
            }
            let resp = req
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {url}: {e}"));
            let status = resp.status().as_u16();
            let has_retry_after = resp.headers().contains_key("retry-after");
            let _ = resp.bytes().await;
            (status, has_retry_after)
        }));
    }
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    let mut rejections_without_retry_after = 0;
    for t in tasks {
        let (status, has_ra) = t.await.expect("request task");
        *statuses.entry(status).or_insert(0) += 1;
        if matches!(status, 429 | 503) && !has_ra {
            rejections_without_retry_after += 1;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    println!(
        "sent {} requests from {} addresses in {elapsed:.1}s; statuses {statuses:?}",
        lines.len(),
        ip_map.len()
    );

    // Per-class table from crawlguard's counters.
    let stats = envoy.crawlguard_stats().await;
    let decisions = ["allowed", "limited", "shadow_limited", "fail_open"];
    // Exempt paths are decided before classification: one class-less counter.
    let exempt = stats.get("crawlguard.exempt").copied().unwrap_or(0);
    let mut table: BTreeMap<String, BTreeMap<&str, u64>> = BTreeMap::new();
    for (name, v) in &stats {
        if let Some(rest) = name.strip_prefix("crawlguard.class.") {
            if let Some((class, decision)) = rest.rsplit_once('.') {
                if let Some(d) = decisions.iter().find(|d| **d == decision) {
                    *table
                        .entry(class.to_string())
                        .or_default()
                        .entry(d)
                        .or_insert(0) += v;
                }
            }
        }
    }
    println!(
        "{:<16} {:>8} {:>8} {:>9}",
        "class", "allowed", "limited", "fail_open"
    );
    let mut total = 0;
    for (class, row) in &table {
        let g = |d: &str| row.get(d).copied().unwrap_or(0);
        println!(
            "{class:<16} {:>8} {:>8} {:>9}",
            g("allowed"),
            g("limited"),
            g("fail_open")
        );
        total += g("allowed") + g("limited") + g("shadow_limited");
    }
    println!("exempt (robots.txt, sitemaps): {exempt}");
    let get = |class: &str, d: &str| {
        table
            .get(class)
            .and_then(|r| r.get(d))
            .copied()
            .unwrap_or(0)
    };
    let seen = |class: &str| {
        table
            .get(class)
            .map(|r| r.values().sum::<u64>())
            .unwrap_or(0)
    };

    // Nothing failed: no 5xx except a deliberate, well-formed shed, and every rejection
    // carried Retry-After.
    let server_errors: usize = statuses
        .iter()
        .filter(|(s, _)| **s >= 500 && **s != 503)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(server_errors, 0, "5xx in replay: {statuses:?}");
    assert_eq!(rejections_without_retry_after, 0);
    // Every request was seen by the filter and counted exactly once.
    assert_eq!(statuses.values().sum::<usize>(), lines.len());
    assert_eq!(
        total + exempt,
        lines.len() as u64,
        "class counters {table:?}"
    );
    let limited_total: u64 = table.keys().map(|c| get(c, "limited")).sum();
    let rejected =
        statuses.get(&429).copied().unwrap_or(0) + statuses.get(&503).copied().unwrap_or(0);
    assert_eq!(limited_total, rejected as u64);
    assert_eq!(
        table.keys().map(|c| get(c, "fail_open")).sum::<u64>(),
        0,
        "the shared store should not fail under this load"
    );

    // The classes the log contains (browsers, scripts with "-" UA, Googlebot/bingbot/Yandex
    // claims that cannot be verified yet, SEO/archive bots).
    for class in ["human", "script", "unverified_bot", "other_bot"] {
        assert!(seen(class) > 0, "class {class} missing from {table:?}");
    }
    // Unverified crawler claims from single IPs (66.249.73.135 alone sends 482 requests)
    // flood in compressed time: their strict limit must bite.
    assert!(get("unverified_bot", "limited") > 0, "{table:?}");
    // robots.txt fetches are exempt, never limited.
    assert!(exempt > 0);
    // Browsers mostly get through.
    assert!(
        get("human", "allowed") * 10 >= seen("human") * 9,
        "more than 10% of human requests limited: {table:?}"
    );
}
