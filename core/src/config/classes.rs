//! Validation of `bots`, `bots_mode`, `non_browser_class` and `classes`: the catalog
//! entries, the class of unknown non-browser clients, and each class's rejection policy,
//! checked with their field paths (split from `compile.rs`, which calls them).

use super::defaults::default_policy;
use super::raw::{RawClassPolicy, RawRetryAfter};
use super::{err, BotsMode, ClassPolicy, ConfigError, RetryAfter};
use crate::identity::catalog::{builtin_catalog, BotEntry};
use crate::identity::class::{Class, PerClass};
use crate::identity::classify::Classifier;
use crawlguard_contract::bot_id::is_valid_bot_id;
use std::collections::{BTreeMap, HashSet};

/// `bots` and `bots_mode`: valid entries (crawler classes need `verify: true`), merged
/// with the built-in catalog, compiled into the matcher.
pub(super) fn compile_bots(bots: Vec<BotEntry>, mode: BotsMode) -> Result<Classifier, ConfigError> {
    let mut seen = HashSet::new();
    for (i, b) in bots.iter().enumerate() {
        let p = format!("bots[{i}]");
        if !is_valid_bot_id(&b.id) {
            return Err(err(
                format!("{p}.id"),
                "must be 1..=64 chars of [a-z0-9._-]",
            ));
        }
        if !seen.insert(b.id.as_str()) {
            return Err(err(format!("{p}.id"), format!("duplicate id {:?}", b.id)));
        }
        if b.ua_contains.is_empty() {
            return Err(err(format!("{p}.ua_contains"), "must not be empty"));
        }
        for (j, t) in b.ua_contains.iter().enumerate() {
            if t.trim().is_empty() || t.len() > 256 {
                return Err(err(
                    format!("{p}.ua_contains[{j}]"),
                    "must be 1..=256 bytes, not blank",
                ));
            }
        }
        if matches!(b.class, Class::UnverifiedBot | Class::Spoofed) {
            return Err(err(
                format!("{p}.class"),
                "unverified_bot and spoofed are assigned by verification, not by the catalog",
            ));
        }
        if b.class.is_crawler() && !b.verify {
            return Err(err(
                format!("{p}.class"),
                format!(
                    "{} is only given to verified claims: set verify: true (and teach the \
                     verifier how to check it) or use other_bot",
                    b.class.as_str()
                ),
            ));
        }
    }
    let entries = match mode {
        BotsMode::Replace => bots,
        BotsMode::Extend => {
            let ids: HashSet<String> = bots.iter().map(|b| b.id.clone()).collect();
            let mut v = bots;
            v.extend(
                builtin_catalog()
                    .into_iter()
                    .filter(|b| !ids.contains(&b.id)),
            );
            v
        }
    };

    Ok(Classifier::new(entries))
}

/// `non_browser_class`: the class of a User-Agent that is neither a catalog bot nor
/// browser-shaped; default the catalog's (`other_bot`); `human` turns the human rule off.
pub(super) fn compile_non_browser_class(class: Option<Class>) -> Result<Class, ConfigError> {
    match class {
        None => Ok(crate::identity::catalog::builtin_human_rule().non_browser_class),
        Some(c @ (Class::OtherBot | Class::Script | Class::Human)) => Ok(c),
        Some(c) => Err(err(
            "non_browser_class",
            format!(
                "{} is not other_bot, script or human (nothing about such a client was verified)",
                c.as_str()
            ),
        )),
    }
}

/// `classes`: per-class overrides merged onto the defaults, each value in range.
pub(super) fn compile_classes(
    raw: &BTreeMap<String, RawClassPolicy>,
) -> Result<PerClass<ClassPolicy>, ConfigError> {
    let mut classes = PerClass::from_fn(default_policy);
    for (name, rc) in raw {
        let p = format!("classes.{name}");
        let Some(class) = Class::parse(name) else {
            return Err(err(p, "unknown class"));
        };
        let pol = &mut classes[class];
        pol.retry_after = compile_retry_after(
            &format!("{p}.retry_after"),
            rc.retry_after.as_ref(),
            pol.retry_after,
        )?;
        if let Some(s) = rc.reject_status {
            pol.reject_status = s;
        }
        if let Some(e) = &rc.escalation {
            let x = &mut pol.escalation;
            x.enabled = e.enabled.unwrap_or(x.enabled);
            x.after_ignored = e.after_ignored.unwrap_or(x.after_ignored);
            x.factor = e.factor.unwrap_or(x.factor);
            x.max_s = e.max_s.unwrap_or(x.max_s);
            x.decay_s = e.decay_s.unwrap_or(x.decay_s);
        }
        let ra = pol.retry_after;
        if !matches!(pol.reject_status, 429 | 503) {
            return Err(err(format!("{p}.reject_status"), "must be 429 or 503"));
        }
        let e = pol.escalation;
        if e.enabled && class.is_crawler() {
            // A crawler class is only ever a verified claim: a verified crawler never
            // escalates: a penalty would shut a real crawler out for up to max_s.
            return Err(err(
                format!("{p}.escalation.enabled"),
                format!(
                    "must be false for {} (a verified crawler never escalates)",
                    class.as_str()
                ),
            ));
        }
        if !(1..=1_000).contains(&e.after_ignored) {
            return Err(err(
                format!("{p}.escalation.after_ignored"),
                "must be 1..=1000",
            ));
        }
        if !(e.factor.is_finite() && e.factor > 1.0 && e.factor <= 100.0) {
            return Err(err(
                format!("{p}.escalation.factor"),
                "must be > 1 and <= 100",
            ));
        }
        if e.max_s < ra.min_s || e.max_s > 86_400 {
            return Err(err(
                format!("{p}.escalation.max_s"),
                format!(
                    "must be in retry_after.min_s..=86400 (min_s is {})",
                    ra.min_s
                ),
            ));
        }
        if !(1..=86_400).contains(&e.decay_s) {
            return Err(err(format!("{p}.escalation.decay_s"), "must be 1..=86400"));
        }
    }

    Ok(classes)
}

/// A Retry-After range at `p` (`classes.<class>.retry_after`, `shedding.retry_after`,
/// `exempt_limit.retry_after`): the fields given over `default`, `min_s` >= 1, `max_s` in `min_s..=86400`, `jitter_s` <= 3600.
pub(super) fn compile_retry_after(
    p: &str,
    raw: Option<&RawRetryAfter>,
    default: RetryAfter,
) -> Result<RetryAfter, ConfigError> {
    let ra = raw.map_or(default, |r| RetryAfter {
        min_s: r.min_s.unwrap_or(default.min_s),
        max_s: r.max_s.unwrap_or(default.max_s),
        jitter_s: r.jitter_s.unwrap_or(default.jitter_s),
    });
    if ra.min_s < 1 {
        return Err(err(format!("{p}.min_s"), "must be >= 1"));
    }
    if ra.max_s < ra.min_s || ra.max_s > 86_400 {
        return Err(err(
            format!("{p}.max_s"),
            format!("must be in min_s..=86400 (min_s is {})", ra.min_s),
        ));
    }
    if ra.jitter_s > 3_600 {
        return Err(err(format!("{p}.jitter_s"), "must be <= 3600"));
    }
    Ok(ra)
}
