//! Header names in the configuration: the RFC 9110 token every name must be, and the names
//! each use refuses, each with its reason (the README's `limits[].key` row states them).

use super::{err, ConfigError};

/// RFC 9110 section 5.1 field-name token, lowercased; `path` names the field in the error.
fn token(path: &str, s: &str) -> Result<String, ConfigError> {
    const TCHAR: &[u8] = b"!#$%&'*+-.^_`|~";
    let lower = s.to_ascii_lowercase();
    if lower.is_empty()
        || lower.len() > 128
        || !lower
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || TCHAR.contains(&b))
    {
        return Err(err(path, format!("{s:?} is not a valid header name")));
    }
    Ok(lower)
}

/// A header name crawlguard writes or removes (`class_header`, a cost header, `degraded`):
/// a token, and not one Envoy or the origin needs intact.
///
/// Errors: `path: "<s>" is not a valid header name` or `path: "<s>" is reserved`.
pub(super) fn header_name(path: &str, s: &str) -> Result<String, ConfigError> {
    const RESERVED: &[&str] = &[
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "te",
        "upgrade",
        "user-agent",
        "x-forwarded-for",
    ];
    let lower = token(path, s)?;
    if RESERVED.contains(&lower.as_str()) {
        return Err(err(path, format!("{s:?} is reserved")));
    }
    Ok(lower)
}

/// Why crawlguard must not take over a header (as `class_header`, which it replaces on every
/// request, or a cost header, which it removes from every response): the groups each refused
/// name is in. A prefix ending in `-` refuses every name it starts.
pub const TAKE_OVER_REFUSED: &[(&[&str], &str)] = &[
    (
        &[
            "authorization",
            "proxy-authorization",
            "cookie",
            "set-cookie",
            "www-authenticate",
            "proxy-authenticate",
        ],
        "it carries credentials or cookies, which the origin or the client would lose",
    ),
    (
        &[
            "connection",
            "keep-alive",
            "proxy-connection",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "content-length",
            "content-encoding",
            "content-type",
            "host",
        ],
        "hop-by-hop, framing or routing: Envoy and the origin need it intact",
    ),
    (
        &["user-agent", "x-forwarded-for", "forwarded", "via"],
        "it says who the client is: crawlguard classifies by it and the origin needs it",
    ),
    (
        &[
            "retry-after",
            "cache-control",
            "ratelimit",
            "ratelimit-policy",
            "location",
            "vary",
            "etag",
            "expires",
            "last-modified",
            "age",
            "date",
        ],
        "standard response semantics (crawlguard sets some of them on its own answers): \
         clients and caches need it intact",
    ),
    (
        &["x-envoy-"],
        "Envoy's own headers (x-envoy-*): Envoy sets, strips and acts on them",
    ),
];

/// A header crawlguard takes over (`class_header`: replaced on every request; a cost
/// header: removed from every response): a token, not in [`TAKE_OVER_REFUSED`].
///
/// Errors: `path: "<s>" is not a valid header name` or
/// `path: "<s>" cannot be taken over by crawlguard: <reason>`.
pub(super) fn taken_over_header_name(path: &str, s: &str) -> Result<String, ConfigError> {
    let lower = token(path, s)?;
    let hit = TAKE_OVER_REFUSED.iter().find(|(names, _)| {
        names.iter().any(|n| {
            if n.ends_with('-') {
                lower.starts_with(n)
            } else {
                lower == *n
            }
        })
    });
    match hit {
        Some((_, why)) => Err(err(
            path,
            format!("{s:?} cannot be taken over by crawlguard: {why}"),
        )),
        None => Ok(lower),
    }
}

/// Request headers a limit may not be keyed by (`limits[].key: "header:<name>"`), and why.
/// Everything else is allowed, `user-agent` included (one bucket per User-Agent string,
/// whatever address sends it).
pub const KEY_REFUSED: &[(&str, &str)] = &[
    (
        "host",
        "Envoy keeps the Host as :authority, so no `host` header reaches the filter and every \
         request would share one bucket",
    ),
    (
        "x-forwarded-for",
        "clients write any addresses into it and every listed value is charged, so a client \
         could spend other clients' buckets by naming their addresses; use key \"client_ip\" \
         with client_ip.source \"xff\", which takes the entry your proxies appended",
    ),
    (
        "forwarded",
        "clients write any addresses into it and every listed value is charged, so a client \
         could spend other clients' buckets by naming their addresses; use key \"client_ip\" \
         with client_ip.source \"xff\", which takes the entry your proxies appended",
    ),
    (
        "connection",
        "hop-by-hop (RFC 9110 section 7.6.1): Envoy consumes it, so the key would be one \
         bucket for nearly every request",
    ),
    (
        "keep-alive",
        "hop-by-hop (RFC 9110 section 7.6.1): Envoy consumes it, so the key would be one \
         bucket for nearly every request",
    ),
    (
        "proxy-connection",
        "hop-by-hop (RFC 9110 section 7.6.1): Envoy consumes it, so the key would be one \
         bucket for nearly every request",
    ),
    (
        "te",
        "hop-by-hop (RFC 9110 section 7.6.1): Envoy consumes it, so the key would be one \
         bucket for nearly every request",
    ),
    (
        "upgrade",
        "hop-by-hop (RFC 9110 section 7.6.1): Envoy consumes it, so the key would be one \
         bucket for nearly every request",
    ),
    (
        "transfer-encoding",
        "message framing, not the client: the key would be one bucket for nearly every request",
    ),
    (
        "content-length",
        "message framing, not the client: the key would be one bucket per body size",
    ),
];

/// The header of `limits[i].key: "header:<s>"` (lowercased), refused when it is in
/// [`KEY_REFUSED`] or is the `class_header` (crawlguard replaces the client's value, so the
/// key would be whatever the client made up).
///
/// Errors: `path: "<s>" is not a valid header name`, or
/// `path: "header:<s>" cannot be a limit key: <reason>`.
pub(super) fn key_header_name(
    path: &str,
    s: &str,
    class_header: &str,
) -> Result<String, ConfigError> {
    let lower = token(path, s)?;
    let reason = if lower == class_header {
        Some(
            "it is class_header, which crawlguard sets to the class (the client's value is \
             removed); limit by class with limits[].class",
        )
    } else {
        KEY_REFUSED
            .iter()
            .find(|(name, _)| *name == lower)
            .map(|(_, why)| *why)
    };
    match reason {
        Some(why) => Err(err(
            path,
            format!("\"header:{s}\" cannot be a limit key: {why}"),
        )),
        None => Ok(lower),
    }
}

/// Whether a key header's value is a comma-separated list (RFC 9110 section 5.3), each
/// element its own key. `user-agent` is not: its comments carry commas
/// (`(KHTML, like Gecko)`), so each line is one whole value.
pub fn key_header_is_list(name: &str) -> bool {
    name != "user-agent"
}
