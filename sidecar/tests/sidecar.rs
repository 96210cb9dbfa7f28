//! Real-process tests: a local dnsmasq on a free loopback port serves PTR and A/AAAA records
//! for documentation addresses (192.0.2.0/24, 198.51.100.0/24, 2001:db8::/32); the
//! `crawlguard-sidecar` binary is started against it and queried over HTTP. Nothing ever
//! connects to those addresses: they are only names in DNS answers.
//!
//! Why not 127.x: hickory-resolver follows RFC 6761 and answers reverse lookups in
//! 127.in-addr.arpa / ::1 itself (`localhost.`) without asking the server, so loopback
//! addresses cannot carry test PTR records (see `loopback_claims_are_spoofed`).
//! Range-file tests use 127.x prefixes (no DNS involved).
//!
//! dnsmasq comes from Debian (`dnsmasq-base`), installed by `scripts/setup.sh` (which
//! `make test` runs); without it these tests fail, never skip.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Kills (and reaps) the child when dropped, including during a panic.
struct ChildGuard {
    child: Child,
    name: &'static str,
    log: Option<PathBuf>,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            if let Some(log) = &self.log {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                eprintln!("---- {} log (last lines) ----", self.name);
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 (dnsmasq binds both).
fn free_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let port = udp.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn dnsmasq_binary() -> Option<PathBuf> {
    let find = || {
        [
            "/usr/sbin/dnsmasq",
            "/usr/bin/dnsmasq",
            "/usr/local/sbin/dnsmasq",
        ]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    };
    find()
}

/// The dnsmasq binary; panics with the fix when it is missing.
fn require_dnsmasq() -> Option<PathBuf> {
    match dnsmasq_binary() {
        Some(p) => Some(p),
        None => panic!(
            "dnsmasq is required for the real-process verifier tests: run scripts/setup.sh \
             (make test does), or apt-get install dnsmasq-base"
        ),
    }
}

/// Records for every scenario.
fn records() -> Vec<String> {
    [
        // Verified Googlebot (host-record also creates the PTR).
        "--host-record=crawl-66-249-66-1.googlebot.com,192.0.2.1",
        // PTR outside Google's domains.
        "--ptr-record=2.2.0.192.in-addr.arpa,host-2.example.net",
        // Several PTR names; only crawl-3.googlebot.com confirms.
        "--ptr-record=3.2.0.192.in-addr.arpa,other.example.net",
        "--ptr-record=3.2.0.192.in-addr.arpa,crawl.evilgooglebot.com",
        "--ptr-record=3.2.0.192.in-addr.arpa,liar.googlebot.com",
        "--ptr-record=3.2.0.192.in-addr.arpa,crawl-3.googlebot.com",
        "--address=/crawl-3.googlebot.com/192.0.2.3",
        // A Google Cloud VM's default name and an App Engine name, both forward-confirmed:
        // anyone can rent these.
        "--host-record=7.2.0.192.bc.googleusercontent.com,192.0.2.7",
        "--host-record=app-8.gae.googleusercontent.com,192.0.2.8",
        // A special-case crawler's name (google.com), documented for AdsBot, not Googlebot.
        "--host-record=rate-limited-proxy-192-0-2-9.google.com,192.0.2.9",
        // PTR in googlebot.com whose forward lookup returns another address.
        "--ptr-record=5.2.0.192.in-addr.arpa,liar.googlebot.com",
        "--address=/liar.googlebot.com/198.51.100.99",
        // Fresh address for the concurrency test.
        "--host-record=crawl-66-249-66-10.googlebot.com,192.0.2.10",
        // IPv6 FCrDNS.
        "--host-record=crawl-v6.googlebot.com,2001:db8::66",
        // Everything else: NXDOMAIN (not REFUSED), like a real authoritative answer.
        "--local=/#/",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A minimal DNS query for `name` (type A), to see dnsmasq answer.
fn dns_probe(port: u16) -> bool {
    let mut pkt = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in "crawl-66-249-66-1.googlebot.com".split('.') {
        pkt.push(label.len() as u8);
        pkt.extend_from_slice(label.as_bytes());
    }
    pkt.extend_from_slice(&[0, 0, 1, 0, 1]);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    if sock.send_to(&pkt, ("127.0.0.1", port)).is_err() {
        return false;
    }
    let mut buf = [0u8; 512];
    matches!(sock.recv_from(&mut buf), Ok((n, _)) if n >= 12 && buf[0] == 0x12 && buf[1] == 0x34)
}

struct Dns {
    _guard: ChildGuard,
    addr: SocketAddr,
}

fn start_dnsmasq(bin: &Path, dir: &Path) -> Dns {
    let port = free_port();
    let log = dir.join("dnsmasq.log");
    let child = Command::new(bin)
        .args([
            "--no-daemon".to_string(),
            format!("--port={port}"),
            "--listen-address=127.0.0.1".to_string(),
            "--bind-interfaces".to_string(),
            "--no-resolv".to_string(),
            "--no-hosts".to_string(),
            "--conf-file=/dev/null".to_string(),
            "--log-queries".to_string(),
        ])
        .args(records())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn dnsmasq");
    let guard = ChildGuard {
        child,
        name: "dnsmasq",
        log: Some(log),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dns_probe(port) {
        assert!(
            Instant::now() < deadline,
            "dnsmasq did not answer on port {port}"
        );
    }
    Dns {
        _guard: guard,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

struct Sidecar {
    _guard: ChildGuard,
    base: String,
    http: reqwest::Client,
}

/// Starts the binary in `dir` (its log: `dir/verifier.log`). Hermetic: the built-in vendor
/// range URLs are off (`--no-builtin-range-urls`; tests that fetch configure a loopback URL)
/// and the range cache is `dir/cache`, unless `args` say otherwise.
async fn start_sidecar(dir: &Path, args: &[String]) -> Sidecar {
    let log = dir.join("verifier.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
        .args(["--listen", "127.0.0.1:0", "--log-level", "debug"])
        .arg("--no-builtin-range-urls")
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn crawlguard-sidecar");
    let stdout = child.stdout.take().unwrap();
    let guard = ChildGuard {
        child,
        name: "crawlguard-sidecar",
        log: Some(log),
    };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining stdout so the child never blocks on a full pipe.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("verifier printed no `listening on` line");
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first stdout line: {line:?}"));
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
            if r.status() == 200 {
                assert_eq!(r.text().await.unwrap(), "ok");
                break;
            }
        }
        assert!(Instant::now() < deadline, "/healthz never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Sidecar {
        _guard: guard,
        base,
        http,
    }
}

impl Sidecar {
    async fn get(&self, path_and_query: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path_and_query}", self.base))
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.text().await.unwrap())
    }

    async fn verify(&self, ip: &str, bot: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/verify?ip={ip}&bot={bot}")).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    async fn metrics(&self) -> String {
        self.get("/metrics").await.1
    }

    /// Waits (polling `/metrics`) until `series` is at least `at_least`.
    async fn wait_metric(&self, series: &str, at_least: f64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.metric(series).await < at_least {
            assert!(
                Instant::now() < deadline,
                "{series} never reached {at_least}:\n{}",
                self.metrics().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Value of one exact series (`name{labels}`), 0 when absent.
    async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    }
}

fn answer(ip: &str, bot: &str, verdict: &str, method: &str, host: &str, ttl_s: u64) -> Value {
    json!({"ip": ip, "bot": bot, "verdict": verdict, "method": method, "host": host, "ttl_s": ttl_s})
}

fn nameserver_args(dns: &Dns) -> Vec<String> {
    vec!["--nameserver".into(), dns.addr.to_string()]
}

fn shared_data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data")
        .join(rel)
        .canonicalize()
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[tokio::test]
async fn fcrdns_verdicts_against_dnsmasq() {
    let Some(bin) = require_dnsmasq() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dns = start_dnsmasq(&bin, dir.path());
    let sc = start_sidecar(dir.path(), &nameserver_args(&dns)).await;

    // Real Googlebot: PTR in googlebot.com, A record returns the same address.
    assert_eq!(
        sc.verify("192.0.2.1", "googlebot").await,
        answer(
            "192.0.2.1",
            "googlebot",
            "verified",
            "fcrdns",
            "crawl-66-249-66-1.googlebot.com",
            86400
        )
    );
    // Same UA from an address whose PTR is not Google's.
    assert_eq!(
        sc.verify("192.0.2.2", "googlebot").await,
        answer("192.0.2.2", "googlebot", "spoofed", "fcrdns", "", 3600)
    );
    // PTR in googlebot.com, forward lookup returns another address.
    assert_eq!(
        sc.verify("192.0.2.5", "googlebot").await,
        answer("192.0.2.5", "googlebot", "spoofed", "fcrdns", "", 3600)
    );
    // Several PTR names, one passes.
    assert_eq!(
        sc.verify("192.0.2.3", "googlebot").await,
        answer(
            "192.0.2.3",
            "googlebot",
            "verified",
            "fcrdns",
            "crawl-3.googlebot.com",
            86400
        )
    );
    // Google Cloud VM and App Engine names verify no Google crawler or fetcher.
    for (ip, bot) in [
        ("192.0.2.7", "googlebot"),
        ("192.0.2.7", "feedfetcher-google"),
        ("192.0.2.8", "googlebot"),
        ("192.0.2.8", "feedfetcher-google"),
        ("192.0.2.9", "googlebot"),
    ] {
        assert_eq!(
            sc.verify(ip, bot).await,
            answer(ip, bot, "spoofed", "fcrdns", "", 3600),
            "{ip} as {bot}"
        );
    }
    // The same google.com name is AdsBot's documented reverse name.
    assert_eq!(
        sc.verify("192.0.2.9", "adsbot-google").await,
        answer(
            "192.0.2.9",
            "adsbot-google",
            "verified",
            "fcrdns",
            "rate-limited-proxy-192-0-2-9.google.com",
            86400
        )
    );
    // No PTR at all (NXDOMAIN): a definite answer.
    assert_eq!(
        sc.verify("192.0.2.200", "googlebot").await,
        answer("192.0.2.200", "googlebot", "spoofed", "fcrdns", "", 3600)
    );
    // IPv6: ip6.arpa PTR and AAAA.
    assert_eq!(
        sc.verify("2001:db8::66", "googlebot").await,
        answer(
            "2001:db8::66",
            "googlebot",
            "verified",
            "fcrdns",
            "crawl-v6.googlebot.com",
            86400
        )
    );
    assert_eq!(
        sc.verify("2001:DB8:0::66", "GoogleOther").await,
        answer(
            "2001:db8::66",
            "googleother",
            "verified",
            "fcrdns",
            "crawl-v6.googlebot.com",
            86400
        )
    );
    // Bing's domain does not cover a Google host.
    assert_eq!(
        sc.verify("192.0.2.1", "bingbot").await,
        answer("192.0.2.1", "bingbot", "spoofed", "fcrdns", "", 3600)
    );
    // A catalog bot without configured range files has no method: unknown.
    assert_eq!(
        sc.verify("192.0.2.1", "gptbot").await,
        answer("192.0.2.1", "gptbot", "unknown", "none", "", 30)
    );
    // A bot id not in the catalog.
    assert_eq!(
        sc.verify("192.0.2.1", "acmebot").await,
        answer("192.0.2.1", "acmebot", "unknown", "none", "", 30)
    );

    assert_eq!(
        sc.metric("crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"verified\"}").await,
        3.0
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"spoofed\"}").await,
        // 192.0.2.2, .5 and .200, and the cloud and special-case names .7, .8, .9
        6.0
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_verdicts_total{bot=\"unlisted\",method=\"none\",verdict=\"unknown\"}").await,
        1.0
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_dns_errors_total{type=\"ptr\",kind=\"nxdomain\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn fifty_concurrent_requests_make_one_resolution() {
    let Some(bin) = require_dnsmasq() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dns = start_dnsmasq(&bin, dir.path());
    let sc = std::sync::Arc::new(start_sidecar(dir.path(), &nameserver_args(&dns)).await);

    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let sc = sc.clone();
        set.spawn(async move { sc.verify("192.0.2.10", "googlebot").await });
    }
    while let Some(v) = set.join_next().await {
        let v = v.unwrap();
        assert_eq!(v["verdict"], "verified", "{v}");
        assert_eq!(v["host"], "crawl-66-249-66-10.googlebot.com");
    }
    assert_eq!(
        sc.metric("crawlguard_sidecar_dns_queries_total{type=\"ptr\"}")
            .await,
        1.0
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_dns_queries_total{type=\"a\"}")
            .await,
        1.0
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_cache_misses_total").await,
        1.0
    );
    assert_eq!(sc.metric("crawlguard_sidecar_cache_hits_total").await, 49.0);
    assert_eq!(
        sc.metric("crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"verified\"}").await,
        50.0
    );
    assert_eq!(sc.metric("crawlguard_sidecar_in_flight").await, 0.0);
}

#[tokio::test]
async fn dns_timeout_gives_503_within_the_timeout() {
    // A UDP socket that never answers: every query times out.
    let blackhole = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = blackhole.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let sc = start_sidecar(
        dir.path(),
        &[
            "--nameserver".into(),
            format!("127.0.0.1:{port}"),
            "--dns-timeout-ms".into(),
            "300".into(),
            "--dns-attempts".into(),
            "1".into(),
        ],
    )
    .await;
    let started = Instant::now();
    let (status, body) = sc.get("/v1/verify?ip=192.0.2.1&bot=googlebot").await;
    let elapsed = started.elapsed();
    // No answer is not a verdict: 503, so the filter keeps a verdict it had.
    assert_eq!(
        (status, body.as_str()),
        (
            503,
            r#"{"error":"dns ptr query got no answer: timeout: query budget exceeded"}"#
        )
    );
    // 300 ms per attempt, one attempt, plus the 100 ms hard-budget margin and slack.
    assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    assert_eq!(
        sc.metric("crawlguard_sidecar_dns_errors_total{type=\"ptr\",kind=\"timeout\"}")
            .await,
        1.0
    );
    // Not cached: a repeat asks DNS again.
    let (status, _) = sc.get("/v1/verify?ip=192.0.2.1&bot=googlebot").await;
    assert_eq!(status, 503);
    assert_eq!(
        sc.metric("crawlguard_sidecar_dns_errors_total{type=\"ptr\",kind=\"timeout\"}")
            .await,
        2.0
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_verify_errors_total").await,
        2.0
    );
    assert_eq!(
        sc.metric("crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"unknown\"}")
            .await,
        0.0
    );
    drop(blackhole);
}

#[tokio::test]
async fn a_dns_outage_is_503_never_unknown() {
    let Some(bin) = require_dnsmasq() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dns = start_dnsmasq(&bin, dir.path());
    let sc = start_sidecar(
        dir.path(),
        &[
            "--nameserver".into(),
            dns.addr.to_string(),
            "--dns-timeout-ms".into(),
            "300".into(),
            "--dns-attempts".into(),
            "1".into(),
            "--ttl-verified-s".into(),
            "1".into(),
        ],
    )
    .await;
    let verified = answer(
        "192.0.2.1",
        "googlebot",
        "verified",
        "fcrdns",
        "crawl-66-249-66-1.googlebot.com",
        1,
    );
    assert_eq!(sc.verify("192.0.2.1", "googlebot").await, verified);
    // A definite answer while DNS works: NXDOMAIN is `spoofed`.
    assert_eq!(
        sc.verify("198.51.100.1", "googlebot").await["verdict"],
        "spoofed"
    );
    // The resolver dies. Until the cached verdict expires the answer is `verified`; then
    // 503, and never `unknown` (which would overwrite the filter's verdict).
    drop(dns);
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (status, body) = sc.get("/v1/verify?ip=192.0.2.1&bot=googlebot").await;
        if status != 200 {
            assert_eq!(status, 503, "{body}");
            break body;
        }
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), verified);
        assert!(Instant::now() < deadline, "the verdict never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let error: Value = serde_json::from_str(&body).unwrap();
    let message = error["error"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("dns ptr query got no answer: "),
        "{body}"
    );
    // A new claim while DNS is down: 503 too, not `unknown`.
    let (status, _) = sc.get("/v1/verify?ip=198.51.100.2&bot=googlebot").await;
    assert_eq!(status, 503);
    assert_eq!(
        sc.metric("crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"unknown\"}")
            .await,
        0.0
    );
}

/// Writes `content` to `path` atomically (temp file + rename), as a sync job would.
fn replace_file(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn range_files_verify_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let ranges = dir.path().join("gptbot.json");
    replace_file(
        &ranges,
        r#"{"creationTime": "2025-01-01T00:00:00", "prefixes": [{"ipv4Prefix": "127.0.77.0/24"}, {"ipv6Prefix": "2001:db8:77::/48"}]}"#,
    );
    let chatgpt = shared_data("openai-crawler-ips/chatgpt-user.json");
    let config = dir.path().join("verifier.toml");
    std::fs::write(
        &config,
        format!(
            "[[bots]]\nid = \"gptbot\"\nranges = [\"gptbot.json\"]\n\
             [[bots]]\nid = \"chatgpt-user\"\nranges = [{:?}]\n",
            chatgpt.display().to_string()
        ),
    )
    .unwrap();
    // No DNS needed (range-only bots), but never fall back to the host's resolv.conf.
    let sc = start_sidecar(
        dir.path(),
        &[
            "--config".into(),
            config.display().to_string(),
            "--reload-interval-s".into(),
            "1".into(),
            "--nameserver".into(),
            "127.0.0.1:9".into(),
        ],
    )
    .await;
    let file_label = ranges.display().to_string();
    let chatgpt_label = chatgpt.display().to_string();

    assert_eq!(
        sc.verify("127.0.77.5", "gptbot").await,
        answer("127.0.77.5", "gptbot", "verified", "ip_range", "", 86400)
    );
    assert_eq!(
        sc.verify("2001:db8:77::1", "gptbot").await,
        answer(
            "2001:db8:77::1",
            "gptbot",
            "verified",
            "ip_range",
            "",
            86400
        )
    );
    assert_eq!(
        sc.verify("127.0.78.5", "gptbot").await,
        answer("127.0.78.5", "gptbot", "spoofed", "ip_range", "", 3600)
    );
    // The real OpenAI file (single-line formatting) is loaded and used.
    assert_eq!(
        sc.metric(&format!(
            "crawlguard_sidecar_range_prefixes{{source={chatgpt_label:?}}}"
        ))
        .await,
        103.0
    );
    assert_eq!(
        sc.verify("13.65.138.113", "chatgpt-user").await,
        answer(
            "13.65.138.113",
            "chatgpt-user",
            "verified",
            "ip_range",
            "",
            86400
        )
    );

    // A malformed replacement is rejected, counted, and the old ranges stay.
    replace_file(
        &ranges,
        r#"{"creationTime": "2025-02-01", "prefixes": [{"ipv4Prefix": "127.0.88.0/24"},"#,
    );
    let err_series =
        format!("crawlguard_sidecar_range_reloads_total{{source={file_label:?},result=\"error\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sc.metric(&err_series).await < 1.0 {
        assert!(Instant::now() < deadline, "malformed file never reported");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sc.verify("127.0.77.6", "gptbot").await,
        answer("127.0.77.6", "gptbot", "verified", "ip_range", "", 86400)
    );
    assert_eq!(
        sc.metric(&format!(
            "crawlguard_sidecar_range_prefixes{{source={file_label:?}}}"
        ))
        .await,
        2.0
    );
    assert_eq!(
        sc.metric(&format!(
            "crawlguard_sidecar_range_source_failures{{source={file_label:?}}}"
        ))
        .await,
        1.0
    );

    // A new valid file is picked up; cached verdicts from the old ranges are dropped.
    replace_file(&ranges, r#"{"prefixes":[{"ipv4Prefix":"127.0.88.0/24"}]}"#);
    let ok_series =
        format!("crawlguard_sidecar_range_reloads_total{{source={file_label:?},result=\"ok\"}}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sc.metric(&ok_series).await < 2.0 {
        assert!(Instant::now() < deadline, "new range file never loaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        sc.verify("127.0.88.1", "gptbot").await,
        answer("127.0.88.1", "gptbot", "verified", "ip_range", "", 86400)
    );
    assert_eq!(
        sc.verify("127.0.77.5", "gptbot").await,
        answer("127.0.77.5", "gptbot", "spoofed", "ip_range", "", 3600)
    );
}

#[tokio::test]
async fn published_ranges_follow_the_range_files_with_304_for_an_unchanged_generation() {
    use crawlguard_contract::ranges::{parse, OutOfRange};
    let dir = tempfile::tempdir().unwrap();
    let ranges = dir.path().join("gptbot.json");
    replace_file(
        &ranges,
        r#"{"prefixes": [{"ipv4Prefix": "127.0.77.0/24"}]}"#,
    );
    let googlebot = shared_data("google-crawler-ips/googlebot.json");
    let config = dir.path().join("verifier.toml");
    std::fs::write(
        &config,
        format!(
            "[[bots]]\nid = \"gptbot\"\nranges = [\"gptbot.json\"]\n\
             [[bots]]\nid = \"googlebot\"\nranges = [{:?}]\n",
            googlebot.display().to_string()
        ),
    )
    .unwrap();
    let sc = start_sidecar(
        dir.path(),
        &[
            "--config".into(),
            config.display().to_string(),
            "--reload-interval-s".into(),
            "1".into(),
            "--nameserver".into(),
            "127.0.0.1:9".into(),
        ],
    )
    .await;
    let get = |q: String, inm: Option<String>| {
        let mut r = sc.http.get(format!("{}/v1/ranges{q}", sc.base));
        if let Some(v) = inm {
            r = r.header("if-none-match", v);
        }
        async move {
            let r = r.send().await.expect("request");
            let etag = r
                .headers()
                .get("etag")
                .and_then(|v| v.to_str().ok())
                .map(String::from);
            (r.status().as_u16(), etag, r.text().await.unwrap())
        }
    };
    let (status, etag, body) = get(String::new(), None).await;
    assert_eq!(status, 200);
    let table = parse(body.as_bytes()).expect("a valid document");
    assert_eq!(etag, Some(format!("\"{}\"", table.generation)));
    assert_eq!(table.prefixes(), 169 + 146 + 1);
    let bots: Vec<(&str, OutOfRange, u32)> = table
        .bots
        .iter()
        .map(|b| (b.id.as_str(), b.out_of_range, b.set))
        .collect();
    assert_eq!(
        bots,
        [
            ("googlebot", OutOfRange::Fcrdns, 0),
            ("gptbot", OutOfRange::Spoofed, 1)
        ]
    );
    let g = table.generation.clone();
    assert_eq!(get(format!("?since={g}"), None).await.0, 304);
    assert_eq!(get(String::new(), Some(format!("\"{g}\""))).await.0, 304);
    assert_eq!(get("?since=0000000000000001".into(), None).await.0, 200);
    assert_eq!(get("?since=%zz".into(), None).await.0, 200);

    // A changed file gives a new generation and the new set.
    replace_file(&ranges, r#"{"prefixes":[{"ipv4Prefix":"127.0.88.0/24"}]}"#);
    let deadline = Instant::now() + Duration::from_secs(10);
    let next = loop {
        let (status, _, body) = get(format!("?since={g}"), None).await;
        if status == 200 {
            break parse(body.as_bytes()).expect("a valid document");
        }
        assert!(Instant::now() < deadline, "the new range file never showed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_ne!(next.generation, g);
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    use crawlguard_contract::verify::Verdict;
    assert_eq!(
        next.verdict(ip("127.0.88.1"), "gptbot"),
        Some(Verdict::Verified)
    );
    assert_eq!(
        next.verdict(ip("127.0.77.1"), "gptbot"),
        Some(Verdict::Spoofed)
    );
}

#[tokio::test]
async fn bad_requests_get_400_with_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let sc = start_sidecar(dir.path(), &["--nameserver".into(), "127.0.0.1:9".into()]).await;
    for (query, fragment) in [
        ("/v1/verify", "missing query parameter: ip"),
        ("/v1/verify?bot=googlebot", "missing query parameter: ip"),
        (
            "/v1/verify?ip=&bot=googlebot",
            "missing query parameter: ip",
        ),
        ("/v1/verify?ip=127.0.0.1", "missing query parameter: bot"),
        ("/v1/verify?ip=999.1.1.1&bot=googlebot", "invalid ip"),
        ("/v1/verify?ip=example.com&bot=googlebot", "invalid ip"),
        ("/v1/verify?ip=fe80::1%25eth0&bot=googlebot", "invalid ip"),
        ("/v1/verify?ip=127.0.0.1&bot=google%20bot", "invalid bot"),
        ("/v1/verify?ip=127.0.0.1&bot=%FF%FE", "invalid"),
        (
            "/v1/verify?ip=127.0.0.1&ip=127.0.0.2&bot=googlebot",
            "invalid query string",
        ),
    ] {
        let (status, body) = sc.get(query).await;
        assert_eq!(status, 400, "{query}: {body}");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{query}: {e}: {body}"));
        let msg = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{query}: {body}"));
        assert!(msg.contains(fragment), "{query}: {msg}");
    }
    let long_bot = "a".repeat(65);
    let (status, _) = sc
        .get(&format!("/v1/verify?ip=127.0.0.1&bot={long_bot}"))
        .await;
    assert_eq!(status, 400);
    let (status, body) = sc.get("/nope").await;
    assert_eq!((status, body.as_str()), (404, r#"{"error":"not found"}"#));
    // Still healthy after all of that.
    assert_eq!(sc.get("/healthz").await, (200, "ok".to_string()));
}

#[tokio::test]
async fn metrics_expose_the_expected_series() {
    let Some(bin) = require_dnsmasq() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dns = start_dnsmasq(&bin, dir.path());
    let sc = start_sidecar(dir.path(), &nameserver_args(&dns)).await;
    sc.verify("192.0.2.1", "googlebot").await;
    sc.verify("192.0.2.1", "googlebot").await;
    sc.verify("192.0.2.200", "googlebot").await;
    let r = sc
        .http
        .get(format!("{}/metrics", sc.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ctype = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    let text = r.text().await.unwrap();
    for series in [
        "# TYPE crawlguard_sidecar_verdicts counter",
        "crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"verified\"} 2",
        "crawlguard_sidecar_verdicts_total{bot=\"googlebot\",method=\"fcrdns\",verdict=\"spoofed\"} 1",
        "crawlguard_sidecar_cache_hits_total 1",
        "crawlguard_sidecar_cache_misses_total 2",
        "crawlguard_sidecar_cache_entries ",
        "crawlguard_sidecar_dns_queries_total{type=\"ptr\"} 2",
        "crawlguard_sidecar_dns_queries_total{type=\"a\"} 1",
        "crawlguard_sidecar_dns_errors_total{type=\"ptr\",kind=\"nxdomain\"} 1",
        "crawlguard_sidecar_in_flight 0",
        "crawlguard_sidecar_lookups_rejected_total 0",
        "# TYPE crawlguard_sidecar_verify_duration_seconds histogram",
        "crawlguard_sidecar_verify_duration_seconds_count 2",
        "crawlguard_sidecar_verify_duration_seconds_bucket{le=\"+Inf\"} 2",
        "# EOF",
    ] {
        assert!(text.contains(series), "missing {series:?} in\n{text}");
    }
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--listen",
        "--config",
        "--nameserver",
        "--dns-timeout-ms",
        "--dns-attempts",
        "--cache-max-entries",
        "--max-concurrent-lookups",
        "--reload-interval-s",
        "--refresh-interval-s",
        "--range-max-age-s",
        "--cache-dir",
        "--no-builtin-range-urls",
        "--ttl-verified-s",
        "--ttl-spoofed-s",
        "--ttl-unknown-s",
        "--redis",
        "--redis-timeout-ms",
        "--redis-prefix",
        "--log-level",
        "--print-default-config",
        "--check-config",
        "--version",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn print_default_config_is_a_valid_config() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
        .arg("--print-default-config")
        .output()
        .unwrap();
    assert!(out.status.success());
    let path = dir.path().join("default.toml");
    std::fs::write(&path, &out.stdout).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
        .args(["--check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        stdout.starts_with("configuration ok: 56 bots, 0 range files, 14 range URLs"),
        "{stdout}"
    );
}

#[test]
fn check_config_gives_one_verdict_naming_each_failing_range_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("good.json"),
        r#"{"prefixes": [{"ipv4Prefix": "192.0.2.64/26"}]}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("broken.json"), "not json").unwrap();
    let config = dir.path().join("verifier.toml");
    std::fs::write(
        &config,
        "bots_mode = \"replace\"\n\
         [[bots]]\nid = \"gptbot\"\nranges = [\"good.json\", \"broken.json\", \"missing.json\"]\n",
    )
    .unwrap();
    let check = |config: &Path| {
        Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
            .args([
                "--check-config",
                "--no-builtin-range-urls",
                "--log-level",
                "off",
            ])
            .arg("--config")
            .arg(config)
            .output()
            .unwrap()
    };
    let out = check(&config);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert_eq!(stdout, "", "no `ok` for a failing configuration");
    let lines: Vec<&str> = stderr.lines().collect();
    let path = |name: &str| dir.path().join(name).display().to_string();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert_eq!(
        lines[0],
        "configuration invalid: 2 of 3 range files cannot be used"
    );
    let broken = format!("  range file {}: ", path("broken.json"));
    let missing = format!("  range file {}: ", path("missing.json"));
    assert!(
        lines[1..]
            .iter()
            .any(|l| l.starts_with(&broken) && l.len() > broken.len()),
        "{stderr}"
    );
    assert!(
        lines[1..]
            .iter()
            .any(|l| l.starts_with(&missing) && l.len() > missing.len()),
        "{stderr}"
    );

    // Only the good file: ok, on stdout, exit 0.
    std::fs::write(
        &config,
        "bots_mode = \"replace\"\n[[bots]]\nid = \"gptbot\"\nranges = [\"good.json\"]\n",
    )
    .unwrap();
    let out = check(&config);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "configuration ok: 1 bots, 1 range files, 0 range URLs (fetched at start, not by \
         --check-config)\n"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn invalid_config_fails_at_startup_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[dns]\ntimeout_ms = 0\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
        .args(["--check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dns.timeout_ms"), "{stderr}");
}

/// The Redis URL the Istio example hands every verifier pod (`envoy/istio/redis-example.yaml`,
/// Secret key `url`, read as `CRAWLGUARD_SIDECAR_REDIS` by `envoy/istio/sidecar.yaml`) is
/// one the verifier accepts from that variable.
#[test]
fn the_istio_examples_redis_url_is_accepted_from_the_environment() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../envoy/istio/redis-example.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let url = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("url: "))
        .expect("a url: line")
        .trim_matches('"');
    assert!(url.starts_with("redis://"), "{url}");
    let check = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
            .arg("--check-config")
            .env("CRAWLGUARD_SIDECAR_REDIS", url)
            .output()
            .unwrap()
    };
    let out = check(url);
    assert!(
        out.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The variable is really read: a malformed URL in it is refused.
    let out = check("redis//no-scheme");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("redis.url"), "{stderr}");
}

#[tokio::test]
async fn loopback_claims_are_spoofed() {
    // hickory answers loopback PTR queries itself with `localhost.` (RFC 6761), which is in
    // no bot's domains: a Googlebot claim from 127.0.0.1 or ::1 is spoofed, whatever the
    // nameserver says (here: one that does not even exist).
    let dir = tempfile::tempdir().unwrap();
    let sc = start_sidecar(dir.path(), &["--nameserver".into(), "127.0.0.1:9".into()]).await;
    assert_eq!(
        sc.verify("127.0.0.1", "googlebot").await,
        answer("127.0.0.1", "googlebot", "spoofed", "fcrdns", "", 3600)
    );
    assert_eq!(
        sc.verify("::1", "googlebot").await,
        answer("::1", "googlebot", "spoofed", "fcrdns", "", 3600)
    );
}

// ---------------------------------------------------------------------------------------
// Range URLs: fetched on start and on schedule, 304s, changes, the cache across a restart
// ---------------------------------------------------------------------------------------

const DOC_V1: &str = r#"{"creationTime":"2026-08-20T00:00:00","prefixes":[{"ipv4Prefix":"127.0.90.0/24"},{"ipv6Prefix":"2001:db8:90::/48"}]}"#;
const DOC_V2: &str =
    r#"{"creationTime":"2026-08-21T00:00:00","prefixes":[{"ipv4Prefix":"127.0.91.0/24"}]}"#;

/// A range document on loopback (axum): `GET /r.json` with an ETag, 304 on a match.
struct DocServer {
    addr: SocketAddr,
    doc: std::sync::Arc<std::sync::Mutex<(String, String)>>,
    task: tokio::task::JoinHandle<()>,
}

impl DocServer {
    async fn start(body: &str, etag: &str) -> DocServer {
        use axum::http::{header, HeaderMap, StatusCode};
        use axum::response::IntoResponse;
        let doc = std::sync::Arc::new(std::sync::Mutex::new((body.to_string(), etag.to_string())));
        let state = doc.clone();
        let app = axum::Router::new().route(
            "/r.json",
            axum::routing::get(move |headers: HeaderMap| {
                let (body, etag) = state.lock().unwrap().clone();
                async move {
                    if headers
                        .get(header::IF_NONE_MATCH)
                        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
                    {
                        return StatusCode::NOT_MODIFIED.into_response();
                    }
                    ([(header::ETAG, etag)], body).into_response()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        DocServer { addr, doc, task }
    }

    fn url(&self) -> String {
        format!("http://{}/r.json", self.addr)
    }

    fn set(&self, body: &str, etag: &str) {
        *self.doc.lock().unwrap() = (body.to_string(), etag.to_string());
    }
}

impl Drop for DocServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `crawlguard_sidecar_<name>{source="<source>"<extra>}`.
fn series(name: &str, source: &str, extra: &str) -> String {
    format!("crawlguard_sidecar_{name}{{source={source:?}{extra}}}")
}

fn fetches(source: &str, result: &str) -> String {
    series(
        "range_fetches_total",
        source,
        &format!(",result={result:?}"),
    )
}

fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("verifier.log")).unwrap_or_default()
}

#[tokio::test]
async fn range_urls_are_fetched_refreshed_and_survive_a_restart_without_network() {
    let server = DocServer::start(DOC_V1, "\"v1\"").await;
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("verifier.toml");
    std::fs::write(
        &config,
        format!("[[bots]]\nid = \"gptbot\"\nranges = [{url:?}]\n"),
    )
    .unwrap();
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--config".into(),
            config.display().to_string(),
            "--refresh-interval-s".into(),
            "1".into(),
            "--nameserver".into(),
            "127.0.0.1:9".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let sc = start_sidecar(dir.path(), &args(&[])).await;

    // Fetched on start (in the background: the service answered /healthz meanwhile).
    sc.wait_metric(&fetches(&url, "ok"), 1.0).await;
    assert_eq!(
        sc.verify("127.0.90.5", "gptbot").await,
        answer("127.0.90.5", "gptbot", "verified", "ip_range", "", 86400)
    );
    assert_eq!(
        sc.verify("2001:db8:90::5", "gptbot").await,
        answer(
            "2001:db8:90::5",
            "gptbot",
            "verified",
            "ip_range",
            "",
            86400
        )
    );
    assert_eq!(sc.metric(&series("range_prefixes", &url, "")).await, 2.0);
    assert_eq!(
        sc.metric(&series("range_source_stale", &url, "")).await,
        0.0
    );
    assert_eq!(
        sc.metric(&series("range_source_failures", &url, "")).await,
        0.0
    );
    assert!(sc
        .metrics()
        .await
        .contains(&series("range_source_age_seconds", &url, "")));
    assert!(
        sc.metric(&series("range_source_age_seconds", &url, ""))
            .await
            < 5.0
    );

    // Every second (±10%): a conditional GET, answered 304.
    sc.wait_metric(&fetches(&url, "not_modified"), 1.0).await;
    assert_eq!(sc.metric(&fetches(&url, "ok")).await, 1.0);

    // A changed document is picked up, and the verdicts of the old ranges are dropped.
    assert_eq!(
        sc.verify("127.0.91.5", "gptbot").await,
        answer("127.0.91.5", "gptbot", "spoofed", "ip_range", "", 3600)
    );
    server.set(DOC_V2, "\"v2\"");
    sc.wait_metric(&fetches(&url, "ok"), 2.0).await;
    assert_eq!(
        sc.verify("127.0.91.5", "gptbot").await,
        answer("127.0.91.5", "gptbot", "verified", "ip_range", "", 86400)
    );
    assert_eq!(
        sc.verify("127.0.90.5", "gptbot").await,
        answer("127.0.90.5", "gptbot", "spoofed", "ip_range", "", 3600)
    );
    assert_eq!(sc.metric(&series("range_prefixes", &url, "")).await, 1.0);
    assert!(log_of(dir.path()).contains("range source fetched"));
    drop(sc);

    // The server goes away; a restart verifies with the last good copy from the cache, and
    // with a max age of 1 s the copy soon counts as stale: a metric and a log line, never an
    // outage.
    drop(server);
    let sc = start_sidecar(dir.path(), &args(&["--range-max-age-s", "1"])).await;
    assert!(log_of(dir.path()).contains("range source loaded from the cache"));
    assert_eq!(
        sc.verify("127.0.91.6", "gptbot").await,
        answer("127.0.91.6", "gptbot", "verified", "ip_range", "", 86400)
    );
    sc.wait_metric(&fetches(&url, "error"), 1.0).await;
    sc.wait_metric(&series("range_source_stale", &url, ""), 1.0)
        .await;
    assert!(sc.metric(&series("range_source_failures", &url, "")).await >= 1.0);
    assert_eq!(sc.metric(&series("range_prefixes", &url, "")).await, 1.0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log_of(dir.path()).contains("range source stale; its ranges stay in use") {
        assert!(
            Instant::now() < deadline,
            "no stale log line:\n{}",
            log_of(dir.path())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(log_of(dir.path()).contains("range source fetch failed; keeping previous ranges"));
    assert_eq!(
        sc.verify("127.0.91.7", "gptbot").await,
        answer("127.0.91.7", "gptbot", "verified", "ip_range", "", 86400)
    );
}

#[tokio::test]
async fn with_no_network_the_sidecar_starts_and_verifies_by_fcrdns() {
    let Some(bin) = require_dnsmasq() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dns = start_dnsmasq(&bin, dir.path());
    // Googlebot's ranges at an address where nothing listens (port 9, discard): every fetch
    // fails, there is no cached copy, and FCrDNS still verifies.
    let dead = "http://127.0.0.1:9/common-crawlers.json";
    let config = dir.path().join("verifier.toml");
    std::fs::write(
        &config,
        format!("[[bots]]\nid = \"googlebot\"\nranges = [{dead:?}]\n"),
    )
    .unwrap();
    let mut args = nameserver_args(&dns);
    args.extend(["--config".into(), config.display().to_string()]);
    let sc = start_sidecar(dir.path(), &args).await;
    assert_eq!(
        sc.verify("192.0.2.1", "googlebot").await,
        answer(
            "192.0.2.1",
            "googlebot",
            "verified",
            "fcrdns",
            "crawl-66-249-66-1.googlebot.com",
            86400
        )
    );
    sc.wait_metric(&fetches(dead, "error"), 1.0).await;
    assert_eq!(sc.metric(&series("range_prefixes", dead, "")).await, 0.0);
    assert_eq!(
        sc.metric(&series("range_source_stale", dead, "")).await,
        0.0
    );
    assert!(!sc
        .metrics()
        .await
        .contains(&series("range_source_age_seconds", dead, "")));
    assert_eq!(
        sc.verify("192.0.2.200", "googlebot").await,
        answer("192.0.2.200", "googlebot", "spoofed", "fcrdns", "", 3600)
    );
}

/// `--check-config` gives one verdict for a configuration that does not validate too: the
/// field path and why on one `configuration invalid:` line, exit 1 (no error chain).
#[test]
fn check_config_refuses_a_cloud_zone_domain_in_one_verdict_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.toml");
    std::fs::write(
        &path,
        "[[bots]]\nid = 'googlebot'\ndomains = ['googlebot.com', 'bc.googleusercontent.com']\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_crawlguard-sidecar"))
        .args(["--check-config", "--config"])
        .arg(&path)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let verdict: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("configuration invalid: "))
        .collect();
    assert_eq!(
        verdict,
        [
            "configuration invalid: invalid configuration: bots[0].domains[1]: \
          \"bc.googleusercontent.com\" is no proof: it is in or contains googleusercontent.com, \
          under which anyone can rent a machine (Google Cloud (Compute Engine VMs: \
          <ip>.bc.googleusercontent.com; App Engine: *.gae.googleusercontent.com))"
        ],
        "{stderr}"
    );
    assert!(!stderr.contains("Caused by"), "{stderr}");
}
