//! DNS for the verifier sidecar: [`Dnsmasq`] serving a test's PTR and A/AAAA [`Record`]s,
//! [`SlowDns`] (a relay that answers late) and [`Blackhole`] (a server that never answers).
//!
//! Loopback addresses cannot be verified through DNS: hickory-resolver (inside the sidecar)
//! answers reverse lookups of `127.0.0.0/8` and `::1` itself with `localhost.` (RFC 6761)
//! and never asks the server. Tests therefore serve records for documentation addresses
//! (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) and make the filter take
//! the client address from `x-forwarded-for`.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::process::{free_udp_tcp_port, temp_dir, NotReady, Process};

/// How long dnsmasq may take to answer its first query.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A real Googlebot of the tests: its PTR is [`GOOGLEBOT_HOST`], which resolves back to it.
pub const GOOGLEBOT_V4: &str = "192.0.2.1";
/// The PTR name of [`GOOGLEBOT_V4`].
pub const GOOGLEBOT_HOST: &str = "crawl-192-0-2-1.googlebot.com";

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

    /// The real Googlebot of the tests: [`GOOGLEBOT_HOST`] <-> [`GOOGLEBOT_V4`].
    pub fn googlebot() -> Record {
        Record::host(GOOGLEBOT_HOST, GOOGLEBOT_V4)
    }

    fn arg(&self) -> String {
        match self {
            Record::Host(name, ip) => format!("--host-record={name},{ip}"),
            Record::Ptr(ip, name) => format!("--ptr-record={},{name}", reverse_name(*ip)),
            Record::Forward(name, ip) => format!("--address=/{name}/{ip}"),
        }
    }
}

/// The dnsmasq binary (Debian `dnsmasq-base`, installed by `scripts/setup.sh`). Panics with
/// the fix when it cannot be found.
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
    BIN.get_or_init(find).clone().expect(
        "dnsmasq is required for the verification tests: run scripts/setup.sh (make test does)",
    )
}

/// A DNS query (type A) for `name`; true if a reply with our id came back within 200 ms.
async fn dns_answers(port: u16, name: &str) -> bool {
    let mut pkt = vec![0x5a, 0x17, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        pkt.push(label.len() as u8);
        pkt.extend_from_slice(label.as_bytes());
    }
    pkt.extend_from_slice(&[0, 0, 1, 0, 1]);
    let Ok(sock) = tokio::net::UdpSocket::bind("127.0.0.1:0").await else {
        return false;
    };
    if sock.send_to(&pkt, ("127.0.0.1", port)).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 512];
    let reply = tokio::time::timeout(Duration::from_millis(200), sock.recv_from(&mut buf)).await;
    matches!(reply, Ok(Ok((n, _))) if n >= 12 && buf[..2] == [0x5a, 0x17])
}

/// A running dnsmasq on `127.0.0.1:<free port>` that serves exactly the given records and
/// answers NXDOMAIN for every other name (like an authoritative server would); killed on
/// drop (see [`Process`]).
pub struct Dnsmasq {
    process: Process,
    addr: SocketAddr,
}

impl Dnsmasq {
    /// Starts it and waits until it answers queries. Tries again on a port taken meanwhile.
    pub async fn start(records: &[Record]) -> Dnsmasq {
        let bin = dnsmasq_bin();
        const ATTEMPTS: usize = 3;
        for attempt in 1..=ATTEMPTS {
            let port = free_udp_tcp_port();
            let process = Process::spawn(
                "dnsmasq",
                temp_dir("dnsmasq"),
                Command::new(&bin)
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
                    .args(records.iter().map(Record::arg)),
            );
            let ready = process
                .wait_ready(READY_DEADLINE, || async {
                    dns_answers(port, "ready.probe.invalid").await.then_some(())
                })
                .await;
            match ready {
                Ok(()) => {
                    return Dnsmasq {
                        process,
                        addr: SocketAddr::from(([127, 0, 0, 1], port)),
                    }
                }
                Err(NotReady::Exited(_)) if attempt < ATTEMPTS => continue,
                Err(e) => panic!("dnsmasq on port {port} {e} (attempt {attempt} of {ATTEMPTS})"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Where it answers (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its log (`--log-queries`: one line per query and answer).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Kills it (SIGKILL) and reaps it: a resolver outage. Queries to its port then go
    /// unanswered (UDP port unreachable, TCP connection refused).
    pub fn kill(&self) {
        self.process.kill();
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
    stop: Arc<AtomicBool>,
}

impl SlowDns {
    /// Binds a free UDP port on 127.0.0.1 and relays to `upstream` with `delay`.
    pub fn start(upstream: SocketAddr, delay: Duration) -> SlowDns {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind udp 127.0.0.1:0");
        let addr = sock.local_addr().expect("slow dns local addr");
        // A short read timeout so the thread notices `stop` soon after the drop.
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("set_read_timeout");
        let stop = Arc::new(AtomicBool::new(false));
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
        self.stop.store(true, Ordering::Relaxed);
    }
}
