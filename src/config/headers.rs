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
