//! Per-worker state: one [`Worker`] per Envoy worker (proxy-wasm VM), built from the
//! configuration once by the root context and shared (`Rc`) with every request context.
//! Also the root context's events, in plain Rust: a wake-up to dispatch verifier callouts,
//! a callout's answer, the periodic tick, and going away.

use crate::config::Config;
use crate::fleet::{self, SyncState};
use crate::host::Host;
use crate::identity::class::Class;
use crate::identity::published_ranges::{self, RangesState};
use crate::identity::verdict_cache::VerdictCache;
use crate::identity::verification::{self, Resolution};
use crate::identity::verifier_flights::Flights;
use crate::limits::limiter::Limiter;
use crate::metrics::{Metrics, VerifyEvent, STATS_FLUSH_MS};
use crate::protection::origin_health::{self, Counts, Window};
use crate::protection::shedding;
use crate::request::{self, Handle};
use std::cell::{Cell, RefCell};
use std::net::IpAddr;

/// The period of the root tick's once-a-second work (the shedding step), ms; the tick
/// itself may run faster (fleet syncs, [`crate::fleet`]).
pub const SECOND_WORK_PERIOD_MS: u32 = 1_000;

/// Minimum gap between two warnings of one kind per worker, ns.
const WARN_EVERY_NS: u64 = 10_000_000_000;

/// A warning that is logged at most once every 10 s per worker, so a failing dependency
/// cannot flood Envoy's log at request rate (the counters still count every event).
#[derive(Debug, Default)]
pub struct WarnEvery10s {
    last_ns: Cell<Option<u64>>,
}

impl WarnEvery10s {
    /// True (and remembers `now_ns`) when no warning of this kind was logged in the last 10 s.
    pub fn due(&self, now_ns: u64) -> bool {
        let due = self
            .last_ns
            .get()
            .is_none_or(|last| now_ns.saturating_sub(last) >= WARN_EVERY_NS);
        if due {
            self.last_ns.set(Some(now_ns));
        }
        due
    }
}

/// Everything one worker keeps between requests.
pub struct Worker {
    /// The validated configuration.
    pub cfg: Config,
    /// Bucket slot table, per-worker fallback buckets and the keyed hasher.
    pub limiter: RefCell<Limiter>,
    /// Crawler verdicts and per-prefix spoofed counts (shared data).
    pub verdicts: VerdictCache,
    /// Counter ids.
    pub metrics: Metrics,
    /// Verifier callouts in flight on this worker and the requests paused on them.
    pub flights: RefCell<Flights<Handle>>,
    /// Shared-store trouble warnings.
    pub store_warning: WarnEvery10s,
    /// Verifier error warnings.
    pub verifier_warning: WarnEvery10s,
    /// Per route: this worker's response counts since the last tick (origin health).
    health: RefCell<Vec<Counts>>,
    /// "Unhealthy only through a few clients" warnings.
    few_clients_warning: WarnEvery10s,
    /// Per route: the shed level in force, as read on the last tick.
    shed_levels: RefCell<Vec<u8>>,
    /// When shedding last ran (it runs about once a second, whatever the tick period).
    last_shedding_ns: Cell<Option<u64>>,
    /// Fleet mode: the sync in flight, degraded time, warnings.
    pub fleet_sync: RefCell<SyncState>,
    /// The sidecar's published ranges in use and their fetch ([`crate::identity::published_ranges`]).
    pub ranges: RefCell<RangesState>,
    /// A root wake-up is already queued (one is enough for any number of new flights).
    wake_pending: Cell<bool>,
    /// State of the jitter generator (xorshift64*; seeded per worker).
    rng: Cell<u64>,
}

impl Worker {
    /// Builds a worker for `cfg`; `seed` seeds Retry-After jitter (any value; 0 is fine).
    pub fn new(cfg: Config, metrics: Metrics, seed: u64) -> Worker {
        let limiter = Limiter::new(&cfg);
        let verdicts = VerdictCache::new(cfg.verifier.cache_slots, cfg.store.cas_retries);
        let routes = cfg.routes.len() + 1;
        Worker {
            cfg,
            limiter: RefCell::new(limiter),
            verdicts,
            metrics,
            flights: RefCell::new(Flights::default()),
            store_warning: WarnEvery10s::default(),
            verifier_warning: WarnEvery10s::default(),
            health: RefCell::new(vec![Counts::default(); routes]),
            few_clients_warning: WarnEvery10s::default(),
            shed_levels: RefCell::new(vec![0; routes]),
            last_shedding_ns: Cell::new(None),
            fleet_sync: RefCell::new(SyncState::default()),
            ranges: RefCell::new(RangesState::default()),
            wake_pending: Cell::new(false),
            // Never 0 (xorshift's fixed point).
            rng: Cell::new(seed | 1),
        }
    }

