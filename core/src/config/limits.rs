//! Validation of `limits`: each limit's name, class, route, rate and burst, key and cost,
//! checked with its field path (split from `compile.rs`, which calls it).

use super::classes::compile_retry_after;
use super::defaults;
use super::headers::{key_header_name, taken_over_header_name};
use super::is_name;
use super::raw::{RawExemptLimit, RawKey, RawLimit};
use super::{
    err, AddressPrefix, ClassPolicy, ClientIpConfig, ConfigError, Cost, Escalation, ExemptLimit,
    KeyKind, Limit, Mode, Route, TokenBucket, DEFAULT_ROUTE, EXEMPT_LIMIT_NAME, MAX_IN_FLIGHT,
    MAX_REFILL_S,
};
use crate::identity::class::Class;
use std::collections::HashSet;

/// `limits`: unique names, known class and route, a token bucket that fits (refill within
/// [`MAX_REFILL_S`]) and/or a `max_in_flight`, a valid key (a header key not refused, see
/// `headers::KEY_REFUSED`, and not `class_header`).
pub(super) fn compile_limits(
    raw_limits: Vec<RawLimit>,
    routes: &[Route],
    mode: Mode,
    class_header: &str,
    client_ip: &ClientIpConfig,
) -> Result<Vec<Limit>, ConfigError> {
    let mut limits = Vec::with_capacity(raw_limits.len());
    let mut limit_names = HashSet::new();
    for (i, l) in raw_limits.iter().enumerate() {
        let p = format!("limits[{i}]");
        if !is_name(&l.name, true) {
            return Err(err(
                format!("{p}.name"),
                "must be 1..=64 chars of [a-z0-9._-]",
            ));
        }
        if l.name == EXEMPT_LIMIT_NAME {
            return Err(err(
                format!("{p}.name"),
                format!("{EXEMPT_LIMIT_NAME:?} is the exempt paths' own limit (configure it in exempt_limit)"),
            ));
        }
        if !limit_names.insert(l.name.as_str()) {
            return Err(err(
                format!("{p}.name"),
                format!("duplicate limit {:?}", l.name),
            ));
        }
        let class = if l.class == "*" {
            None
        } else {
            Some(Class::parse(&l.class).ok_or_else(|| {
                err(
                    format!("{p}.class"),
                    format!(
                        "unknown class {:?} (expected a class name or \"*\")",
                        l.class
                    ),
                )
            })?)
        };
        let route = if l.route == "*" {
            None
        } else if l.route == DEFAULT_ROUTE {
            Some(routes.len())
        } else {
            Some(
                routes
                    .iter()
                    .position(|r| r.name == l.route)
                    .ok_or_else(|| {
                        err(
                            format!("{p}.route"),
                            format!("unknown route {:?} (define it in routes)", l.route),
                        )
                    })?,
            )
        };
        let bucket = match (l.rate_per_s, l.burst) {
            (Some(rate_per_s), Some(burst)) => Some(compile_bucket(&p, rate_per_s, burst)?),
            (None, None) => None,
            (Some(_), None) => {
                return Err(err(
                    format!("{p}.burst"),
                    "required with rate_per_s (a token bucket has both)",
                ))
            }
            (None, Some(_)) => {
                return Err(err(
                    format!("{p}.rate_per_s"),
                    "required with burst (a token bucket has both)",
                ))
            }
        };
        let max_in_flight = match l.max_in_flight {
            None => None,
            Some(m) => match u16::try_from(m) {
                Ok(m) if (1..=MAX_IN_FLIGHT).contains(&m) => Some(m),
                _ => {
                    return Err(err(
                        format!("{p}.max_in_flight"),
                        format!("{m}: must be 1..={MAX_IN_FLIGHT}"),
                    ))
                }
            },
        };
        if bucket.is_none() && max_in_flight.is_none() {
            return Err(err(
                p,
                "a limit needs rate_per_s and burst (a token bucket), max_in_flight (requests \
                 in flight at once), or both",
            ));
        }
        let key = compile_key(&format!("{p}.key"), &l.key, class_header)?;
        if let Some(c) = class.filter(|c| key.has_bot() && c.names_no_bot()) {
            return Err(err(
                format!("{p}.key"),
                format!(
                    "\"bot\" in a limit of class {c}: {c} requests name no bot id, so the \
                     limit would charge nothing",
                    c = c.as_str()
                ),
            ));
        }
        let address_prefix = match (l.ipv4_prefix_len, l.ipv6_prefix_len) {
            (None, None) => None,
            (v4, v6) => {
                if !key.has_client_ip() {
                    let field = if v4.is_some() { "ipv4" } else { "ipv6" };
                    return Err(err(
                        format!("{p}.{field}_prefix_len"),
                        "only for a key with a \"client_ip\" part",
                    ));
                }
                let len = |given: Option<u32>, global: u8, max: u8, field: &str| match given {
                    None => Ok(global),
                    Some(n) => u8::try_from(n)
                        .ok()
                        .filter(|n| *n <= max)
                        .ok_or_else(|| err(format!("{p}.{field}"), format!("must be 0..={max}"))),
                };
                Some(AddressPrefix {
                    ipv4_len: len(v4, client_ip.ipv4_prefix_len, 32, "ipv4_prefix_len")?,
                    ipv6_len: len(v6, client_ip.ipv6_prefix_len, 128, "ipv6_prefix_len")?,
                })
            }
        };
        let cost = match (&l.cost, bucket) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(err(
                    format!("{p}.cost"),
                    "needs rate_per_s and burst: a cost is charged to a token bucket",
                ))
            }
            (Some(c), Some(b)) => {
                if !(1..=b.burst).contains(&c.reserve) {
                    return Err(err(
                        format!("{p}.cost.reserve"),
                        format!("must be 1..=burst ({})", b.burst),
                    ));
                }
                let max_in_flight = match c.max_in_flight {
                    None => defaults::COST_MAX_IN_FLIGHT,
                    Some(m) => match u8::try_from(m) {
                        Ok(m) if m >= 1 => m,
                        _ => {
                            return Err(err(
                                format!("{p}.cost.max_in_flight"),
                                format!("{m}: must be 1..=255"),
                            ))
                        }
                    },
                };
                Some(Cost {
                    reserve: c.reserve,
                    max_in_flight,
                    from_response_header: taken_over_header_name(
                        &format!("{p}.cost.from_response_header"),
                        &c.from_response_header,
                    )?,
                })
            }
        };
        limits.push(Limit {
            name: l.name.clone(),
            class,
            route,
            bucket,
            max_in_flight,
            key,
            address_prefix,
            mode: l.mode.unwrap_or(mode),
            cost,
        });
    }

    Ok(limits)
}

