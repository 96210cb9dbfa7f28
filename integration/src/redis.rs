//! Redis for fleet mode: [`Redis`], a real `redis-server` (Debian's package) on a free
//! loopback port, with a small blocking client of its own ([`Redis::cmd`], [`RedisReply`]) so
//! tests look at Redis without the code under test; and [`SlowProxy`], a TCP relay whose
//! delay a test turns up and down, to make Redis slow for one client only.
//!
//! The server keeps nothing on disk (`--save ""`, no AOF, its directory is the handle's
//! temporary directory) and can be killed and restarted on the same port
//! ([`Redis::kill`], [`Redis::restart`]), which is what a sidecar sees when Redis goes away
//! and comes back (empty). [`Redis::pause`] holds every client's commands for a while
//! (`CLIENT PAUSE`): a slow Redis for everyone. [`RedisOpts`] adds a password
//! (`requirepass`) and a TLS port with a throwaway CA ([`RedisTls::generate`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::process::{free_tcp_ports, temp_dir, NotReady, Process};

/// How long redis-server may take to answer PING.
const READY_DEADLINE: Duration = Duration::from_secs(30);
/// Bound on one command of the test client.
const CMD_TIMEOUT: Duration = Duration::from_secs(10);

/// The redis-server binary (Debian `redis-server`); installed with apt-get when missing and
/// running as root (`scripts/setup.sh` installs it too). Panics with a hint when it cannot
/// be found.
pub fn redis_server_bin() -> PathBuf {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    let find = || {
        ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    };
    BIN.get_or_init(|| {
        find().or_else(|| {
            eprintln!("redis-server not found; trying `apt-get install -y redis-server`");
            let _ = Command::new("sh")
                .arg("-c")
                .arg(
                    "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                     apt-get install -y -qq --no-install-recommends redis-server) \
                     >/dev/null 2>&1",
                )
                .status();
            find()
        })
    })
    .clone()
    .expect("redis-server is required for the fleet tests: apt-get install redis-server")
}

/// One RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisReply {
    /// `+OK` and other simple strings.
    Status(String),
    /// An integer.
    Int(i64),
    /// A bulk string (lossy UTF-8).
    Bulk(String),
    /// A null bulk string or array (a missing key).
    Nil,
    /// An array.
    Array(Vec<RedisReply>),
    /// `-ERR ...`.
    Error(String),
}

impl RedisReply {
    /// The integer, else a panic naming what came instead.
    pub fn int(&self) -> i64 {
        match self {
            RedisReply::Int(v) => *v,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    /// The string of a bulk or status reply; `None` for nil; a panic otherwise.
    pub fn text(&self) -> Option<String> {
        match self {
            RedisReply::Bulk(s) | RedisReply::Status(s) => Some(s.clone()),
            RedisReply::Nil => None,
            other => panic!("expected a string reply, got {other:?}"),
        }
    }
}

fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    if !line.ends_with("\r\n") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("truncated RESP line {line:?}"),
        ));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_len(s: &str) -> std::io::Result<i64> {
    s.parse().map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad length {s:?}"))
    })
}

