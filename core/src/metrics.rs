//! Stats: every counter crawlguard defines, by name, and what each event increments.
//!
//! Counters, in the voice of Envoy's `local_ratelimit` (Envoy shows wasm metrics under the
//! `wasmcustom.` prefix in `/stats`):
//! - `crawlguard.class.<class>.<decision>`, decision in [`DECISIONS`] (`fail_open`: decided
//!   by the per-worker fallback bucket; `malformed`: a key header naming too many values,
//!   rejected with 400, or forwarded in shadow mode);
//! - `crawlguard.class.<class>.<compliance>`, compliance in [`COMPLIANCE`]: requests that
//!   came back before (`retry_after_ignored`) or after (`retry_after_honoured`, the first
//!   one) the Retry-After their key was given, and rejections made longer by escalation
//!   (`escalated`);
//! - `crawlguard.class.<class>.limited_in_flight` / `.shadow_limited_in_flight`: the
//!   rejections (and shadow rejections) of those that were for requests in flight (a
//!   concurrency limit's `max_in_flight`, or a cost-based limit's `cost.max_in_flight`);
//! - `crawlguard.exempt`: exempt paths (decided before any classification);
//!   `crawlguard.exempt_limited` / `crawlguard.exempt_shadow_limited`: those over the exempt
//!   paths' own per-client limit (rejected / shadow mode);
//! - `crawlguard.browser_check.<id>.inconsistent`: `human` requests that failed a browser
//!   check of the catalog (enforced: class `suspect_browser`; shadow mode: still `human`);
//! - `crawlguard.signature.<event>`, event in [`SignatureEvent::names`]: signed requests of a
//!   known agent, by what their check found (with `signed_agents` on);
//! - `crawlguard.stats.flushes`: flushes of the counters below (see [`CounterBuffer`]);
//! - `crawlguard.route.<route>.limited` (enforced and shadow);
//! - `crawlguard.store.<event>`, event in [`STORE_EVENTS`]: shared-store trouble, each of
//!   which fell back to the per-worker bucket;
//! - `crawlguard.verify.<event>`, event in [`VerifyEvent::ALL`];
//! - `crawlguard.rewrite.<fix>` ([`REWRITE_FIXES`]) and `crawlguard.rewrite.status_<code>`;
//! - with shedding on, gauges `crawlguard.shed.<route>.level` and
//!   `crawlguard.origin.<route>.<name>` ([`ORIGIN_GAUGES`]);
//! - [`PerKey`]: `crawlguard.limit.<limit>.{limited,shadow_limited}` (which limit said
//!   no), `crawlguard.bot.<bot>.{requests,rejected}` (the built-in catalog's bot ids and
//!   `other`), and with shedding on `crawlguard.shed.<route>.duration_ms.<level>`;
//! - with fleet mode on, `crawlguard.fleet.<name>`: counters [`FLEET_COUNTERS`], gauges
//!   [`FLEET_GAUGES`].
//!
//! Counters are added up in the worker's own memory ([`CounterBuffer`]) and handed to Envoy
//! on the root context's tick, every [`STATS_FLUSH_MS`]: no host call per request for
//! stats, at the price of counters that lag by up to one flush period.
//!
//! [`Metrics::define`] is the one list: [`names`] runs it with a recorder, the filter with
//! the host's `define_metric`, so the names and the ids cannot drift.

use crate::config::Config;
use crate::identity::class::{Class, PerClass};
use crate::identity::signature_event::SignatureEvent;
use crate::limits::escalation::Visit;
use crate::limits::limiter::{Decision, LimitResult};

/// Decisions counted per class.
pub const DECISIONS: [&str; 7] = [
    "allowed",
    "limited",
    "shadow_limited",
    "fail_open",
    "malformed",
    "shed",
    "shadow_shed",
];

/// How often each worker hands its counted events to Envoy, ms: on every root tick
/// ([`crate::host::TICK_MS`]), the most the `crawlguard.*` counters in `/stats` lag behind
/// the requests they count.
pub const STATS_FLUSH_MS: u32 = crate::host::TICK_MS;

mod counter_buffer;
mod per_key;
mod verify_event;
pub use counter_buffer::CounterBuffer;
pub use per_key::{BotIds, PerKey, BOT_COUNTERS, OTHER_BOT};
pub use verify_event::VerifyEvent;

