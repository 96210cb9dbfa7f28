//! Access-log line parsers. Each turns one line (raw bytes, any encoding) into a [`LogRecord`]
//! borrowing from it, or `None`: a line that does not parse is counted by the caller, never
//! fatal.
//!
//! Formats:
//! - [`Format::Combined`]: nginx/Apache combined,
//!   `host ident user [time] "request" status bytes "referer" "ua"`, optionally followed by
//!   nginx's `$request_time $upstream_response_time` (seconds; `-` when no upstream was
//!   reached; several upstream attempts are summed).
//! - [`Format::EnvoyDefault`]: Envoy's default text format,
//!   `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
//!   %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
//!   %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
//!   "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"`.
//! - [`Format::Crawlguard`]: the access log of `envoy/envoy.yaml`,
//!   `[%START_TIME%] %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% "%REQ(:METHOD)% %REQ(:PATH)%"
//!   %RESPONSE_CODE% %RESPONSE_CODE_DETAILS% key=value... ua="%REQ(USER-AGENT)%"`, with keys
//!   `class`, `retry_after`, `duration_ms`, `upstream_ms`, `route`, `limit`, and the TLS
//!   edge's (`envoy/envoy-tls.yaml`) `tls`, `proto`, `ja4`, `asn`, `sfs`, `chua` (any order,
//!   any subset; older lines without them parse too).
//! - [`Format::EnvoyJson`]: Envoy `json_format` access logs, one object per line, with the
//!   key names of Envoy's and Istio's documented JSON examples (`start_time`, `method`,
//!   `path`, `response_code`, `response_code_details`, `response_flags`, `duration`,
//!   `upstream_service_time`, `x_forwarded_for`, `user_agent`, `upstream_host`,
//!   `downstream_remote_address`, `route_name`) plus crawlguard's `class` and `limit`, and
//!   the browser checks' `tls_version`, `protocol`, `ja4`, `asn`, `sec_fetch_site`,
//!   `sec_ch_ua`.

mod json;
mod text;

pub use json::parse_envoy_json;
pub use text::{parse_combined, parse_crawlguard, parse_envoy_default};

use crawlguard_core::identity::classify::Class;
use crawlguard_core::response::rejection::DETAILS_NORMALISED;

/// A log format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// crawlguard's own access log (`envoy/envoy.yaml`).
    Crawlguard,
    /// Envoy's default text format.
    EnvoyDefault,
    /// Envoy JSON access log (`json_format`), one object per line.
    EnvoyJson,
    /// nginx/Apache combined, optionally with `$request_time $upstream_response_time`.
    Combined,
}

impl Format {
    /// Every format, in detection order (most specific first).
    pub const ALL: [Format; 4] = [
        Format::Crawlguard,
        Format::EnvoyDefault,
        Format::EnvoyJson,
        Format::Combined,
    ];

    /// The name used by `--format` and in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Crawlguard => "crawlguard",
            Format::EnvoyDefault => "envoy-default",
            Format::EnvoyJson => "envoy-json",
            Format::Combined => "combined",
        }
    }
}

/// Whether the request reached the upstream (origin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamReach {
    /// The log says it did (an upstream host or an upstream time).
    Reached,
    /// The log says it did not (no upstream host / `-` upstream time).
    NotReached,
    /// The format does not tell.
    Unknown,
}

/// What a log line says of the client beyond its request line, for the browser checks
/// (README, "crawlguard replay"): each field `None` when the format does not carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoggedSignals<'a> {
    /// The connection was TLS (`tls=%DOWNSTREAM_TLS_VERSION%`, `-` for none).
    pub tls: Option<bool>,
    /// `%PROTOCOL%` (`HTTP/2`).
    pub protocol: Option<&'a [u8]>,
    /// The JA4 fingerprint (`%REQ(X-CRAWLGUARD-JA4)%`), `Some(None)` when logged as `-`.
    pub ja4: Option<Option<&'a [u8]>>,
    /// The autonomous system (`%REQ(X-CRAWLGUARD-ASN)%`), `Some(None)` when logged as `-`.
    pub asn: Option<Option<&'a [u8]>>,
    /// `Sec-Fetch-Site`, `Some(None)` when the request had none.
    pub sec_fetch_site: Option<Option<&'a [u8]>>,
    /// `Sec-CH-UA` (crawlguard's text format logs its first character, enough to tell it
    /// was sent), `Some(None)` when the request had none.
    pub sec_ch_ua: Option<Option<&'a [u8]>>,
}

