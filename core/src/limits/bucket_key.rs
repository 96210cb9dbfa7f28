//! What a bucket is keyed by: the [`KeyPart`] hashed into its fingerprint
//! ([`crate::limits::limiter::Limiter::key`]), and the distinct values of a key header
//! ([`key_values`]), each of which a request is charged for.

use crate::identity::class::Class;
use std::net::IpAddr;

/// What the limit decision needs to know about a request, derived once from its headers
/// (`request::Facts`).
#[derive(Debug, Clone, Copy)]
pub struct RequestKeys<'a> {
    /// Route index (see [`crate::config::Config::route_name`]).
    pub route: usize,
    /// The client address masked to its prefix (the `client_ip` bucket key); `None` when no
    /// address parses (all such requests share one bucket per limit).
    pub client: Option<IpAddr>,
    /// The full client address: what a limit with its own prefix
    /// ([`crate::config::Limit::address_prefix`]) masks; `None` when no address parses.
    pub client_ip: Option<IpAddr>,
    /// The catalog bot id the User-Agent names (the `bot` key); `None` for `human` and a
    /// blank User-Agent.
    pub bot: Option<&'a str>,
    /// The request path without its query (the `path` key).
    pub path: &'a [u8],
    /// The client's autonomous system (the `asn` key); `None` when no `asn_header` is
    /// configured or its value does not parse.
    pub asn: Option<u32>,
    /// Every line of each `header:<name>` key header, by lowercase name.
    pub key_headers: &'a [(&'a str, Vec<Vec<u8>>)],
    /// The class is a verified crawler claim's (any class: AdsBot is `other_bot`): it never
    /// escalates, whatever the class's `escalation.enabled`.
    pub verified_claim: bool,
}

impl RequestKeys<'_> {
    pub(crate) fn header_lines(&self, name: &str) -> &[Vec<u8>] {
        self.key_headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_slice())
            .unwrap_or_default()
    }
}

/// One part of what a bucket is keyed by, hashed into its fingerprint
/// ([`crate::limits::limiter::Limiter::key`]); a compound key (`limits[].key` a list) is
/// several, hashed in order. New variants go last: a variant's position is part of every
/// fingerprint of that kind (an upgrade that moved one would reset its buckets, and split a
/// fleet's Redis buckets between versions during a rolling upgrade).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyPart<'a> {
    /// A client address prefix.
    Ip(IpAddr),
    /// No address parsed (all such requests share one bucket per limit).
    UnknownIp,
    /// The one bucket of a `global` limit.
    Global,
    /// One value of the key header; `None` = absent or blank.
    Header(Option<&'a [u8]>),
    /// The reservations in flight of one client (its address, an IPv6 client's /48,
    /// [`crate::identity::client_ip::concurrency_prefix`]; `None`: none parsed) under a cost-based
    /// limit, whatever its key ([`crate::limits::limiter::Limiter::take_flight`]).
    FlightsOf(Option<IpAddr>),
    /// The catalog bot id the User-Agent names (`bot` key).
    Bot(&'a str),
    /// The request path without its query (`path` key).
    Path(&'a [u8]),
    /// The request's class: part of a `bot` or `header:user-agent` key in a limit of every
    /// class ([`crate::config::KeyKind::keyed_by_claim`]).
    Class(Class),
    /// The client's autonomous system number (`asn` key).
    Asn(u32),
}

/// Most distinct values of a key header a request may name; each is charged. A request
/// naming more is rejected as malformed ([`crate::limits::limiter::Decision::Malformed`]): it must charge every key
/// it names or be rejected, so padding cannot hide an exhausted key among fresh ones.
pub const MAX_KEY_VALUES: usize = 16;

/// The distinct values of a key header: every line, split on commas when `list` (RFC 9110
/// section 5.3 list syntax; not for `user-agent`, see [`crate::config::key_header_is_list`]),
/// trimmed, blanks dropped, in first-seen order. A request that repeats the header (or lists
/// several values) is charged once per distinct value, so a client cannot slip an exhausted
/// key past the limit behind a fresh one. Collecting stops at `MAX_KEY_VALUES + 1` values
/// (enough to know the request is malformed), so a huge list costs no more than that many
/// comparisons per part.
pub fn key_values(lines: &[Vec<u8>], list: bool) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = Vec::new();
    let parts = lines
        .iter()
        .flat_map(|l| l.split(move |b| list && *b == b','));
    for part in parts {
        let v = part.trim_ascii();
        if !v.is_empty() && !out.contains(&v) {
            out.push(v);
            if out.len() > MAX_KEY_VALUES {
                break;
            }
        }
    }
    out
}
