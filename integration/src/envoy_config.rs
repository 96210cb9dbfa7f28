//! The Envoy configuration of a test: [`EnvoyOpts`] (what the test asks for) rendered from
//! the shipped `envoy/envoy.yaml` (or another shipped template) by [`render`]: free ports,
//! the absolute path of the built filter, the filter configuration, and optionally an
//! external upstream cluster, buffer and header limits, and a fake verifier listener.
//!
//! Every substitution insists that the text it replaces is in the template, so a change of
//! `envoy/envoy.yaml` that the harness does not follow fails loudly.

use std::net::SocketAddr;
use std::path::Path;

use crate::filter_config::FilterConfig;
use crate::paths::repo_root;
use crate::upstream::TestUpstream;
use crawlguard_contract::verify::{Answer, Method, Verdict};

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
    /// The `method` to send instead of the usual one: a value a newer sidecar might send
    /// (`None`: `fcrdns`, or `none` for `unknown`).
    pub method: Option<String>,
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
        let answer = Answer {
            ip: self.ip.clone(),
            bot: self.bot.clone(),
            verdict,
            method,
            host,
            ttl_s: 3600,
        };
        match &self.method {
            None => answer.to_json(),
            Some(m) => {
                let mut v = serde_json::to_value(&answer).unwrap_or_default();
                v["method"] = serde_json::Value::String(m.clone());
                v.to_string()
            }
        }
    }

    /// The same answer with `method` spelled `method` (e.g. one this filter does not know).
    pub fn with_method(mut self, method: &str) -> Self {
        self.method = Some(method.to_string());
        self
    }
}

impl<I: ToString, B: Into<String>, V: Into<String>> From<(I, B, V)> for FakeVerdict {
    fn from((ip, bot, verdict): (I, B, V)) -> Self {
        FakeVerdict {
            ip: ip.to_string(),
            bot: bot.into(),
            verdict: verdict.into(),
            method: None,
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
    /// started by [`crate::Sidecar`]). `None`: no such cluster.
    pub real_verifier_port: Option<u16>,
    /// `max_request_headers_kb` of the main listener's HTTP connection manager (Envoy's
    /// default, 60 KiB, when `None`).
    pub max_request_headers_kb: Option<u32>,
    /// The shipped Envoy configuration rendered for the test, relative to the repository
    /// root (default `envoy/envoy.yaml`; e.g. `envoy/envoy-local-ratelimit.yaml`).
    pub template: &'static str,
    /// Serve the main listener over LDS from a file Envoy watches (`dynamic_resources`
    /// `path_config_source`) instead of `static_resources`, so that
    /// [`crate::Envoy::push_filter_config`] can replace it in the running Envoy, as a control
    /// plane would. Default false.
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

    /// Serves the main listener over LDS from a watched file (see [`EnvoyOpts::lds`]).
    pub fn lds(mut self) -> Self {
        self.lds = true;
        self
    }

    /// Routes the main listener to `addr` (cluster `test_upstream`) over `protocol`.
    pub fn upstream(mut self, addr: SocketAddr, protocol: UpstreamProtocol) -> Self {
        self.upstream = Some(ExternalUpstream { addr, protocol });
        self
    }

    /// Routes the main listener to a [`TestUpstream`] over HTTP/1.1.
    pub fn in_front_of(self, up: &TestUpstream) -> Self {
        self.upstream(up.addr(), UpstreamProtocol::Http1)
    }

    /// Runs Envoy with this many worker threads (`--concurrency`).
    pub fn concurrency(mut self, workers: u32) -> Self {
        self.concurrency = workers;
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
}

/// The ports one Envoy listens on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ports {
    /// The main listener (with the crawlguard filter).
    pub main: u16,
    /// The demo origin's listener.
    pub upstream: u16,
    /// The admin endpoint.
    pub admin: u16,
    /// The fake verifier's listener (or, without one, a port where nothing listens).
    pub verifier: u16,
}

impl Ports {
    /// Four distinct ports that were free a moment ago.
    pub fn free() -> Ports {
        let [main, upstream, admin, verifier] = crate::process::free_tcp_ports::<4>();
        Ports {
            main,
            upstream,
            admin,
            verifier,
        }
    }
}

/// A JSON string literal (also a valid YAML double-quoted scalar).
pub(crate) fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Replaces `from` in `text`, insisting that it occurs (the template must not drift).
fn replace_required(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "envoy/envoy.yaml no longer contains `{from}`; update integration/src/envoy_config.rs"
    );
    text.replace(from, to)
}

/// Renders `envoy/envoy.yaml` for a test: free ports, absolute wasm path, the given filter
/// configuration, and the optional upstream, buffer limit and fake verifier.
pub(crate) fn render(ports: Ports, wasm: &Path, opts: &EnvoyOpts) -> String {
    let filter_config = &opts.filter_config.as_string();
    let template_path = repo_root().join(opts.template);
    let template = std::fs::read_to_string(&template_path)
        .unwrap_or_else(|e| panic!("read {}: {e}", template_path.display()));
    let mut y = template;
    for (from, to) in [
        ("port_value: 9901", format!("port_value: {}", ports.admin)),
        ("port_value: 10000", format!("port_value: {}", ports.main)),
        (
            "port_value: 10001",
            format!("port_value: {}", ports.upstream),
        ),
        (
            "filename: target/wasm32-wasip1/release/crawlguard.wasm",
            format!("filename: {}", json_str(&wasm.display().to_string())),
        ),
    ] {
        y = replace_required(&y, from, &to);
    }
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

/// Splits a rendered configuration into (the configuration without the listener `main`, an
/// LDS resource file holding that listener). The listener runs from its `  - name: main`
/// line to the next line indented by at most two spaces that is not a comment.
pub(crate) fn split_main_listener(yaml: &str) -> (String, String) {
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

/// The main listener served over LDS from a watched file (see [`EnvoyOpts::lds`]).
pub(crate) struct LdsFile {
    /// The directory Envoy watches; it holds `listeners.yaml`.
    pub dir: std::path::PathBuf,
    pub opts: EnvoyOpts,
    pub ports: Ports,
    pub wasm: std::path::PathBuf,
}

impl LdsFile {
    /// Renders the configuration with `cfg` as the filter configuration, writes its main
    /// listener to `listeners.yaml` atomically (written next to the directory, then renamed
    /// into it: the move is what Envoy's directory watch reacts to) and returns the rest,
    /// with a `node` and `dynamic_resources` pointing at that file, as the bootstrap.
    pub fn write(&self, cfg: &FilterConfig) -> String {
        let opts = EnvoyOpts {
            filter_config: cfg.clone(),
            ..self.opts.clone()
        };
        let (bootstrap, listener) = split_main_listener(&render(self.ports, &self.wasm, &opts));
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
