//! What a bucket is keyed by: the [`KeyPart`] hashed into its fingerprint
//! ([`crate::limits::limiter::Limiter::key`]), and the distinct values of a key header
//! ([`key_values`]), each of which a request is charged for.

use std::net::IpAddr;

/// What a bucket is keyed by, hashed into its fingerprint ([`crate::limits::limiter::Limiter::key`]).
#[derive(Hash)]
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
