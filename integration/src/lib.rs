//! Real-Envoy test harness for the crawlguard wasm filter.
//!
//! [`Envoy::start`] writes an Envoy configuration derived from the shipped `envoy/envoy.yaml`
//! (same listeners, filter chain and demo origin, but on free ports and with the filter
//! configuration of the test) into a temporary directory, starts the Envoy from `.venv/`
//! (or `$CRAWLGUARD_ENVOY`) and waits until its admin endpoint reports `LIVE`. The returned
//! handle kills Envoy when dropped, also when a test panics.
//!
//! Clients made with [`client`] bind a chosen `127.0.0.x` source address, so one test process
//! can play many different client IPs against the same Envoy.

use std::collections::HashMap;
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use tokio::sync::Semaphore;

/// Prefix Envoy 1.40 puts in front of metrics defined by a wasm module (`define_metric`):
/// the filter's `crawlguard.class.human.allowed` shows up in the admin stats as
/// `wasmcustom.crawlguard.class.human.allowed`.
pub const WASM_STATS_PREFIX: &str = "wasmcustom.";

/// A current desktop Chrome User-Agent: classified `human`.
pub const UA_CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                             (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
/// curl's User-Agent: classified `script`.
pub const UA_CURL: &str = "curl/8.5.0";
/// Googlebot's desktop User-Agent: classified `unverified_bot` until verification exists.
pub const UA_GOOGLEBOT: &str =
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// How long [`Envoy::start`] waits for the admin endpoint to report `LIVE`.
const READY_DEADLINE: Duration = Duration::from_secs(30);
/// Poll interval while waiting for Envoy.
const POLL: Duration = Duration::from_millis(50);

/// The repository root (the parent of this crate's directory, symlinks resolved).
pub fn repo_root() -> PathBuf {
    if let Ok(root) = std::env::var("CRAWLGUARD_ROOT") {
        return PathBuf::from(root);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = manifest
        .canonicalize()
        .unwrap_or_else(|_| manifest.to_path_buf());
    manifest
        .parent()
        .expect("integration/ has a parent directory")
        .to_path_buf()
}

/// The Envoy binary: `$CRAWLGUARD_ENVOY`, else `<repo>/.venv/bin/envoy` (installed by
/// `scripts/setup.sh`). Panics with a hint when it is missing.
pub fn envoy_bin() -> PathBuf {
    let path = match std::env::var_os("CRAWLGUARD_ENVOY") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join(".venv/bin/envoy"),
    };
    assert!(
        path.exists(),
        "envoy not found at {}: run `make test` (or scripts/setup.sh) to install it, \
         or set CRAWLGUARD_ENVOY",
        path.display()
    );
    path
}

/// The built filter: `$CRAWLGUARD_WASM`, else
/// `<repo>/target/wasm32-wasip1/release/crawlguard.wasm`. Panics when it is missing.
pub fn wasm_path() -> PathBuf {
    let path = match std::env::var_os("CRAWLGUARD_WASM") {
        Some(p) => PathBuf::from(p),
        None => repo_root().join("target/wasm32-wasip1/release/crawlguard.wasm"),
    };
    assert!(
        path.exists(),
        "{} is missing: run `make build` first",
        path.display()
    );
    path
}

/// The filter's `configuration` as the test wants to hand it to Envoy.
#[derive(Debug, Clone)]
pub enum FilterConfig {
    /// A JSON document, serialised compactly.
    Json(serde_json::Value),
    /// Any string, passed verbatim (empty = the embedded default; may be invalid JSON).
    Raw(String),
}

impl FilterConfig {
    /// The string Envoy passes to `on_configure`.
    pub fn as_string(&self) -> String {
        match self {
            FilterConfig::Json(v) => v.to_string(),
            FilterConfig::Raw(s) => s.clone(),
        }
    }
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig::Raw(String::new())
    }
}

impl From<serde_json::Value> for FilterConfig {
    fn from(v: serde_json::Value) -> Self {
        FilterConfig::Json(v)
    }
}

impl From<&str> for FilterConfig {
    fn from(s: &str) -> Self {
        FilterConfig::Raw(s.to_string())
    }
}

/// How to start an Envoy for a test.
#[derive(Debug, Clone)]
pub struct EnvoyOpts {
    /// The crawlguard filter configuration (default: empty = embedded default).
    pub filter_config: FilterConfig,
    /// Envoy `--concurrency` (worker threads). Default 1.
    pub concurrency: u32,
}

impl Default for EnvoyOpts {
    fn default() -> Self {
        EnvoyOpts {
            filter_config: FilterConfig::default(),
            concurrency: 1,
        }
    }
}

impl EnvoyOpts {
    /// Options with the given filter configuration and one worker.
    pub fn with_config(cfg: impl Into<FilterConfig>) -> Self {
        EnvoyOpts {
            filter_config: cfg.into(),
            ..Default::default()
        }
    }
}

/// The three ports one Envoy listens on.
#[derive(Debug, Clone, Copy)]
struct Ports {
    main: u16,
    upstream: u16,
    admin: u16,
}

