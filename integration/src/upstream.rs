//! [`TestUpstream`]: a running `crawlguard-test-upstream` (the scriptable origin of this
//! crate, `src/bin/test-upstream/main.rs`), and [`upstream_path`] to script one answer.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::client::harness_client;
use crate::paths::test_upstream_bin;
use crate::process::{temp_dir, Process};

/// How long [`TestUpstream::start`] waits for its `listening on` line.
const READY_DEADLINE: Duration = Duration::from_secs(10);

/// A running `crawlguard-test-upstream` (HTTP/1.1 and h2c on one loopback port), killed on
/// drop (see [`Process`]). See the binary's module documentation for the request
/// parameters.
pub struct TestUpstream {
    process: Process,
    addr: SocketAddr,
    http: reqwest::Client,
}

impl TestUpstream {
    /// Starts the binary found by [`test_upstream_bin`].
    pub async fn start() -> TestUpstream {
        TestUpstream::start_bin(test_upstream_bin()).await
    }

    /// Starts `bin --listen 127.0.0.1:0` and waits (10 s at most) for its
    /// `listening on ADDR` line.
    pub async fn start_bin(bin: impl AsRef<Path>) -> TestUpstream {
        let bin = bin.as_ref();
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build -p crawlguard-integration --bins` \
             or set CRAWLGUARD_TEST_UPSTREAM",
            bin.display()
        );
        let process = Process::spawn(
            "test-upstream",
            temp_dir("test-upstream"),
            Command::new(bin).args(["--listen", "127.0.0.1:0"]),
        );
        let addr = process
            .wait_listening(READY_DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{} {e}", bin.display()));
        let http = harness_client(Duration::from_secs(5));
        TestUpstream {
            process,
            addr,
            http,
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it has written to stdout and stderr.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Makes the origin slow and/or failing for every later request that does not say
    /// otherwise (`GET /__upstream/defaults`): `delay_ms` before the response headers, every
    /// `error_every`th request answered 500 (0 = none). `set_mood(0, 0)` restores it.
    pub async fn set_mood(&self, delay_ms: u64, error_every: u64) {
        let url = format!(
            "http://{}/__upstream/defaults?delay_ms={delay_ms}&error_every={error_every}",
            self.addr
        );
        let status = self
            .http
            .get(&url)
            .send()
            .await
            .expect("GET upstream defaults")
            .status();
        assert!(status.is_success(), "upstream defaults: {status}");
    }

    /// Its concurrency counter (`GET /__upstream/concurrency`): `(in_flight, peak,
    /// served)`, the requests being answered now, the most at once since the start or the
    /// last [`TestUpstream::reset_concurrency`], and the requests counted since then.
    pub async fn concurrency(&self) -> (u64, u64, u64) {
        self.concurrency_at("/__upstream/concurrency").await
    }

    /// Starts a new concurrency measurement (the peak becomes what is in flight now).
    pub async fn reset_concurrency(&self) {
        self.concurrency_at("/__upstream/concurrency?reset=1").await;
    }

    async fn concurrency_at(&self, path: &str) -> (u64, u64, u64) {
        let url = format!("http://{}{path}", self.addr);
        let text = self
            .http
            .get(&url)
            .send()
            .await
            .expect("GET upstream concurrency")
            .text()
            .await
            .expect("upstream concurrency body");
        let v: serde_json::Value = serde_json::from_str(&text).expect("upstream concurrency JSON");
        let n = |k: &str| v[k].as_u64().expect("a count");
        (n("in_flight"), n("peak"), n("served"))
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

/// The path `/?k=v&...` (form-encoded) whose query tells the test upstream what to answer,
/// e.g. `upstream_path(&[("status", "429"), ("header", "retry-after: 120")])`.
pub fn upstream_path(params: &[(&str, &str)]) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let qs: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect();
    format!("/?{}", qs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::upstream_path;

    #[test]
    fn upstream_path_form_encodes_the_parameters() {
        assert_eq!(
            upstream_path(&[("status", "503"), ("header", "etag: \"v1\"")]),
            "/?status=503&header=etag%3A%20%22v1%22"
        );
    }
}
