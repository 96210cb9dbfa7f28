//! Answering one request: the defaults control, the request log, or the response the request
//! describes (under the origin's current defaults).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::body::{plain, Source, TestBody};
use crate::request_log::{Log, LoggedRequest, LOG_CAP, LOG_PATH};
use crate::spec::{parse_query, Spec};

/// Path of the defaults control.
pub(crate) const DEFAULTS_PATH: &str = "/__upstream/defaults";
/// Path of the concurrency counter.
pub(crate) const CONCURRENCY_PATH: &str = "/__upstream/concurrency";

/// Requests being answered at once (see the module docs): every request but the control
/// paths counts from its arrival until its response headers are handed over (after its
/// `delay_ms`), or until it is abandoned (its future dropped).
#[derive(Debug, Default)]
pub(crate) struct Concurrency {
    in_flight: AtomicU64,
    peak: AtomicU64,
    served: AtomicU64,
}

impl Concurrency {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.served.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "in_flight": self.in_flight.load(Ordering::SeqCst),
            "peak": self.peak.load(Ordering::SeqCst),
            "served": self.served.load(Ordering::SeqCst),
        })
    }

    /// Starts a new measurement: the peak is what is in flight now, nothing served.
    fn reset(&self) {
        self.peak
            .store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
        self.served.store(0, Ordering::SeqCst);
    }
}

/// One request counted in [`Concurrency`] until dropped.
pub(crate) struct InFlightGuard(Arc<Concurrency>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How the upstream answers requests that do not say otherwise (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Defaults {
    pub(crate) delay_ms: u64,
    pub(crate) error_every: u64,
    /// Requests answered under these defaults so far (for `error_every`).
    pub(crate) served: u64,
}

pub(crate) type Shared = Arc<Mutex<Defaults>>;
/// Body when neither `body` nor `body_bytes` is given.
pub(crate) const DEFAULT_BODY: &str = "hello from the test upstream\n";
/// Default `chunk_bytes`.
pub(crate) const DEFAULT_CHUNK: usize = 65_536;

pub(crate) async fn handle(
    log: Log,
    defaults: Shared,
    concurrency: Arc<Concurrency>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<TestBody>, Infallible> {
    if req.uri().path() == CONCURRENCY_PATH {
        if req.uri().query().is_some_and(|q| q.contains("reset=1")) {
            concurrency.reset();
        }
        return Ok(plain(StatusCode::OK, concurrency.json().to_string()));
    }
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
        let entries: Vec<serde_json::Value> = log
            .lock()
            .unwrap()
            .iter()
            .map(LoggedRequest::to_json)
            .collect();
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
    // Counted until the response headers are handed over: before Envoy can see them, so
    // never after Envoy has ended the stream.
    let _counted = concurrency.enter();
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
        l.push_back(LoggedRequest {
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