/// One parsed access-log line; byte fields borrow from the line (or from the JSON decoder).
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecord<'a> {
    /// Request start, ms since the Unix epoch (UTC).
    pub ts_ms: i64,
    /// The client address as logged (downstream address, Apache `%h`, or the first
    /// `x-forwarded-for` entry for Envoy's default format); `None` when not logged.
    pub client: Option<&'a [u8]>,
    /// `x-forwarded-for`, when logged.
    pub xff: Option<&'a [u8]>,
    /// Request method (`-` when unknown).
    pub method: &'a [u8],
    /// Request path with query (empty when the request line had none).
    pub path: &'a [u8],
    /// Response status (0 = no response, as Envoy logs it).
    pub status: u16,
    /// User-Agent; `None` when absent (`-`).
    pub ua: Option<&'a [u8]>,
    /// Total duration, ms.
    pub duration_ms: Option<u32>,
    /// Upstream time (Envoy `x-envoy-upstream-service-time`, nginx
    /// `$upstream_response_time`), ms: the time to the upstream's response headers.
    pub upstream_ms: Option<u32>,
    /// Whether the upstream was reached.
    pub upstream: UpstreamReach,
    /// `%RESPONSE_CODE_DETAILS%`.
    pub details: Option<&'a [u8]>,
    /// Envoy `%RESPONSE_FLAGS%`.
    pub flags: Option<&'a [u8]>,
    /// The class crawlguard gave the request (`x-crawler-class`), when logged.
    pub class: Option<Class>,
    /// The route, when logged.
    pub route: Option<&'a [u8]>,
    /// The limit that rejected the request, when logged (from `RateLimit-Policy`).
    pub limit: Option<&'a [u8]>,
    /// The client's TLS, protocol, JA4, network and browser headers, as far as logged.
    pub signals: LoggedSignals<'a>,
}

impl<'a> LogRecord<'a> {
    fn new(ts_ms: i64) -> LogRecord<'a> {
        LogRecord {
            ts_ms,
            client: None,
            xff: None,
            method: b"-",
            path: b"",
            status: 0,
            ua: None,
            duration_ms: None,
            upstream_ms: None,
            upstream: UpstreamReach::Unknown,
            details: None,
            flags: None,
            class: None,
            route: None,
            limit: None,
            signals: LoggedSignals::default(),
        }
    }
}

/// `-` or empty -> `None`.
fn opt(v: &[u8]) -> Option<&[u8]> {
    if v.is_empty() || v == b"-" {
        None
    } else {
        Some(v)
    }
}

fn num_u32(v: &[u8]) -> Option<u32> {
    if v.is_empty() || v.len() > 9 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Whether `%RESPONSE_CODE_DETAILS%` is the upstream's own answer: `via_upstream`, or one
/// crawlguard normalised on the way back.
pub fn is_upstream_answer(details: &[u8]) -> bool {
    details == b"via_upstream" || details == DETAILS_NORMALISED.as_bytes()
}

/// Whether the upstream was reached, by `%RESPONSE_CODE_DETAILS%`; `None` when not logged.
fn reach_of_details(details: Option<&[u8]>) -> Option<UpstreamReach> {
    details.map(|d| {
        if is_upstream_answer(d) {
            UpstreamReach::Reached
        } else {
            UpstreamReach::NotReached
        }
    })
}

/// The first `x-forwarded-for` entry: the client address of formats that log no downstream
/// address.
fn first_forwarded(xff: Option<&[u8]>) -> Option<&[u8]> {
    xff.and_then(|x| x.split(|b| *b == b',').next())
        .map(<[u8]>::trim_ascii)
        .and_then(opt)
}

/// The limit name of a `RateLimit-Policy` value (`"human_per_ip";q=100;w=5`), or the
/// value itself when it is a bare name.
pub fn limit_name(v: &[u8]) -> Option<&[u8]> {
    let v = v.trim_ascii();
    let name = match v.strip_prefix(b"\"") {
        Some(q) => q.get(..memchr::memchr(b'"', q)?)?,
        None => v.split(|b| *b == b';').next().unwrap_or(v),
    };
    opt(name)
}

/// Parses `line` in `format`, handing the record to `f`; false if it does not parse.
pub fn parse(format: Format, line: &[u8], f: &mut dyn FnMut(&LogRecord<'_>)) -> bool {
    let r = match format {
        Format::Combined => parse_combined(line),
        Format::EnvoyDefault => parse_envoy_default(line),
        Format::Crawlguard => parse_crawlguard(line),
        Format::EnvoyJson => return parse_envoy_json(line, f),
    };
    match r {
        Some(r) => {
            f(&r);
            true
        }
        None => false,
    }
}

/// Picks the format that parses the most of `sample` (ties: the more specific format, in
/// [`Format::ALL`] order). `None` if no line parses in any format.
pub fn detect<'a>(sample: impl Iterator<Item = &'a [u8]> + Clone) -> Option<Format> {
    let mut best: Option<(usize, Format)> = None;
    for fmt in Format::ALL {
        let n = sample
            .clone()
            .filter(|l| parse(fmt, l, &mut |_| {}))
            .count();
        if n > 0 && best.is_none_or(|(b, _)| n > b) {
            best = Some((n, fmt));
        }
    }
    best.map(|(_, f)| f)
}