/// A token bucket at `p` (`limits[i]` or `exempt_limit`): `rate_per_s` in (0, 1000000],
/// `burst` 1..=1000000, refilled within [`MAX_REFILL_S`].
fn compile_bucket(p: &str, rate_per_s: f64, burst: u32) -> Result<TokenBucket, ConfigError> {
    if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
        return Err(err(format!("{p}.rate_per_s"), "must be > 0"));
    }
    if rate_per_s > 1_000_000.0 {
        return Err(err(format!("{p}.rate_per_s"), "must be <= 1000000"));
    }
    if !(1..=1_000_000).contains(&burst) {
        return Err(err(format!("{p}.burst"), "must be 1..=1000000"));
    }
    let refill_s = f64::from(burst) / rate_per_s;
    if refill_s > MAX_REFILL_S {
        return Err(err(
            format!("{p}.rate_per_s"),
            format!(
                "burst / rate_per_s must be <= {MAX_REFILL_S} s (one year), is {} s",
                refill_s.ceil()
            ),
        ));
    }
    Ok(TokenBucket::new(rate_per_s, burst))
}

/// `exempt_limit`: when enabled, a token bucket per client address ([`EXEMPT_LIMIT_NAME`],
/// key `client_ip`) in `mode` (its own, else the global one), answered 429 with its
/// `retry_after` range, never escalated. `None` when disabled.
pub(super) fn compile_exempt_limit(
    raw: &RawExemptLimit,
    mode: Mode,
) -> Result<Option<ExemptLimit>, ConfigError> {
    use super::defaults::exempt_limit as d;
    if !raw.enabled.unwrap_or(d::ENABLED) {
        return Ok(None);
    }
    let bucket = compile_bucket(
        "exempt_limit",
        raw.rate_per_s.unwrap_or(d::RATE_PER_S),
        raw.burst.unwrap_or(d::BURST),
    )?;
    let retry_after = compile_retry_after(
        "exempt_limit.retry_after",
        raw.retry_after.as_ref(),
        d::RETRY_AFTER,
    )?;
    Ok(Some(ExemptLimit {
        limit: Limit {
            name: EXEMPT_LIMIT_NAME.into(),
            class: None,
            route: None,
            bucket: Some(bucket),
            max_in_flight: None,
            key: KeyKind::ClientIp,
            address_prefix: None,
            mode: raw.mode.unwrap_or(mode),
            cost: None,
        },
        policy: ClassPolicy {
            retry_after,
            reject_status: 429,
            escalation: Escalation {
                enabled: false,
                after_ignored: 1,
                factor: 2.0,
                max_s: retry_after.max_s,
                decay_s: 1,
            },
        },
    }))
}

