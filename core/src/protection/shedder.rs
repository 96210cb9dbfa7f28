//! The shed level a worker applies, per route: each worker counts its responses in VM
//! memory ([`Shedder::record_response`]), and about once a second its root tick adds them
//! to the route's shared window ([`crate::protection::origin_health`]), judges it and moves
//! the shared level ([`crate::protection::shedding`]); between two judgements every tick
//! applies the level another worker may have moved.

use crate::config::Config;
use crate::host::Host;
use crate::identity::class::Class;
use crate::log_limit::WarnEvery10s;
use crate::metrics::Metrics;
use crate::protection::origin_health::{self, Counts, Window};
use crate::protection::{shed_clock, shedding};
use std::cell::{Cell, RefCell};
use std::net::IpAddr;

/// The period of the root tick's once-a-second work (the shedding step), ms; the tick
/// itself may run faster (fleet syncs, [`crate::fleet`]).
pub const SECOND_WORK_PERIOD_MS: u32 = 1_000;

/// One worker's shedding state.
#[derive(Debug)]
pub struct Shedder {
    /// Per route: this worker's response counts since the last judgement (origin health).
    health: RefCell<Vec<Counts>>,
    /// "Unhealthy only through a few clients" warnings.
    few_clients_warning: WarnEvery10s,
    /// Per route: the shed level in force, as read on the last tick.
    shed_levels: RefCell<Vec<u8>>,
    /// When shedding last ran (it runs about once a second, whatever the tick period).
    last_shedding_ns: Cell<Option<u64>>,
}

impl Shedder {
    /// Nothing counted and nothing shed on `routes` routes (the configured ones and the
    /// default route).
    pub fn new(routes: usize) -> Shedder {
        Shedder {
            health: RefCell::new(vec![Counts::default(); routes]),
            few_clients_warning: WarnEvery10s::default(),
            shed_levels: RefCell::new(vec![0; routes]),
            last_shedding_ns: Cell::new(None),
        }
    }

    /// Counts a response of route `route` to client prefix `client` (`None`: no parsable
    /// address) that took `latency_ms` (VM memory only).
    pub fn record_response(
        &self,
        cfg: &Config,
        route: usize,
        latency_ms: u64,
        error: bool,
        client: Option<IpAddr>,
    ) {
        let threshold_ms = cfg.shedding.thresholds_of(route).latency_ms;
        let client = client.unwrap_or(crate::protection::top_clients::UNKNOWN_CLIENT);
        if let Ok(mut h) = self.health.try_borrow_mut() {
            if let Some(c) = h.get_mut(route) {
                c.record(latency_ms, error, client, threshold_ms);
            }
        }
    }

    /// True when requests of `class` on route `route` are shed now (as of the last tick).
    pub fn is_shed(&self, cfg: &Config, class: Class, route: usize) -> bool {
        let level = self
            .shed_levels
            .try_borrow()
            .ok()
            .and_then(|l| l.get(route).copied())
            .unwrap_or(0);
        level > 0
            && cfg
                .shedding
                .rank_of(class)
                .is_some_and(|r| r < usize::from(level))
    }

    /// Root tick (every `tick_ns`): about once a second judges each route's window and moves
    /// its level; on the ticks between, applies the shared levels.
    pub fn tick(
        &self,
        cfg: &Config,
        metrics: &Metrics,
        host: &mut dyn Host,
        now_ns: u64,
        tick_ns: u64,
    ) {
        // Half a tick of slack: timers fire a little early or late.
        let second_due = self.last_shedding_ns.get().is_none_or(|t| {
            now_ns.saturating_add(tick_ns / 2)
                >= t.saturating_add(u64::from(SECOND_WORK_PERIOD_MS) * 1_000_000)
        });
        if second_due {
            self.last_shedding_ns.set(Some(now_ns));
            self.judge(cfg, metrics, host, now_ns);
        } else {
            self.apply_shared_levels(cfg, metrics, host);
        }
    }

