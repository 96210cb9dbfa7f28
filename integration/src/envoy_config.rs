//! The Envoy configuration of a test: [`EnvoyOpts`] (what the test asks for) rendered from
//! the shipped `envoy/envoy.yaml` (or another shipped template) by [`render`]: free ports,
//! the absolute path of the built filter, the filter configuration, and optionally an
//! external upstream cluster, buffer and header limits, and a fake verifier listener.
//!
//! Every substitution insists that the text it replaces is in the template, so a change of
//! `envoy/envoy.yaml` that the harness does not follow fails loudly.
//!
//! By job: the options here, `template` (rendering the shipped template), `fake_verifier`
//! ([`FakeVerdict`] and its listener), `lds` (the main listener served from a watched file).

mod fake_verifier;
mod lds;
mod template;

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::filter_config::FilterConfig;
use crate::upstream::TestUpstream;

pub use fake_verifier::FakeVerdict;
pub(crate) use lds::LdsFile;
pub(crate) use template::{render, Ports};
pub use template::{shipped_filter_config, TLS_TEMPLATE};

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

/// The TLS edge of `envoy/envoy-tls.yaml` ([`EnvoyOpts::tls_edge`]): the main listener
/// terminates TLS with this certificate, offers h2 or not, and looks client addresses up in
/// this ASN database.
#[derive(Debug, Clone)]
pub struct TlsEdge {
    /// Server certificate (PEM), for `localhost` and `127.0.0.1`.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// A MaxMind-format ASN database (`asn_db_path`).
    pub asn_db: PathBuf,
    /// `alpn_protocols: ["h2", "http/1.1"]` (true) or `["http/1.1"]` (false).
    pub offer_h2: bool,
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
    /// Render `envoy/envoy-tls.yaml` with this TLS edge ([`EnvoyOpts::tls_edge`]).
    pub tls_edge: Option<TlsEdge>,
    /// Envoy `--drain-time-s`: how long a listener replaced over LDS (or a hot restart)
    /// lets its connections finish their requests. Default 0: replaced at once.
    pub drain_time_s: u32,
    /// The route `timeout` to the external upstream, s (Envoy's default, 15 s, when `None`).
    pub route_timeout_s: Option<u32>,
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
            tls_edge: None,
            drain_time_s: 0,
            route_timeout_s: None,
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

    /// Lets a listener replaced over LDS drain for this long (`--drain-time-s`): requests
    /// in flight on it finish under the configuration they started with.
    pub fn drain_time_s(mut self, seconds: u32) -> Self {
        self.drain_time_s = seconds;
        self
    }

    /// Gives the route to the external upstream this `timeout` (Envoy's default is 15 s:
    /// a request the origin answers later gets Envoy's 504).
    pub fn route_timeout_s(mut self, seconds: u32) -> Self {
        self.route_timeout_s = Some(seconds);
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

    /// Renders `envoy/envoy-tls.yaml`: the main listener terminates TLS per `edge` and
    /// tells crawlguard the client's JA4 and ASN. An empty filter configuration keeps the
    /// file's own (its `client_signals`); a test's own replaces it whole.
    pub fn tls_edge(mut self, edge: TlsEdge) -> Self {
        self.template = TLS_TEMPLATE;
        self.tls_edge = Some(edge);
        self
    }

    /// Sets `max_request_headers_kb` on the main listener's HTTP connection manager.
    pub fn max_request_headers_kb(mut self, kb: u32) -> Self {
        self.max_request_headers_kb = Some(kb);
        self
    }
}
