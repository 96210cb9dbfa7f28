//! The text formats: nginx/Apache combined, Envoy's default, and crawlguard's own (see the
//! module docs of [`super`]).

use super::{
    first_forwarded, limit_name, num_u32, opt, reach_of_details, LogRecord, UpstreamReach,
};
use crate::time;
use crawlguard_core::identity::classify::Class;

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

/// A record at `ts` of the request line `req` (`METHOD path [PROTO]`) answered `status`.
fn of_request_line(ts: i64, req: &[u8], status: u16) -> LogRecord<'_> {
    let (method, path) = split_request(req);
    let mut r = LogRecord::new(ts);
    r.method = method;
    r.path = path;
    r.status = status;
    r
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
    let mut r = of_request_line(ts, req, status);
    r.client = opt(host);
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
    let mut r = of_request_line(ts, req, status);
    r.flags = opt(flags);
    r.duration_ms = num_u32(dur);
    r.upstream_ms = num_u32(up);
    r.xff = opt(xff);
    // No downstream address in this format: the first x-forwarded-for entry stands in.
    r.client = first_forwarded(r.xff);
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
    let mut r = of_request_line(ts, req, status);
    r.client = opt(addr);
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
            b"tls" => r.signals.tls = Some(opt(v).is_some()),
            b"proto" => r.signals.protocol = opt(v),
            b"ja4" => r.signals.ja4 = Some(opt(v)),
            b"asn" => r.signals.asn = Some(opt(v)),
            b"sfs" => r.signals.sec_fetch_site = Some(opt(v)),
            b"chua" => r.signals.sec_ch_ua = Some(opt(v)),
            _ => {}
        }
        rest = next;
    }
    if !saw_ua {
        return None;
    }
    r.upstream = match reach_of_details(r.details) {
        Some(reach) => reach,
        None if r.upstream_ms.is_some() => UpstreamReach::Reached,
        None if saw_upstream_ms => UpstreamReach::NotReached,
        None => UpstreamReach::Unknown,
    };
    Some(r)
}
