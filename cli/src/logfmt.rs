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
//!   `class`, `retry_after`, `duration_ms`, `upstream_ms`, `route`, `limit` (any order, any
//!   subset; older lines without the timing keys parse too).
//! - [`Format::EnvoyJson`]: Envoy `json_format` access logs, one object per line, with the
//!   key names of Envoy's and Istio's documented JSON examples (`start_time`, `method`,
//!   `path`, `response_code`, `response_code_details`, `response_flags`, `duration`,
//!   `upstream_service_time`, `x_forwarded_for`, `user_agent`, `upstream_host`,
//!   `downstream_remote_address`, `route_name`) plus crawlguard's `class` and `limit`.

use crate::time;
use crawlguard::classify::Class;
use serde::Deserialize;
use std::borrow::Cow;

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

fn status(v: &[u8]) -> Option<u16> {
    if v.len() != 3 && v != b"0" {
        return None;
    }
    let s = num_u32(v)?;
    if s == 0 || (100..=999).contains(&s) {
        Some(s as u16)
    } else {
        None
    }
}

/// Seconds with a decimal fraction (`0.005`) -> ms, rounded to the nearest ms.
fn seconds_to_ms(v: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(v).ok()?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    let ms = (f * 1000.0).round();
    (ms.is_finite() && (0.0..=4.0e9).contains(&ms)).then_some(ms as u32)
}

/// Splits `"request" rest`: `s` starts just after the opening quote. The request line ends
/// at the first `"` followed by a space and a digit (a status), so quotes inside a
/// malformed request line do not cut it short. Returns (request, rest after `" `).
fn request_field(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut from = 0;
    loop {
        let i = from + memchr::memchr(b'"', s.get(from..)?)?;
        if s.get(i + 1) == Some(&b' ') && s.get(i + 2).is_some_and(u8::is_ascii_digit) {
            return Some((s.get(..i)?, s.get(i + 2..)?));
        }
        from = i + 1;
    }
}

/// Method and path of a request line `METHOD path [PROTO]`.
fn split_request(req: &[u8]) -> (&[u8], &[u8]) {
    let mut it = req.splitn(3, |b| *b == b' ');
    let method = it.next().filter(|m| !m.is_empty()).unwrap_or(b"-");
    let path = it.next().unwrap_or(b"");
    (method, path)
}

/// A quoted field at the start of `s` (`"..."`, backslash escapes skipped): (content, rest
/// after the closing quote). `None` if unterminated.
fn quoted(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let body = s.strip_prefix(b"\"")?;
    let mut i = 0;
    loop {
        i += memchr::memchr2(b'"', b'\\', body.get(i..)?)?;
        match body.get(i)? {
            b'"' => return Some((body.get(..i)?, body.get(i + 1..)?)),
            _ => i += 2,
        }
    }
}

/// Next space-separated token: (token, rest after the space(s)).
fn token(s: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b' ', s) {
        Some(i) => (
            s.get(..i).unwrap_or(b""),
            s.get(i + 1..).unwrap_or(b"").trim_ascii_start(),
        ),
        None => (s, b""),
    }
}