/// Picks three distinct free ports on 127.0.0.1 (bound together, then released).
fn free_ports() -> Ports {
    let ls: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    let p: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
    Ports {
        main: p[0],
        upstream: p[1],
        admin: p[2],
    }
}

/// Replaces `from` in `text`, insisting that it occurs (the template must not drift).
fn replace_required(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "envoy/envoy.yaml no longer contains `{from}`; update integration/src/lib.rs"
    );
    text.replace(from, to)
}

/// Renders `envoy/envoy.yaml` for a test: free ports, absolute wasm path, the given filter
/// configuration.
fn render_config(ports: Ports, wasm: &Path, filter_config: &str) -> String {
    let template_path = repo_root().join("envoy/envoy.yaml");
    let template = std::fs::read_to_string(&template_path)
        .unwrap_or_else(|e| panic!("read {}: {e}", template_path.display()));
    let json_str = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let mut y = template;
    y = replace_required(
        &y,
        "port_value: 9901",
        &format!("port_value: {}", ports.admin),
    );
    y = replace_required(
        &y,
        "port_value: 10000",
        &format!("port_value: {}", ports.main),
    );
    y = replace_required(
        &y,
        "port_value: 10001",
        &format!("port_value: {}", ports.upstream),
    );
    y = replace_required(
        &y,
        "filename: target/wasm32-wasip1/release/crawlguard.wasm",
        &format!("filename: {}", json_str(&wasm.display().to_string())),
    );
    // A JSON string literal is a valid YAML double-quoted scalar.
    y = replace_required(
        &y,
        "value: \"\"",
        &format!("value: {}", json_str(filter_config)),
    );
    y
}

/// How a start attempt ended.
enum Outcome {
    Ready,
    Exited(String),
    TimedOut,
}

