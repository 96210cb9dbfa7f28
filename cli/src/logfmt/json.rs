//! Envoy `json_format` access logs (see the module docs of [`super`]).

use super::{
    first_forwarded, limit_name, opt, reach_of_details, LogRecord, LoggedSignals, UpstreamReach,
};
use crate::time;
use crawlguard_core::identity::classify::Class;
use serde::Deserialize;
use std::borrow::Cow;

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
    #[serde(borrow, alias = "tls")]
    tls_version: Option<Val<'a>>,
    #[serde(borrow, alias = "proto", alias = "PROTOCOL")]
    protocol: Option<Val<'a>>,
    #[serde(borrow)]
    ja4: Option<Val<'a>>,
    #[serde(borrow)]
    asn: Option<Val<'a>>,
    #[serde(borrow, alias = "sfs")]
    sec_fetch_site: Option<Val<'a>>,
    #[serde(borrow, alias = "chua")]
    sec_ch_ua: Option<Val<'a>>,
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
    let (tls, protocol, ja4, asn) = (
        text(&j.tls_version),
        text(&j.protocol),
        text(&j.ja4),
        text(&j.asn),
    );
    let (sfs, chua) = (text(&j.sec_fetch_site), text(&j.sec_ch_ua));
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
    // A key present is logged (its value may be `-` or null: none); absent, not logged.
    let logged = |key: &Option<Val<'_>>, v| key.is_some().then_some(v);
    r.signals = LoggedSignals {
        tls: j.tls_version.is_some().then(|| b(&tls).is_some()),
        protocol: b(&protocol),
        ja4: logged(&j.ja4, b(&ja4)),
        asn: logged(&j.asn, b(&asn)),
        sec_fetch_site: logged(&j.sec_fetch_site, b(&sfs)),
        sec_ch_ua: logged(&j.sec_ch_ua, b(&chua)),
    };
    r.client = client_addr
        .map(str::as_bytes)
        .and_then(opt)
        .or_else(|| first_forwarded(r.xff));
    r.upstream = match reach_of_details(r.details) {
        Some(reach) => reach,
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
