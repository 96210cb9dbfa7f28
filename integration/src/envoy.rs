//! [`Envoy`]: a running Envoy with the crawlguard filter, started from [`EnvoyOpts`] on free
//! ports; its URLs, log, admin stats and crawlguard's counters.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use crate::checks::assert_log_clean;
use crate::client::harness_client;
use crate::envoy_config::{render, EnvoyOpts, LdsFile, Ports};
use crate::filter_config::FilterConfig;
use crate::paths::{envoy_bin, wasm_path};
use crate::process::{poll_until, temp_dir, NotReady, Process};
use crate::upstream::TestUpstream;

/// Prefix Envoy 1.40 puts in front of metrics defined by a wasm module (`define_metric`):
/// the filter's `crawlguard.class.human.allowed` shows up in the admin stats as
/// `wasmcustom.crawlguard.class.human.allowed`.
pub const WASM_STATS_PREFIX: &str = "wasmcustom.";

/// How long [`Envoy::start`] waits for the admin endpoint to report `LIVE`.
const READY_DEADLINE: Duration = Duration::from_secs(30);
/// How often [`Envoy::start`] tries again when a parallel test took one of its ports.
const START_ATTEMPTS: usize = 3;

/// A running Envoy with the crawlguard filter; killed when dropped (see [`Process`]).
pub struct Envoy {
    process: Process,
    ports: Ports,
    admin: reqwest::Client,
    lds: Option<LdsFile>,
    /// `--concurrency`: worker threads, each with its own VM and stats flush.
    concurrency: u32,
}