/// A running Envoy with the crawlguard filter, killed on drop.
pub struct Envoy {
    child: Child,
    ports: Ports,
    log_path: PathBuf,
    admin: reqwest::Client,
    // Keep the temp dir (config + log) alive as long as Envoy runs; removed on drop.
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy and waits until it is ready. Panics (printing Envoy's log) if it does not
    /// become ready within 30 s. Retries on a port collision with a parallel test.
    pub async fn start(opts: EnvoyOpts) -> Envoy {
        let mut last_log = String::new();
        for _attempt in 0..3 {
            let mut envoy = Envoy::spawn(&opts);
            match envoy.wait_ready().await {
                Outcome::Ready => return envoy,
                Outcome::Exited(log) if log.contains("Address already in use") => {
                    last_log = log;
                    continue;
                }
                Outcome::Exited(log) => {
                    panic!("envoy exited before becoming ready; log:\n{log}")
                }
                Outcome::TimedOut => panic!(
                    "envoy not ready after {READY_DEADLINE:?}; log:\n{}",
                    envoy.log()
                ),
            }
        }
        panic!("envoy could not bind its ports after 3 attempts; last log:\n{last_log}");
    }

    /// Starts Envoy with a configuration that must be refused: returns Envoy's log once it
    /// has exited (or, if it neither exits nor becomes ready within 30 s, once it is killed).
    /// Panics if Envoy becomes ready.
    pub async fn start_expect_failure(opts: EnvoyOpts) -> String {
        let mut envoy = Envoy::spawn(&opts);
        match envoy.wait_ready().await {
            Outcome::Ready => panic!(
                "envoy became ready with a configuration that should be refused: {}\nlog:\n{}",
                opts.filter_config.as_string(),
                envoy.log()
            ),
            Outcome::Exited(log) => log,
            Outcome::TimedOut => {
                envoy.kill();
                envoy.log()
            }
        }
    }

    fn spawn(opts: &EnvoyOpts) -> Envoy {
        let dir = tempfile::Builder::new()
            .prefix("crawlguard-envoy-")
            .tempdir()
            .expect("create temp dir");
        let ports = free_ports();
        let wasm = wasm_path();
        let yaml = render_config(ports, &wasm, &opts.filter_config.as_string());
        let cfg_path = dir.path().join("envoy.yaml");
        std::fs::write(&cfg_path, yaml).expect("write envoy.yaml");
        let log_path = dir.path().join("envoy.log");
        let log = File::create(&log_path).expect("create envoy.log");
        // Envoy logs to stderr (unbuffered; a --log-path file is flushed only every few
        // seconds, which would hide recent lines from `log()`).
        let child = Command::new(envoy_bin())
            .arg("-c")
            .arg(&cfg_path)
            .arg("--concurrency")
            .arg(opts.concurrency.to_string())
            .arg("--use-dynamic-base-id")
            .args(["--log-level", "info", "--component-log-level", "wasm:debug"])
            .args(["--drain-time-s", "0"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", envoy_bin().display()));
        let admin = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("admin client");
        Envoy {
            child,
            ports,
            log_path,
            admin,
            _dir: dir,
        }
    }

    async fn wait_ready(&mut self) -> Outcome {
        let deadline = Instant::now() + READY_DEADLINE;
        let url = format!("{}/ready", self.admin_url());
        while Instant::now() < deadline {
            if let Ok(Some(_status)) = self.child.try_wait() {
                return Outcome::Exited(self.log());
            }
            if let Ok(resp) = self.admin.get(&url).send().await {
                if resp.status().is_success() {
                    if let Ok(body) = resp.text().await {
                        if body.trim() == "LIVE" {
                            return Outcome::Ready;
                        }
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
        Outcome::TimedOut
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `http://127.0.0.1:<port>` of the listener with the crawlguard filter.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.main)
    }

    /// `base_url()` + `path` (`path` starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url(), path)
    }

    /// `http://127.0.0.1:<port>` of Envoy's admin endpoint.
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.admin)
    }

    /// The port of the main listener (e.g. for per-worker listener stats).
    pub fn main_port(&self) -> u16 {
        self.ports.main
    }

    /// Everything Envoy has logged so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Every counter and gauge from the admin `/stats?format=json` (histograms skipped).
    pub async fn stats(&self) -> HashMap<String, u64> {
        let url = format!("{}/stats?format=json", self.admin_url());
        let text = self
            .admin
            .get(&url)
            .send()
            .await
            .expect("GET admin /stats")
            .error_for_status()
            .expect("admin /stats status")
            .text()
            .await
            .expect("admin /stats body");
        let body: serde_json::Value = serde_json::from_str(&text).expect("admin /stats JSON");
        let mut out = HashMap::new();
        for s in body["stats"].as_array().into_iter().flatten() {
            if let (Some(name), Some(value)) = (s["name"].as_str(), s["value"].as_u64()) {
                out.insert(name.to_string(), value);
            }
        }
        out
    }

    /// One stat by its full admin name (e.g. `wasmcustom.crawlguard.class.human.allowed`);
    /// `None` if Envoy does not have it (a wasm metric exists once the filter defined it).
    pub async fn stat(&self, name: &str) -> Option<u64> {
        self.stats().await.get(name).copied()
    }

    /// A crawlguard counter by the name the filter gives it, without the wasm prefix
    /// (e.g. `crawlguard.class.human.allowed`); 0 when not (yet) defined.
    pub async fn counter(&self, name: &str) -> u64 {
        self.stat(&format!("{WASM_STATS_PREFIX}{name}"))
            .await
            .unwrap_or(0)
    }

    /// All crawlguard counters, keyed without the wasm prefix (`crawlguard.class....`).
    pub async fn crawlguard_stats(&self) -> HashMap<String, u64> {
        let full = format!("{WASM_STATS_PREFIX}crawlguard.");
        self.stats()
            .await
            .into_iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(&full)
                    .map(|rest| (format!("crawlguard.{rest}"), v))
            })
            .collect()
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An HTTP client whose connections come from `ip` (a `127.0.0.x` address plays a client
/// IP). It keeps a connection pool, so concurrent requests open several connections (which
/// the kernel spreads over Envoy's workers).
pub fn client(ip: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(ip))
        .no_proxy()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(15))
        .build()
        .expect("build reqwest client")
}

/// What came back for one request.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// Response body (lossy UTF-8).
    pub body: String,
}

impl Reply {
    /// A header as a string, if present and valid.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The class the demo origin saw in `x-crawler-class` (echoed as `x-upstream-saw-class`).
    pub fn upstream_class(&self) -> Option<&str> {
        self.header("x-upstream-saw-class")
    }

    /// `Retry-After` parsed as delay-seconds.
    pub fn retry_after_s(&self) -> Option<u64> {
        self.header("retry-after").and_then(|v| v.parse().ok())
    }
}

/// GET `url` with the given User-Agent and extra headers; panics on a transport error.
pub async fn get(client: &reqwest::Client, url: &str, ua: &str, extra: &[(&str, &str)]) -> Reply {
    let mut req = client.get(url).header("user-agent", ua);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Reply {
        status,
        headers,
        body,
    }
}

/// Sends `n` GETs of `url` at once (at most `parallel` in flight) and returns the replies in
/// completion order.
pub async fn burst(
    client: &reqwest::Client,
    url: &str,
    ua: &str,
    n: usize,
    parallel: usize,
) -> Vec<Reply> {
    let sem = Arc::new(Semaphore::new(parallel.max(1)));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (client, url, ua, sem) = (client.clone(), url.to_string(), ua.to_string(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore");
            get(&client, &url, &ua, &[]).await
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.expect("request task"));
    }
    out
}

/// Sends `n` GETs one after the other and returns the replies in order.
pub async fn sequential(client: &reqwest::Client, url: &str, ua: &str, n: usize) -> Vec<Reply> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(get(client, url, ua, &[]).await);
    }
    out
}

/// Counts replies by status code.
pub fn by_status(replies: &[Reply]) -> HashMap<u16, usize> {
    let mut m = HashMap::new();
    for r in replies {
        *m.entry(r.status).or_insert(0) += 1;
    }
    m
}
