//! The real verification stack beside Envoy: a local DNS server (`dnsmasq`) serving test PTR
//! and A/AAAA records, and the `crawlguard-verifier` sidecar pointed at it. Used by
//! `tests/verify.rs` with [`crate::EnvoyOpts::real_verifier`], which points Envoy's cluster
//! `crawlguard_verifier` at the sidecar.
//!
//! Every process runs on free loopback ports, is killed (and reaped) when its handle drops,
//! also when a test panics (its log tail is then printed), and is awaited by polling for
//! readiness, never by a fixed sleep.
//!
//! The sidecar binary: `$CRAWLGUARD_VERIFIER_BIN`, else the one in the running test's
//! target directory if it is newer than the verifier's sources (`make test` builds it
//! first), else `cargo build -q -p crawlguard-verifier` runs once per test process into that
//! target directory; see [`verifier_bin`].
//!
//! Loopback addresses cannot be verified through DNS: hickory-resolver (inside the sidecar)
//! answers reverse lookups of `127.0.0.0/8` and `::1` itself with `localhost.` (RFC 6761)
//! and never asks the server. Tests therefore serve records for documentation addresses
//! (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) and make the filter take
//! the client address from `x-forwarded-for`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::{repo_root, Envoy, EnvoyOpts};

/// How long a process may take to become ready.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A child process killed and reaped on drop; when dropped during a panic it prints the
/// last lines of its log file.
struct ChildGuard {
    child: Option<Child>,
    name: &'static str,
    log: PathBuf,
}

impl ChildGuard {
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `Some(status)` if the process has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let text = self.log();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!("---- {} log (last {} lines) ----", self.name, tail.len());
            for l in tail {
                eprintln!("{l}");
            }
        }
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 (dnsmasq binds both).
fn free_udp_tcp_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp 127.0.0.1:0");
        let port = udp.local_addr().expect("udp local addr").port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The reverse-lookup name of `ip` (`4.3.2.1.in-addr.arpa`, nibbles `.ip6.arpa`).
pub fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(v6) => {
            let mut s = String::new();
            for b in v6.octets().iter().rev() {
                let _ = write!(s, "{:x}.{:x}.", b & 0xf, b >> 4);
            }
            s + "ip6.arpa"
        }
    }
}

/// One DNS fact served by [`Dnsmasq`].
#[derive(Debug, Clone)]
pub enum Record {
    /// `name` resolves to `ip` (A or AAAA) and `ip` has the PTR `name`.
    Host(String, IpAddr),
    /// `ip` has the PTR `name` (add several for several PTR names).
    Ptr(IpAddr, String),
    /// `name` resolves to `ip` (A or AAAA), no PTR.
    Forward(String, IpAddr),
}

fn parse_ip(ip: &str) -> IpAddr {
    ip.parse()
        .unwrap_or_else(|e| panic!("bad IP address {ip:?} in a DNS record: {e}"))
}

impl Record {
    /// [`Record::Host`]: `name` <-> `ip` (forward and reverse).
    pub fn host(name: &str, ip: &str) -> Record {
        Record::Host(name.to_string(), parse_ip(ip))
    }

    /// [`Record::Ptr`]: `ip` -> `name` only.
    pub fn ptr(ip: &str, name: &str) -> Record {
        Record::Ptr(parse_ip(ip), name.to_string())
    }

    /// [`Record::Forward`]: `name` -> `ip` only.
    pub fn forward(name: &str, ip: &str) -> Record {
        Record::Forward(name.to_string(), parse_ip(ip))
    }

    fn arg(&self) -> String {
        match self {
            Record::Host(name, ip) => format!("--host-record={name},{ip}"),
            Record::Ptr(ip, name) => format!("--ptr-record={},{name}", reverse_name(*ip)),
            Record::Forward(name, ip) => format!("--address=/{name}/{ip}"),
        }
    }
}

