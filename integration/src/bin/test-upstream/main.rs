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
//! ## Concurrency
//! `GET /__upstream/concurrency` answers `{"in_flight", "peak", "served"}`: the requests
//! being answered now, the most at once since the start (or the last reset), and the
//! requests counted since then. A request counts from its arrival until its response
//! headers are handed to the connection (after `delay_ms`), or until it is abandoned;
//! the control paths never count. `?reset=1` starts a new measurement (the peak becomes
//! what is in flight now). Tests use it to check that no more than a concurrency limit's
//! requests reach the origin at once.
//!
//! ## Request log
//! `GET /__upstream/requests` returns, as a JSON array in arrival order, every other request
//! received (at most the last 10,000): `{"method", "path", "version", "headers": {name:
//! [values]}, "body_bytes_sent"}`, where `body_bytes_sent` counts the body bytes handed to the
//! connection so far (less than the requested size when the peer stopped reading).
//!
//! Code by job: `spec` (what a request asks for), `body` (the chunked response body),
//! `request_log`, `handler` (answering one request); here the flags and the accept loop.

mod body;
mod handler;
mod request_log;
mod spec;

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use handler::{handle, Concurrency, Shared};
use request_log::Log;

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
    let concurrency: Arc<Concurrency> = Arc::default();
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
        let concurrency = concurrency.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                handle(log.clone(), defaults.clone(), concurrency.clone(), req)
            });
            // Connection errors (peer resets mid-body) are expected in these tests.
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}
