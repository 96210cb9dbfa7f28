//! [`Edge`]: the TLS edge of `envoy/envoy-tls.yaml` in front of a [`TestUpstream`], with a
//! throwaway CA and an ASN database of the test's networks; what the upstream saw of each
//! client, and the browser checks' counters. Used by `tests/browser_signals.rs` and
//! `tests/browser_floods.rs`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::browsers::asn_db;
use crate::envoy::Envoy;
use crate::envoy_config::{EnvoyOpts, TlsEdge};
use crate::process::temp_dir;
use crate::test_ca::TestCa;
use crate::upstream::{upstream_path, TestUpstream};

/// The networks of the browser tests' ASN database: 127.0.0.0/16 an access network
/// (AS7922), 127.1.0.0/16 twenty more (AS3320..=AS3339, one per ten /24s: a residential
/// pool spread over many networks), 127.16.0.0/12 a cloud (AS16509, in the catalog's
/// `datacenter_asns`).
pub fn test_networks() -> Vec<(String, u32, String)> {
    let mut n = vec![
        ("127.0.0.0/16".to_string(), 7922, "COMCAST-7922".to_string()),
        ("127.16.0.0/12".to_string(), 16509, "AMAZON-02".to_string()),
    ];
    for i in 0..20u32 {
        for j in 0..10u32 {
            let third = i * 10 + j;
            n.push((
                format!("127.1.{third}.0/24"),
                3320 + i,
                format!("ACCESS-{i}"),
            ));
        }
    }
    n
}

/// A TLS edge in front of a test upstream.
pub struct Edge {
    /// Envoy, rendered from `envoy/envoy-tls.yaml`.
    pub envoy: Envoy,
    /// The origin.
    pub up: TestUpstream,
    /// The CA that signed Envoy's certificate (clients trust it).
    pub ca: TestCa,
    _dir: tempfile::TempDir,
}

impl Edge {
    /// Envoy rendered from `envoy/envoy-tls.yaml` with `networks` in its ASN database,
    /// offering h2 or not, with `cfg` (`None`: the file's own configuration, every check
    /// enforced).
    pub async fn start(cfg: Option<Value>, offer_h2: bool, networks: &[(&str, u32, &str)]) -> Edge {
        let dir = temp_dir("tls-edge");
        let ca = TestCa::generate(dir.path());
        let edge = TlsEdge {
            cert: ca.cert.clone(),
            key: ca.key.clone(),
            asn_db: asn_db(dir.path(), networks),
            offer_h2,
        };
        let up = TestUpstream::start().await;
        let mut opts = EnvoyOpts::default().in_front_of(&up).tls_edge(edge);
        if let Some(c) = cfg {
            opts.filter_config = c.into();
        }
        let envoy = Envoy::start(opts).await;
        Edge {
            envoy,
            up,
            ca,
            _dir: dir,
        }
    }

    /// [`Edge::start`] with [`test_networks`].
    pub async fn with_test_networks(cfg: Option<Value>) -> Edge {
        let owned = test_networks();
        let networks: Vec<(&str, u32, &str)> = owned
            .iter()
            .map(|(c, a, o)| (c.as_str(), *a, o.as_str()))
            .collect();
        Edge::start(cfg, true, &networks).await
    }

    /// `https://localhost:<port><path>` (the name browsers send as SNI).
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.envoy.main_port())
    }

    /// `https://127.0.0.1:<port><path>` (for clients that bind a source address).
    pub fn ip_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.envoy.main_port())
    }

    /// The CA certificate clients trust.
    pub fn ca(&self) -> &Path {
        &self.ca.ca
    }

    /// What the upstream received for requests whose path contains `marker`: each request's
    /// `x-crawler-class`, `x-crawlguard-ja4` and `x-crawlguard-asn`.
    pub async fn seen(&self, marker: &str) -> Vec<(String, String, String)> {
        let h = |r: &Value, name: &str| {
            r["headers"][name][0]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        self.up
            .requests()
            .await
            .iter()
            .filter(|r| r["path"].as_str().unwrap_or_default().contains(marker))
            .map(|r| {
                (
                    h(r, "x-crawler-class"),
                    h(r, "x-crawlguard-ja4"),
                    h(r, "x-crawlguard-asn"),
                )
            })
            .collect()
    }

    /// The non-zero `crawlguard.browser_check.<check>.inconsistent` counters, by check.
    pub async fn failed_checks(&self) -> BTreeMap<String, u64> {
        self.envoy
            .nonzero_counters("crawlguard.browser_check.")
            .await
            .into_iter()
            .map(|(k, v)| (k.trim_end_matches(".inconsistent").to_string(), v))
            .collect()
    }
}

/// A page with three subresources, every URL marked with `who` (the test upstream answers
/// any path; `?who=` tells the requests apart in its log).
pub fn page(who: &str) -> String {
    let html = format!(
        "<html><body><img src=\"/a/1.png?who={who}\"><img src=\"/a/2.png?who={who}\">\
         <script src=\"/a/app.js?who={who}\"></script>{who}</body></html>"
    );
    let mut p = upstream_path(&[("header", "content-type: text/html"), ("body", &html)]);
    p.push_str(&format!("&who={who}"));
    p
}

/// Chrome's headers beyond its User-Agent, as a scraper that copies them sends them.
pub fn browser_headers(ua: &str) -> Vec<(&str, &str)> {
    vec![
        ("user-agent", ua),
        ("sec-fetch-site", "none"),
        ("sec-fetch-mode", "navigate"),
        (
            "sec-ch-ua",
            "\"Chromium\";v=\"156\", \"Not-A.Brand\";v=\"24\"",
        ),
        ("accept-language", "en-US,en;q=0.9"),
    ]
}