/// nginx/Apache combined (see the module docs).
pub fn parse_combined(line: &[u8]) -> Option<LogRecord<'_>> {
    let (host, rest) = token(line);
    if host.is_empty() {
        return None;
    }
    let open = memchr::memchr(b'[', rest)?;
    let close = open + memchr::memchr(b']', rest.get(open..)?)?;
    let ts = time::parse_apache(rest.get(open + 1..close)?)?;
    let rest = rest.get(close + 1..)?.strip_prefix(b" \"")?;
    let (req, rest) = request_field(rest)?;
    let (st, rest) = token(rest);
    let status = status(st)?;
    let (_bytes, rest) = token(rest);
    let (_referer, rest) = quoted(rest)?;
    let (ua, tail) = quoted(rest.trim_ascii_start())?;
    let (method, path) = split_request(req);
    let mut r = LogRecord::new(ts);
    r.client = opt(host);
    r.method = method;
    r.path = path;
    r.status = status;
    r.ua = opt(ua);
    let tail = tail.trim_ascii();
    if !tail.is_empty() {
        // $request_time $upstream_response_time (the latter may list several attempts,
        // separated by ", " or " : ").
        let (rt, up) = token(tail);
        r.duration_ms = Some(seconds_to_ms(rt)?);
        let mut sum: Option<u32> = None;
        let mut any_dash = false;
        for part in up.split(|b| *b == b' ' || *b == b',' || *b == b':') {
            if part.is_empty() {
                continue;
            }
            if part == b"-" {
                any_dash = true;
                continue;
            }
            let ms = seconds_to_ms(part)?;
            sum = Some(sum.unwrap_or(0).saturating_add(ms));
        }
        r.upstream_ms = sum;
        r.upstream = match (sum, any_dash, up.is_empty()) {
            (Some(_), _, _) => UpstreamReach::Reached,
            (None, true, _) => UpstreamReach::NotReached,
            (None, false, _) => UpstreamReach::Unknown,
        };
    }
    Some(r)
}

/// `[ts] ` prefix of Envoy text formats: (ms, rest).
fn envoy_ts(line: &[u8]) -> Option<(i64, &[u8])> {
    let rest = line.strip_prefix(b"[")?;
    let close = memchr::memchr(b']', rest)?;
    let ts = time::parse_rfc3339(rest.get(..close)?)?;
    Some((ts, rest.get(close + 1..)?.strip_prefix(b" ")?))
}

/// Envoy's default text format (see the module docs).
pub fn parse_envoy_default(line: &[u8]) -> Option<LogRecord<'_>> {
    let (ts, rest) = envoy_ts(line)?;
    let rest = rest.strip_prefix(b"\"")?;
    let (req, rest) = request_field(rest)?;
    let (st, rest) = token(rest);
    let status = status(st)?;
    let (flags, rest) = token(rest);
    let (rx, rest) = token(rest);
    let (tx, rest) = token(rest);
    let (dur, rest) = token(rest);
    let (up, rest) = token(rest);
    if num_u32(rx).is_none() || num_u32(tx).is_none() {
        return None;
    }
    let (xff, rest) = quoted(rest)?;
    let (ua, rest) = quoted(rest.trim_ascii_start())?;
    let (_rid, rest) = quoted(rest.trim_ascii_start())?;
    let (_authority, rest) = quoted(rest.trim_ascii_start())?;
    let (uhost, rest) = quoted(rest.trim_ascii_start())?;
    if !rest.trim_ascii().is_empty() {
        return None;
    }
    let (method, path) = split_request(req);
    let mut r = LogRecord::new(ts);
    r.method = method;
    r.path = path;
    r.status = status;
    r.flags = opt(flags);
    r.duration_ms = num_u32(dur);
    r.upstream_ms = num_u32(up);
    r.xff = opt(xff);
    // No downstream address in this format: the first x-forwarded-for entry stands in.
    r.client = r
        .xff
        .and_then(|x| x.split(|b| *b == b',').next())
        .map(<[u8]>::trim_ascii)
        .and_then(opt);
    r.ua = opt(ua);
    r.upstream = if opt(uhost).is_some() || r.upstream_ms.is_some() {
        UpstreamReach::Reached
    } else {
        UpstreamReach::NotReached
    };
    Some(r)
}

