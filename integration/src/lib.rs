//! Real-process test harness for the crawlguard wasm filter: Envoy, the scriptable test
//! upstream, dnsmasq, Redis and the verifier sidecar as real processes on free loopback
//! ports, and clients that play many client IPs against them.
//!
//! | module | what is in it |
//! |---|---|
//! | [`process`] | [`Process`]: the child-process handle every service uses (log file, readiness polling, kill + reap on drop, log tail on panic) |
//! | [`paths`] | where the repository, Envoy, the built filter and the test upstream are |
//! | [`filter_config`] | the filter configuration a test hands over: [`FilterConfig`], [`Limit`] |
//! | [`envoy_config`] | [`EnvoyOpts`] and the rendering of `envoy/envoy.yaml` for a test (ports, clusters, fake verifier listener) |
//! | [`envoy`] | [`Envoy`]: start, URLs, log, admin stats, crawlguard counters |
//! | [`upstream`] | [`TestUpstream`] (the `crawlguard-test-upstream` binary) and [`upstream_path`] |
//! | [`client`] | reqwest clients bound to `127.0.0.x`, [`get`] / [`claim`] / [`sequential`] / [`burst`], [`Reply`] |
//! | [`raw_http1`] | HTTP/1.1 by hand: exact request bytes, keep-alive, pipelining ([`raw`], [`RawHttp1`]) |
//! | [`dns`] | [`Dnsmasq`] with a test's [`Record`]s, [`SlowDns`], [`Blackhole`] |
//! | [`sidecar`] | [`Sidecar`]: the `crawlguard-sidecar` process |
//! | [`redis`] | [`Redis`]: `redis-server` on a free port (kill, restart, pause, a RESP client of its own), [`SlowProxy`] |
//! | [`stack`] | [`Stack`]: Envoy + sidecar + dnsmasq |
//! | [`prometheus`] | [`Prometheus`]: a Prometheus server scraping Envoys, its query API; [`promtool`] |
//! | [`checks`] | checks the suites share: [`Table`], [`assert_clean_rejection`], [`assert_log_clean`] |
//!
//! Everything a suite uses is re-exported here: `use crawlguard_integration::{...}`.

pub mod browsers;
pub mod checks;
pub mod client;
pub mod dns;
pub mod envoy;
pub mod envoy_config;
pub mod filter_config;
pub mod paths;
pub mod process;
pub mod prometheus;
pub mod raw_http1;
pub mod redis;
pub mod sidecar;
pub mod stack;
pub mod test_ca;
pub mod tls_edge;
pub mod upstream;

pub use checks::{
    assert_clean_rejection, assert_log_clean, Table, BODY_429, BODY_503, LOCAL_REPLY_HEADERS,
};
pub use client::{
    burst, by_status, claim, claims, client, get, ip, runs, sequential, statuses, timed,
    upstream_classes, Reply, UA_CHROME, UA_CURL, UA_GOOGLEBOT,
};
pub use dns::{reverse_name, Blackhole, Dnsmasq, Record, SlowDns, GOOGLEBOT_HOST, GOOGLEBOT_V4};
pub use envoy::{Envoy, WASM_STATS_PREFIX};
pub use envoy_config::{
    shipped_filter_config, EnvoyOpts, ExternalUpstream, FakeVerdict, TlsEdge, UpstreamProtocol,
    TLS_TEMPLATE,
};
pub use filter_config::{FilterConfig, Limit, NO_REFILL_PER_S};
pub use paths::{envoy_bin, repo_root, test_upstream_bin, wasm_path};
pub use process::{poll_until, NotReady, Process};
pub use prometheus::{prometheus_bin, promtool, Prometheus};
pub use raw_http1::{raw, raw_request, raw_statuses, RawHeaders, RawHttp1};
pub use redis::{
    redis_cmd, redis_cmd_auth, redis_server_bin, Redis, RedisOpts, RedisReply, SlowProxy,
};
pub use sidecar::{verifier_bin, Sidecar, SidecarOpts};
pub use stack::Stack;
pub use test_ca::TestCa;
pub use upstream::{upstream_path, TestUpstream};
