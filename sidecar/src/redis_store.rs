//! Fleet mode's one Redis client: bucket sync batches ([`RedisStore::sync`]) and shared
//! FCrDNS verdicts ([`RedisStore::get_verdict`], [`RedisStore::put_verdict`]).
//!
//! - One multiplexed connection (redis-rs `ConnectionManager`), made lazily: the service
//!   starts whether Redis is up or not, and reconnects on its own in the background after a
//!   dropped connection (backoff 50 ms .. 1 s).
//! - Every operation is bounded by `redis.timeout_ms` as a whole (connecting, EVALSHA, the
//!   EVAL fallback after a Redis restart emptied the script cache): a slow or dead Redis
//!   costs a caller at most that, never a hang.
//! - Failures are counted by kind (`redis_errors_total`) and logged at most once per 10 s
//!   (with the number of failures not logged); the first success after failures logs
//!   `redis reachable again`.
//! - After a failed verdict lookup or store, verdict traffic skips Redis for 1 s, so a slow
//!   Redis does not add its timeout to every verification (sync batches always try).
//! - The URL is never logged: only scheme, host, port and database (see [`redacted`]).

use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, RedisResult, Script};
use serde::{Deserialize, Serialize};

use crate::config::RedisConfig;
use crate::fleet::{bucket_key, decode_reply, emission_ns, replicas_key, SYNC_SCRIPT};
use crate::metrics::Metrics;
use crawlguard_contract::fleet::{alive_ms, SyncRequest, SyncResponse, MAX_ALIVE_MS};
use crawlguard_contract::verify::{Method, Verdict};

/// At most one warning per this long about failing Redis commands.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// How long verdict lookups and stores skip Redis after one failed.
const VERDICT_PAUSE: Duration = Duration::from_secs(1);

/// Checks a Redis URL without connecting: scheme `redis`, `rediss`, `unix` or `redis+unix`,
/// and parts redis-rs accepts. The error never repeats the URL (it may hold a password).
pub fn check_url(url: &str) -> Result<(), String> {
    let Some(parsed) = redis::parse_redis_url(url) else {
        return Err("not a URL of scheme redis://, rediss:// or unix://".into());
    };
    match parsed.scheme() {
        "redis" | "rediss" | "unix" | "redis+unix" => {}
        other => {
            return Err(format!(
                "scheme {other:?} is not redis://, rediss:// or unix://"
            ))
        }
    }
    redis::IntoConnectionInfo::into_connection_info(parsed)
        .map(|_| ())
        .map_err(|e| format!("invalid Redis URL ({})", e.category()))
}

/// The URL without user, password or query: what logs may show.
pub fn redacted(url: &str) -> String {
    let Some(u) = redis::parse_redis_url(url) else {
        return "<invalid url>".into();
    };
    match (u.host_str(), u.port()) {
        (Some(host), Some(port)) => format!("{}://{host}:{port}{}", u.scheme(), u.path()),
        (Some(host), None) => format!("{}://{host}{}", u.scheme(), u.path()),
        (None, _) => format!("{}://{}", u.scheme(), u.path()),
    }
}

/// Why a Redis operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No answer within `redis.timeout_ms`.
    Timeout,
    /// Connecting failed or the connection broke (a reconnect is under way).
    Connection(String),
    /// Redis refused the credentials.
    Auth(String),
    /// Redis answered with an error (OOM, BUSY, a script error, ...).
    Server(String),
    /// Redis answered something the service cannot use.
    Reply(String),
    /// Anything else the client reported.
    Other(String),
}

