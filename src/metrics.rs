//! Stats names and bookkeeping, host-independent.
//!
//! Counters, in the voice of Envoy's `local_ratelimit` (Envoy shows wasm metrics under the
//! `wasmcustom.` prefix in `/stats`):
//! - `crawlguard.class.<class>.<decision>`, decision in `allowed`, `limited`,
//!   `shadow_limited`, `exempt`, `fail_open` (decided by the local fallback bucket),
//!   `malformed` (a key header naming too many values; rejected, or forwarded in shadow mode);
//! - `crawlguard.route.<route>.limited` (enforced and shadow);
//! - `crawlguard.store.{error,cas_exhausted,collision,corrupt}`: shared-store trouble, each
//!   of which fell back to the local bucket.

use crate::classify::Class;
use crate::config::Config;
use crate::engine::{Decision, Outcome};

/// Decisions counted per class, in id order.
pub const DECISIONS: [&str; 6] = [
    "allowed",
    "limited",
    "shadow_limited",
    "exempt",
    "fail_open",
    "malformed",
];

/// Store event counter suffixes, in id order.
pub const STORE_EVENTS: [&str; 4] = ["error", "cas_exhausted", "collision", "corrupt"];

/// Verification counters (`crawlguard.verify.<event>`), in id order.
pub const VERIFY_EVENTS: [&str; 7] = [
    "verified",
    "spoofed",
    "unknown",
    "error",
    "cache_hit",
    "cache_miss",
    "in_flight",
];

/// A verification event to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyEvent {
    /// The verifier answered `verified`.
    Verified = 0,
    /// The verifier answered `spoofed`.
    Spoofed = 1,
    /// The verifier answered `unknown`.
    Unknown = 2,
    /// Verifier error (dispatch refused, timeout, non-200, malformed body).
    Error = 3,
    /// A fresh cached verdict (or remembered error) was used.
    CacheHit = 4,
    /// No cached verdict.
    CacheMiss = 5,
    /// Another request's callout for the claim was in flight; proceeded unverified.
    InFlight = 6,
}

/// Every counter name the filter defines for `cfg`, in definition order.
pub fn names(cfg: &Config) -> Vec<String> {
    let mut v = Vec::new();
    for c in Class::ALL {
        for d in DECISIONS {
            v.push(format!("crawlguard.class.{}.{d}", c.as_str()));
        }
    }
    for i in 0..=cfg.routes.len() {
        v.push(format!("crawlguard.route.{}.limited", cfg.route_name(i)));
    }
    for e in STORE_EVENTS {
        v.push(format!("crawlguard.store.{e}"));
    }
    for e in VERIFY_EVENTS {
        v.push(format!("crawlguard.verify.{e}"));
    }
    for f in REWRITE_FIXES {
        v.push(format!("crawlguard.rewrite.{f}"));
    }
    for code in rewrite_statuses(cfg) {
        v.push(format!("crawlguard.rewrite.status_{code}"));
    }
    v
}

/// Response-path fix counters (`crawlguard.rewrite.<fix>`), in id order.
pub const REWRITE_FIXES: [&str; 5] = [
    "retry_after_added",
    "retry_after_converted",
    "body_replaced",
    "cache_control_replaced",
    "degraded",
];

/// Statuses counted as `crawlguard.rewrite.status_<code>`: the configured ones, and 503
/// (degraded pages become 503).
fn rewrite_statuses(cfg: &Config) -> Vec<u16> {
    let mut v = cfg.rewrite.statuses.clone();
    v.push(503);
    v.sort_unstable();
    v.dedup();
    v
}

/// Metric ids as returned by the host, in [`names`] order (`None`: definition failed; that
/// counter is then skipped, never an error).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    ids: Vec<Option<u32>>,
    routes: usize,
    statuses: Vec<u16>,
}

impl Metrics {
    /// Defines every counter through `define` (name -> host metric id).
    pub fn define(cfg: &Config, define: &mut dyn FnMut(&str) -> Option<u32>) -> Metrics {
        Metrics {
            ids: names(cfg).iter().map(|n| define(n)).collect(),
            routes: cfg.routes.len() + 1,
            statuses: rewrite_statuses(cfg),
        }
    }

    fn id(&self, idx: usize) -> Option<u32> {
        self.ids.get(idx).copied().flatten()
    }

    /// Calls `inc(id)` for a normalised upstream response: its status and each fix.
    pub fn record_rewrite(&self, plan: &crate::rewrite::Plan, inc: &mut dyn FnMut(u32)) {
        let base = Class::ALL.len() * DECISIONS.len()
            + self.routes
            + STORE_EVENTS.len()
            + VERIFY_EVENTS.len();
        let f = plan.fixes;
        let flags = [
            f.retry_after_added,
            f.retry_after_converted,
            f.body_replaced,
            f.cache_control_replaced,
            plan.degraded,
        ];
        let status_idx = self.statuses.iter().position(|s| *s == plan.status);
        let hits = flags
            .iter()
            .enumerate()
            .filter(|(_, on)| **on)
            .map(|(i, _)| base + i)
            .chain(status_idx.map(|i| base + REWRITE_FIXES.len() + i));
        for idx in hits {
            if let Some(id) = self.id(idx) {
                inc(id);
            }
        }
    }