/// Most parts of a compound key.
pub const MAX_KEY_PARTS: usize = 4;

/// `limits[].key` at `path`: one part, or a compound key of 2..=[`MAX_KEY_PARTS`] distinct
/// parts, none of them `global` (one bucket for all already). Errors name the part's path
/// (`limits[0].key[1]`).
fn compile_key(path: &str, raw: &RawKey, class_header: &str) -> Result<KeyKind, ConfigError> {
    match raw {
        RawKey::One(k) => compile_key_part(path, k, class_header),
        RawKey::Compound(parts) => {
            if !(2..=MAX_KEY_PARTS).contains(&parts.len()) {
                return Err(err(
                    path,
                    format!(
                        "a compound key has 2..={MAX_KEY_PARTS} parts, has {} (one part is a string)",
                        parts.len()
                    ),
                ));
            }
            let mut out: Vec<KeyKind> = Vec::with_capacity(parts.len());
            for (i, k) in parts.iter().enumerate() {
                let at = format!("{path}[{i}]");
                let part = compile_key_part(&at, k, class_header)?;
                if part == KeyKind::Global {
                    return Err(err(
                        at,
                        "\"global\" cannot be part of a compound key (it is one bucket for all)",
                    ));
                }
                if out.contains(&part) {
                    return Err(err(at, format!("{k:?} is already a part of this key")));
                }
                out.push(part);
            }
            Ok(KeyKind::Compound(out))
        }
    }
}

/// One key part: `client_ip`, `global`, `bot`, `path`, `asn` or `header:<name>` (a header not
/// refused, see `headers::KEY_REFUSED`, and not `class_header`).
fn compile_key_part(path: &str, k: &str, class_header: &str) -> Result<KeyKind, ConfigError> {
    Ok(match k {
        "client_ip" => KeyKind::ClientIp,
        "global" => KeyKind::Global,
        "bot" => KeyKind::Bot,
        "path" => KeyKind::Path,
        "asn" => KeyKind::Asn,
        k => match k.strip_prefix("header:") {
            Some(h) => KeyKind::Header(key_header_name(path, h, class_header)?),
            None => {
                return Err(err(
                    path,
                    format!(
                        "{k:?}: expected \"client_ip\", \"global\", \"bot\", \"path\", \
                         \"asn\", \"header:<name>\" or a list of them"
                    ),
                ))
            }
        },
    })
}
