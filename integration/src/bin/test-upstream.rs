//! `crawlguard-test-upstream`: a scriptable origin for the real-Envoy tests.
//!
//! One port speaks HTTP/1.1 and HTTP/2 with prior knowledge (h2c), detected per connection.
//! Every response is described by the request itself, so one running upstream serves every
//! test case:
//!
//! ```text
//! crawlguard-test-upstream [--listen 127.0.0.1:0]
//! listening on 127.0.0.1:41234          <- printed (and flushed) once ready
//! ```
//!
//! `--listen` takes `ADDR:PORT` (default `127.0.0.1:0`, a free port; the line printed says
//! which). The process runs until killed.
//!
//! ## Request parameters
//! Given as query parameters (`application/x-www-form-urlencoded`: `%XX` escapes, `+` is a
//! space) or as request headers named `x-upstream-<param>` with `_` written as `-`
//! (`x-upstream-body-bytes: 10`). Query parameters win for single-valued parameters;
//! `header` values from both places are all used.
//!
//! | param | default | meaning |
//! |---|---|---|
//! | `status` | `200` | response status |
//! | `header` | - | `name:value`, repeatable, added in order (several equal names = several headers) |
//! | `body` | `hello from the test upstream\n` | literal body |
//! | `body_bytes` | - | body of exactly N bytes of `x` instead (0 = empty body) |
//! | `chunk_bytes` | `65536` | the body is handed to the connection in chunks of this size |
//! | `frames` | - | split the body into this many chunks instead (HTTP/2: one DATA frame each) |
//! | `chunk_delay_ms` | `0` | pause between two chunks |
//! | `chunked` | `0` | `1`: no `content-length`; HTTP/1.1 uses `Transfer-Encoding: chunked` |
//! | `delay_ms` | `0` | pause before the response headers |
//! | `read_body` | `0` | `1`: read the whole request body before answering, as an origin that parses a form or JSON does |
//!
//! Example: `/?status=503&header=cache-control:public,%20max-age=600&header=etag:%22x%22&body_bytes=10485760&chunked=1`.
//!
//! Every response also carries `x-upstream-saw-class` (the request's `x-crawler-class`, when
//! present) and `x-upstream-protocol` (`HTTP/1.1` or `HTTP/2.0`).
//!
//! ## The origin's mood
//! `GET /__upstream/defaults?delay_ms=<ms>&error_every=<n>` changes how the upstream answers
//! every later request that does not say otherwise: `delay_ms` before the response headers,
//! and every `n`th such request answered `500` (`0` = none). Both stay until changed
//! (`/__upstream/defaults` alone resets them). It answers the defaults now in force as JSON.
//! Tests use it to make the origin slow or failing while their traffic stays the same.
//!
//! ## Request log
//! `GET /__upstream/requests` returns, as a JSON array in arrival order, every other request
//! received (at most the last 10,000): `{"method", "path", "version", "headers": {name:
//! [values]}, "body_bytes_sent"}`, where `body_bytes_sent` counts the body bytes handed to the
//! connection so far (less than the requested size when the peer stopped reading).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::time::Sleep;

/// Path of the request log.
const LOG_PATH: &str = "/__upstream/requests";
/// Path of the defaults control.
const DEFAULTS_PATH: &str = "/__upstream/defaults";

/// How the upstream answers requests that do not say otherwise (see the module docs).
#[derive(Debug, Default)]
struct Defaults {
    delay_ms: u64,
    error_every: u64,
    /// Requests answered under these defaults so far (for `error_every`).
    served: u64,
}

type Shared = Arc<Mutex<Defaults>>;
/// Most requests kept in the log.
const LOG_CAP: usize = 10_000;
/// Body when neither `body` nor `body_bytes` is given.
const DEFAULT_BODY: &str = "hello from the test upstream\n";
/// Default `chunk_bytes`.
const DEFAULT_CHUNK: usize = 65_536;

/// One logged request.
struct Record {
    method: String,
    path: String,
    version: String,
    headers: BTreeMap<String, Vec<String>>,
    body_bytes_sent: Arc<AtomicU64>,
}

impl Record {
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "method": self.method,
            "path": self.path,
            "version": self.version,
            "headers": self.headers,
            "body_bytes_sent": self.body_bytes_sent.load(Ordering::Relaxed),
        })
    }
}

type Log = Arc<Mutex<VecDeque<Record>>>;

/// What the request asked for.
#[derive(Debug, Default)]
struct Spec {
    status: Option<u16>,
    headers: Vec<(String, String)>,
    body: Option<String>,
    body_bytes: Option<u64>,
    chunk_bytes: Option<usize>,
    frames: Option<u64>,
    chunk_delay_ms: Option<u64>,
    chunked: Option<bool>,
    delay_ms: Option<u64>,
    read_body: Option<bool>,
}