/// The dnsmasq binary (Debian `dnsmasq-base`); installed with apt-get when missing and
/// running as root. Panics with a hint when it cannot be found.
pub fn dnsmasq_bin() -> PathBuf {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    let find = || {
        [
            "/usr/sbin/dnsmasq",
            "/usr/bin/dnsmasq",
            "/usr/local/sbin/dnsmasq",
        ]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
    };
    BIN.get_or_init(|| {
        find().or_else(|| {
            eprintln!("dnsmasq not found; trying `apt-get install -y dnsmasq-base`");
            let _ = Command::new("sh")
                .arg("-c")
                .arg(
                    "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                     apt-get install -y -qq dnsmasq-base) >/dev/null 2>&1",
                )
                .status();
            find()
        })
    })
    .clone()
    .expect("dnsmasq is required for the verification tests: apt-get install dnsmasq-base")
}

/// A DNS query (type A) for `name`; true if a reply with our id came back within 200 ms.
fn dns_answers(port: u16, name: &str) -> bool {
    let mut pkt = vec![0x5a, 0x17, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        pkt.push(label.len() as u8);
        pkt.extend_from_slice(label.as_bytes());
    }
    pkt.extend_from_slice(&[0, 0, 1, 0, 1]);
    let Ok(sock) = UdpSocket::bind("127.0.0.1:0") else {
        return false;
    };
    let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
    if sock.send_to(&pkt, ("127.0.0.1", port)).is_err() {
        return false;
    }
    let mut buf = [0u8; 512];
    matches!(sock.recv_from(&mut buf), Ok((n, _)) if n >= 12 && buf[..2] == [0x5a, 0x17])
}

/// A running dnsmasq on `127.0.0.1:<free port>` that serves exactly the given records and
/// answers NXDOMAIN for every other name (like an authoritative server would).
pub struct Dnsmasq {
    guard: ChildGuard,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Dnsmasq {
    /// Starts it and waits until it answers queries. Retries on a port taken meanwhile.
    pub fn start(records: &[Record]) -> Dnsmasq {
        let bin = dnsmasq_bin();
        let dir = tempfile::Builder::new()
            .prefix("crawlguard-dnsmasq-")
            .tempdir()
            .expect("temp dir");
        let mut last = String::new();
        for _attempt in 0..3 {
            let port = free_udp_tcp_port();
            let log = dir.path().join("dnsmasq.log");
            let child = Command::new(&bin)
                .args([
                    "--no-daemon".to_string(),
                    format!("--port={port}"),
                    "--listen-address=127.0.0.1".to_string(),
                    "--bind-interfaces".to_string(),
                    "--no-resolv".to_string(),
                    "--no-hosts".to_string(),
                    "--conf-file=/dev/null".to_string(),
                    "--log-queries".to_string(),
                    "--local=/#/".to_string(),
                ])
                .args(records.iter().map(Record::arg))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("create dnsmasq.log"))
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let mut guard = ChildGuard {
                child: Some(child),
                name: "dnsmasq",
                log,
            };
            let deadline = Instant::now() + READY_DEADLINE;
            loop {
                if dns_answers(port, "ready.probe.invalid") {
                    return Dnsmasq {
                        guard,
                        addr: SocketAddr::from(([127, 0, 0, 1], port)),
                        _dir: dir,
                    };
                }
                if let Some(status) = guard.exited() {
                    last = format!("dnsmasq exited ({status}): {}", guard.log());
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "dnsmasq did not answer on port {port}; log:\n{}",
                    guard.log()
                );
            }
        }
        panic!("dnsmasq could not start after 3 attempts: {last}");
    }

    /// Where it answers (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its log (`--log-queries`: one line per query and answer).
    pub fn log(&self) -> String {
        self.guard.log()
    }
}

/// A UDP socket on loopback that never answers: a DNS server where every query times out.
pub struct Blackhole {
    sock: UdpSocket,
}

impl Blackhole {
    /// Binds it on a free port.
    pub fn new() -> Blackhole {
        Blackhole {
            sock: UdpSocket::bind("127.0.0.1:0").expect("bind udp 127.0.0.1:0"),
        }
    }

    /// Its address, to pass as a nameserver.
    pub fn addr(&self) -> SocketAddr {
        self.sock.local_addr().expect("blackhole local addr")
    }
}

impl Default for Blackhole {
    fn default() -> Self {
        Blackhole::new()
    }
}

