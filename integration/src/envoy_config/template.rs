//! Rendering the shipped `envoy/envoy.yaml` (or another shipped template) for a test: free
//! ports, the built filter's path, the filter configuration, and the optional upstream
//! cluster, limits and fake verifier listener.

use std::path::Path;

use super::fake_verifier::verifier_listener;
use super::{EnvoyOpts, ExternalUpstream, UpstreamProtocol};
use crate::paths::repo_root;

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
        "envoy/envoy.yaml no longer contains `{from}`; update integration/src/envoy_config/template.rs"
    );
    text.replace(from, to)
}

/// The shipped Envoy configuration of a TLS edge with every browser signal.
pub const TLS_TEMPLATE: &str = "envoy/envoy-tls.yaml";

/// The crawlguard configuration a shipped template gives the filter (its
/// `value: '<json>'` line), e.g. `envoy/envoy-tls.yaml`'s `client_signals`; `{}` for an
/// empty one.
pub fn shipped_filter_config(template: &str) -> serde_json::Value {
    let text = read_template(template);
    let json = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("value: '")?.strip_suffix('\''))
        .unwrap_or("{}");
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{template}: filter configuration: {e}"))
}

fn read_template(template: &str) -> String {
    let path = repo_root().join(template);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Renders `envoy/envoy.yaml` for a test: free ports, absolute wasm path, the given filter
/// configuration, and the optional upstream, buffer limit and fake verifier.
pub(crate) fn render(ports: Ports, wasm: &Path, opts: &EnvoyOpts) -> String {
    let mut filter_config = opts.filter_config.as_string();
    let mut y = read_template(opts.template);
    if let Some(edge) = &opts.tls_edge {
        if filter_config.is_empty() {
            filter_config = shipped_filter_config(TLS_TEMPLATE).to_string();
        }
        y = render_tls_edge(y, edge);
    }
    let filter_config = &filter_config;
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
        let timeout = opts
            .route_timeout_s
            .map_or(String::new(), |t| format!(", timeout: {t}s"));
        y = replace_required(
            &y,
            "route: { cluster: demo_upstream }",
            &format!("route: {{ cluster: test_upstream{timeout} }}"),
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

/// `envoy/envoy-tls.yaml` with `edge`'s files and ALPN, its main listener on the port the
/// other templates use and its configuration line emptied, so the rest of [`render`]
/// applies.
fn render_tls_edge(mut y: String, edge: &super::TlsEdge) -> String {
    let path = |p: &Path| json_str(&p.display().to_string());
    for (from, to) in [
        ("port_value: 10443", "port_value: 10000".to_string()),
        (
            "filename: /etc/envoy/tls/cert.pem",
            format!("filename: {}", path(&edge.cert)),
        ),
        (
            "filename: /etc/envoy/tls/key.pem",
            format!("filename: {}", path(&edge.key)),
        ),
        (
            "asn_db_path: /usr/share/GeoIP/GeoLite2-ASN.mmdb",
            format!("asn_db_path: {}", path(&edge.asn_db)),
        ),
    ] {
        y = replace_required(&y, from, &to);
    }
    if !edge.offer_h2 {
        y = replace_required(
            &y,
            "alpn_protocols: [\"h2\", \"http/1.1\"]",
            "alpn_protocols: [\"http/1.1\"]",
        );
    }
    // The common path of `render` puts the configuration in, at the usual `value: ""`.
    let shipped = y
        .lines()
        .find(|l| l.trim().starts_with("value: '"))
        .map(str::to_string)
        .expect("envoy/envoy-tls.yaml has a value: '...' configuration line");
    let indent = &shipped[..shipped.len() - shipped.trim_start().len()];
    y.replace(&shipped, &format!("{indent}value: \"\""))
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