/// What a metric is: a counter only goes up; a gauge is set to a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// proxy-wasm metric type 0.
    Counter,
    /// proxy-wasm metric type 1.
    Gauge,
}

/// Gauges per route when shedding is on (`crawlguard.shed.<route>.level`, then
/// `crawlguard.origin.<route>.<name>`), in [`RouteGauges`] order.
pub const ORIGIN_GAUGES: [&str; 4] = ["requests", "error_permille", "p95_ms", "p99_ms"];

/// Retry-After compliance counters per class.
pub const COMPLIANCE: [&str; 3] = ["retry_after_ignored", "retry_after_honoured", "escalated"];

/// Store event counter suffixes.
pub const STORE_EVENTS: [&str; 4] = ["error", "cas_exhausted", "collision", "corrupt"];

/// Response-path fix counters (`crawlguard.rewrite.<fix>`).
pub const REWRITE_FIXES: [&str; 5] = [
    "retry_after_added",
    "retry_after_converted",
    "body_replaced",
    "cache_control_replaced",
    "degraded",
];

/// A host metric id (`None`: the definition failed; that counter is then skipped).
type Id = Option<u32>;

/// The per-class decision counters.
#[derive(Debug, Clone, Copy, Default)]
struct ClassCounters {
    allowed: Id,
    limited: Id,
    shadow_limited: Id,
    fail_open: Id,
    malformed: Id,
    retry_after_ignored: Id,
    retry_after_honoured: Id,
    escalated: Id,
    shed: Id,
    shadow_shed: Id,
    limited_in_flight: Id,
    shadow_limited_in_flight: Id,
}

/// Fleet-mode counters and gauges (`crawlguard.fleet.<name>`, defined when fleet mode is
/// on): [`FLEET_COUNTERS`] then [`FLEET_GAUGES`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FleetMetrics {
    /// Syncs answered.
    pub syncs: Id,
    /// Syncs failed (refused, no answer, non-200, malformed).
    pub sync_error: Id,
    /// Bucket keys sent in answered syncs.
    pub keys_synced: Id,
    /// Bucket uses not recorded for a sync because the worker's ledger was full, or given up
    /// with a sync that failed after it left (a sync is sent at most once).
    pub keys_dropped: Id,
    /// Milliseconds this worker spent degraded (deciding alone after a failed sync).
    pub degraded_ms: Id,
    /// Gauge: live replicas as of the last answer (at most `fleet.max_replicas`).
    pub replicas: Id,
    /// Gauge: 1 while the worker is degraded, else 0.
    pub degraded: Id,
}

/// Fleet counters (`crawlguard.fleet.<name>`).
pub const FLEET_COUNTERS: [&str; 5] = [
    "syncs",
    "sync_error",
    "keys_synced",
    "keys_dropped",
    "degraded_ms",
];

/// Fleet gauges (`crawlguard.fleet.<name>`).
pub const FLEET_GAUGES: [&str; 2] = ["replicas", "degraded"];

/// One route's shedding gauges.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteGauges {
    /// `crawlguard.shed.<route>.level`.
    pub level: Id,
    /// `crawlguard.origin.<route>.{requests,error_permille,p95_ms,p99_ms}` over the window.
    pub origin: [Id; ORIGIN_GAUGES.len()],
}

/// Every counter's host id, by what it counts.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    class: PerClass<ClassCounters>,
    exempt: Id,
    exempt_limited: Id,
    exempt_shadow_limited: Id,
    /// `crawlguard.stats.flushes`: added to directly (not buffered) at each flush.
    pub flushes: Id,
    route_limited: Vec<Id>,
    store: [Id; STORE_EVENTS.len()],
    verify: [Id; VerifyEvent::ALL.len()],
    rewrite_fix: [Id; REWRITE_FIXES.len()],
    rewrite_status: Vec<(u16, Id)>,
    /// `crawlguard.browser_check.<id>.inconsistent`, per catalog browser check.
    browser_check: Vec<Id>,
    /// `crawlguard.signature.<event>`, in [`SignatureEvent::names`] order.
    signature: Vec<Id>,
    /// Per route (shedding only).
    pub route_gauges: Vec<RouteGauges>,
    /// Fleet mode only.
    pub fleet: FleetMetrics,
    /// Per limit, per known bot id, shed time per route and level.
    pub per_key: PerKey,
}

