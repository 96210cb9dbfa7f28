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
//!
//! Options beyond the shipped layout: [`EnvoyOpts::upstream`] routes the main listener to an
//! external origin (usually a [`TestUpstream`], the scriptable `crawlguard-test-upstream`
//! binary of this crate) over HTTP/1.1 or h2c; [`EnvoyOpts::buffer_limit`] sets
//! `per_connection_buffer_limit_bytes` on the main listener and that upstream cluster;
//! [`EnvoyOpts::max_request_headers_kb`] raises the main listener's request header limit;
//! [`EnvoyOpts::fake_verifier`] adds a `crawlguard_verifier` cluster answered by an extra
//! listener of the same Envoy with fixed verdicts; [`EnvoyOpts::lds`] serves the main
//! listener over LDS from a watched file, so [`Envoy::push_filter_config`] can change the
//! filter configuration of a running Envoy. [`RawHttp1`] speaks HTTP/1.1 on one TCP
//! connection, for keep-alive checks.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crawlguard_contract::verify::{Answer, Method, Verdict};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
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

/// How Envoy talks to an external upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamProtocol {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2 over cleartext with prior knowledge.
    H2c,
}

/// An origin outside Envoy that the main listener routes to (cluster `test_upstream`).
#[derive(Debug, Clone, Copy)]
pub struct ExternalUpstream {
    /// Its address (a loopback address in the tests).
    pub addr: SocketAddr,
    /// The protocol Envoy speaks to it.
    pub protocol: UpstreamProtocol,
}

/// One fixed answer of the fake verifier (see [`EnvoyOpts::fake_verifier`]).
#[derive(Debug, Clone)]
pub struct FakeVerdict {
    /// The client IP of the claim, as the filter prints it in `ip=`.
    pub ip: String,
    /// The bot id of the claim (`bot=`).
    pub bot: String,
    /// `verified`, `spoofed` or `unknown`.
    pub verdict: String,
}

impl FakeVerdict {
    /// The JSON body the fake verifier answers with: the contract's [`Answer`] (crate
    /// `crawlguard-contract`, the type the sidecar serialises and the filter parses), `method`
    /// `fcrdns` (`none` for `unknown`), `host` `crawl-<ip with dashes>.<bot>.com` for
    /// `verified` (empty otherwise), `ttl_s` 3600. A `verdict` other than `verified`,
    /// `spoofed` or `unknown` gives a body that is not an answer (a verifier error for the
    /// filter).
    pub fn body(&self) -> String {
        let Some(verdict) = Verdict::parse(&self.verdict) else {
            return format!("not a verdict: {}", self.verdict);
        };
        let host = if verdict == Verdict::Verified {
            format!(
                "crawl-{}.{}.com",
                self.ip.replace(['.', ':'], "-"),
                self.bot
            )
        } else {
            String::new()
        };
        let method = if verdict == Verdict::Unknown {
            Method::None
        } else {
            Method::Fcrdns
        };
        Answer {
            ip: self.ip.clone(),
            bot: self.bot.clone(),
            verdict,
            method,
            host,
            ttl_s: 3600,
        }
        .to_json()
    }
}

impl<I: ToString, B: Into<String>, V: Into<String>> From<(I, B, V)> for FakeVerdict {
    fn from((ip, bot, verdict): (I, B, V)) -> Self {
        FakeVerdict {
            ip: ip.to_string(),
            bot: bot.into(),
            verdict: verdict.into(),
        }
    }
}

