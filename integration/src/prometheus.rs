//! [`Prometheus`]: Debian's `prometheus` server on a free loopback port, scraping Envoy
//! admin endpoints' `/stats/prometheus` every second with the test's rule files, and its HTTP
//! API ([`Prometheus::query`], [`Prometheus::rules`]); [`promtool`] for the rule checks.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::client::harness_client;
use crate::process::{free_tcp_ports, poll_until, temp_dir, Process};

/// How long [`Prometheus::start`] waits for `/-/ready`.
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// A binary of Debian's `prometheus` package (`make setup` installs it): its absolute path,
/// or a panic saying how to install it (the monitoring test must not skip).
pub fn prometheus_bin(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} not found: install Debian's prometheus package (`make setup`)");
}

/// Runs `promtool ARGS` in `dir`; returns its exit success and its output (stdout + stderr).
pub fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(prometheus_bin("promtool"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run promtool {args:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A running Prometheus server, killed when dropped.
pub struct Prometheus {
    process: Process,
    port: u16,
    http: reqwest::Client,
}

impl Prometheus {
    /// Starts Prometheus scraping each `targets` entry (`127.0.0.1:<admin port>`, job
    /// `crawlguard`, path `/stats/prometheus`) every second, evaluating `rule_files` every
    /// second, with its storage in a temporary directory; waits until `/-/ready` answers 200.
    pub async fn start(targets: &[String], rule_files: &[PathBuf]) -> Prometheus {
        let dir = temp_dir("prometheus");
        let [port] = free_tcp_ports::<1>();
        let config = serde_json::json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                       "scrape_timeout": "1s"},
            "rule_files": rule_files,
            "scrape_configs": [{
                "job_name": "crawlguard",
                "metrics_path": "/stats/prometheus",
                "static_configs": [{"targets": targets}],
            }],
        });
        // JSON is YAML: no YAML writer needed.
        let cfg_path = dir.path().join("prometheus.yml");
        std::fs::write(&cfg_path, config.to_string()).expect("write prometheus.yml");
        let data = dir.path().join("data");
        let process = Process::spawn(
            "prometheus",
            dir,
            Command::new(prometheus_bin("prometheus"))
                .arg(format!("--config.file={}", cfg_path.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}")),
        );
        let p = Prometheus {
            process,
            port,
            http: harness_client(Duration::from_secs(10)),
        };
        let url = format!("{}/-/ready", p.url());
        let ready = p
            .process
            .wait_ready(READY_DEADLINE, || async {
                let r = p.http.get(&url).send().await.ok()?;
                r.status().is_success().then_some(())
            })
            .await;
        if let Err(e) = ready {
            panic!("prometheus {e}");
        }
        p
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything Prometheus has logged.
    pub fn log(&self) -> String {
        self.process.log()
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> serde_json::Value {
        let qs: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect();
        let url = format!("{}{path}?{}", self.url(), qs.join("&"));
        let body = self
            .http
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("GET {path} body: {e}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// The result of instant query `expr` (`data.result`); panics when Prometheus refuses
    /// the query (a syntax error names it).
    pub async fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let v = self.api("/api/v1/query", &[("query", expr)]).await;
        assert_eq!(v["status"], "success", "query {expr}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Polls instant query `expr` until it returns at least one series (and `ok` accepts
    /// the result); returns them. Panics, with the last result, after `timeout`.
    pub async fn query_until(
        &self,
        expr: &str,
        timeout: Duration,
        ok: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let found = poll_until(timeout, || async {
            let r = self.query(expr).await;
            (!r.is_empty() && ok(&r)).then_some(r)
        })
        .await;
        match found {
            Some(r) => r,
            None => panic!(
                "query {expr}: no (accepted) series within {timeout:?}; last result: {:?}",
                self.query(expr).await
            ),
        }
    }

    /// The rule groups as Prometheus loaded and evaluates them (`/api/v1/rules`,
    /// `data.groups`).
    pub async fn rules(&self) -> Vec<serde_json::Value> {
        let v = self.api("/api/v1/rules", &[]).await;
        assert_eq!(v["status"], "success", "rules: {v}");
        v["data"]["groups"].as_array().cloned().unwrap_or_default()
    }
}

/// `s` with every byte outside RFC 3986's unreserved set percent-encoded (a query value).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
