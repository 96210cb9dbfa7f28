//! Range URLs against a real HTTP server on loopback (axum, in this test process): the
//! fetcher's promises one by one, each with exact values. The binary's wiring (schedules,
//! metrics, the cache across a restart) is tested in `tests/sidecar.rs`.
//!
//! The server serves one range document at `/r.json` with an ETag and a Last-Modified, and
//! answers a matching `If-None-Match` with 304; it records what every request carried.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crawlguard_sidecar::fetch::{CacheOutcome, FetchError, FetchOutcome, FetchSettings, Fetcher};
use crawlguard_sidecar::ranges::{RangeError, RangeSource, RangeStore};

const DOC_V1: &str = r#"{"creationTime":"2026-08-20T00:00:00","prefixes":[{"ipv4Prefix":"127.0.90.0/24"},{"ipv6Prefix":"2001:db8:90::/48"}]}"#;
const DOC_V2: &str =
    r#"{"creationTime":"2026-08-21T00:00:00","prefixes":[{"ipv4Prefix":"127.0.91.0/24"}]}"#;
const LAST_MODIFIED: &str = "Thu, 20 Aug 2026 00:00:00 GMT";

/// What one request to the server carried.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    path: String,
    if_none_match: Option<String>,
    if_modified_since: Option<String>,
}

/// The server's document and what it saw.
struct Doc {
    body: String,
    etag: String,
    /// Where `/moved` redirects to.
    redirect_to: String,
    seen: Vec<Seen>,
}

type Shared = Arc<Mutex<Doc>>;

