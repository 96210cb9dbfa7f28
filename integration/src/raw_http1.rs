//! HTTP/1.1 by hand, for what reqwest will not do: exact request bytes (non-UTF-8 or
//! repeated headers, unnormalised paths), several requests on one keep-alive connection,
//! pipelining, and clients that hang up mid-request.
//!
//! [`raw_request`] builds the bytes of a GET; [`raw`] sends them on a new connection and
//! reads the [`Reply`]; [`RawHttp1`] is one connection to do more on. Responses are read by
//! `content-length`, chunked encoding, or up to the close.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::client::Reply;

/// How long reading one response may take.
const RESPONSE_DEADLINE: Duration = Duration::from_secs(10);

/// Raw header lines of an HTTP/1.1 request: `(name, value)` bytes, sent as given.
pub type RawHeaders<'a> = &'a [(&'a [u8], &'a [u8])];

/// The bytes of `GET <path> HTTP/1.1` with `host: hostile.test`, `connection: close`, then
/// exactly these header lines in this order (nothing validated or normalised).
pub fn raw_request(path: &[u8], headers: RawHeaders) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(b"GET ");
    r.extend_from_slice(path);
    r.extend_from_slice(b" HTTP/1.1\r\nhost: hostile.test\r\nconnection: close\r\n");
    for (k, v) in headers {
        r.extend_from_slice(k);
        r.extend_from_slice(b": ");
        r.extend_from_slice(v);
        r.extend_from_slice(b"\r\n");
    }
    r.extend_from_slice(b"\r\n");
    r
}

/// Sends `request` from `from` to `to` on a new connection and reads one response (10 s at
/// most).
pub async fn raw(from: Ipv4Addr, to: SocketAddr, request: &[u8]) -> Reply {
    let mut conn = RawHttp1::connect(from, to).await;
    conn.send(request).await;
    tokio::time::timeout(RESPONSE_DEADLINE, conn.read_response_now())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no response within {RESPONSE_DEADLINE:?} to {:?}",
                String::from_utf8_lossy(&request[..request.len().min(200)])
            )
        })
}

/// Sends the same request `n` times (one connection each) and returns the statuses.
pub async fn raw_statuses(from: Ipv4Addr, to: SocketAddr, request: &[u8], n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(raw(from, to, request).await.status);
    }
    out
}

/// One HTTP/1.1 client connection from a chosen `127.0.0.x` address.
pub struct RawHttp1 {
    io: BufReader<TcpStream>,
    host: String,
}

impl RawHttp1 {
    /// Connects from `from` (a `127.0.0.x` client address) to `to`.
    pub async fn connect(from: Ipv4Addr, to: SocketAddr) -> RawHttp1 {
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        sock.bind(SocketAddr::new(IpAddr::V4(from), 0))
            .unwrap_or_else(|e| panic!("bind {from}: {e}"));
        let stream = sock
            .connect(to)
            .await
            .unwrap_or_else(|e| panic!("connect {to}: {e}"));
        RawHttp1 {
            io: BufReader::new(stream),
            host: to.to_string(),
        }
    }

    /// Writes `bytes` as they are. A write error is ignored: the server may answer (e.g.
    /// 431) and close before it has read everything, and that answer is still to be read.
    pub async fn send(&mut self, bytes: &[u8]) {
        let _ = self.io.get_mut().write_all(bytes).await;
    }

    /// Writes a keep-alive `GET path` with `host: <address>` and these headers.
    pub async fn send_get(&mut self, path: &str, headers: &[(&str, &str)]) {
        let mut req = format!("GET {path} HTTP/1.1\r\nhost: {}\r\n", self.host);
        for (k, v) in headers {
            req += &format!("{k}: {v}\r\n");
        }
        req += "\r\n";
        self.send(req.as_bytes()).await;
    }

    /// Sends a keep-alive `GET path` with a User-Agent and reads the whole response (10 s at
    /// most).
    pub async fn get(&mut self, path: &str, ua: &str) -> Reply {
        self.send_get(path, &[("user-agent", ua)]).await;
        tokio::time::timeout(RESPONSE_DEADLINE, self.read_response_now())
            .await
            .unwrap_or_else(|_| panic!("no complete response to GET {path} within 10 s"))
    }

    /// Reads one response (10 s at most).
    pub async fn read_response(&mut self) -> Reply {
        tokio::time::timeout(RESPONSE_DEADLINE, self.read_response_now())
            .await
            .unwrap_or_else(|_| panic!("no complete response within {RESPONSE_DEADLINE:?}"))
    }

    /// Reads responses until the server closes the connection (10 s at most for each).
    pub async fn read_until_close(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        loop {
            let more = tokio::time::timeout(RESPONSE_DEADLINE, self.io.fill_buf())
                .await
                .expect("a response (or the close) within 10 s")
                .is_ok_and(|buf| !buf.is_empty());
            if !more {
                return out;
            }
            out.push(self.read_response().await);
        }
    }

    /// True if anything (a byte, the close, an error) arrives within `wait`: false while a
    /// request is still unanswered.
    pub async fn answered_within(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.io.fill_buf()).await.is_ok()
    }

    /// One line without its CRLF; panics when the connection ends first.
    async fn line(&mut self, what: &str) -> Vec<u8> {
        let mut l = Vec::new();
        let n = self
            .io
            .read_until(b'\n', &mut l)
            .await
            .unwrap_or_else(|e| panic!("reading the {what}: {e}"));
        assert!(n > 0, "connection closed before the {what}");
        while l.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            l.pop();
        }
        l
    }

    async fn read_response_now(&mut self) -> Reply {
        let status_line = String::from_utf8_lossy(&self.line("status line").await).into_owned();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let mut headers = HeaderMap::new();
        loop {
            let l = self.line("response head").await;
            if l.is_empty() {
                break;
            }
            let colon = l
                .iter()
                .position(|b| *b == b':')
                .unwrap_or_else(|| panic!("bad header line {:?}", String::from_utf8_lossy(&l)));
            headers.append(
                HeaderName::from_bytes(l[..colon].trim_ascii()).expect("header name"),
                HeaderValue::from_bytes(l[colon + 1..].trim_ascii()).expect("header value"),
            );
        }
        let chunked = headers
            .get("transfer-encoding")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
        let length = headers.get("content-length").map(|v| {
            v.to_str()
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("bad content-length {v:?}"))
        });
        let mut body = Vec::new();
        if matches!(status, 100..=199 | 204 | 304) {
            // No body.
        } else if chunked {
            loop {
                let size = String::from_utf8_lossy(&self.line("chunk size").await).into_owned();
                let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                    .unwrap_or_else(|_| panic!("bad chunk size {size:?}"));
                if size == 0 {
                    while !self.line("trailer").await.is_empty() {}
                    break;
                }
                let mut chunk = vec![0; size + 2];
                self.io.read_exact(&mut chunk).await.expect("read chunk");
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(len) = length {
            body.resize(len, 0);
            self.io
                .read_exact(&mut body)
                .await
                .unwrap_or_else(|e| panic!("connection closed in the body: {e}"));
        } else {
            // Delimited by the close; an error (a reset) ends it too.
            let _ = self.io.read_to_end(&mut body).await;
        }
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }
}