/// crawlguard's own access log (see the module docs).
pub fn parse_crawlguard(line: &[u8]) -> Option<LogRecord<'_>> {
    let (ts, rest) = envoy_ts(line)?;
    let (addr, rest) = token(rest);
    let rest = rest.strip_prefix(b"\"")?;
    let (req, rest) = request_field(rest)?;
    let (st, rest) = token(rest);
    let status = status(st)?;
    let (details, mut rest) = token(rest);
    if details.contains(&b'=') || details.starts_with(b"\"") {
        return None;
    }
    let (method, path) = split_request(req);
    let mut r = LogRecord::new(ts);
    r.client = opt(addr);
    r.method = method;
    r.path = path;
    r.status = status;
    r.details = opt(details);
    let mut saw_ua = false;
    let mut saw_upstream_ms = false;
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix(b"ua=") {
            // The User-Agent is last and may hold anything, quotes included: up to the
            // final quote of the line.
            let q = q.strip_prefix(b"\"")?.trim_ascii_end();
            let ua = q.strip_suffix(b"\"")?;
            r.ua = opt(ua);
            saw_ua = true;
            break;
        }
        let (kv, next) = token(rest);
        let eq = memchr::memchr(b'=', kv)?;
        let (k, v) = (kv.get(..eq)?, kv.get(eq + 1..)?);
        match k {
            b"class" => {
                r.class = opt(v)
                    .and_then(|c| std::str::from_utf8(c).ok())
                    .and_then(Class::parse)
            }
            b"duration_ms" => r.duration_ms = num_u32(v),
            b"upstream_ms" => {
                saw_upstream_ms = true;
                r.upstream_ms = num_u32(v);
            }
            b"route" => r.route = opt(v),
            b"limit" => r.limit = opt(v).and_then(limit_name),
            _ => {}
        }
        rest = next;
    }
    if !saw_ua {
        return None;
    }
    r.upstream = match r.details {
        Some(d) if d == b"via_upstream" || d == b"crawlguard_normalised_upstream" => {
            UpstreamReach::Reached
        }
        Some(_) => UpstreamReach::NotReached,
        None if r.upstream_ms.is_some() => UpstreamReach::Reached,
        None if saw_upstream_ms => UpstreamReach::NotReached,
        None => UpstreamReach::Unknown,
    };
    Some(r)
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

/// A JSON value that may be a string or a number (Envoy types some fields).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Val<'a> {
    Str(#[serde(borrow)] Cow<'a, str>),
    Num(f64),
    Other(serde::de::IgnoredAny),
}

impl Val<'_> {
    fn text(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s.as_ref()),
            _ => None,
        }
    }

    fn num(&self) -> Option<f64> {
        match self {
            Val::Num(n) => Some(*n),
            Val::Str(s) => s.trim().parse().ok(),
            Val::Other(_) => None,
        }
    }
}

/// The keys of an Envoy/Istio JSON access log that the report uses.
#[derive(Debug, Default, Deserialize)]
struct JsonLine<'a> {
    #[serde(borrow, alias = "timestamp", alias = "START_TIME")]
    start_time: Option<Val<'a>>,
    #[serde(borrow, alias = "METHOD")]
    method: Option<Val<'a>>,
    #[serde(borrow, alias = "PATH", alias = "x_envoy_original_path")]
    path: Option<Val<'a>>,
    #[serde(borrow, alias = "status", alias = "RESPONSE_CODE")]
    response_code: Option<Val<'a>>,
    #[serde(borrow, alias = "RESPONSE_CODE_DETAILS")]
    response_code_details: Option<Val<'a>>,
    #[serde(borrow, alias = "RESPONSE_FLAGS")]
    response_flags: Option<Val<'a>>,
    #[serde(borrow, alias = "duration_ms", alias = "DURATION")]
    duration: Option<Val<'a>>,
    #[serde(
        borrow,
        alias = "upstream_ms",
        alias = "x_envoy_upstream_service_time",
        alias = "UPSTREAM_SERVICE_TIME"
    )]
    upstream_service_time: Option<Val<'a>>,
    #[serde(borrow, alias = "xff", alias = "X_FORWARDED_FOR")]
    x_forwarded_for: Option<Val<'a>>,
    #[serde(borrow, alias = "ua", alias = "USER_AGENT", alias = "user-agent")]
    user_agent: Option<Val<'a>>,
    #[serde(borrow, alias = "UPSTREAM_HOST")]
    upstream_host: Option<Val<'a>>,
    #[serde(
        borrow,
        alias = "client",
        alias = "downstream_remote_address_without_port",
        alias = "DOWNSTREAM_REMOTE_ADDRESS"
    )]
    downstream_remote_address: Option<Val<'a>>,
    #[serde(borrow, alias = "route", alias = "ROUTE_NAME")]
    route_name: Option<Val<'a>>,
    #[serde(borrow, alias = "x_crawler_class", alias = "crawler_class")]
    class: Option<Val<'a>>,
    #[serde(borrow, alias = "ratelimit_policy")]
    limit: Option<Val<'a>>,
}