struct Server {
    addr: SocketAddr,
    doc: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start() -> Server {
        let doc: Shared = Arc::new(Mutex::new(Doc {
            body: DOC_V1.to_string(),
            etag: "\"v1\"".to_string(),
            redirect_to: String::new(),
            seen: Vec::new(),
        }));
        let app = Router::new()
            .route("/r.json", get(document))
            .route("/moved", get(moved))
            .route("/big", get(big))
            .route("/stream", get(stream))
            .route("/slow", get(slow))
            .route("/broken", get(broken))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn_with_state(doc.clone(), record))
            .with_state(doc.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Server { addr, doc, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn set(&self, body: &str, etag: &str) {
        let mut d = self.doc.lock().expect("lock");
        d.body = body.to_string();
        d.etag = etag.to_string();
    }

    fn seen(&self) -> Vec<Seen> {
        self.doc.lock().expect("lock").seen.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn record(State(doc): State<Shared>, req: Request, next: axum::middleware::Next) -> Response {
    let seen = Seen {
        path: req.uri().path().to_string(),
        if_none_match: header_text(req.headers(), header::IF_NONE_MATCH),
        if_modified_since: header_text(req.headers(), header::IF_MODIFIED_SINCE),
    };
    if let Ok(mut d) = doc.lock() {
        d.seen.push(seen);
    }
    next.run(req).await
}

async fn document(State(doc): State<Shared>, headers: HeaderMap) -> Response {
    let d = doc.lock().expect("lock");
    let etag = d.etag.clone();
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    (
        StatusCode::OK,
        [
            (header::ETAG, etag),
            (header::LAST_MODIFIED, LAST_MODIFIED.to_string()),
            (header::CONTENT_TYPE, "application/json".to_string()),
        ],
        d.body.clone(),
    )
        .into_response()
}

async fn moved(State(doc): State<Shared>) -> Response {
    let to = doc.lock().expect("lock").redirect_to.clone();
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

/// A valid document of about 2 KiB, with its Content-Length.
fn big_doc() -> String {
    let prefixes: Vec<String> = (0..80)
        .map(|i| format!(r#"{{"ipv4Prefix":"10.{i}.0.0/16"}}"#))
        .collect();
    format!(r#"{{"prefixes":[{}]}}"#, prefixes.join(","))
}

async fn big() -> String {
    big_doc()
}

/// The same document, chunked: no Content-Length, the cap must apply while reading.
async fn stream() -> Response {
    let body = big_doc().into_bytes();
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(256).map(|c| Ok(c.to_vec())).collect();
    Body::from_stream(futures_util::stream::iter(chunks)).into_response()
}

/// Never answers.
async fn slow() -> Response {
    std::future::pending::<()>().await;
    StatusCode::OK.into_response()
}

async fn broken() -> StatusCode {
    StatusCode::INTERNAL_SERVER_ERROR
}

fn fetcher(cache: Option<&Path>) -> Fetcher {
    Fetcher::new(FetchSettings {
        timeout: Duration::from_millis(1500),
        max_body_bytes: 1024,
        cache_dir: cache.map(Path::to_path_buf),
    })
    .expect("HTTP client")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn holds(store: &RangeStore, url: &str, addr: &str) -> bool {
    store.contains_any(&[RangeSource::Url(url.to_string())], ip(addr))
}

#[tokio::test]
async fn initial_fetch_then_304_then_a_changed_document() {
    let server = Server::start().await;
    let cache = tempfile::tempdir().expect("tempdir");
    let url = server.url("/r.json");
    let store = RangeStore::new([RangeSource::Url(url.clone())]);
    let f = fetcher(Some(cache.path()));

    // Initial fetch: no validators (nothing in use yet), both families in use, cached.
    assert_eq!(
        f.fetch(&store, &url).await,
        FetchOutcome::Updated {
            prefixes: 2,
            cache_error: None
        }
    );
    assert!(holds(&store, &url, "127.0.90.7"));
    assert!(holds(&store, &url, "2001:db8:90::1"));
    assert!(!holds(&store, &url, "127.0.91.7"));
    let (body_path, meta_path) = f.cache_paths(&url).expect("cache paths");
    assert_eq!(std::fs::read_to_string(&body_path).expect("cached"), DOC_V1);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&meta_path).expect("meta")).expect("json");
    assert_eq!(meta["url"], url.as_str());
    assert_eq!(meta["etag"], "\"v1\"");
    assert_eq!(meta["last_modified"], LAST_MODIFIED);

    // Unchanged: a conditional GET, answered 304; the ranges stay, confirmed now.
    assert_eq!(
        f.fetch(&store, &url).await,
        FetchOutcome::NotModified { prefixes: 2 }
    );
    assert!(holds(&store, &url, "127.0.90.7"));
    let status = store.status(SystemTime::now(), Duration::from_secs(60));
    assert_eq!(status[0].failures, 0);
    assert!(status[0].age.is_some_and(|a| a < Duration::from_secs(5)));

    // Changed: the conditional GET gets the new document, the old ranges are gone.
    server.set(DOC_V2, "\"v2\"");
    assert_eq!(
        f.fetch(&store, &url).await,
        FetchOutcome::Updated {
            prefixes: 1,
            cache_error: None
        }
    );
    assert!(holds(&store, &url, "127.0.91.7"));
    assert!(!holds(&store, &url, "127.0.90.7"));
    assert_eq!(std::fs::read_to_string(&body_path).expect("cached"), DOC_V2);

    let conditional = Seen {
        path: "/r.json".into(),
        if_none_match: Some("\"v1\"".into()),
        if_modified_since: Some(LAST_MODIFIED.into()),
    };
    assert_eq!(
        server.seen(),
        vec![
            Seen {
                path: "/r.json".into(),
                if_none_match: None,
                if_modified_since: None
            },
            conditional.clone(),
            conditional,
        ]
    );
}

#[tokio::test]
async fn server_down_the_last_good_copy_is_used_and_kept() {
    let cache = tempfile::tempdir().expect("tempdir");
    let server = Server::start().await;
    let url = server.url("/r.json");
    {
        let store = RangeStore::new([RangeSource::Url(url.clone())]);
        let f = fetcher(Some(cache.path()));
        assert!(matches!(
            f.fetch(&store, &url).await,
            FetchOutcome::Updated { prefixes: 2, .. }
        ));
    }
    drop(server);

    // A restart without the server: the cached copy is in use before any fetch...
    let store = RangeStore::new([RangeSource::Url(url.clone())]);
    let f = fetcher(Some(cache.path()));
    assert!(!holds(&store, &url, "127.0.90.7"));
    let CacheOutcome::Loaded { prefixes, age } = f.load_cache(&store, &url) else {
        panic!("the cached copy did not load");
    };
    assert_eq!(prefixes, 2);
    assert!(age < Duration::from_secs(60), "{age:?}");
    assert!(holds(&store, &url, "127.0.90.7"));
    // ...and a failing fetch keeps it (connection refused: the server is gone).
    let outcome = f.fetch(&store, &url).await;
    let FetchOutcome::Failed {
        error: FetchError::Request(why),
        kept_prefixes: 2,
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert!(why.contains("onnect"), "{why}");
    assert!(holds(&store, &url, "127.0.90.7"));
    assert_eq!(
        store.status(SystemTime::now(), Duration::from_secs(60))[0].failures,
        1
    );

    // Without a cache directory there is nothing to fall back on.
    let bare = RangeStore::new([RangeSource::Url(url.clone())]);
    assert_eq!(fetcher(None).load_cache(&bare, &url), CacheOutcome::Missing);
}

#[tokio::test]
async fn garbage_keeps_the_previous_ranges_and_the_cached_copy() {
    let server = Server::start().await;
    let cache = tempfile::tempdir().expect("tempdir");
    let url = server.url("/r.json");
    let store = RangeStore::new([RangeSource::Url(url.clone())]);
    let f = fetcher(Some(cache.path()));
    assert!(matches!(
        f.fetch(&store, &url).await,
        FetchOutcome::Updated { prefixes: 2, .. }
    ));

    // Google's old addresses answer 200 with a JSON document without prefixes.
    for (body, etag) in [
        (
            r#"{"Action needed": "update the location you're fetching from"}"#,
            "\"g1\"",
        ),
        (
            r#"{"prefixes": [{"ipv4Prefix": "127.0.99.0/24"},"#,
            "\"g2\"",
        ),
        (r#"{"prefixes": []}"#, "\"g3\""),
        ("<html>maintenance</html>", "\"g4\""),
    ] {
        server.set(body, etag);
        let outcome = f.fetch(&store, &url).await;
        let FetchOutcome::Failed {
            error: FetchError::Invalid(e),
            kept_prefixes: 2,
        } = &outcome
        else {
            panic!("{body}: {outcome:?}");
        };
        assert_eq!(outcome_label(&outcome), "invalid", "{body}: {e}");
        assert!(holds(&store, &url, "127.0.90.7"), "{body}");
        assert!(!holds(&store, &url, "127.0.99.7"), "{body}");
    }
    let (body_path, _) = f.cache_paths(&url).expect("cache paths");
    assert_eq!(std::fs::read_to_string(body_path).expect("cached"), DOC_V1);
    assert_eq!(
        store.status(SystemTime::now(), Duration::from_secs(60))[0].failures,
        4
    );
    // The empty document is refused for what it is.
    server.set(r#"{"prefixes": []}"#, "\"g5\"");
    assert!(matches!(
        f.fetch(&store, &url).await,
        FetchOutcome::Failed {
            error: FetchError::Invalid(RangeError::Empty),
            ..
        }
    ));
}

fn outcome_label(o: &FetchOutcome) -> &'static str {
    match o {
        FetchOutcome::Updated { .. } => "ok",
        FetchOutcome::NotModified { .. } => "not_modified",
        FetchOutcome::Failed { error, .. } => error.result_label(),
    }
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_or_without_a_length() {
    let server = Server::start().await;
    assert!(big_doc().len() > 1024 && big_doc().len() < 4096);
    for path in ["/big", "/stream"] {
        let url = server.url(path);
        let store = RangeStore::new([RangeSource::Url(url.clone())]);
        assert_eq!(
            fetcher(None).fetch(&store, &url).await,
            FetchOutcome::Failed {
                error: FetchError::TooLarge { limit: 1024 },
                kept_prefixes: 0
            },
            "{path}"
        );
        assert!(!store.any_loaded(&[RangeSource::Url(url.clone())]));
        // With room for it, the same document is fine.
        let roomy = Fetcher::new(FetchSettings {
            timeout: Duration::from_secs(5),
            max_body_bytes: 4096,
            cache_dir: None,
        })
        .expect("client");
        assert_eq!(
            roomy.fetch(&store, &url).await,
            FetchOutcome::Updated {
                prefixes: 80,
                cache_error: None
            },
            "{path}"
        );
    }
}

#[tokio::test]
async fn redirects_stay_on_the_same_origin() {
    let server = Server::start().await;
    let url = server.url("/moved");
    let store = RangeStore::new([RangeSource::Url(url.clone())]);
    // Same scheme, host and port: followed.
    server.doc.lock().expect("lock").redirect_to = server.url("/r.json");
    assert!(matches!(
        fetcher(None).fetch(&store, &url).await,
        FetchOutcome::Updated { prefixes: 2, .. }
    ));
    // Another host (the same server, named differently): refused, nothing fetched from it.
    let elsewhere = format!("http://localhost:{}/r.json", server.addr.port());
    server.doc.lock().expect("lock").redirect_to = elsewhere.clone();
    let before = server.seen().len();
    let outcome = fetcher(None).fetch(&store, &url).await;
    let FetchOutcome::Failed {
        error: FetchError::Redirect(why),
        kept_prefixes: 2,
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert!(why.contains("redirect to another origin"), "{why}");
    assert!(why.contains(&elsewhere), "{why}");
    assert_eq!(
        server.seen()[before..]
            .iter()
            .map(|s| s.path.as_str())
            .collect::<Vec<_>>(),
        ["/moved"]
    );
    // Another port on the same host is another origin too.
    server.doc.lock().expect("lock").redirect_to = "http://127.0.0.1:9/r.json".into();
    assert!(matches!(
        fetcher(None).fetch(&store, &url).await,
        FetchOutcome::Failed {
            error: FetchError::Redirect(_),
            ..
        }
    ));
    // A loop on the same origin ends after 5 redirects.
    server.doc.lock().expect("lock").redirect_to = server.url("/moved");
    let outcome = fetcher(None).fetch(&store, &url).await;
    assert!(
        matches!(&outcome, FetchOutcome::Failed { error: FetchError::Redirect(w), .. } if w.contains("more than 5 redirects")),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn errors_and_a_silent_server_end_in_a_failure_not_a_hang() {
    let server = Server::start().await;
    let store = RangeStore::new([]);
    assert_eq!(
        fetcher(None).fetch(&store, &server.url("/broken")).await,
        FetchOutcome::Failed {
            error: FetchError::Status(500),
            kept_prefixes: 0
        }
    );
    assert_eq!(
        fetcher(None).fetch(&store, &server.url("/missing")).await,
        FetchOutcome::Failed {
            error: FetchError::Status(404),
            kept_prefixes: 0
        }
    );
    // The fetcher's timeout (1.5 s) ends a request the server never answers.
    let started = std::time::Instant::now();
    let outcome = fetcher(None).fetch(&store, &server.url("/slow")).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(&outcome, FetchOutcome::Failed { error: FetchError::Request(w), .. } if w.contains("timed out")),
        "{outcome:?}"
    );
    assert!(elapsed >= Duration::from_millis(1400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
}