/// How to start an Envoy for a test.
#[derive(Debug, Clone)]
pub struct EnvoyOpts {
    /// The crawlguard filter configuration (default: empty = embedded default).
    pub filter_config: FilterConfig,
    /// Envoy `--concurrency` (worker threads). Default 1.
    pub concurrency: u32,
    /// Route the main listener to this origin instead of the built-in demo origin.
    pub upstream: Option<ExternalUpstream>,
    /// `per_connection_buffer_limit_bytes` of the main listener and of the external upstream
    /// cluster (Envoy's default, 1 MiB, when `None`).
    pub buffer_limit_bytes: Option<u32>,
    /// A fake verifier: cluster `crawlguard_verifier` -> an extra listener that answers
    /// `GET /v1/verify?ip=<ip>&bot=<bot>` with a 200 JSON verdict for each listed claim and
    /// 404 (a verifier error for the filter) for anything else. `None`: no such cluster.
    pub fake_verifier: Option<Vec<FakeVerdict>>,
    /// A real verifier: cluster `crawlguard_verifier` -> `127.0.0.1:<port>` (the sidecar
    /// started by [`stack::Sidecar`]). `None`: no such cluster.
    pub real_verifier_port: Option<u16>,
    /// `max_request_headers_kb` of the main listener's HTTP connection manager (Envoy's
    /// default, 60 KiB, when `None`).
    pub max_request_headers_kb: Option<u32>,
    /// The shipped Envoy configuration rendered for the test, relative to the repository
    /// root (default `envoy/envoy.yaml`; e.g. `envoy/envoy-local-ratelimit.yaml`).
    pub template: &'static str,
    /// Serve the main listener over LDS from a file Envoy watches (`dynamic_resources`
    /// `path_config_source`) instead of `static_resources`, so that
    /// [`Envoy::push_filter_config`] can replace it in the running Envoy, as a control plane
    /// would. Default false.
    pub lds: bool,
}