    /// Root tick, shedding: adds this worker's counts to each route's shared window, judges
    /// the window, moves the shared level one step when due, caches it, sets the gauges, and
    /// logs every level change this worker made.
    fn judge(&self, cfg: &Config, metrics: &Metrics, host: &mut dyn Host, now_ns: u64) {
        let sh = &cfg.shedding;
        let now_s = now_ns / 1_000_000_000;
        let tallies = match self.health.try_borrow_mut() {
            Ok(mut h) => std::mem::take(&mut *h),
            Err(_) => return,
        };
        let max = u8::try_from(sh.order.len()).unwrap_or(u8::MAX);
        let mut levels = Vec::with_capacity(tallies.len());
        for (i, counts) in tallies.iter().enumerate() {
            let route = cfg.route_name(i);
            let store = host.shared_data();
            let window = origin_health::merge(
                store,
                &origin_health::key(route),
                counts,
                now_s,
                sh.window_s,
                cfg.store.cas_retries,
            )
            .unwrap_or_default();
            let judged = shedding::judge(
                &window,
                &sh.thresholds_of(i),
                sh.min_requests,
                sh.min_clients,
            );
            if judged.unhealthy_as_a_whole
                && !judged.unhealthy
                && self.few_clients_warning.due(now_ns)
            {
                log_few_clients(cfg, route, &window);
            }
            let sick = judged.unhealthy;
            let view = &window.tally;
            let level = match shedding::step(
                store,
                &shedding::key(route),
                sick,
                max,
                now_s,
                sh.step_s,
                cfg.store.cas_retries,
            ) {
                Ok((l, moved)) => {
                    if let Some(from) = moved {
                        log_level_change(cfg, route, from, l.level, &window, &judged);
                    }
                    l.level
                }
                Err(_) => self
                    .shed_levels
                    .try_borrow()
                    .ok()
                    .and_then(|l| l.get(i).copied())
                    .unwrap_or(0),
            };
            levels.push(level);
            let key = shed_clock::key(route);
            let now_ms = now_ns / 1_000_000;
            if let Ok(ms) = shed_clock::advance(store, &key, now_ms, cfg.store.cas_retries) {
                if let Some(id) = metrics.per_key.shed_ms(i, level).filter(|_| ms > 0) {
                    host.add_to_counter(id, ms);
                }
            }
            if let Some(g) = metrics.route_gauges.get(i) {
                let values = [
                    u64::from(view.requests),
                    u64::from(view.error_permille()),
                    u64::from(view.percentile_ms(95).unwrap_or(0)),
                    u64::from(view.percentile_ms(99).unwrap_or(0)),
                ];
                for (id, v) in g.origin.iter().zip(values) {
                    if let Some(id) = id {
                        host.set_gauge(*id, v);
                    }
                }
                if let Some(id) = g.level {
                    host.set_gauge(id, u64::from(level));
                }
            }
        }
        if let Ok(mut h) = self.health.try_borrow_mut() {
            h.resize(tallies.len(), Counts::default());
        }
        if let Ok(mut l) = self.shed_levels.try_borrow_mut() {
            for (i, (was, now)) in l.iter().zip(&levels).enumerate() {
                if was != now {
                    log_level_applied(cfg.route_name(i), *now);
                }
            }
            *l = levels;
        }
    }

    /// Root tick between two shedding judgements: applies each route's shared level as
    /// another worker may have moved it, so every worker sheds within one tick
    /// ([`crate::host::TICK_MS`]) of a level change, not within a second. One shared-data read
    /// per route; a failed read keeps the level in force.
    fn apply_shared_levels(&self, cfg: &Config, metrics: &Metrics, host: &mut dyn Host) {
        let Ok(mut levels) = self.shed_levels.try_borrow_mut() else {
            return;
        };
        for (i, level) in levels.iter_mut().enumerate() {
            let route = cfg.route_name(i);
            let Ok(now) = shedding::read(host.shared_data(), &shedding::key(route)) else {
                continue;
            };
            if now.level != *level {
                *level = now.level;
                log_level_applied(route, now.level);
                if let Some(id) = metrics.route_gauges.get(i).and_then(|g| g.level) {
                    host.set_gauge(id, u64::from(now.level));
                }
            }
        }
    }
}

/// Logs, at debug level, that this worker now applies level `level` on `route` (each worker
/// logs its own line, so a test can see every worker take a change).
fn log_level_applied(route: &str, level: u8) {
    log::debug!("shedding route={route}: this worker applies level {level}");
}

/// Logs, at warn level, that the route's window is unhealthy only through fewer client
/// prefixes than `shedding.min_clients`, so nothing is shed for it: the heaviest prefixes
/// and their slow and failed responses (what an operator looks for: one client's slow URLs
/// or 5xx).
fn log_few_clients(cfg: &Config, route: &str, window: &Window) {
    // The heaviest first, by selection (no sort code in the module for a log line).
    let mut rows: Vec<&crate::protection::top_clients::ClientRow> = window.clients.iter().collect();
    let mut heaviest = Vec::new();
    for _ in 0..cfg.shedding.min_clients.saturating_sub(1).max(1) {
        let Some(i) = (0..rows.len()).max_by_key(|i| rows.get(*i).map(|r| r.weight())) else {
            break;
        };
        let r = rows.swap_remove(i);
        heaviest.push(format!("{} ({} slow, {} 5xx)", r.prefix, r.slow, r.errors));
    }
    log::warn!(
        "shedding route={route}: not shedding, the window is unhealthy only through fewer than \
         shedding.min_clients {} client prefixes; heaviest: {}",
        cfg.shedding.min_clients,
        heaviest.join(", ")
    );
}

/// Logs a shed level change at warn level: the route, the levels, the classes now shed, and
/// the window that decided it.
fn log_level_change(
    cfg: &Config,
    route: &str,
    from: u8,
    to: u8,
    window: &Window,
    judged: &shedding::Judgement,
) {
    let view = &window.tally;
    let shed: Vec<&str> = cfg
        .shedding
        .order
        .iter()
        .take(usize::from(to))
        .map(|c| c.as_str())
        .collect();
    log::warn!(
        "shedding route={route} level {from} -> {to} (shed: [{}]); window: {} responses, \
         p95 {} ms, 5xx {} per mille; over the per-client cap: {} slow, {} 5xx",
        shed.join(", "),
        view.requests,
        view.percentile_ms(95).unwrap_or(0),
        view.error_permille(),
        judged.slow_set_aside,
        judged.errors_set_aside
    );
}