fn read_reply(r: &mut impl BufRead) -> std::io::Result<RedisReply> {
    let line = read_line(r)?;
    let (tag, rest) = line.split_at(line.len().min(1));
    Ok(match tag {
        "+" => RedisReply::Status(rest.to_string()),
        "-" => RedisReply::Error(rest.to_string()),
        ":" => RedisReply::Int(parse_len(rest)?),
        "$" => {
            let n = parse_len(rest)?;
            if n < 0 {
                return Ok(RedisReply::Nil);
            }
            let mut buf = vec![0; n as usize + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(n as usize);
            RedisReply::Bulk(String::from_utf8_lossy(&buf).into_owned())
        }
        "*" => {
            let n = parse_len(rest)?;
            if n < 0 {
                return Ok(RedisReply::Nil);
            }
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                items.push(read_reply(r)?);
            }
            RedisReply::Array(items)
        }
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unexpected RESP line {line:?}"),
            ))
        }
    })
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends one command to `addr` on a fresh plain-text connection (after `AUTH password` when
/// given; a refused AUTH is the reply) and reads its reply.
pub fn redis_cmd_auth(
    addr: SocketAddr,
    password: Option<&str>,
    args: &[&str],
) -> std::io::Result<RedisReply> {
    let stream = TcpStream::connect_timeout(&addr, CMD_TIMEOUT)?;
    stream.set_read_timeout(Some(CMD_TIMEOUT))?;
    stream.set_write_timeout(Some(CMD_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    if let Some(pw) = password {
        (&stream).write_all(&encode(&["AUTH", pw]))?;
        let reply = read_reply(&mut reader)?;
        if reply != RedisReply::Status("OK".into()) {
            return Ok(reply);
        }
    }
    (&stream).write_all(&encode(args))?;
    read_reply(&mut reader)
}

/// Sends one command to `addr` on a fresh plain-text connection and reads its reply.
pub fn redis_cmd(addr: SocketAddr, args: &[&str]) -> std::io::Result<RedisReply> {
    redis_cmd_auth(addr, None, args)
}

/// A server certificate for `127.0.0.1` / `localhost` and the throwaway CA that signed it
/// (PEM files), for a Redis TLS port; a client trusts it with `SSL_CERT_FILE=<ca>`.
#[derive(Debug, Clone)]
pub struct RedisTls {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The server certificate.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl RedisTls {
    /// Makes a CA and a server certificate in `dir` with the `openssl` command (Debian
    /// `openssl`, installed with apt-get when missing and running as root).
    pub fn generate(dir: &Path) -> RedisTls {
        if Command::new("openssl").arg("version").output().is_err() {
            eprintln!("openssl not found; trying `apt-get install -y openssl`");
            let _ = Command::new("sh")
                .arg("-c")
                .arg(
                    "(apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
                     apt-get install -y -qq --no-install-recommends openssl) >/dev/null 2>&1",
                )
                .status();
        }
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap_or_else(|e| panic!("openssl is required for the TLS tests: {e}"));
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
             basicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature\n\
             extendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        let ec = "ec_paramgen_curve:prime256v1";
        run(&[
            "req",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-newkey",
            "ec",
            "-pkeyopt",
            ec,
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=crawlguard test CA",
        ]);
        run(&[
            "req",
            "-nodes",
            "-newkey",
            "ec",
            "-pkeyopt",
            ec,
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.pem",
            "-extfile",
            "server.ext",
        ]);
        RedisTls {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        }
    }
}

/// How to start a [`Redis`].
#[derive(Debug, Clone, Default)]
pub struct RedisOpts {
    /// `requirepass`: clients must `AUTH` (the URL's `redis://:password@...`).
    pub password: Option<String>,
    /// A TLS port too (`--tls-port`, no client certificates), beside the plain one.
    pub tls: Option<RedisTls>,
}

/// A running `redis-server` on `127.0.0.1:<port>`, no persistence; killed on drop (see
/// [`Process`]).
pub struct Redis {
    process: Process,
    port: u16,
    tls_port: Option<u16>,
    opts: RedisOpts,
}

impl Redis {
    /// Starts it on a free port and waits until it answers PING. Tries another port if the
    /// one picked was taken meanwhile.
    pub async fn start() -> Redis {
        Redis::start_with(RedisOpts::default()).await
    }

    /// [`Redis::start`] with a password and/or a TLS port.
    pub async fn start_with(opts: RedisOpts) -> Redis {
        const ATTEMPTS: usize = 3;
        for attempt in 1..=ATTEMPTS {
            let [port, tls] = free_tcp_ports::<2>();
            let tls_port = opts.tls.as_ref().map(|_| tls);
            match Redis::spawn(port, tls_port, &opts).await {
                Ok(process) => {
                    return Redis {
                        process,
                        port,
                        tls_port,
                        opts,
                    }
                }
                Err(NotReady::Exited(_)) if attempt < ATTEMPTS => continue,
                Err(e) => {
                    panic!("redis-server on port {port} {e} (attempt {attempt} of {ATTEMPTS})")
                }
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    async fn spawn(
        port: u16,
        tls_port: Option<u16>,
        opts: &RedisOpts,
    ) -> Result<Process, NotReady> {
        let dir = temp_dir("redis");
        let mut args: Vec<String> = vec![
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            dir.path().display().to_string(),
            "--daemonize".into(),
            "no".into(),
            "--loglevel".into(),
            "notice".into(),
        ];
        if let Some(pw) = &opts.password {
            args.extend(["--requirepass".into(), pw.clone()]);
        }
        if let (Some(tls), Some(tls_port)) = (&opts.tls, tls_port) {
            args.extend([
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                tls.cert.display().to_string(),
                "--tls-key-file".into(),
                tls.key.display().to_string(),
                "--tls-ca-cert-file".into(),
                tls.ca.display().to_string(),
                "--tls-auth-clients".into(),
                "no".into(),
            ]);
        }
        let process = Process::spawn(
            "redis-server",
            dir,
            Command::new(redis_server_bin()).args(&args),
        );
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let password = opts.password.clone();
        process
            .wait_ready(READY_DEADLINE, || {
                let password = password.clone();
                async move {
                    let pong = redis_cmd_auth(addr, password.as_deref(), &["PING"]);
                    matches!(pong, Ok(RedisReply::Status(s)) if s == "PONG").then_some(())
                }
            })
            .await?;
        Ok(process)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:<port>/` (with `:password@` when it has one), for `--redis`.
    pub fn url(&self) -> String {
        match &self.opts.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// `rediss://[:password@]127.0.0.1:<tls port>/` when started with TLS.
    pub fn tls_url(&self) -> Option<String> {
        let port = self.tls_port?;
        Some(match &self.opts.password {
            Some(pw) => format!("rediss://:{pw}@127.0.0.1:{port}/"),
            None => format!("rediss://127.0.0.1:{port}/"),
        })
    }

    /// Kills it (SIGKILL): connections break, the port refuses, the data is gone.
    pub fn kill(&self) {
        self.process.kill();
    }

    /// Kills it if it still runs and starts a new, empty one on the same port; returns when
    /// it answers PING.
    pub async fn restart(&mut self) {
        self.process.kill();
        self.process = Redis::spawn(self.port, self.tls_port, &self.opts)
            .await
            .unwrap_or_else(|e| panic!("redis-server restarted on port {} {e}", self.port));
    }

    /// Its log.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// One command (panics on a connection failure; an error reply is [`RedisReply::Error`]).
    pub fn cmd(&self, args: &[&str]) -> RedisReply {
        redis_cmd_auth(self.addr(), self.opts.password.as_deref(), args)
            .unwrap_or_else(|e| panic!("redis {args:?} on port {}: {e}", self.port))
    }

    /// `DBSIZE`: keys in database 0.
    pub fn dbsize(&self) -> i64 {
        self.cmd(&["DBSIZE"]).int()
    }

    /// `GET key`.
    pub fn get(&self, key: &str) -> Option<String> {
        self.cmd(&["GET", key]).text()
    }

    /// `PTTL key`: ms to expiry; -1 without expiry, -2 when the key does not exist.
    pub fn pttl(&self, key: &str) -> i64 {
        self.cmd(&["PTTL", key]).int()
    }

    /// `used_memory` of `INFO memory`, bytes.
    pub fn used_memory(&self) -> i64 {
        let info = self.cmd(&["INFO", "memory"]).text().unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no used_memory in INFO memory:\n{info}"))
    }

    /// Holds every client's commands for `d` (`CLIENT PAUSE <ms> ALL`): Redis is slow for
    /// everyone, this test client included, until `d` has passed.
    pub fn pause(&self, d: Duration) {
        let ms = d.as_millis().to_string();
        assert_eq!(
            self.cmd(&["CLIENT", "PAUSE", &ms, "ALL"]),
            RedisReply::Status("OK".into())
        );
    }
}

/// A TCP relay on `127.0.0.1:<free port>` to `upstream` that holds every chunk a client
/// sends for [`SlowProxy::set_delay`] before passing it on (answers come back at once): a
/// slow Redis for the clients that connect through it. Starts with no delay; stops
/// accepting when dropped.
pub struct SlowProxy {
    addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl SlowProxy {
    /// Binds a free port and relays to `upstream`.
    pub fn start(upstream: SocketAddr) -> SlowProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("slow proxy local addr");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (delay, stopped) = (delay_ms.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(upstream) else {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        };
                        relay(client, server, delay.clone(), stopped.clone());
                    }
                    // Nothing to accept: look again soon (and notice `stop`).
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        SlowProxy {
            addr,
            delay_ms,
            stop,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://<addr>/`: Redis through this relay.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// How long each chunk from a client is held from now on (0: none).
    pub fn set_delay(&self, d: Duration) {
        self.delay_ms.store(
            d.as_millis().try_into().unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Two threads per connection: client -> server with the delay, server -> client without.
fn relay(client: TcpStream, server: TcpStream, delay_ms: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let pipe = move |mut from: TcpStream, mut to: TcpStream, delayed: bool| {
        let delay_ms = delay_ms.clone();
        let stop = stop.clone();
        move || {
            // A read timeout so the thread notices `stop`.
            let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
            let mut buf = [0u8; 16 * 1024];
            while !stop.load(Ordering::Relaxed) {
                let n = match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        continue
                    }
                    Err(_) => break,
                };
                if delayed {
                    let arrived = Instant::now();
                    let delay = Duration::from_millis(delay_ms.load(Ordering::Relaxed));
                    // Simulated latency of a slow server, not a synchronisation.
                    std::thread::sleep(delay.saturating_sub(arrived.elapsed()));
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        }
    };
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(pipe(client, server, true));
    std::thread::spawn(pipe(server2, client2, false));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_killed_redis_restarts_empty_on_its_port() {
        let mut redis = Redis::start().await;
        assert_eq!(
            redis.cmd(&["SET", "k", "v"]),
            RedisReply::Status("OK".into())
        );
        assert_eq!(redis.get("k"), Some("v".into()));
        let addr = redis.addr();
        redis.kill();
        assert!(redis_cmd(addr, &["PING"]).is_err());
        redis.restart().await;
        assert_eq!(redis.addr(), addr);
        assert_eq!(redis.get("k"), None);
        assert_eq!(redis.dbsize(), 0);
    }

    #[tokio::test]
    async fn a_password_is_required_and_the_url_carries_it() {
        let redis = Redis::start_with(RedisOpts {
            password: Some("pw1".into()),
            tls: None,
        })
        .await;
        assert_eq!(redis.cmd(&["PING"]), RedisReply::Status("PONG".into()));
        let anonymous = redis_cmd(redis.addr(), &["PING"]).expect("connect");
        assert!(
            matches!(&anonymous, RedisReply::Error(e) if e.starts_with("NOAUTH")),
            "{anonymous:?}"
        );
        assert_eq!(redis.url(), format!("redis://:pw1@{}/", redis.addr()));
        assert_eq!(redis.tls_url(), None);
    }

    #[tokio::test]
    async fn a_slow_proxy_holds_commands_for_its_delay() {
        let redis = Redis::start().await;
        let proxy = SlowProxy::start(redis.addr());
        let ping = || {
            let t = Instant::now();
            let reply = redis_cmd(proxy.addr(), &["PING"]).expect("through the proxy");
            assert_eq!(reply, RedisReply::Status("PONG".into()));
            t.elapsed()
        };
        assert!(ping() < Duration::from_millis(250));
        proxy.set_delay(Duration::from_millis(300));
        let took = ping();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        proxy.set_delay(Duration::ZERO);
        assert!(ping() < Duration::from_millis(250));
        assert_eq!(proxy.url(), format!("redis://{}/", proxy.addr()));
    }
}
