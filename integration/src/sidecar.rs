//! The verifier sidecar: [`Sidecar`], a running `crawlguard-sidecar` started from
//! [`SidecarOpts`], and [`verifier_bin`], which finds (or builds) the binary.
//!
//! The sidecar binary: `$CRAWLGUARD_SIDECAR_BIN`, else the one in the running test's
//! target directory if it is newer than the verifier's sources (`make test` builds it
//! first), else `cargo build -q -p crawlguard-sidecar` runs once per test process into that
//! target directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use crawlguard_contract::fleet::{SyncRequest, PATH as FLEET_SYNC_PATH};

use crate::client::harness_client;
use crate::paths::{profile_dir, repo_root};
use crate::process::{temp_dir, Process};

/// How long the sidecar may take to print `listening on` and to answer `/healthz`.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// The `crawlguard-sidecar` binary: `$CRAWLGUARD_SIDECAR_BIN`; else
/// `target/<profile>/crawlguard-sidecar` of the target directory and profile of the running
/// test executable (`target/<profile>/deps/<test>`) if it is newer than the verifier's
/// sources (as after `make test`'s first `cargo test --workspace`); else it is built there,
/// once per test process, with `cargo build -q -p crawlguard-sidecar`. If that build fails
/// but a binary is there, that binary is used (with a warning).
pub fn verifier_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CRAWLGUARD_SIDECAR_BIN") {
            return PathBuf::from(p);
        }
        let profile_dir = profile_dir();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_string();
        let mut target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        // target/<triple>/<profile>/deps (cargo test --target ...): the host binary goes to
        // target/<profile>.
        if !target_dir.join("CACHEDIR.TAG").exists()
            && target_dir
                .parent()
                .is_some_and(|t| t.join("CACHEDIR.TAG").exists())
        {
            target_dir = target_dir.parent().unwrap().to_path_buf();
        }
        let bin = target_dir.join(&profile).join("crawlguard-sidecar");
        if binary_is_fresh(&bin) {
            return bin;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "-q", "-p", "crawlguard-sidecar", "--bin"])
            .arg("crawlguard-sidecar")
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(repo_root())
            .stdin(Stdio::null());
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        match cmd.status() {
            Ok(s) if s.success() && bin.exists() => bin,
            result if bin.exists() => {
                eprintln!(
                    "warning: `cargo build -p crawlguard-sidecar` failed ({result:?}); \
                     using the existing {}",
                    bin.display()
                );
                bin
            }
            result => panic!(
                "crawlguard-sidecar could not be built ({result:?}) and {} is missing; \
                 build it with `cargo build -p crawlguard-sidecar` or set \
                 CRAWLGUARD_SIDECAR_BIN",
                bin.display()
            ),
        }
    })
    .clone()
}

/// The newest modification time of the files the sidecar binary is built from (its crate's
/// sources and manifest, the workspace manifest and lock file).
fn newest_source_mtime() -> Option<SystemTime> {
    fn walk(dir: &Path, newest: &mut SystemTime) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                walk(&entry.path(), newest)?;
            } else {
                *newest = (*newest).max(meta.modified()?);
            }
        }
        Ok(())
    }
    let root = repo_root();
    let mut newest = SystemTime::UNIX_EPOCH;
    for f in ["Cargo.toml", "Cargo.lock", "sidecar/Cargo.toml"] {
        newest = newest.max(std::fs::metadata(root.join(f)).ok()?.modified().ok()?);
    }
    walk(&root.join("sidecar/src"), &mut newest).ok()?;
    Some(newest)
}

/// True if `bin` exists and is newer than every source it is built from: then no cargo run
/// is needed (this also avoids a rebuild under `make test`, whose workspace-wide `cargo
/// test` resolves dependency features differently from `cargo build -p`).
fn binary_is_fresh(bin: &Path) -> bool {
    let Some(built) = std::fs::metadata(bin).and_then(|m| m.modified()).ok() else {
        return false;
    };
    newest_source_mtime().is_some_and(|newest| built >= newest)
}