impl StoreError {
    /// The metric label: `timeout`, `connection`, `auth`, `server`, `reply` or `other`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout => "timeout",
            StoreError::Connection(_) => "connection",
            StoreError::Auth(_) => "auth",
            StoreError::Server(_) => "server",
            StoreError::Reply(_) => "reply",
            StoreError::Other(_) => "other",
        }
    }

    fn from_redis(e: &RedisError) -> StoreError {
        let text = e.to_string();
        if e.is_timeout() {
            return StoreError::Timeout;
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            return StoreError::Connection(text);
        }
        match e.kind() {
            ErrorKind::AuthenticationFailed => StoreError::Auth(text),
            ErrorKind::Server(_) | ErrorKind::Extension => StoreError::Server(text),
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => StoreError::Reply(text),
            _ => StoreError::Other(text),
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Timeout => f.write_str("timed out"),
            StoreError::Connection(m)
            | StoreError::Auth(m)
            | StoreError::Server(m)
            | StoreError::Reply(m)
            | StoreError::Other(m) => write!(f, "{}: {m}", self.kind()),
        }
    }
}

impl std::error::Error for StoreError {}

/// A verdict as stored in Redis at `<prefix>verdict:<bot>:<ip>` (JSON, with a PX expiry of
/// the verdict's lifetime). Unknown fields are ignored, so newer sidecars may add some.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedVerdict {
    /// `verified` or `spoofed` (`unknown` verdicts are not shared).
    pub verdict: Verdict,
    /// How it was decided (`fcrdns`: only DNS verdicts are worth sharing).
    pub method: Method,
    /// The PTR name that passed, else empty.
    #[serde(default)]
    pub host: String,
}

/// Rate-limited logging of failures, and one line when Redis answers again.
#[derive(Default)]
struct ErrorLog {
    state: Mutex<ErrorLogState>,
}

#[derive(Default)]
struct ErrorLogState {
    last_warning: Option<Instant>,
    not_logged: u64,
    failing: bool,
}

impl ErrorLog {
    fn failure(&self, op: &str, error: &StoreError, target: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.failing = true;
        if s.last_warning.is_some_and(|t| t.elapsed() < LOG_EVERY) {
            s.not_logged += 1;
            return;
        }
        tracing::warn!(
            redis = target,
            op,
            kind = error.kind(),
            %error,
            not_logged_since_last = s.not_logged,
            "redis command failed (logged at most every 10 s)"
        );
        s.last_warning = Some(Instant::now());
        s.not_logged = 0;
    }

    fn success(&self, target: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.failing {
            s.failing = false;
            tracing::info!(redis = target, "redis reachable again");
        }
    }
}

/// The fleet's Redis: the sync script and shared verdicts, every operation bounded by one
/// timeout.
pub struct RedisStore {
    conn: ConnectionManager,
    timeout: Duration,
    prefix: String,
    script: Script,
    metrics: Arc<Metrics>,
    target: String,
    log: ErrorLog,
    started: Instant,
    /// Verdict traffic skips Redis until this many ms after `started`.
    verdicts_paused_until_ms: AtomicU64,
    /// Redis's clock minus this host's, ms, as of the last sync reply ([`UNKNOWN_OFFSET`]
    /// before one).
    clock_offset_ms: AtomicI64,
}

/// How much later than its timeout a sync script may still run and apply its batch, ms
/// (scheduling and clock jitter between this host and Redis).
pub const DEADLINE_MARGIN_MS: i64 = 250;

/// `clock_offset_ms` before any sync reply.
const UNKNOWN_OFFSET: i64 = i64::MIN;

