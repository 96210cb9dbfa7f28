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
//! (`requirepass`) and a TLS port with a throwaway CA ([`TestCa::generate`]).
//!
//! By job: the server and its handle here, `resp` (the test client), `slow_proxy`
//! ([`SlowProxy`]); the throwaway CA is `crate::test_ca`.

mod resp;
mod slow_proxy;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::process::{free_tcp_ports, temp_dir, NotReady, Process};

pub use crate::test_ca::TestCa;
pub use resp::{redis_cmd, redis_cmd_auth, RedisReply};
pub use slow_proxy::SlowProxy;

/// How long redis-server may take to answer PING.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// The redis-server binary (Debian `redis-server`, installed by `scripts/setup.sh`). Panics
/// with the fix when it cannot be found.
pub fn redis_server_bin() -> PathBuf {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    let find = || {
        ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    };
    BIN.get_or_init(find).clone().expect(
        "redis-server is required for the fleet tests: run scripts/setup.sh (make test does)",
    )
}

/// How to start a [`Redis`].
#[derive(Debug, Clone, Default)]
pub struct RedisOpts {
    /// `requirepass`: clients must `AUTH` (the URL's `redis://:password@...`).
    pub password: Option<String>,
    /// A TLS port too (`--tls-port`, no client certificates), beside the plain one.
    pub tls: Option<TestCa>,
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
}