    /// Calls `inc(id)` for verification event `e`.
    pub fn record_verify(&self, e: VerifyEvent, inc: &mut dyn FnMut(u32)) {
        let base = Class::ALL.len() * DECISIONS.len() + self.routes + STORE_EVENTS.len();
        if let Some(id) = self.id(base + e as usize) {
            inc(id);
        }
    }

    /// Calls `inc(id)` for every counter `outcome` of class `class` touches.
    pub fn record(&self, class: Class, outcome: &Outcome, inc: &mut dyn FnMut(u32)) {
        let base = class.index() * DECISIONS.len();
        let (decision, limited) = match outcome.decision {
            Decision::Allowed => (0, false),
            Decision::Limited(_) => (1, true),
            Decision::ShadowLimited(_) => (2, true),
            Decision::Exempt => (3, false),
            Decision::Malformed { .. } | Decision::ShadowMalformed { .. } => (5, false),
        };
        let mut bump = |idx: usize| {
            if let Some(id) = self.id(idx) {
                inc(id);
            }
        };
        bump(base + decision);
        if outcome.store.fell_back() {
            bump(base + 4);
        }
        let routes_base = Class::ALL.len() * DECISIONS.len();
        if limited && outcome.route < self.routes {
            bump(routes_base + outcome.route);
        }
        let store_base = routes_base + self.routes;
        let ev = outcome.store;
        for (i, n) in [ev.errors, ev.cas_exhausted, ev.collisions, ev.corrupt]
            .into_iter()
            .enumerate()
        {
            if n > 0 {
                bump(store_base + i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::engine::{Reject, StoreEvents};

    #[test]
    fn names_and_ids_line_up() {
        let cfg =
            config::parse(br#"{"routes":[{"name":"api","path_prefix":"/api"}]}"#).expect("valid");
        let n = names(&cfg);
        assert_eq!(n.len(), 8 * 6 + 2 + 4 + 7 + 5 + 2);
        assert_eq!(n[61], "crawlguard.rewrite.retry_after_added");
        assert_eq!(n[66], "crawlguard.rewrite.status_429");
        assert_eq!(n[67], "crawlguard.rewrite.status_503");
        assert_eq!(n[54], "crawlguard.verify.verified");
        assert_eq!(n[60], "crawlguard.verify.in_flight");
        assert_eq!(n[0], "crawlguard.class.search_crawler.allowed");
        assert_eq!(n[5 * 6 + 1], "crawlguard.class.human.limited");
        assert_eq!(n[5 * 6 + 5], "crawlguard.class.human.malformed");
        assert_eq!(n[48], "crawlguard.route.api.limited");
        assert_eq!(n[49], "crawlguard.route.default.limited");
        assert_eq!(n[53], "crawlguard.store.corrupt");

        let mut next = 100;
        let m = Metrics::define(&cfg, &mut |_| {
            next += 1;
            Some(next)
        });
        let mut hits = Vec::new();
        let out = Outcome {
            route: 1,
            decision: Decision::Limited(Reject {
                limit: 0,
                status: 429,
                retry_after_s: 3,
            }),
            store: StoreEvents {
                errors: 1,
                ..StoreEvents::default()
            },
        };
        m.record(Class::Human, &out, &mut |id| hits.push(id));
        // human.limited (idx 31), human.fail_open (34), route default (49), store.error (50).
        assert_eq!(hits, vec![101 + 31, 101 + 34, 101 + 49, 101 + 50]);
        hits.clear();
        // A malformed key: human.malformed (35) only, enforced or shadow.
        for decision in [
            Decision::Malformed { limit: 0 },
            Decision::ShadowMalformed { limit: 0 },
        ] {
            let out = Outcome {
                route: 1,
                decision,
                store: StoreEvents::default(),
            };
            m.record(Class::Human, &out, &mut |id| hits.push(id));
        }
        assert_eq!(hits, vec![101 + 35, 101 + 35]);
        hits.clear();
        m.record_verify(VerifyEvent::InFlight, &mut |id| hits.push(id));
        m.record_verify(VerifyEvent::Verified, &mut |id| hits.push(id));
        assert_eq!(hits, vec![101 + 60, 101 + 54]);
        hits.clear();
        let plan = crate::rewrite::Plan {
            status: 503,
            retry_after_s: 5,
            fixes: crate::rewrite::Fixes {
                retry_after_converted: true,
                cache_control_replaced: true,
                ..Default::default()
            },
            degraded: false,
        };
        m.record_rewrite(&plan, &mut |id| hits.push(id));
        assert_eq!(hits, vec![101 + 62, 101 + 64, 101 + 67]);
    }
}