impl Default for EnvoyOpts {
    fn default() -> Self {
        EnvoyOpts {
            filter_config: FilterConfig::default(),
            concurrency: 1,
            upstream: None,
            buffer_limit_bytes: None,
            fake_verifier: None,
            real_verifier_port: None,
            max_request_headers_kb: None,
            template: "envoy/envoy.yaml",
            lds: false,
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

    /// Routes the main listener to `addr` (cluster `test_upstream`) over `protocol`.
    pub fn upstream(mut self, addr: SocketAddr, protocol: UpstreamProtocol) -> Self {
        self.upstream = Some(ExternalUpstream { addr, protocol });
        self
    }

    /// Sets `per_connection_buffer_limit_bytes` on the main listener and the upstream cluster.
    pub fn buffer_limit(mut self, bytes: u32) -> Self {
        self.buffer_limit_bytes = Some(bytes);
        self
    }

    /// Adds the fake verifier with these `(ip, bot, verdict)` answers, e.g.
    /// `.fake_verifier(vec![("127.0.0.7", "googlebot", "verified")])`.
    pub fn fake_verifier<T: Into<FakeVerdict>>(mut self, verdicts: Vec<T>) -> Self {
        self.fake_verifier = Some(verdicts.into_iter().map(Into::into).collect());
        self
    }

    /// Points cluster `crawlguard_verifier` at a real verifier on `127.0.0.1:<port>`.
    pub fn real_verifier(mut self, port: u16) -> Self {
        self.real_verifier_port = Some(port);
        self
    }

    /// Renders another shipped configuration (same listeners, ports and clusters as
    /// `envoy/envoy.yaml`), e.g. `envoy/envoy-local-ratelimit.yaml`.
    pub fn template(mut self, path: &'static str) -> Self {
        self.template = path;
        self
    }

    /// Sets `max_request_headers_kb` on the main listener's HTTP connection manager.
    pub fn max_request_headers_kb(mut self, kb: u32) -> Self {
        self.max_request_headers_kb = Some(kb);
        self
    }

    /// Serves the main listener over LDS from a watched file (see [`EnvoyOpts::lds`]).
    pub fn lds(mut self) -> Self {
        self.lds = true;
        self
    }
}

/// The ports one Envoy listens on.
#[derive(Debug, Clone, Copy)]
struct Ports {
    main: u16,
    upstream: u16,
    admin: u16,
    verifier: u16,
}

/// Picks four distinct free ports on 127.0.0.1 (bound together, then released).
fn free_ports() -> Ports {
    let ls: Vec<TcpListener> = (0..4)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    let p: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
    Ports {
        main: p[0],
        upstream: p[1],
        admin: p[2],
        verifier: p[3],
    }
}

/// A JSON string literal (also a valid YAML double-quoted scalar).
fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
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
/// configuration, and the optional upstream, buffer limit and fake verifier.
fn render_config(ports: Ports, wasm: &Path, opts: &EnvoyOpts) -> String {
    let filter_config = &opts.filter_config.as_string();
    let template_path = repo_root().join(opts.template);
    let template = std::fs::read_to_string(&template_path)
        .unwrap_or_else(|e| panic!("read {}: {e}", template_path.display()));
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
    if let Some(limit) = opts.buffer_limit_bytes {
        y = replace_required(
            &y,
            "  - name: main\n",
            &format!("  - name: main\n    per_connection_buffer_limit_bytes: {limit}\n"),
        );
    }
    if let Some(kb) = opts.max_request_headers_kb {
        y = replace_required(
            &y,
            "          stat_prefix: main\n",
            &format!("          stat_prefix: main\n          max_request_headers_kb: {kb}\n"),
        );
    }
    if let Some(up) = opts.upstream {
        y = replace_required(
            &y,
            "route: { cluster: demo_upstream }",
            "route: { cluster: test_upstream }",
        );
        y = replace_required(
            &y,
            "\n  clusters:\n",
            &format!(
                "\n  clusters:\n{}",
                upstream_cluster(up, opts.buffer_limit_bytes)
            ),
        );
    }
    // envoy.yaml's crawlguard_verifier cluster: the real sidecar, the fake verifier's
    // listener, or (neither) a free port where nothing listens.
    assert!(
        opts.real_verifier_port.is_none() || opts.fake_verifier.is_none(),
        "a fake or a real verifier, not both"
    );
    y = replace_required(
        &y,
        "port_value: 9090",
        &format!(
            "port_value: {}",
            opts.real_verifier_port.unwrap_or(ports.verifier)
        ),
    );
    if let Some(verdicts) = &opts.fake_verifier {
        y = replace_required(
            &y,
            "\n  listeners:\n",
            &format!(
                "\n  listeners:\n{}",
                verifier_listener(ports.verifier, verdicts)
            ),
        );
    }
    y
}

/// Cluster `test_upstream` (YAML, indented for `static_resources.clusters`).
fn upstream_cluster(up: ExternalUpstream, buffer_limit: Option<u32>) -> String {
    let mut c =
        String::from("  - name: test_upstream\n    type: STATIC\n    connect_timeout: 1s\n");
    if let Some(limit) = buffer_limit {
        c += &format!("    per_connection_buffer_limit_bytes: {limit}\n");
    }
    if up.protocol == UpstreamProtocol::H2c {
        c += concat!(
            "    typed_extension_protocol_options:\n",
            "      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n",
            "        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n",
            "        explicit_http_config:\n",
            "          http2_protocol_options: {}\n",
        );
    }
    c += &format!(
        concat!(
            "    load_assignment:\n",
            "      cluster_name: test_upstream\n",
            "      endpoints:\n",
            "      - lb_endpoints:\n",
            "        - endpoint:\n",
            "            address:\n",
            "              socket_address: {{ address: {}, port_value: {} }}\n",
        ),
        json_str(&up.addr.ip().to_string()),
        up.addr.port()
    );
    c
}

/// The fake verifier: a listener whose routes answer the listed claims with fixed verdicts.
fn verifier_listener(port: u16, verdicts: &[FakeVerdict]) -> String {
    let mut routes = String::new();
    for v in verdicts {
        routes += &format!(
            concat!(
                "              - match:\n",
                "                  path: /v1/verify\n",
                "                  query_parameters:\n",
                "                  - name: ip\n",
                "                    string_match: {{ exact: {ip} }}\n",
                "                  - name: bot\n",
                "                    string_match: {{ exact: {bot} }}\n",
                "                direct_response:\n",
                "                  status: 200\n",
                "                  body: {{ inline_string: {body} }}\n",
                "                response_headers_to_add:\n",
                "                - header: {{ key: content-type, value: application/json }}\n",
                "                  append_action: OVERWRITE_IF_EXISTS_OR_ADD\n",
            ),
            ip = json_str(&v.ip),
            bot = json_str(&v.bot),
            body = json_str(&v.body()),
        );
    }
    format!(
        concat!(
            "  - name: fake_verifier\n",
            "    address:\n",
            "      socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n",
            "    filter_chains:\n",
            "    - filters:\n",
            "      - name: envoy.filters.network.http_connection_manager\n",
            "        typed_config:\n",
            "          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n",
            "          stat_prefix: fake_verifier\n",
            "          route_config:\n",
            "            name: fake_verifier\n",
            "            virtual_hosts:\n",
            "            - name: all\n",
            "              domains: [\"*\"]\n",
            "              routes:\n",
            "{routes}",
            "              - match: {{ prefix: \"/\" }}\n",
            "                direct_response: {{ status: 404 }}\n",
            "          http_filters:\n",
            "          - name: envoy.filters.http.router\n",
            "            typed_config:\n",
            "              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n",
        ),
        port = port,
        routes = routes
    )
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
    lds: Option<LdsFile>,
    // Keep the temp dir (config + log) alive as long as Envoy runs; removed on drop.
    _dir: tempfile::TempDir,
}

/// The main listener served over LDS from a watched file (see [`EnvoyOpts::lds`]).
struct LdsFile {
    /// The directory Envoy watches; it holds `listeners.yaml`.
    dir: PathBuf,
    opts: EnvoyOpts,
    ports: Ports,
    wasm: PathBuf,
}

impl LdsFile {
    /// Renders the configuration with `cfg` as the filter configuration, writes its main
    /// listener to `listeners.yaml` atomically (written next to the directory, then renamed
    /// into it: the move is what Envoy's directory watch reacts to) and returns the rest,
    /// with a `node` and `dynamic_resources` pointing at that file, as the bootstrap.
    fn write(&self, cfg: &FilterConfig) -> String {
        let opts = EnvoyOpts {
            filter_config: cfg.clone(),
            ..self.opts.clone()
        };
        let (bootstrap, listener) =
            split_main_listener(&render_config(self.ports, &self.wasm, &opts));
        let path = self.dir.join("listeners.yaml");
        let tmp = self.dir.with_extension("tmp");
        std::fs::write(&tmp, listener).expect("write LDS file");
        std::fs::rename(&tmp, &path).expect("move LDS file into place");
        // LDS needs a node identity (a file has no control plane to tell it apart from).
        format!(
            concat!(
                "node: {{ id: crawlguard-test, cluster: crawlguard-test }}\n",
                "{}dynamic_resources:\n",
                "  lds_config:\n",
                "    resource_api_version: V3\n",
                "    path_config_source:\n",
                "      path: {}\n",
                "      watched_directory: {{ path: {} }}\n",
            ),
            bootstrap,
            json_str(&path.display().to_string()),
            json_str(&self.dir.display().to_string())
        )
    }
}

/// Splits a rendered configuration into (the configuration without the listener `main`, an
/// LDS resource file holding that listener). The listener runs from its `  - name: main`
/// line to the next line indented by at most two spaces that is not a comment.
fn split_main_listener(yaml: &str) -> (String, String) {
    const START: &str = "\n  - name: main\n";
    let start = yaml
        .find(START)
        .map(|i| i + 1)
        .expect("the rendered configuration has a listener `main`");
    let (head, rest) = yaml.split_at(start);
    let mut end = rest.len();
    let mut offset = 0;
    for (i, line) in rest.split_inclusive('\n').enumerate() {
        let text = line.trim();
        let indent = line.len() - line.trim_start_matches(' ').len();
        if i > 0 && !text.is_empty() && !text.starts_with('#') && indent <= 2 {
            end = offset;
            break;
        }
        offset += line.len();
    }
    let (block, tail) = rest.split_at(end);
    let mut listener = String::from("resources:\n");
    for (i, line) in block.lines().enumerate() {
        let line = line.strip_prefix("  ").unwrap_or(line);
        if i == 0 {
            listener += "- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n";
            listener += "  ";
            listener += line.trim_start_matches("- ");
        } else {
            listener += line;
        }
        listener.push('\n');
    }
    let mut bootstrap = format!("{head}{tail}");
    if !bootstrap.ends_with('\n') {
        bootstrap.push('\n');
    }
    (bootstrap, listener)
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

    /// Starts Envoy and waits until it is ready (`Ok`) or has exited (`Err` with its log),
    /// e.g. for a configuration that should be refused but may not be. Panics if it does
    /// neither within 30 s.
    pub async fn try_start(opts: EnvoyOpts) -> Result<Envoy, String> {
        let mut envoy = Envoy::spawn(&opts);
        match envoy.wait_ready().await {
            Outcome::Ready => Ok(envoy),
            Outcome::Exited(log) => Err(log),
            Outcome::TimedOut => panic!(
                "envoy neither ready nor exited after {READY_DEADLINE:?}; log:\n{}",
                envoy.log()
            ),
        }
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
        let lds = opts.lds.then(|| LdsFile {
            dir: dir.path().join("lds"),
            opts: opts.clone(),
            ports,
            wasm: wasm.clone(),
        });
        let yaml = match &lds {
            Some(l) => {
                std::fs::create_dir(&l.dir).expect("create lds dir");
                l.write(&opts.filter_config)
            }
            None => render_config(ports, &wasm, opts),
        };
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
            lds,
            _dir: dir,
        }
    }

    /// Replaces the filter configuration of the running Envoy, as a control plane would
    /// (needs [`EnvoyOpts::lds`]): writes the main listener with `cfg` to the LDS file and
    /// waits (30 s at most) until Envoy has applied it (`listener_manager.lds.update_success`
    /// went up and no listener is warming, so new connections get the new configuration) or
    /// refused it (`listener_manager.lds.update_rejected` went up: `Err` with Envoy's log).
    pub async fn push_filter_config(&self, cfg: impl Into<FilterConfig>) -> Result<(), String> {
        const OK: &str = "listener_manager.lds.update_success";
        const REJECTED: &str = "listener_manager.lds.update_rejected";
        const WARMING: &str = "listener_manager.total_listeners_warming";
        let lds = self
            .lds
            .as_ref()
            .expect("push_filter_config needs EnvoyOpts::lds()");
        let stat = |s: &HashMap<String, u64>, k: &str| s.get(k).copied().unwrap_or(0);
        let before = self.stats().await;
        lds.write(&cfg.into());
        let deadline = Instant::now() + READY_DEADLINE;
        while Instant::now() < deadline {
            let now = self.stats().await;
            if stat(&now, REJECTED) > stat(&before, REJECTED) {
                return Err(self.log());
            }
            if stat(&now, OK) > stat(&before, OK) && stat(&now, WARMING) == 0 {
                return Ok(());
            }
            tokio::time::sleep(POLL).await;
        }
        panic!(
            "envoy neither applied nor refused the pushed listener within {READY_DEADLINE:?}; \
             log:\n{}",
            self.log()
        );
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

    /// The body of an admin `GET path` (e.g. `/memory`); panics on an error status.
    pub async fn admin_get(&self, path: &str) -> String {
        let url = format!("{}{}", self.admin_url(), path);
        self.admin
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET admin {path}: {e}"))
            .error_for_status()
            .unwrap_or_else(|e| panic!("admin {path}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("admin {path} body: {e}"))
    }

    /// Bytes currently allocated by Envoy's heap (admin `/memory`, field `allocated`).
    pub async fn memory_allocated(&self) -> u64 {
        let text = self.admin_get("/memory").await;
        let v: serde_json::Value = serde_json::from_str(&text).expect("admin /memory JSON");
        let a = &v["allocated"];
        a.as_u64()
            .or_else(|| a.as_str().and_then(|s| s.parse().ok()))
            .unwrap_or_else(|| panic!("no `allocated` in admin /memory: {text}"))
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

    /// How many times a header occurs.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers.get_all(name).iter().count()
    }

    /// The header names, sorted, each once.
    pub fn header_names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.headers.keys().map(|k| k.to_string()).collect();
        n.sort();
        n.dedup();
        n
    }
}

/// The `crawlguard-test-upstream` binary: `$CRAWLGUARD_TEST_UPSTREAM`, else next to the
/// running test executable's directory (`target/<profile>/`, where cargo builds the binaries
/// of this package before its integration tests). Integration tests of this crate can also
/// pass `env!("CARGO_BIN_EXE_crawlguard-test-upstream")` to [`TestUpstream::start_bin`].
pub fn test_upstream_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CRAWLGUARD_TEST_UPSTREAM") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/crawlguard-test-upstream
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("test executable directory");
    dir.join("crawlguard-test-upstream")
}

/// A running `crawlguard-test-upstream` (HTTP/1.1 and h2c on one loopback port), killed on
/// drop. See the binary's module documentation for the request parameters.
pub struct TestUpstream {
    child: Child,
    addr: SocketAddr,
    http: reqwest::Client,
}

impl TestUpstream {
    /// Starts the binary found by [`test_upstream_bin`].
    pub fn start() -> TestUpstream {
        TestUpstream::start_bin(test_upstream_bin())
    }

    /// Starts `bin --listen 127.0.0.1:0` and waits (10 s at most) for its
    /// `listening on ADDR` line.
    pub fn start_bin(bin: impl AsRef<Path>) -> TestUpstream {
        let bin = bin.as_ref();
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build -p crawlguard-integration --bins` \
             or set CRAWLGUARD_TEST_UPSTREAM",
            bin.display()
        );
        let mut child = Command::new(bin)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            // Keep draining so the upstream never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) => l,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not say `listening on`: {e}", bin.display());
            }
        };
        let addr: SocketAddr = line
            .strip_prefix("listening on ")
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from test upstream: {line:?}"));
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("upstream log client");
        TestUpstream { child, addr, http }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request it received (`GET /__upstream/requests`), oldest first, each
    /// `{"method", "path", "version", "headers": {name: [values]}, "body_bytes_sent"}`.
    pub async fn requests(&self) -> Vec<serde_json::Value> {
        let url = format!("http://{}/__upstream/requests", self.addr);
        let text = self
            .http
            .get(&url)
            .send()
            .await
            .expect("GET upstream request log")
            .text()
            .await
            .expect("upstream request log body");
        match serde_json::from_str(&text).expect("upstream request log JSON") {
            serde_json::Value::Array(a) => a,
            other => panic!("upstream request log is not an array: {other}"),
        }
    }
}

impl Drop for TestUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 client connection (keep-alive), for checks that must stay on one socket.
/// Understands `content-length` and chunked responses.
pub struct RawHttp1 {
    io: tokio::io::BufReader<tokio::net::TcpStream>,
    host: String,
}

impl RawHttp1 {
    /// Connects from `from` (a `127.0.0.x` client address) to `to`.
    pub async fn connect(from: Ipv4Addr, to: SocketAddr) -> RawHttp1 {
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        sock.bind(SocketAddr::new(IpAddr::V4(from), 0))
            .unwrap_or_else(|e| panic!("bind {from}: {e}"));
        let stream = sock
            .connect(to)
            .await
            .unwrap_or_else(|e| panic!("connect {to}: {e}"));
        RawHttp1 {
            io: tokio::io::BufReader::new(stream),
            host: to.to_string(),
        }
    }

    /// Sends `GET path` with a User-Agent and reads the whole response (10 s at most).
    pub async fn get(&mut self, path: &str, ua: &str) -> Reply {
        let req = format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\nuser-agent: {ua}\r\n\r\n",
            self.host
        );
        tokio::time::timeout(Duration::from_secs(10), async {
            self.io
                .get_mut()
                .write_all(req.as_bytes())
                .await
                .expect("write request");
            self.read_response().await
        })
        .await
        .unwrap_or_else(|_| panic!("no complete response to GET {path} within 10 s"))
    }

    async fn line(&mut self) -> String {
        let mut l = String::new();
        let n = self.io.read_line(&mut l).await.expect("read line");
        assert!(n > 0, "connection closed by the server");
        l.trim_end_matches(['\r', '\n']).to_string()
    }

    async fn read_response(&mut self) -> Reply {
        let status_line = self.line().await;
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let mut headers = HeaderMap::new();
        loop {
            let l = self.line().await;
            if l.is_empty() {
                break;
            }
            let (k, v) = l
                .split_once(':')
                .unwrap_or_else(|| panic!("bad header line {l:?}"));
            headers.append(
                HeaderName::from_bytes(k.trim().as_bytes()).expect("header name"),
                HeaderValue::from_str(v.trim()).expect("header value"),
            );
        }
        let chunked = headers
            .get("transfer-encoding")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
        let mut body = Vec::new();
        if chunked {
            loop {
                let size = self.line().await;
                let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16)
                    .unwrap_or_else(|_| panic!("bad chunk size {size:?}"));
                if size == 0 {
                    while !self.line().await.is_empty() {}
                    break;
                }
                let mut chunk = vec![0; size + 2];
                self.io.read_exact(&mut chunk).await.expect("read chunk");
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(len) = headers.get("content-length") {
            let len: usize = len.to_str().unwrap().parse().expect("content-length");
            body.resize(len, 0);
            self.io.read_exact(&mut body).await.expect("read body");
        }
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
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

#[cfg(test)]
mod tests {
    use super::FakeVerdict;

    #[test]
    fn fake_verdict_body_follows_the_verifier_contract() {
        let v = FakeVerdict::from(("127.0.0.7", "googlebot", "verified"));
        assert_eq!(
            v.body(),
            r#"{"ip":"127.0.0.7","bot":"googlebot","verdict":"verified","method":"fcrdns","host":"crawl-127-0-0-7.googlebot.com","ttl_s":3600}"#
        );
        let v = FakeVerdict::from(("127.0.0.8", "gptbot", "spoofed"));
        assert_eq!(
            v.body(),
            r#"{"ip":"127.0.0.8","bot":"gptbot","verdict":"spoofed","method":"fcrdns","host":"","ttl_s":3600}"#
        );
    }
}

pub mod stack;