/// Statuses counted as `crawlguard.rewrite.status_<code>`: the configured ones, and 503
/// (degraded pages become 503).
fn rewrite_statuses(cfg: &Config) -> Vec<u16> {
    let mut v = cfg.rewrite.statuses.clone();
    v.push(503);
    v.sort_unstable();
    v.dedup();
    v
}

impl Metrics {
    /// Defines every counter through `define` (name -> host metric id), in a fixed order.
    pub fn define(cfg: &Config, define: &mut dyn FnMut(&str, MetricKind) -> Id) -> Metrics {
        let counter = &mut |name: &str| define(name, MetricKind::Counter);
        let mut m = Self::define_counters(cfg, counter);
        if cfg.fleet.enabled {
            let mut c = FLEET_COUNTERS
                .map(|n| define(&format!("crawlguard.fleet.{n}"), MetricKind::Counter))
                .into_iter();
            let mut g = FLEET_GAUGES
                .map(|n| define(&format!("crawlguard.fleet.{n}"), MetricKind::Gauge))
                .into_iter();
            m.fleet = FleetMetrics {
                syncs: c.next().flatten(),
                sync_error: c.next().flatten(),
                keys_synced: c.next().flatten(),
                keys_dropped: c.next().flatten(),
                degraded_ms: c.next().flatten(),
                replicas: g.next().flatten(),
                degraded: g.next().flatten(),
            };
        }
        if cfg.shedding.enabled {
            m.route_gauges = (0..=cfg.routes.len())
                .map(|i| {
                    let route = cfg.route_name(i);
                    RouteGauges {
                        level: define(&format!("crawlguard.shed.{route}.level"), MetricKind::Gauge),
                        origin: ORIGIN_GAUGES.map(|g| {
                            define(&format!("crawlguard.origin.{route}.{g}"), MetricKind::Gauge)
                        }),
                    }
                })
                .collect();
        }
        m
    }

    fn define_counters(cfg: &Config, define: &mut dyn FnMut(&str) -> Id) -> Metrics {
        let mut m = Metrics::default();
        for (class, c) in m.class.iter_mut() {
            let mut d =
                |decision: &str| define(&format!("crawlguard.class.{}.{decision}", class.as_str()));
            *c = ClassCounters {
                allowed: d("allowed"),
                limited: d("limited"),
                shadow_limited: d("shadow_limited"),
                fail_open: d("fail_open"),
                malformed: d("malformed"),
                retry_after_ignored: d("retry_after_ignored"),
                retry_after_honoured: d("retry_after_honoured"),
                escalated: d("escalated"),
                shed: d("shed"),
                shadow_shed: d("shadow_shed"),
                limited_in_flight: d("limited_in_flight"),
                shadow_limited_in_flight: d("shadow_limited_in_flight"),
            };
        }
        m.exempt = define("crawlguard.exempt");
        m.exempt_limited = define("crawlguard.exempt_limited");
        m.exempt_shadow_limited = define("crawlguard.exempt_shadow_limited");
        m.browser_check = crate::identity::catalog::builtin_browser_checks()
            .iter()
            .map(|c| define(&format!("crawlguard.browser_check.{}.inconsistent", c.id)))
            .collect();
        if cfg.signed_agents.enabled() {
            m.signature = SignatureEvent::names()
                .map(|e| define(&format!("crawlguard.signature.{e}")))
                .collect();
        }
        m.route_limited = (0..=cfg.routes.len())
            .map(|i| define(&format!("crawlguard.route.{}.limited", cfg.route_name(i))))
            .collect();
        for (e, id) in STORE_EVENTS.iter().zip(m.store.iter_mut()) {
            *id = define(&format!("crawlguard.store.{e}"));
        }
        for (e, id) in VerifyEvent::ALL.iter().zip(m.verify.iter_mut()) {
            *id = define(&format!("crawlguard.verify.{}", e.as_str()));
        }
        for (f, id) in REWRITE_FIXES.iter().zip(m.rewrite_fix.iter_mut()) {
            *id = define(&format!("crawlguard.rewrite.{f}"));
        }
        m.rewrite_status = rewrite_statuses(cfg)
            .into_iter()
            .map(|code| (code, define(&format!("crawlguard.rewrite.status_{code}"))))
            .collect();
        m.per_key = PerKey::define(cfg, define);
        m.flushes = define("crawlguard.stats.flushes");
        m
    }