impl Spec {
    /// Applies one parameter; a single-valued parameter keeps its first value.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
            v.trim()
                .parse()
                .map_err(|_| format!("{k}: not a number: {v:?}"))
        }
        fn set<T>(slot: &mut Option<T>, v: T) {
            if slot.is_none() {
                *slot = Some(v);
            }
        }
        match key {
            "status" => set(&mut self.status, num(key, value)?),
            "header" => {
                let (n, v) = value
                    .split_once(':')
                    .ok_or_else(|| format!("header: expected name:value, got {value:?}"))?;
                self.headers
                    .push((n.trim().to_string(), v.trim_start().to_string()));
            }
            "body" => set(&mut self.body, value.to_string()),
            "body_bytes" => set(&mut self.body_bytes, num(key, value)?),
            "chunk_bytes" => set(&mut self.chunk_bytes, num::<usize>(key, value)?.max(1)),
            "frames" => set(&mut self.frames, num::<u64>(key, value)?.max(1)),
            "chunk_delay_ms" => set(&mut self.chunk_delay_ms, num(key, value)?),
            "chunked" => set(&mut self.chunked, matches!(value, "1" | "true" | "yes")),
            "delay_ms" => set(&mut self.delay_ms, num(key, value)?),
            "read_body" => set(&mut self.read_body, matches!(value, "1" | "true" | "yes")),
            _ => {} // unknown parameters belong to the test, not to us
        }
        Ok(())
    }

    fn from_request<B>(req: &Request<B>) -> Result<Spec, String> {
        let mut spec = Spec::default();
        for (k, v) in parse_query(req.uri().query().unwrap_or("")) {
            spec.apply(&k, &v)?;
        }
        for (name, value) in req.headers() {
            if let Some(param) = name.as_str().strip_prefix("x-upstream-") {
                let value = value
                    .to_str()
                    .map_err(|_| format!("{name}: not visible ASCII"))?;
                spec.apply(&param.replace('-', "_"), value)?;
            }
        }
        Ok(spec)
    }
}

/// Splits and decodes an `application/x-www-form-urlencoded` query.
fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where body bytes come from.
enum Source {
    /// The literal `body`.
    Literal(Bytes),
    /// `body_bytes` of `x`: one chunk-sized buffer, sliced.
    Filler(Bytes),
}

/// The response body: `total` bytes in chunks of `chunk`, `delay` between chunks.
struct TestBody {
    source: Source,
    offset: u64,
    total: u64,
    chunk: u64,
    delay: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    exact: bool,
    sent: Arc<AtomicU64>,
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.offset >= this.total {
            return Poll::Ready(None);
        }
        if this.offset > 0 && !this.delay.is_zero() {
            // `chunk_delay_ms`: the slow origin a test asked for, not a synchronisation.
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(this.delay)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        let n = this.chunk.min(this.total - this.offset);
        let data = match &this.source {
            Source::Literal(b) => b.slice(this.offset as usize..(this.offset + n) as usize),
            Source::Filler(b) => b.slice(..n as usize),
        };
        this.offset += n;
        this.sent.fetch_add(n, Ordering::Relaxed);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.offset >= self.total
    }

    fn size_hint(&self) -> SizeHint {
        if self.exact {
            SizeHint::with_exact(self.total - self.offset)
        } else {
            SizeHint::default()
        }
    }
}