/// A DNS relay that answers every query late: it forwards each UDP query to `upstream`
/// (usually a [`Dnsmasq`]) and sends the answer back only `delay` after the query arrived.
/// It plays a slow resolver, so that the sidecar answers verifications slowly while its
/// verdicts stay real. Stops when dropped.
pub struct SlowDns {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SlowDns {
    /// Binds a free UDP port on 127.0.0.1 and relays to `upstream` with `delay`.
    pub fn start(upstream: SocketAddr, delay: Duration) -> SlowDns {
        use std::sync::atomic::{AtomicBool, Ordering};
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind udp 127.0.0.1:0");
        let addr = sock.local_addr().expect("slow dns local addr");
        // A short read timeout so the thread notices `stop` soon after the drop.
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("set_read_timeout");
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((n, client)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let query = buf[..n].to_vec();
                let Ok(reply_sock) = sock.try_clone() else {
                    continue;
                };
                let arrived = Instant::now();
                // One thread per query: the delay is per query, not a queue.
                std::thread::spawn(move || {
                    let Ok(up) = UdpSocket::bind("127.0.0.1:0") else {
                        return;
                    };
                    let _ = up.set_read_timeout(Some(Duration::from_secs(5)));
                    if up.send_to(&query, upstream).is_err() {
                        return;
                    }
                    let mut answer = [0u8; 4096];
                    let Ok((m, _)) = up.recv_from(&mut answer) else {
                        return;
                    };
                    // Simulated latency of a slow resolver, not a synchronisation.
                    std::thread::sleep(delay.saturating_sub(arrived.elapsed()));
                    let _ = reply_sock.send_to(&answer[..m], client);
                });
            }
        });
        SlowDns { addr, stop }
    }

    /// Its address, to pass as a nameserver.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for SlowDns {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The `crawlguard-verifier` binary: `$CRAWLGUARD_VERIFIER_BIN`; else
/// `target/<profile>/crawlguard-verifier` of the target directory and profile of the running
/// test executable (`target/<profile>/deps/<test>`) if it is newer than the verifier's
/// sources (as after `make test`'s first `cargo test --workspace`); else it is built there,
/// once per test process, with `cargo build -q -p crawlguard-verifier`. If that build fails
/// but a binary is there, that binary is used (with a warning).
pub fn verifier_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("CRAWLGUARD_VERIFIER_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("current exe");
        let mut profile_dir = exe.parent().expect("test executable directory");
        if profile_dir.ends_with("deps") {
            profile_dir = profile_dir.parent().expect("target/<profile>");
        }
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
        let bin = target_dir.join(&profile).join("crawlguard-verifier");
        if binary_is_fresh(&bin) {
            return bin;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(&cargo);
        cmd.args(["build", "-q", "-p", "crawlguard-verifier", "--bin"])
            .arg("crawlguard-verifier")
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
                    "warning: `cargo build -p crawlguard-verifier` failed ({result:?}); \
                     using the existing {}",
                    bin.display()
                );
                bin
            }
            result => panic!(
                "crawlguard-verifier could not be built ({result:?}) and {} is missing; \
                 build it with `cargo build -p crawlguard-verifier` or set \
                 CRAWLGUARD_VERIFIER_BIN",
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
    for f in ["Cargo.toml", "Cargo.lock", "verifier/Cargo.toml"] {
        newest = newest.max(std::fs::metadata(root.join(f)).ok()?.modified().ok()?);
    }
    walk(&root.join("verifier/src"), &mut newest).ok()?;
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
}

impl SidecarOpts {
    /// Resolving through `dns` only.
    pub fn dns(dns: SocketAddr) -> SidecarOpts {
        SidecarOpts {
            nameservers: vec![dns],
            ..Default::default()
        }
    }
}

