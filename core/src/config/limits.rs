//! Validation of `limits`: each limit's name, class, route, rate and burst, key and cost,
//! checked with its field path (split from `compile.rs`, which calls it).

use super::defaults;
use super::headers::{key_header_name, taken_over_header_name};
use super::is_name;
use super::raw::RawLimit;
use super::{err, ConfigError, Cost, KeyKind, Limit, Mode, Route, DEFAULT_ROUTE, MAX_REFILL_S};
use crate::identity::class::Class;
use crate::limits::bucket::Rate;
use std::collections::HashSet;

/// Why `header:user-agent` needs a class: anyone can send a crawler's exact User-Agent, so
/// with `class: "*"` spoofed claims would spend, and escalate, the bucket that the verified
/// crawler with that User-Agent uses (a limit of one class keeps them apart: spoofed claims
/// are class `spoofed`).
pub const USER_AGENT_KEY_NEEDS_A_CLASS: &str = "\"header:user-agent\" needs a class, not \"*\": \
     anyone can send a crawler's exact User-Agent, so spoofed claims would spend (and \
     escalate) the bucket of the verified crawler that sends it; give each per-User-Agent \
     limit one class";

/// `limits`: unique names, known class and route, a rate and burst that fit (refill within
/// [`MAX_REFILL_S`]), a valid key (a header key not refused, see `headers::KEY_REFUSED`,
/// and not `class_header`).
pub(super) fn compile_limits(
    raw_limits: Vec<RawLimit>,
    routes: &[Route],
    mode: Mode,
    class_header: &str,
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
        if !(l.rate_per_s.is_finite() && l.rate_per_s > 0.0) {
            return Err(err(format!("{p}.rate_per_s"), "must be > 0"));
        }
        if l.rate_per_s > 1_000_000.0 {
            return Err(err(format!("{p}.rate_per_s"), "must be <= 1000000"));
        }
        if !(1..=1_000_000).contains(&l.burst) {
            return Err(err(format!("{p}.burst"), "must be 1..=1000000"));
        }
        let refill_s = f64::from(l.burst) / l.rate_per_s;
        if refill_s > MAX_REFILL_S {
            return Err(err(
                format!("{p}.rate_per_s"),
                format!(
                    "burst / rate_per_s must be <= {MAX_REFILL_S} s (one year), is {} s",
                    refill_s.ceil()
                ),
            ));
        }
        let key = match l.key.as_str() {
            "client_ip" => KeyKind::ClientIp,
            "global" => KeyKind::Global,
            k => match k.strip_prefix("header:") {
                Some(h) => {
                    let name = key_header_name(&format!("{p}.key"), h, class_header)?;
                    if name == "user-agent" && class.is_none() {
                        return Err(err(format!("{p}.key"), USER_AGENT_KEY_NEEDS_A_CLASS));
                    }
                    KeyKind::Header(name)
                }
                None => {
                    return Err(err(
                        format!("{p}.key"),
                        format!("{k:?}: expected \"client_ip\", \"global\" or \"header:<name>\""),
                    ))
                }
            },
        };
        let cost = match &l.cost {
            None => None,
            Some(c) => {
                if !(1..=l.burst).contains(&c.reserve) {
                    return Err(err(
                        format!("{p}.cost.reserve"),
                        format!("must be 1..=burst ({})", l.burst),
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
            rate_per_s: l.rate_per_s,
            burst: l.burst,
            rate: Rate::new(l.rate_per_s, l.burst),
            key,
            mode: l.mode.unwrap_or(mode),
            cost,
        });
    }

    Ok(limits)
}