impl Envoy {
    /// Starts Envoy and waits until its admin endpoint reports `LIVE`. Panics if it does not
    /// within 30 s (its log tail is printed). Tries again on a port collision with a
    /// parallel test.
    pub async fn start(opts: EnvoyOpts) -> Envoy {
        for attempt in 1..=START_ATTEMPTS {
            let envoy = Envoy::spawn(&opts);
            match envoy.wait_ready().await {
                Ok(()) => return envoy,
                Err(NotReady::Exited(_))
                    if attempt < START_ATTEMPTS
                        && envoy.log().contains("Address already in use") =>
                {
                    continue
                }
                Err(e) => panic!("envoy {e} (attempt {attempt} of {START_ATTEMPTS})"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// [`Envoy::start`] in front of `up` (over HTTP/1.1) with the filter configuration `cfg`.
    pub async fn start_in_front_of(up: &TestUpstream, cfg: impl Into<FilterConfig>) -> Envoy {
        Envoy::start(EnvoyOpts::with_config(cfg).in_front_of(up)).await
    }

    /// A fresh [`TestUpstream`] and [`Envoy::start_in_front_of`] it: the usual start of a
    /// test that scripts the origin's answers or reads what reached it.
    pub async fn start_with_upstream(cfg: impl Into<FilterConfig>) -> (Envoy, TestUpstream) {
        let up = TestUpstream::start().await;
        let envoy = Envoy::start_in_front_of(&up, cfg).await;
        (envoy, up)
    }

    /// Starts Envoy and waits until it is ready (`Ok`) or has exited (`Err` with its log),
    /// e.g. for a configuration that should be refused but may not be. Panics if it does
    /// neither within 30 s.
    pub async fn try_start(opts: EnvoyOpts) -> Result<Envoy, String> {
        let envoy = Envoy::spawn(&opts);
        match envoy.wait_ready().await {
            Ok(()) => Ok(envoy),
            Err(NotReady::Exited(_)) => Err(envoy.log()),
            Err(e) => panic!("envoy neither ready nor exited: {e}"),
        }
    }

    /// Replaces the filter configuration of a running Envoy started with
    /// [`EnvoyOpts::lds`], as a control plane would (a new main listener over LDS), and
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
        let before = self.stats_now().await;
        lds.write(&cfg.into());
        let outcome = poll_until(READY_DEADLINE, || async {
            let now = self.stats_now().await;
            if stat(&now, REJECTED) > stat(&before, REJECTED) {
                return Some(Err(self.log()));
            }
            (stat(&now, OK) > stat(&before, OK) && stat(&now, WARMING) == 0).then_some(Ok(()))
        })
        .await;
        outcome.unwrap_or_else(|| {
            panic!(
                "envoy neither applied nor refused the pushed listener within \
                 {READY_DEADLINE:?}; log:\n{}",
                self.log()
            )
        })
    }

    /// Starts Envoy with a configuration that must be refused: returns Envoy's log once it
    /// has exited (or, if it neither exits nor becomes ready within 30 s, once it is killed).
    /// Panics if Envoy becomes ready.
    pub async fn start_expect_failure(opts: EnvoyOpts) -> String {
        let envoy = Envoy::spawn(&opts);
        match envoy.wait_ready().await {
            Ok(()) => panic!(
                "envoy became ready with a configuration that should be refused: {}",
                opts.filter_config.as_string()
            ),
            Err(_) => {
                envoy.process.kill();
                envoy.log()
            }
        }
    }

    fn spawn(opts: &EnvoyOpts) -> Envoy {
        let dir = temp_dir("envoy");
        let cwd = dir.path().to_path_buf();
        let ports = Ports::free();
        let cfg_path = cwd.join("envoy.yaml");
        let lds = opts.lds.then(|| LdsFile {
            dir: cwd.join("lds"),
            opts: opts.clone(),
            ports,
            wasm: wasm_path(),
        });
        let yaml = match &lds {
            Some(l) => {
                std::fs::create_dir(&l.dir).expect("create lds dir");
                l.write(&opts.filter_config)
            }
            None => render(ports, &wasm_path(), opts),
        };
        std::fs::write(&cfg_path, yaml).expect("write envoy.yaml");
        // Envoy logs to stderr, which the process handle writes to its log file unbuffered
        // (a --log-path file is flushed only every few seconds and would hide recent lines).
        let process = Process::spawn(
            "envoy",
            dir,
            Command::new(envoy_bin())
                .arg("-c")
                .arg(&cfg_path)
                .arg("--concurrency")
                .arg(opts.concurrency.to_string())
                .arg("--use-dynamic-base-id")
                .args(["--log-level", "info", "--component-log-level", "wasm:debug"])
                .args(["--drain-time-s", &opts.drain_time_s.to_string()])
                .current_dir(&cwd),
        );
        let admin = harness_client(Duration::from_secs(5));
        Envoy {
            process,
            ports,
            admin,
            lds,
            concurrency: opts.concurrency,
        }
    }

    /// Polls the admin endpoint's `/ready` until it answers `LIVE`.
    async fn wait_ready(&self) -> Result<(), NotReady> {
        let url = format!("{}/ready", self.admin_url());
        self.process
            .wait_ready(READY_DEADLINE, || async {
                let resp = self.admin.get(&url).send().await.ok()?;
                let body = resp.error_for_status().ok()?.text().await.ok()?;
                (body.trim() == "LIVE").then_some(())
            })
            .await
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

    /// The address of the main listener, for raw connections.
    pub fn main_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports.main))
    }

    /// Everything Envoy has logged so far (stdout and stderr).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Panics if the log shows a filter panic, a critical line or a failed wasm VM (see
    /// [`assert_log_clean`]).
    pub fn assert_log_clean(&self) {
        assert_log_clean(&self.log());
    }

    /// Polls the log until a line satisfies `found` and returns it; panics, naming `what`,
    /// after `timeout`.
    pub async fn wait_for_log_line(
        &self,
        timeout: Duration,
        what: &str,
        found: impl Fn(&str) -> bool,
    ) -> String {
        let line = poll_until(timeout, || async {
            self.log().lines().find(|l| found(l)).map(str::to_string)
        })
        .await;
        line.unwrap_or_else(|| panic!("no log line {what} within {timeout:?}"))
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

    /// Every counter and gauge from the admin `/stats?format=json` (histograms skipped),
    /// read after every crawlguard VM has flushed its counters at least once since the
    /// call: crawlguard counts in VM memory and hands the counts to Envoy on each root tick
    /// (README, "Operating it": the counters lag by up to `metrics::STATS_FLUSH_MS`), so
    /// a read right after a response could miss the requests just answered.
    pub async fn stats(&self) -> HashMap<String, u64> {
        self.wait_for_flush().await;
        self.stats_now().await
    }

    /// Waits until `crawlguard.stats.flushes` (one per flush of one VM: each worker's, and
    /// the main thread's) has gone up by two per VM since the call, so that every VM, each
    /// on its own 250 ms timer, has flushed after the requests sent before the call.
    /// Returns at once when Envoy has no crawlguard filter (the counter does not exist);
    /// gives up after 10 s (a test that stops the VMs reads what was flushed).
    pub async fn wait_for_flush(&self) {
        let name = format!("{WASM_STATS_PREFIX}crawlguard.stats.flushes");
        let Some(start) = self.stats_now().await.get(&name).copied() else {
            return;
        };
        let vms = u64::from(self.concurrency) + 1;
        let _ = poll_until(Duration::from_secs(10), || async {
            let now = self.stats_now().await.get(&name).copied().unwrap_or(0);
            (now >= start + 2 * vms).then_some(())
        })
        .await;
    }

    /// Every counter and gauge as Envoy has them now (crawlguard's may lag, see
    /// [`Envoy::stats`]).
    pub async fn stats_now(&self) -> HashMap<String, u64> {
        let text = self.admin_get("/stats?format=json").await;
        let body: serde_json::Value = serde_json::from_str(&text).expect("admin /stats JSON");
        let mut out = HashMap::new();
        for s in body["stats"].as_array().into_iter().flatten() {
            if let (Some(name), Some(value)) = (s["name"].as_str(), s["value"].as_u64()) {
                out.insert(name.to_string(), value);
            }
        }
        out
    }

    /// One stat as Envoy has it now, without waiting for a flush: for gauges (set directly,
    /// never buffered) and for polling loops, which wait anyway.
    pub async fn stat_now(&self, name: &str) -> Option<u64> {
        self.stats_now().await.get(name).copied()
    }

    /// One stat by its full admin name (e.g. `wasmcustom.crawlguard.class.human.allowed`);
    /// `None` if Envoy does not have it (a wasm metric exists once the filter defined it).
    pub async fn stat(&self, name: &str) -> Option<u64> {
        self.stats().await.get(name).copied()
    }

    /// Polls stat `name` (0 while Envoy does not have it) until `ok` holds and returns its
    /// value; panics, naming `what`, after `timeout`.
    pub async fn wait_for_stat(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        ok: impl Fn(u64) -> bool,
    ) -> u64 {
        // Polling already waits: read without waiting for a flush each time.
        let value = poll_until(timeout, || async {
            let v = self.stats_now().await.get(name).copied().unwrap_or(0);
            ok(v).then_some(v)
        })
        .await;
        value.unwrap_or_else(|| panic!("{what}: {name} not as expected within {timeout:?}"))
    }

    /// Polls crawlguard counter `name` until it is at least `at_least`; panics, naming
    /// `what`, after `timeout`.
    pub async fn wait_for_counter(
        &self,
        name: &str,
        at_least: u64,
        timeout: Duration,
        what: &str,
    ) -> u64 {
        let full = format!("{WASM_STATS_PREFIX}{name}");
        self.wait_for_stat(&full, timeout, what, |v| v >= at_least)
            .await
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

    /// The crawlguard counters whose name starts with `prefix` (e.g. `crawlguard.rewrite.`)
    /// and that are not zero, keyed by the rest of the name; `crawlguard.stats.flushes`
    /// (bookkeeping of the counters themselves, not an event) is left out.
    pub async fn nonzero_counters(&self, prefix: &str) -> BTreeMap<String, u64> {
        self.crawlguard_stats()
            .await
            .into_iter()
            .filter(|(k, v)| *v > 0 && k != "crawlguard.stats.flushes")
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|rest| (rest.to_string(), v)))
            .collect()
    }

    /// Asserts that each crawlguard counter (name without the wasm prefix) has exactly the
    /// value given; a counter the filter did not define is a failure too. Reports every
    /// mismatch at once.
    pub async fn assert_counters(&self, expected: &[(&str, u64)]) {
        let stats = self.crawlguard_stats().await;
        let wrong: Vec<String> = expected
            .iter()
            .filter_map(|(name, want)| match stats.get(*name) {
                Some(got) if got == want => None,
                Some(got) => Some(format!("{name}: {got}, expected {want}")),
                None => Some(format!("{name}: not defined, expected {want}")),
            })
            .collect();
        let nonzero: BTreeMap<&String, &u64> = stats.iter().filter(|(_, v)| **v > 0).collect();
        assert!(
            wrong.is_empty(),
            "crawlguard counters:\n  {}\nevery non-zero crawlguard counter: {nonzero:?}",
            wrong.join("\n  ")
        );
    }

    /// Asserts that the crawlguard counters under `prefix` that are not zero are exactly
    /// `expected` (names without `prefix`), e.g.
    /// `assert_nonzero_counters("crawlguard.rewrite.", &[("status_429", 1)])`.
    pub async fn assert_nonzero_counters(&self, prefix: &str, expected: &[(&str, u64)]) {
        let got = self.nonzero_counters(prefix).await;
        let want: BTreeMap<String, u64> =
            expected.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(got, want, "non-zero counters under {prefix}");
    }

    /// Requests Envoy sent to cluster `crawlguard_verifier` (each one a lookup the verifier
    /// sees).
    pub async fn verifier_lookups(&self) -> u64 {
        self.stat("cluster.crawlguard_verifier.upstream_rq_total")
            .await
            .unwrap_or(0)
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
}