/// How to start the sidecar.
#[derive(Debug, Clone, Default)]
pub struct SidecarOpts {
    /// `--nameserver` addresses (at least one, so the host's resolv.conf is never used).
    pub nameservers: Vec<SocketAddr>,
    /// `--dns-timeout-ms`.
    pub dns_timeout_ms: Option<u32>,
    /// `--dns-attempts`.
    pub dns_attempts: Option<u32>,
    /// A TOML configuration file's content (`--config`), written into the sidecar's temp
    /// directory; relative range-file paths in it are relative to that directory.
    pub config_toml: Option<String>,
    /// Files written into the sidecar's temp directory before it starts: `(name, content)`
    /// (e.g. a range file the configuration names).
    pub files: Vec<(String, String)>,
    /// `--redis` (fleet mode), e.g. [`crate::Redis::url`].
    pub redis: Option<String>,
    /// `--redis-timeout-ms`.
    pub redis_timeout_ms: Option<u32>,
    /// `--redis-prefix`.
    pub redis_prefix: Option<String>,
    /// Extra environment variables of the process (e.g. `SSL_CERT_FILE`).
    pub env: Vec<(String, String)>,
    /// Listen on this port of 127.0.0.1 (`None`: a free one the sidecar picks).
    pub port: Option<u16>,
    /// More command-line arguments (e.g. `--allow-loopback-agent-directories`).
    pub args: Vec<String>,
    /// `--cache-dir` (`None`: one in the sidecar's own temp directory, gone with it); a
    /// directory of the test's keeps the caches across [`Sidecar::restart`].
    pub cache_dir: Option<PathBuf>,
}

impl SidecarOpts {
    /// Resolving through `dns` only.
    pub fn dns(dns: SocketAddr) -> SidecarOpts {
        SidecarOpts {
            nameservers: vec![dns],
            ..Default::default()
        }
    }

    /// [`SidecarOpts::dns`] in fleet mode: `--redis redis`.
    pub fn fleet(dns: SocketAddr, redis: &str) -> SidecarOpts {
        SidecarOpts {
            redis: Some(redis.to_string()),
            ..SidecarOpts::dns(dns)
        }
    }
}

/// A running `crawlguard-sidecar` on `127.0.0.1:<port>`, killed on drop (or by
/// [`Sidecar::kill`]; see [`Process`]).
pub struct Sidecar {
    process: Process,
    addr: SocketAddr,
    http: reqwest::Client,
    opts: SidecarOpts,
}

impl Sidecar {
    /// Starts the binary with `--listen 127.0.0.1:0`, reads its `listening on ADDR` line and
    /// waits until `GET /healthz` answers `ok`.
    pub async fn start(opts: SidecarOpts) -> Sidecar {
        assert!(
            !opts.nameservers.is_empty(),
            "give the sidecar a nameserver: the host's resolv.conf must not be used"
        );
        let bin = verifier_bin();
        let dir = temp_dir("verifier");
        // Hermetic: no fetches of the vendors' range URLs (tests configure their own range
        // sources) and a range cache of its own.
        let listen = format!("127.0.0.1:{}", opts.port.unwrap_or(0));
        let mut args: Vec<String> = vec![
            "--listen".into(),
            listen,
            "--log-level".into(),
            "debug".into(),
            "--no-builtin-range-urls".into(),
            "--cache-dir".into(),
            opts.cache_dir
                .clone()
                .unwrap_or_else(|| dir.path().join("range-cache"))
                .display()
                .to_string(),
        ];
        args.extend(opts.args.iter().cloned());
        for ns in &opts.nameservers {
            args.extend(["--nameserver".into(), ns.to_string()]);
        }
        if let Some(ms) = opts.dns_timeout_ms {
            args.extend(["--dns-timeout-ms".into(), ms.to_string()]);
        }
        if let Some(n) = opts.dns_attempts {
            args.extend(["--dns-attempts".into(), n.to_string()]);
        }
        for (name, content) in &opts.files {
            std::fs::write(dir.path().join(name), content).expect("write sidecar file");
        }
        if let Some(url) = &opts.redis {
            args.extend(["--redis".into(), url.clone()]);
        }
        if let Some(ms) = opts.redis_timeout_ms {
            args.extend(["--redis-timeout-ms".into(), ms.to_string()]);
        }
        if let Some(prefix) = &opts.redis_prefix {
            args.extend(["--redis-prefix".into(), prefix.clone()]);
        }
        if let Some(toml) = &opts.config_toml {
            let path = dir.path().join("verifier.toml");
            std::fs::write(&path, toml).expect("write verifier.toml");
            args.extend(["--config".into(), path.display().to_string()]);
        }
        // stdout (the `listening on` line) and stderr (the log) share the log file.
        let process = Process::spawn(
            "crawlguard-sidecar",
            dir,
            Command::new(&bin)
                .args(&args)
                .env_remove("CRAWLGUARD_SIDECAR_CONFIG")
                .env_remove("CRAWLGUARD_SIDECAR_REDIS")
                .envs(opts.env.iter().map(|(k, v)| (k, v))),
        );
        let addr = process
            .wait_listening(READY_DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("crawlguard-sidecar {e} (no `listening on` line)"));
        let http = harness_client(Duration::from_secs(10));
        let healthz = format!("http://{addr}/healthz");
        process
            .wait_ready(READY_DEADLINE, || async {
                let r = http.get(&healthz).send().await.ok()?;
                let ok = r.status() == 200 && r.text().await.is_ok_and(|t| t == "ok");
                ok.then_some(())
            })
            .await
            .unwrap_or_else(|e| panic!("crawlguard-sidecar {e} (/healthz never answered ok)"));
        Sidecar {
            process,
            addr,
            http,
            opts,
        }
    }

