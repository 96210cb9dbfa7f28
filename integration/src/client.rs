//! Clients that play many client IPs against one Envoy: [`client`] (reqwest, bound to a
//! `127.0.0.x` source address), one request ([`get`], [`claim`]), many ([`sequential`],
//! [`claims`], [`burst`]), what came back ([`Reply`]) and how to read a batch of replies
//! ([`statuses`], [`upstream_classes`], [`by_status`], [`runs`]).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use tokio::sync::Semaphore;

/// A current desktop Chrome User-Agent: classified `human`.
pub const UA_CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                             (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
/// curl's User-Agent: classified `script`.
pub const UA_CURL: &str = "curl/8.5.0";
/// Googlebot's desktop User-Agent: a claim; `search_crawler` only once verified, else
/// `unverified_bot` (or `spoofed`).
pub const UA_GOOGLEBOT: &str =
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// The loopback address `127.0.0.<last>`: one client IP a test plays.
pub fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// An HTTP client whose connections come from `ip` (a `127.0.0.x` address plays a client
/// IP). It keeps a connection pool, so concurrent requests open several connections (which
/// the kernel spreads over Envoy's workers).
pub fn client(ip: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(ip))
        .no_proxy()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(15))
        .build()
        .expect("build reqwest client")
}

/// A client for the harness's own requests (admin endpoints, request logs, metrics): no
/// proxy, and a `timeout` on every request.
pub(crate) fn harness_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .expect("build the harness's reqwest client")
}

/// What came back for one request.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// Response body (lossy UTF-8).
    pub body: String,
}

impl Reply {
    /// A header as a string, if present and valid.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The class the origin saw in `x-crawler-class` (the demo origin and the test upstream
    /// echo it as `x-upstream-saw-class`).
    pub fn upstream_class(&self) -> Option<&str> {
        self.header("x-upstream-saw-class")
    }

    /// `Retry-After` parsed as delay-seconds.
    pub fn retry_after_s(&self) -> Option<u64> {
        self.header("retry-after").and_then(|v| v.parse().ok())
    }

    /// How many times a header occurs.
    pub fn header_count(&self, name: &str) -> usize {
        self.headers.get_all(name).iter().count()
    }

    /// The header names, sorted, each once.
    pub fn header_names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.headers.keys().map(|k| k.to_string()).collect();
        n.sort();
        n.dedup();
        n
    }
}

/// GET `url` with the given User-Agent and extra headers; panics on a transport error.
pub async fn get(client: &reqwest::Client, url: &str, ua: &str, extra: &[(&str, &str)]) -> Reply {
    let mut req = client.get(url).header("user-agent", ua);
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    Reply {
        status,
        headers,
        body,
    }
}

/// GET `url` as User-Agent `ua` from the client address `xff` (sent as
/// `x-forwarded-for`, for a filter that takes the client address from there).
pub async fn claim(client: &reqwest::Client, url: &str, ua: &str, xff: &str) -> Reply {
    get(client, url, ua, &[("x-forwarded-for", xff)]).await
}

/// Sends `n` GETs one after the other and returns the replies in order.
pub async fn sequential(client: &reqwest::Client, url: &str, ua: &str, n: usize) -> Vec<Reply> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(get(client, url, ua, &[]).await);
    }
    out
}

/// Sends `n` [`claim`]s one after the other and returns the replies in order.
pub async fn claims(
    client: &reqwest::Client,
    url: &str,
    ua: &str,
    xff: &str,
    n: usize,
) -> Vec<Reply> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(claim(client, url, ua, xff).await);
    }
    out
}

/// Sends `n` GETs of `url` at once (at most `parallel` in flight) and returns the replies in
/// completion order.
pub async fn burst(
    client: &reqwest::Client,
    url: &str,
    ua: &str,
    n: usize,
    parallel: usize,
) -> Vec<Reply> {
    let sem = Arc::new(Semaphore::new(parallel.max(1)));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (client, url, ua, sem) = (client.clone(), url.to_string(), ua.to_string(), sem.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore");
            get(&client, &url, &ua, &[]).await
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.expect("request task"));
    }
    out
}

/// Runs `f` and measures how long it took.
pub async fn timed<T>(f: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = f.await;
    (out, started.elapsed())
}

/// The status of each reply, in order.
pub fn statuses(replies: &[Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status).collect()
}

/// The class the origin saw for each forwarded reply (status 200), in order; `<none>` for
/// a forwarded request without a class (an exempt path).
pub fn upstream_classes(replies: &[Reply]) -> Vec<&str> {
    replies
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.upstream_class().unwrap_or("<none>"))
        .collect()
}

/// Counts replies by status code.
pub fn by_status(replies: &[Reply]) -> HashMap<u16, usize> {
    let mut m = HashMap::new();
    for r in replies {
        *m.entry(r.status).or_insert(0) += 1;
    }
    m
}

/// Statuses in runs: `runs(&[(200, 10), (429, 2)])` is ten 200s, then two 429s.
pub fn runs(runs: &[(u16, usize)]) -> Vec<u16> {
    runs.iter()
        .flat_map(|&(status, n)| std::iter::repeat_n(status, n))
        .collect()
}