/// This host's clock, ms since the Unix epoch.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl RedisStore {
    /// A store for `config.url` (which must be set). Does not connect: the first operation
    /// does, and fails fast if Redis is not there. Must run inside a Tokio runtime.
    pub fn new(config: &RedisConfig, metrics: Arc<Metrics>) -> Result<RedisStore, String> {
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| "redis.url: not set".to_string())?;
        check_url(url).map_err(|e| format!("redis.url: {e}"))?;
        let timeout = Duration::from_millis(config.timeout_ms);
        let client =
            redis::Client::open(url).map_err(|e| format!("redis.url: {}", e.category()))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let conn = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| format!("redis: {e}"))?;
        Ok(RedisStore {
            conn,
            timeout,
            prefix: config.prefix.clone(),
            script: Script::new(SYNC_SCRIPT),
            metrics,
            target: redacted(url),
            log: ErrorLog::default(),
            started: Instant::now(),
            verdicts_paused_until_ms: AtomicU64::new(0),
            clock_offset_ms: AtomicI64::new(UNKNOWN_OFFSET),
        })
    }

    /// Where it connects, without credentials.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Applies one validated batch atomically (one EVALSHA) and answers the fleet-wide state
    /// of its keys and the live replica count.
    ///
    /// The script gets a deadline in Redis's clock (this host's clock plus the offset seen
    /// in the last reply, plus the timeout and [`DEADLINE_MARGIN_MS`]): a script Redis runs
    /// later than that (queued while it stalled) changes nothing, since this sidecar has
    /// answered 503 by then and the filter does not send the batch again. Before any reply
    /// (no offset known yet) there is no deadline.
    pub async fn sync(&self, req: &SyncRequest) -> Result<SyncResponse, StoreError> {
        let sent_ms = unix_ms();
        let deadline_ms = match self.clock_offset_ms.load(Ordering::Relaxed) {
            UNKNOWN_OFFSET => 0,
            offset => sent_ms
                .saturating_add(offset)
                .saturating_add(i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX))
                .saturating_add(DEADLINE_MARGIN_MS)
                .max(1),
        };
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(replicas_key(&self.prefix))
            .arg(&req.replica)
            .arg(alive_ms(req.interval_ms))
            .arg(MAX_ALIVE_MS)
            .arg(deadline_ms);
        for k in &req.keys {
            invocation
                .key(bucket_key(&self.prefix, &k.key))
                .arg(emission_ns(k.rate_per_s))
                .arg(k.burst)
                .arg(k.used);
        }
        let mut conn = self.conn.clone();
        let reply: Vec<i64> = self.run("sync", invocation.invoke_async(&mut conn)).await?;
        let (answer, redis_now_ms) = decode_reply(&reply, &req.keys).map_err(|e| {
            let e = StoreError::Reply(e);
            self.failed("sync", &e);
            e
        })?;
        // Redis's clock minus ours, plus the one-way delay: never less than the true offset,
        // so the next deadline errs on the late side.
        self.clock_offset_ms
            .store(redis_now_ms.saturating_sub(sent_ms), Ordering::Relaxed);
        Ok(answer)
    }

    /// The Redis key of a shared verdict: `<prefix>verdict:<bot>:<ip>`.
    pub fn verdict_key(&self, bot: &str, ip: IpAddr) -> String {
        format!("{}verdict:{bot}:{ip}", self.prefix)
    }

    /// A verdict another sidecar stored for (`bot`, `ip`), with its remaining lifetime.
    /// `None` when there is none, it is unusable, or Redis fails (counted and logged; the
    /// caller resolves it itself).
    pub async fn get_verdict(&self, bot: &str, ip: IpAddr) -> Option<(SharedVerdict, Duration)> {
        if self.verdicts_paused() {
            return None;
        }
        let key = self.verdict_key(bot, ip);
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(&key).cmd("PTTL").arg(&key);
        let mut conn = self.conn.clone();
        let reply: Result<(Option<String>, i64), _> =
            self.run("verdict_get", pipe.query_async(&mut conn)).await;
        let fleet = &self.metrics.fleet;
        match reply {
            Err(_) => {
                self.pause_verdicts();
                None
            }
            Ok((Some(text), pttl_ms)) if pttl_ms > 0 => {
                match serde_json::from_str::<SharedVerdict>(&text) {
                    Ok(v) if v.verdict != Verdict::Unknown => {
                        fleet.verdict_hits.inc();
                        Some((v, Duration::from_millis(pttl_ms.unsigned_abs())))
                    }
                    Ok(_) => {
                        fleet.verdict_misses.inc();
                        None
                    }
                    Err(e) => {
                        self.failed("verdict_get", &StoreError::Reply(e.to_string()));
                        fleet.verdict_misses.inc();
                        None
                    }
                }
            }
            Ok(_) => {
                fleet.verdict_misses.inc();
                None
            }
        }
    }

    /// Stores a verdict for the fleet with lifetime `ttl`, in the background (the caller's
    /// answer does not wait for Redis). Failures are counted and logged.
    pub fn put_verdict(
        self: &Arc<Self>,
        bot: &str,
        ip: IpAddr,
        verdict: SharedVerdict,
        ttl: Duration,
    ) {
        if self.verdicts_paused() || verdict.verdict == Verdict::Unknown {
            return;
        }
        let Ok(value) = serde_json::to_string(&verdict) else {
            return;
        };
        let key = self.verdict_key(bot, ip);
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key).arg(&value).arg("PX").arg(ttl_ms);
            let mut conn = this.conn.clone();
            let stored: Result<(), _> = this.run("verdict_set", cmd.query_async(&mut conn)).await;
            if stored.is_err() {
                this.pause_verdicts();
            }
        });
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn verdicts_paused(&self) -> bool {
        self.now_ms() < self.verdicts_paused_until_ms.load(Ordering::Relaxed)
    }

    fn pause_verdicts(&self) {
        let until = self
            .now_ms()
            .saturating_add(VERDICT_PAUSE.as_millis() as u64);
        self.verdicts_paused_until_ms
            .fetch_max(until, Ordering::Relaxed);
    }

    fn failed(&self, op: &str, e: &StoreError) {
        self.metrics.fleet.redis_error(op, e.kind());
        self.log.failure(op, e, &self.target);
    }

    /// Runs one Redis operation within the timeout; times, counts and logs it.
    async fn run<T>(
        &self,
        op: &'static str,
        operation: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = match tokio::time::timeout(self.timeout, operation).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(StoreError::from_redis(&e)),
            Err(_) => Err(StoreError::Timeout),
        };
        self.metrics
            .fleet
            .redis_latency(op, started.elapsed().as_secs_f64());
        match &result {
            Ok(_) => self.log.success(&self.target),
            Err(e) => self.failed(op, e),
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_without_echoing_them() {
        for ok in [
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1",
            "redis://:s3cret@redis.internal:6380/2",
            "redis://user:s3cret@redis.internal/0",
            "rediss://redis.example.com:6380",
            "unix:///run/redis.sock",
        ] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("localhost:6379", "not a URL"),
            ("http://127.0.0.1:6379", "not a URL of scheme redis://"),
            ("valkey://127.0.0.1", "scheme \"valkey\""),
            ("", "not a URL"),
        ] {
            let e = check_url(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let e = check_url("redis://:s3cret@host:6379/notanumber").unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn logs_show_no_credentials() {
        assert_eq!(
            redacted("redis://user:s3cret@redis.internal:6380/2"),
            "redis://redis.internal:6380/2"
        );
        assert_eq!(redacted("rediss://:pw@r.example"), "rediss://r.example");
        assert_eq!(redacted("unix:///run/redis.sock"), "unix:///run/redis.sock");
        assert_eq!(redacted("nope"), "<invalid url>");
    }

    #[test]
    fn shared_verdicts_are_small_json() {
        let v = SharedVerdict {
            verdict: Verdict::Spoofed,
            method: Method::Fcrdns,
            host: String::new(),
        };
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"verdict":"spoofed","method":"fcrdns","host":""}"#
        );
        // A newer sidecar's extra fields are ignored.
        let parsed: SharedVerdict = serde_json::from_str(
            r#"{"verdict":"verified","method":"fcrdns","host":"a.googlebot.com","by":"x"}"#,
        )
        .unwrap();
        assert_eq!(parsed.verdict, Verdict::Verified);
        assert_eq!(parsed.host, "a.googlebot.com");
    }
}