    /// Creates every missing shared-data slot (buckets, verdicts); returns slots created.
    pub fn precreate(
        &self,
        store: &dyn crate::store::SharedData,
    ) -> Result<usize, crate::store::StoreError> {
        let buckets = match self.limiter.try_borrow() {
            Ok(l) => l.table().precreate(store)?,
            Err(_) => 0,
        };
        Ok(buckets + self.verdicts.precreate(store)?)
    }

    /// One line for the log at configuration time.
    pub fn summary(&self) -> String {
        let c = &self.cfg;
        format!(
            "configured: mode {:?}, {} limits, {} routes, {} bots, {} bucket slots, {} verdict slots",
            c.mode,
            c.limits.len(),
            c.routes.len(),
            c.classifier.entries().len(),
            self.limiter.try_borrow().map_or(0, |l| l.table().len()),
            self.verdicts.claim_slots()
        )
    }

    /// A uniform random u32 for Retry-After jitter. Jitter only has to spread clients out,
    /// so a per-worker xorshift64* (no host call per rejection) is enough.
    pub fn next_random(&self) -> u32 {
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// Counts verification event `e`.
    pub fn count_verify(&self, host: &mut dyn Host, e: VerifyEvent) {
        self.metrics.record_verify(e, &mut |id| host.increment(id));
    }

    /// Asks for a root wake-up unless one is already queued; false if the host refused.
    pub fn request_wake(&self, host: &mut dyn Host) -> bool {
        if self.wake_pending.get() {
            return true;
        }
        let ok = host.wake_root().is_ok();
        self.wake_pending.set(ok);
        ok
    }

    /// Root: the wake-up arrived; dispatch queued callouts.
    pub fn on_wake(&self, host: &mut dyn Host) {
        self.wake_pending.set(false);
        let now = host.now_ns().unwrap_or(0);
        let resumed = verification::dispatch_queued(self, host, now);
        self.resume(host, resumed);
    }

    /// Most body bytes to read for the answer to callout `token`: a fleet sync's answer
    /// is larger than a verdict, published ranges larger still (one byte over their bound,
    /// so that an oversize answer is refused, never read truncated).
    pub fn callout_body_limit(&self, token: u32) -> usize {
        if self
            .ranges
            .try_borrow()
            .is_ok_and(|r| r.is_in_flight(token))
        {
            crawlguard_contract::ranges::MAX_BODY_BYTES + 1
        } else if self
            .fleet_sync
            .try_borrow()
            .is_ok_and(|s| s.is_in_flight(token))
        {
            fleet::MAX_SYNC_BODY
        } else {
            verification::MAX_VERIFIER_BODY
        }
    }

    /// Root: the answer to callout `token` arrived (`status` `None`: no response; `body` at
    /// most [`Worker::callout_body_limit`] bytes): a fleet sync's or a verdict.
    pub fn on_callout_response(
        &self,
        host: &mut dyn Host,
        token: u32,
        status: Option<&[u8]>,
        body: &[u8],
    ) {
        let now = host.now_ns().unwrap_or(0);
        if fleet::on_response(self, host, token, status, body, now) {
            return;
        }
        if self
            .ranges
            .try_borrow()
            .is_ok_and(|r| r.is_in_flight(token))
        {
            return published_ranges::on_response(self, host, status, body);
        }
        let resumed = verification::on_callout_response(self, host, token, status, body, now);
        self.resume(host, resumed);
    }

    /// Counts a response of route `route` to client prefix `client` (`None`: no parsable
    /// address) that took `latency_ms` (VM memory only).
    pub fn record_response(
        &self,
        route: usize,
        latency_ms: u64,
        error: bool,
        client: Option<IpAddr>,
    ) {
        let threshold_ms = self.cfg.shedding.thresholds_of(route).latency_ms;
        let client = client.unwrap_or(crate::protection::top_clients::UNKNOWN_CLIENT);
        if let Ok(mut h) = self.health.try_borrow_mut() {
            if let Some(c) = h.get_mut(route) {
                c.record(latency_ms, error, client, threshold_ms);
            }
        }
    }

    /// True when requests of `class` on route `route` are shed now (as of the last tick).
    pub fn is_shed(&self, class: Class, route: usize) -> bool {
        let level = self
            .shed_levels
            .try_borrow()
            .ok()
            .and_then(|l| l.get(route).copied())
            .unwrap_or(0);
        level > 0
            && self
                .cfg
                .shedding
                .rank_of(class)
                .is_some_and(|r| r < usize::from(level))
    }

    /// Root tick, shedding: adds this worker's counts to each route's shared window, judges
    /// the window, moves the shared level one step when due, caches it, sets the gauges, and
    /// logs every level change this worker made.
    fn shedding_tick(&self, host: &mut dyn Host, now_ns: u64) {
        let sh = &self.cfg.shedding;
        let now_s = now_ns / 1_000_000_000;
        let tallies = match self.health.try_borrow_mut() {
            Ok(mut h) => std::mem::take(&mut *h),
            Err(_) => return,
        };
        let max = u8::try_from(sh.order.len()).unwrap_or(u8::MAX);
        let mut levels = Vec::with_capacity(tallies.len());
        for (i, counts) in tallies.iter().enumerate() {
            let route = self.cfg.route_name(i);
            let store = host.shared_data();
            let window = origin_health::merge(
                store,
                &origin_health::key(route),
                counts,
                now_s,
                sh.window_s,
                self.cfg.store.cas_retries,
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
                log_few_clients(&self.cfg, route, &window);
            }
            let sick = judged.unhealthy;
            let view = &window.tally;
            let level =
                match shedding::step(store, &shedding::key(route), sick, max, now_s, sh.step_s) {
                    Ok((l, moved)) => {
                        if let Some(from) = moved {
                            log_level_change(&self.cfg, route, from, l.level, &window, &judged);
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
            if let Some(g) = self.metrics.route_gauges.get(i) {
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
                    log_level_applied(self.cfg.route_name(i), *now);
                }
            }
            *l = levels;
        }
    }

    /// Root tick between two shedding judgements: applies each route's shared level as
    /// another worker may have moved it, so every worker sheds within one tick
    /// ([`STATS_FLUSH_MS`]) of a level change, not within a second. One shared-data read
    /// per route; a failed read keeps the level in force.
    fn apply_shared_shed_levels(&self, host: &mut dyn Host) {
        let Ok(mut levels) = self.shed_levels.try_borrow_mut() else {
            return;
        };
        for (i, level) in levels.iter_mut().enumerate() {
            let route = self.cfg.route_name(i);
            let Ok(now) = shedding::read(host.shared_data(), &shedding::key(route)) else {
                continue;
            };
            if now.level != *level {
                *level = now.level;
                log_level_applied(route, now.level);
                if let Some(id) = self.metrics.route_gauges.get(i).and_then(|g| g.level) {
                    host.set_gauge(id, u64::from(now.level));
                }
            }
        }
    }

    /// The root tick period this configuration needs, ms: the stats flush
    /// ([`STATS_FLUSH_MS`]; shedding and the verifier's safety net need a second, and run
    /// on the tick when a second is due), or the sync interval if fleet mode syncs more
    /// often.
    pub fn tick_period_ms(cfg: &Config) -> u32 {
        let fleet = cfg.fleet.enabled.then_some(cfg.fleet.sync_interval_ms);
        fleet.map_or(STATS_FLUSH_MS, |f| f.min(STATS_FLUSH_MS))
    }

    /// Root: periodic tick: fleet sync, shedding (about once a second), and the safety net
    /// that resumes requests whose deadline passed.
    pub fn on_tick(&self, host: &mut dyn Host) {
        let tick_ns = u64::from(Self::tick_period_ms(&self.cfg)) * 1_000_000;
        // Unspent leased tokens go back to their buckets every tick (crate::limits::lease).
        if let Ok(mut l) = self.limiter.try_borrow_mut() {
            l.return_leases(host.shared_data());
        }
        if let Some(now) = host.now_ns() {
            if self.cfg.fleet.enabled {
                fleet::tick(self, host, now, tick_ns);
            }
            published_ranges::tick(self, host, now);
            // Half a tick of slack: timers fire a little early or late.
            let second_due = self.last_shedding_ns.get().is_none_or(|t| {
                now.saturating_add(tick_ns / 2)
                    >= t.saturating_add(u64::from(SECOND_WORK_PERIOD_MS) * 1_000_000)
            });
            if self.cfg.shedding.enabled {
                if second_due {
                    self.last_shedding_ns.set(Some(now));
                    self.shedding_tick(host, now);
                } else {
                    self.apply_shared_shed_levels(host);
                }
            }
        }
        let empty = self.flights.try_borrow().map_or(true, |f| f.is_empty());
        if empty {
            return;
        }
        let now = host.now_ns().unwrap_or(u64::MAX);
        let mut resumed = verification::expire(self, host, now);
        resumed.extend(verification::dispatch_queued(self, host, now));
        self.resume(host, resumed);
    }

    /// Root: the root context goes away; nothing may stay paused.
    pub fn on_root_done(&self, host: &mut dyn Host) {
        if let Ok(mut l) = self.limiter.try_borrow_mut() {
            l.return_leases(host.shared_data());
        }
        let now = host.now_ns().unwrap_or(0);
        let resumed = verification::drain(self, host, now);
        self.resume(host, resumed);
    }

    /// Resumes each paused request with its class (requests already gone are skipped).
    fn resume(&self, host: &mut dyn Host, resolutions: Vec<Resolution>) {
        for r in resolutions {
            if let Some(e) = r.event {
                self.count_verify(host, e);
            }
            request::resume(self, host, &r.waiter, r.class);
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
fn log_few_clients(cfg: &crate::config::Config, route: &str, window: &Window) {
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
    cfg: &crate::config::Config,
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