    /// Kills it if it still runs and starts a new one with the same options on the same
    /// port (so an Envoy cluster pointing at it reaches the new one); returns when it is
    /// ready.
    pub async fn restart(&mut self) {
        self.process.kill();
        let opts = SidecarOpts {
            port: Some(self.addr.port()),
            ..self.opts.clone()
        };
        *self = Sidecar::start(opts).await;
    }

    /// Where it listens (always on 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Kills it (SIGKILL) and reaps it; later requests to its port are refused.
    pub fn kill(&self) {
        self.process.kill();
    }

    /// Its log (stdout and stderr).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// `GET path_and_query`: status and body.
    pub async fn get(&self, path_and_query: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("http://{}{path_and_query}", self.addr))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path_and_query}: {e}"));
        let status = r.status().as_u16();
        (status, r.text().await.expect("sidecar body"))
    }

    /// `GET /v1/verify?ip=..&bot=..`: status and body.
    pub async fn verify(&self, ip: &str, bot: &str) -> (u16, String) {
        self.get(&format!("/v1/verify?ip={ip}&bot={bot}")).await
    }

    /// `POST path` with `body` (sent as `application/json`): status and body.
    pub async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
        let r = self
            .http
            .post(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = r.status().as_u16();
        (status, r.text().await.expect("sidecar body"))
    }

    /// `POST /v1/fleet/sync` with `req`: status and body.
    pub async fn fleet_sync(&self, req: &SyncRequest) -> (u16, String) {
        let body = serde_json::to_string(req).expect("serialise a SyncRequest");
        self.post(FLEET_SYNC_PATH, body).await
    }

    /// Its Prometheus text (`GET /metrics`).
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("http://{}/metrics", self.addr))
            .send()
            .await
            .expect("GET verifier /metrics")
            .text()
            .await
            .expect("verifier /metrics body")
    }

    /// The value of one exact series (`name{labels}`), 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .map(|v| v.trim().parse().expect("metric value"))
            .unwrap_or(0.0)
    }

    /// How many verdicts it gave for `bot` by `method` (`fcrdns`, `ip_range`, `none`) with
    /// `verdict` (`verified`, `spoofed`, `unknown`): its
    /// `crawlguard_sidecar_verdicts_total` series.
    pub async fn verdicts(&self, bot: &str, method: &str, verdict: &str) -> f64 {
        self.metric(&format!(
            "crawlguard_sidecar_verdicts_total{{bot=\"{bot}\",method=\"{method}\",verdict=\"{verdict}\"}}"
        ))
        .await
    }
}