    /// Counts the browser checks a `human` request failed (bit `i`: check `i`), in
    /// `enforce` or `shadow` mode.
    pub fn record_browser_checks(&self, failed: u32, inc: &mut dyn FnMut(u32)) {
        if failed == 0 {
            return;
        }
        for (i, id) in self.browser_check.iter().enumerate() {
            if u32::try_from(i).is_ok_and(|i| failed & 1u32.checked_shl(i).unwrap_or(0) != 0) {
                bump(*id, inc);
            }
        }
    }

    /// Counts a shed request of class `class` (`shadow`: counted, not shed).
    pub fn record_shed(&self, class: Class, shadow: bool, inc: &mut dyn FnMut(u32)) {
        let c = self.class[class];
        bump(if shadow { c.shadow_shed } else { c.shed }, inc);
    }

    /// Counts an exempt request.
    pub fn record_exempt(&self, inc: &mut dyn FnMut(u32)) {
        bump(self.exempt, inc);
    }

    /// Counts a request for an exempt path over the exempt paths' own limit (`shadow`:
    /// counted, forwarded).
    pub fn record_exempt_limited(&self, shadow: bool, inc: &mut dyn FnMut(u32)) {
        bump(
            if shadow {
                self.exempt_shadow_limited
            } else {
                self.exempt_limited
            },
            inc,
        );
    }

    /// Counts the decision for a request of class `class`: its decision (and, for a
    /// rejection over requests in flight, its `limited_in_flight`), `fail_open` when the
    /// per-worker fallback decided, the route's `limited`, and each kind of store trouble.
    pub fn record(&self, class: Class, outcome: &LimitResult, inc: &mut dyn FnMut(u32)) {
        let c = self.class[class];
        let (decision, limited) = match outcome.decision {
            Decision::Allowed => (c.allowed, false),
            Decision::Limited(_) => (c.limited, true),
            Decision::ShadowLimited(_) => (c.shadow_limited, true),
            Decision::Malformed { .. } | Decision::ShadowMalformed { .. } => (c.malformed, false),
        };
        bump(decision, inc);
        match outcome.decision {
            Decision::Limited(o) | Decision::ShadowLimited(o) => {
                let shadow = matches!(outcome.decision, Decision::ShadowLimited(_));
                if o.in_flight.is_some() {
                    bump(
                        if shadow {
                            c.shadow_limited_in_flight
                        } else {
                            c.limited_in_flight
                        },
                        inc,
                    );
                }
                self.per_key.record_limit(o.limit, shadow, inc);
            }
            _ => {}
        }
        if outcome.store.fell_back() {
            bump(c.fail_open, inc);
        }
        if limited {
            bump(
                self.route_limited.get(outcome.route).copied().flatten(),
                inc,
            );
        }
        match outcome.visit {
            Visit::Ignored => bump(c.retry_after_ignored, inc),
            Visit::Honoured => bump(c.retry_after_honoured, inc),
            Visit::Unremarkable => {}
        }
        if outcome.escalated {
            bump(c.escalated, inc);
        }
        let ev = outcome.store;
        for (n, id) in [ev.errors, ev.cas_exhausted, ev.collisions, ev.corrupt]
            .into_iter()
            .zip(self.store)
        {
            if n > 0 {
                bump(id, inc);
            }
        }
    }

    /// Counts signature event `e` on `host`.
    pub fn count_signature(&self, host: &mut dyn crate::host::Host, e: SignatureEvent) {
        bump(
            self.signature.get(e.index()).copied().flatten(),
            &mut |id| host.increment(id),
        );
    }

    /// Counts verification event `e` on `host`.
    pub fn count_verify(&self, host: &mut dyn crate::host::Host, e: VerifyEvent) {
        self.record_verify(e, &mut |id| host.increment(id));
    }

    /// Counts verification event `e`.
    pub fn record_verify(&self, e: VerifyEvent, inc: &mut dyn FnMut(u32)) {
        let idx = VerifyEvent::ALL.iter().position(|x| *x == e);
        bump(idx.and_then(|i| self.verify.get(i).copied().flatten()), inc);
    }