/// Parses one Envoy JSON access-log line and hands the record to `f` (the record borrows
/// from the decoded object, hence the callback). False if the line is not such a log line
/// (not a JSON object, or no start time / status).
pub fn parse_envoy_json(line: &[u8], f: &mut dyn FnMut(&LogRecord<'_>)) -> bool {
    let Ok(j) = serde_json::from_slice::<JsonLine<'_>>(line) else {
        return false;
    };
    let Some(ts) = j
        .start_time
        .as_ref()
        .and_then(Val::text)
        .and_then(|t| time::parse_rfc3339(t.as_bytes()))
    else {
        return false;
    };
    let Some(status) = j
        .response_code
        .as_ref()
        .and_then(Val::num)
        .filter(|s| *s == 0.0 || (100.0..=999.0).contains(s))
    else {
        return false;
    };
    let text = |v: &Option<Val<'_>>| -> Option<String> {
        v.as_ref().and_then(|v| match v {
            Val::Str(s) => Some(s.to_string()),
            Val::Num(n) => Some(n.to_string()),
            Val::Other(_) => None,
        })
    };
    let ms = |v: &Option<Val<'_>>| -> Option<u32> {
        v.as_ref()
            .and_then(Val::num)
            .filter(|n| n.is_finite() && (0.0..=4.0e9).contains(n))
            .map(|n| n.round() as u32)
    };
    let method = text(&j.method);
    let path = text(&j.path);
    let xff = text(&j.x_forwarded_for);
    let ua = text(&j.user_agent);
    let details = text(&j.response_code_details);
    let flags = text(&j.response_flags);
    let uhost = text(&j.upstream_host);
    let route = text(&j.route_name);
    let limit = text(&j.limit);
    let remote = text(&j.downstream_remote_address);
    let client_addr = remote.as_deref().map(strip_port);
    fn b(s: &Option<String>) -> Option<&[u8]> {
        s.as_deref().map(str::as_bytes).and_then(opt)
    }
    let mut r = LogRecord::new(ts);
    r.method = b(&method).unwrap_or(b"-");
    r.path = b(&path).unwrap_or(b"");
    r.status = status as u16;
    r.ua = b(&ua);
    r.xff = b(&xff);
    r.details = b(&details);
    r.flags = b(&flags);
    r.route = b(&route);
    r.limit = b(&limit).and_then(limit_name);
    r.duration_ms = ms(&j.duration);
    r.upstream_ms = ms(&j.upstream_service_time);
    r.class = j.class.as_ref().and_then(Val::text).and_then(Class::parse);
    r.client = client_addr.map(str::as_bytes).and_then(opt).or_else(|| {
        r.xff
            .and_then(|x| x.split(|c| *c == b',').next())
            .map(<[u8]>::trim_ascii)
            .and_then(opt)
    });
    r.upstream = match r.details {
        Some(d) if d == b"via_upstream" || d == b"crawlguard_normalised_upstream" => {
            UpstreamReach::Reached
        }
        Some(_) => UpstreamReach::NotReached,
        None if b(&uhost).is_some() || r.upstream_ms.is_some() => UpstreamReach::Reached,
        None if j.upstream_host.is_some() => UpstreamReach::NotReached,
        None => UpstreamReach::Unknown,
    };
    f(&r);
    true
}

/// `1.2.3.4:5678` -> `1.2.3.4`, `[::1]:443` -> `::1`; anything else unchanged.
fn strip_port(s: &str) -> &str {
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    if s.matches(':').count() == 1 {
        return s.split(':').next().unwrap_or(s);
    }
    s
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