/// A running `crawlguard-verifier` on `127.0.0.1:<port>`, killed on drop (or by
/// [`Sidecar::kill`]).
pub struct Sidecar {
    guard: ChildGuard,
    addr: SocketAddr,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
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
        let dir = tempfile::Builder::new()
            .prefix("crawlguard-verifier-")
            .tempdir()
            .expect("temp dir");
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--log-level".into(),
            "debug".into(),
        ];
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
        if let Some(toml) = &opts.config_toml {
            let path = dir.path().join("verifier.toml");
            std::fs::write(&path, toml).expect("write verifier.toml");
            args.extend(["--config".into(), path.display().to_string()]);
        }
        let log = dir.path().join("verifier.log");
        let mut child = Command::new(&bin)
            .args(&args)
            .env_remove("CRAWLGUARD_VERIFIER_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("create verifier.log"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let guard = ChildGuard {
            child: Some(child),
            name: "crawlguard-verifier",
            log,
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Keep draining stdout so the sidecar never blocks on a full pipe.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx.recv_timeout(READY_DEADLINE).unwrap_or_else(|e| {
            panic!(
                "crawlguard-verifier printed no `listening on` line ({e}); log:\n{}",
                guard.log()
            )
        });
        let addr: SocketAddr = line
            .strip_prefix("listening on ")
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first stdout line of the verifier: {line:?}"));
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("verifier client");
        let sidecar = Sidecar {
            guard,
            addr,
            http,
            _dir: dir,
        };
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            if let Ok(r) = sidecar
                .http
                .get(format!("http://{addr}/healthz"))
                .send()
                .await
            {
                if r.status() == 200 && r.text().await.is_ok_and(|t| t == "ok") {
                    return sidecar;
                }
            }
            assert!(
                Instant::now() < deadline,
                "verifier /healthz never answered ok; log:\n{}",
                sidecar.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Where it listens (always on 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Kills it (SIGKILL) and reaps it; later requests to its port are refused.
    pub fn kill(&mut self) {
        self.guard.kill();
    }

    /// Its log (stderr).
    pub fn log(&self) -> String {
        self.guard.log()
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
}

/// Envoy with the crawlguard filter, the verifier sidecar behind cluster
/// `crawlguard_verifier`, and (optionally) the DNS server the sidecar asks.
/// Fields drop in reverse order of start: Envoy first, then the sidecar, then DNS.
pub struct Stack {
    /// Envoy (free ports, the given filter configuration).
    pub envoy: Envoy,
    /// The sidecar.
    pub sidecar: Sidecar,
    /// The DNS server, when the stack was started with records.
    pub dns: Option<Dnsmasq>,
}

impl Stack {
    /// dnsmasq with `records`, the sidecar resolving through it (`sidecar` with its
    /// nameservers replaced), and Envoy started with `envoy` plus cluster
    /// `crawlguard_verifier` pointing at the sidecar.
    pub async fn start(envoy: EnvoyOpts, records: &[Record], sidecar: SidecarOpts) -> Stack {
        let dns = Dnsmasq::start(records);
        let sidecar = Sidecar::start(SidecarOpts {
            nameservers: vec![dns.addr()],
            ..sidecar
        })
        .await;
        let envoy = Envoy::start(envoy.real_verifier(sidecar.addr().port())).await;
        Stack {
            envoy,
            sidecar,
            dns: Some(dns),
        }
    }

    /// The sidecar as given (its own nameservers, no DNS server of ours) and Envoy.
    pub async fn start_without_dns(envoy: EnvoyOpts, sidecar: SidecarOpts) -> Stack {
        let sidecar = Sidecar::start(sidecar).await;
        let envoy = Envoy::start(envoy.real_verifier(sidecar.addr().port())).await;
        Stack {
            envoy,
            sidecar,
            dns: None,
        }
    }

    /// Panics if Envoy's log shows a panic in the filter or a critical wasm log line (what
    /// the proxy-wasm SDK's panic hook writes before the VM is lost).
    pub fn assert_no_panic(&self) {
        assert_log_clean(&self.envoy.log());
    }
}

/// Panics if `envoy_log` contains `panicked at` or a critical `wasm log` line.
pub fn assert_log_clean(envoy_log: &str) {
    let bad: Vec<&str> = envoy_log
        .lines()
        .filter(|l| {
            l.contains("panicked at")
                || (l.contains("[critical]") && l.contains("wasm"))
                || l.contains("wasm log crawlguard") && l.contains("critical")
        })
        .collect();
    assert!(
        bad.is_empty(),
        "Envoy's log shows a filter panic / critical wasm log:\n{}",
        bad.join("\n")
    );
}