fn plain(status: StatusCode, text: String) -> Response<TestBody> {
    let bytes = Bytes::from(text);
    let total = bytes.len() as u64;
    let mut r = Response::new(TestBody {
        source: Source::Literal(bytes),
        offset: 0,
        total,
        chunk: total.max(1),
        delay: Duration::ZERO,
        sleep: None,
        exact: true,
        sent: Arc::new(AtomicU64::new(0)),
    });
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(
    log: Log,
    defaults: Shared,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<TestBody>, Infallible> {
    if req.uri().path() == DEFAULTS_PATH {
        let mut d = defaults.lock().unwrap();
        *d = Defaults::default();
        for (k, v) in parse_query(req.uri().query().unwrap_or("")) {
            let n = v.trim().parse::<u64>().unwrap_or(0);
            match k.as_str() {
                "delay_ms" => d.delay_ms = n,
                "error_every" => d.error_every = n,
                _ => {}
            }
        }
        let body = serde_json::json!({"delay_ms": d.delay_ms, "error_every": d.error_every});
        return Ok(plain(StatusCode::OK, body.to_string()));
    }
    if req.uri().path() == LOG_PATH {
        let entries: Vec<serde_json::Value> =
            log.lock().unwrap().iter().map(Record::to_json).collect();
        let mut r = plain(
            StatusCode::OK,
            serde_json::Value::Array(entries).to_string(),
        );
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return Ok(r);
    }
    let version = format!("{:?}", req.version());
    let sent = Arc::new(AtomicU64::new(0));
    {
        let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in req.headers() {
            headers
                .entry(k.as_str().to_string())
                .or_default()
                .push(String::from_utf8_lossy(v.as_bytes()).into_owned());
        }
        let mut l = log.lock().unwrap();
        if l.len() == LOG_CAP {
            l.pop_front();
        }
        l.push_back(Record {
            method: req.method().to_string(),
            path: req
                .uri()
                .path_and_query()
                .map_or("/".to_string(), |p| p.to_string()),
            version: version.clone(),
            headers,
            body_bytes_sent: sent.clone(),
        });
    }
    let spec = match Spec::from_request(&req) {
        Ok(mut s) => {
            let mut d = defaults.lock().unwrap();
            if s.delay_ms.is_none() && d.delay_ms > 0 {
                s.delay_ms = Some(d.delay_ms);
            }
            if s.status.is_none() && d.error_every > 0 {
                d.served += 1;
                if d.served.is_multiple_of(d.error_every) {
                    s.status = Some(500);
                }
            }
            s
        }
        Err(e) => {
            return Ok(plain(
                StatusCode::BAD_REQUEST,
                format!("test-upstream: {e}\n"),
            ))
        }
    };
    let Ok(status) = StatusCode::from_u16(spec.status.unwrap_or(200)) else {
        return Ok(plain(
            StatusCode::BAD_REQUEST,
            "test-upstream: bad status\n".into(),
        ));
    };
    let saw_class = req.headers().get("x-crawler-class").cloned();
    if spec.read_body == Some(true) {
        // The whole body first (errors end it: the answer still goes out).
        let _ = http_body_util::BodyExt::collect(req.into_body()).await;
    }
    if let Some(ms) = spec.delay_ms.filter(|&ms| ms > 0) {
        // `delay_ms`: the slow origin a test asked for, not a synchronisation.
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    let (source, total) = match (spec.body_bytes, spec.body) {
        (Some(n), _) => {
            let chunk = spec.chunk_bytes.unwrap_or(DEFAULT_CHUNK) as u64;
            let per_frame = spec.frames.map(|f| n.div_ceil(f).max(1));
            let buf = per_frame.unwrap_or(chunk).min(n).max(1) as usize;
            (Source::Filler(Bytes::from(vec![b'x'; buf])), n)
        }
        (None, body) => {
            let b = Bytes::from(body.unwrap_or_else(|| DEFAULT_BODY.to_string()));
            let n = b.len() as u64;
            (Source::Literal(b), n)
        }
    };
    let chunk = match spec.frames {
        Some(f) => total.div_ceil(f).max(1),
        None => spec.chunk_bytes.unwrap_or(DEFAULT_CHUNK) as u64,
    };
    let mut resp = Response::new(TestBody {
        source,
        offset: 0,
        total,
        chunk,
        delay: Duration::from_millis(spec.chunk_delay_ms.unwrap_or(0)),
        sleep: None,
        exact: !spec.chunked.unwrap_or(false),
        sent,
    });
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    if let Some(class) = saw_class {
        h.insert("x-upstream-saw-class", class);
    }
    h.insert(
        "x-upstream-protocol",
        HeaderValue::from_str(&version).expect("version is ASCII"),
    );
    for (name, value) in &spec.headers {
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            return Ok(plain(
                StatusCode::BAD_REQUEST,
                format!("test-upstream: bad header {name:?}: {value:?}\n"),
            ));
        };
        h.append(n, v);
    }
    Ok(resp)
}

fn parse_args() -> Result<SocketAddr, String> {
    let mut listen: SocketAddr = "127.0.0.1:0".parse().expect("default address");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => {
                let v = args.next().ok_or("--listen needs ADDR:PORT")?;
                listen = v.parse().map_err(|e| format!("--listen {v}: {e}"))?;
            }
            s if s.starts_with("--listen=") => {
                let v = &s["--listen=".len()..];
                listen = v.parse().map_err(|e| format!("--listen {v}: {e}"))?;
            }
            "-h" | "--help" => {
                println!("usage: crawlguard-test-upstream [--listen ADDR:PORT]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(listen)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let addr = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("crawlguard-test-upstream: {e}");
            std::process::exit(2);
        }
    };
    let listener = TcpListener::bind(addr).await.unwrap_or_else(|e| {
        eprintln!("crawlguard-test-upstream: bind {addr}: {e}");
        std::process::exit(1);
    });
    let local = listener.local_addr().expect("local address");
    println!("listening on {local}");
    let _ = std::io::stdout().flush();

    let log: Log = Arc::new(Mutex::new(VecDeque::new()));
    let defaults: Shared = Arc::default();
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("crawlguard-test-upstream: accept: {e}");
                // Back off briefly (e.g. out of file descriptors) instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let log = log.clone();
        let defaults = defaults.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(log.clone(), defaults.clone(), req));
            // Connection errors (peer resets mid-body) are expected in these tests.
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