    /// Counts a normalised upstream response: its status and each fix.
    pub fn record_rewrite(&self, plan: &crate::response::rewrite::Plan, inc: &mut dyn FnMut(u32)) {
        let f = plan.fixes;
        let flags = [
            f.retry_after_added,
            f.retry_after_converted,
            f.body_replaced,
            f.cache_control_replaced,
            plan.degraded,
        ];
        for (on, id) in flags.into_iter().zip(self.rewrite_fix) {
            if on {
                bump(id, inc);
            }
        }
        let status = self.rewrite_status.iter().find(|(s, _)| *s == plan.status);
        bump(status.and_then(|(_, id)| *id), inc);
    }
}

fn bump(id: Id, inc: &mut dyn FnMut(u32)) {
    if let Some(id) = id {
        inc(id);
    }
}

/// Every counter name the filter defines for `cfg`, in definition order.
pub fn names(cfg: &Config) -> Vec<String> {
    let mut v = Vec::new();
    Metrics::define(cfg, &mut |n, _| {
        v.push(n.to_string());
        None
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::limits::limiter::{OverLimit, StoreEvents};
    use std::collections::HashMap;

    /// Defines `cfg`'s counters with ids 100, 101, ... and returns them with a name lookup.
    fn defined(cfg: &Config) -> (Metrics, HashMap<u32, String>) {
        let mut by_id = HashMap::new();
        let mut next = 100;
        let m = Metrics::define(cfg, &mut |n, _| {
            next += 1;
            by_id.insert(next, n.to_string());
            Some(next)
        });
        (m, by_id)
    }

    fn hits(by_id: &HashMap<u32, String>, f: impl FnOnce(&mut dyn FnMut(u32))) -> Vec<String> {
        let mut out = Vec::new();
        f(&mut |id| out.push(by_id.get(&id).cloned().unwrap_or_default()));
        out
    }

    #[test]
    fn every_name_once_in_a_fixed_order() {
        let cfg =
            config::parse(br#"{"routes":[{"name":"api","path_prefix":"/api"}]}"#).expect("valid");
        let n = names(&cfg);
        // ... + the default's 21 limits and 163 bot ids (161 catalog entries, non-browser,
        // other), two counters each.
        assert_eq!(
            n.len(),
            9 * 12 + 3 + 5 + 15 + 4 + 14 + 5 + 2 + 1 + 2 + 21 * 2 + 163 * 2
        );
        assert_eq!(n[0], "crawlguard.class.search_crawler.allowed");
        assert_eq!(n[4], "crawlguard.class.search_crawler.malformed");
        assert_eq!(n[5], "crawlguard.class.search_crawler.retry_after_ignored");
        assert_eq!(n[10], "crawlguard.class.search_crawler.limited_in_flight");
        assert_eq!(n[108], "crawlguard.exempt");
        assert_eq!(n[109], "crawlguard.exempt_limited");
        assert_eq!(n[110], "crawlguard.exempt_shadow_limited");
        assert_eq!(
            n[111],
            "crawlguard.browser_check.fetch_metadata.inconsistent"
        );
        assert_eq!(n[115], "crawlguard.browser_check.network.inconsistent");
        assert_eq!(n[116], "crawlguard.signature.verified");
        assert_eq!(n[131], "crawlguard.route.api.limited");
        assert_eq!(n[132], "crawlguard.route.default.limited");
        assert_eq!(n[157], "crawlguard.rewrite.status_503");
        assert_eq!(n[158], "crawlguard.limit.human_per_ip.limited");
        assert_eq!(n[159], "crawlguard.limit.human_per_ip.shadow_limited");
        // Bot ids sorted (binary search), `other` last.
        assert_eq!(n[200], "crawlguard.bot.360spider.requests");
        assert_eq!(n[201], "crawlguard.bot.360spider.rejected");
        assert_eq!(
            n.get(n.len() - 2).map(String::as_str),
            Some("crawlguard.bot.other.rejected")
        );
        assert_eq!(
            n.last().map(String::as_str),
            Some("crawlguard.stats.flushes")
        );
        let mut sorted = n.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), n.len());
    }

    #[test]
    fn events_increment_the_counters_named_for_them() {
        let cfg =
            config::parse(br#"{"routes":[{"name":"api","path_prefix":"/api"}]}"#).expect("valid");
        let (m, by_id) = defined(&cfg);
        let out = LimitResult {
            route: 1,
            decision: Decision::Limited(OverLimit {
                limit: 0,
                status: 429,
                retry_after_s: 3,
                in_flight: Some(8),
            }),
            store: StoreEvents {
                errors: 1,
                ..StoreEvents::default()
            },
            visit: Visit::Ignored,
            escalated: true,
            reservations: Vec::new(),
            places: Vec::new(),
        };
        assert_eq!(
            hits(&by_id, |inc| m.record(Class::Human, &out, inc)),
            [
                "crawlguard.class.human.limited",
                "crawlguard.class.human.limited_in_flight",
                "crawlguard.limit.human_per_ip.limited",
                "crawlguard.class.human.fail_open",
                "crawlguard.route.default.limited",
                "crawlguard.class.human.retry_after_ignored",
                "crawlguard.class.human.escalated",
                "crawlguard.store.error"
            ]
        );
        assert_eq!(
            hits(&by_id, |inc| {
                m.record_verify(VerifyEvent::InFlight, inc);
                m.record_verify(VerifyEvent::PrefixSpoofed, inc);
                m.record_exempt(inc);
                m.record_exempt_limited(false, inc);
                m.record_exempt_limited(true, inc);
            }),
            [
                "crawlguard.verify.in_flight",
                "crawlguard.verify.prefix_spoofed",
                "crawlguard.exempt",
                "crawlguard.exempt_limited",
                "crawlguard.exempt_shadow_limited"
            ]
        );
        let plan = crate::response::rewrite::Plan {
            status: 503,
            retry_after_s: 5,
            fixes: crate::response::rewrite::Fixes {
                retry_after_converted: true,
                cache_control_replaced: true,
                ..Default::default()
            },
            degraded: false,
        };
        assert_eq!(
            hits(&by_id, |inc| m.record_rewrite(&plan, inc)),
            [
                "crawlguard.rewrite.retry_after_converted",
                "crawlguard.rewrite.cache_control_replaced",
                "crawlguard.rewrite.status_503"
            ]
        );
    }

    #[test]
    fn bots_count_under_their_catalog_id_or_other_and_limits_under_their_name() {
        let cfg =
            config::parse(br#"{"shedding":{"enabled":true,"order":["script","ai_trainer"]}}"#)
                .expect("valid");
        let (m, by_id) = defined(&cfg);
        let p = &m.per_key;
        assert_eq!(p.bot(None), None);
        assert_eq!(
            hits(&by_id, |inc| {
                PerKey::record_bot(p.bot(Some("googlebot")), false, inc);
                PerKey::record_bot(p.bot(Some("archive.org_bot")), true, inc);
                PerKey::record_bot(p.bot(Some("non-browser")), false, inc);
                PerKey::record_bot(p.bot(Some("my-own-bot")), true, inc);
                p.record_limit(1, true, inc);
                p.record_limit(99, false, inc);
            }),
            [
                "crawlguard.bot.googlebot.requests",
                "crawlguard.bot.archive.org_bot.requests",
                "crawlguard.bot.archive.org_bot.rejected",
                "crawlguard.bot.non-browser.requests",
                "crawlguard.bot.other.requests",
                "crawlguard.bot.other.rejected",
                "crawlguard.limit.script_per_ip.shadow_limited",
            ]
        );
        let name = |id: Option<u32>| id.and_then(|i| by_id.get(&i).cloned());
        assert_eq!(p.shed_ms(0, 0), None);
        assert_eq!(
            name(p.shed_ms(0, 2)).as_deref(),
            Some("crawlguard.shed.default.duration_ms.2")
        );
        assert_eq!(p.shed_ms(0, 3), None);
    }

    #[test]
    fn failed_definitions_are_skipped() {
        let cfg = config::parse(b"").expect("default");
        let m = Metrics::define(&cfg, &mut |_, _| None);
        let mut n = 0;
        m.record_exempt(&mut |_| n += 1);
        m.record_verify(VerifyEvent::Error, &mut |_| n += 1);
        assert_eq!(n, 0);
    }
}
