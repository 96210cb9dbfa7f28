//! Per-worker state: one [`Worker`] per Envoy worker (proxy-wasm VM), built from the
//! configuration once by the root context and shared (`Rc`) with every request context.
//! The worker only composes its components (each owns its state; each module sees only the
//! parts it names, never the worker) and routes the root context's events to them: a
//! wake-up to dispatch verifier callouts, a callout's answer, the periodic tick, and going
//! away.

use crate::clock::WorkerClock;
use crate::config::Config;
use crate::fleet::sync::{self, SyncParts, SyncState};
use crate::host::{Host, TICK_MS};
use crate::identity::published_ranges::{self, RangesParts};
use crate::identity::verification::{self, Resolution, VerificationState, VerifyParts};
use crate::identity::{signature_callouts, verifier_callouts};
use crate::limits::limiter::Limiter;
use crate::log_limit::WarnEvery10s;
use crate::metrics::{MetricKind, Metrics};
use crate::protection::shedder::Shedder;
use crate::request::{self, Handle, RequestParts};
use crate::response::rejection::Jitter;
use crate::store::{self, SharedData, StoreShape};
use std::cell::RefCell;

/// Everything one worker keeps between requests.
pub struct Worker {
    /// The validated configuration.
    pub cfg: Config,
    /// Bucket slot table, per-worker fallback buckets and the keyed hasher.
    pub limiter: RefCell<Limiter>,
    /// Verdicts, verifier callouts in flight and the requests paused on them, published
    /// ranges.
    pub verifier: VerificationState<Handle>,
    /// Origin health counts and the shed level per route.
    pub shedder: Shedder,
    /// Fleet mode: the sync in flight, degraded time, warnings.
    pub fleet_sync: RefCell<SyncState>,
    /// Counter ids.
    pub metrics: Metrics,
    /// Shared-store trouble warnings.
    pub store_warning: WarnEvery10s,
    /// Retry-After jitter.
    pub jitter: Jitter,
    /// The last reading of the host's clock ([`crate::clock`]).
    pub clock: WorkerClock,
}

/// Builds the worker for a validated configuration, as every driver must (the filter's
/// `on_configure`, the host tests' fake proxy, the command's replay): logs the
/// configuration's warnings; resolves an unset `store.hash_seed` (the one this Envoy keeps
/// in `store`, else `draw_seed()`; warns when it falls back to the published seed,
/// [`store::resolve_hash_seed`]); records the store's shape and warns when it changed
/// ([`store::record_shape`]); defines every metric with `define_metric`; and pre-creates the
/// shared-data slots (warns on a store error, and continues). `jitter_seed` seeds
/// Retry-After jitter (any value).
pub fn configure(
    mut cfg: Config,
    store: &dyn SharedData,
    draw_seed: &mut dyn FnMut() -> Option<u64>,
    define_metric: &mut dyn FnMut(&str, MetricKind) -> Option<u32>,
    jitter_seed: u64,
) -> Worker {
    for w in &cfg.warnings {
        log::warn!("configuration warning: {w}");
    }
    let (hash_seed, secret) =
        store::resolve_hash_seed(store, cfg.store.hash_seed, draw_seed, cfg.store.cas_retries);
    if !secret && cfg.store.hash_seed.is_none() {
        log::warn!(
            "store.hash_seed: could not draw or keep a random seed; using the published one \
             (slot collisions can be planned): set store.hash_seed"
        );
    }
    cfg.store.hash_seed = Some(hash_seed);
    let shape = StoreShape {
        slots: cfg.store.slots,
        hash_seed,
    };
    if let Some(change) = store::record_shape(store, shape, cfg.store.cas_retries) {
        log::warn!("{change}");
    }
    let metrics = Metrics::define(&cfg, define_metric);
    let worker = Worker::new(cfg, metrics, jitter_seed);
    if let Err(e) = worker.precreate(store) {
        log::warn!("could not pre-create shared-data slots ({e:?}); continuing");
    }
    worker
}

impl Worker {
    /// Builds a worker for `cfg` as it is (no hash seed resolved, nothing created: see
    /// [`configure`]); `seed` seeds Retry-After jitter (any value; 0 is fine).
    pub fn new(cfg: Config, metrics: Metrics, seed: u64) -> Worker {
        Worker {
            limiter: RefCell::new(Limiter::new(&cfg)),
            verifier: VerificationState::new(&cfg),
            shedder: Shedder::new(cfg.routes.len() + 1),
            fleet_sync: RefCell::new(SyncState::default()),
            metrics,
            store_warning: WarnEvery10s::default(),
            jitter: Jitter::new(seed),
            clock: WorkerClock::default(),
            cfg,
        }
    }

    /// What a request uses of this worker.
    pub fn request_parts(&self) -> RequestParts<'_> {
        RequestParts {
            cfg: &self.cfg,
            metrics: &self.metrics,
            limiter: &self.limiter,
            verifier: &self.verifier,
            shedder: &self.shedder,
            jitter: &self.jitter,
            store_warning: &self.store_warning,
            clock: &self.clock,
        }
    }

    fn verify_parts(&self) -> VerifyParts<'_, Handle> {
        self.request_parts().verify()
    }

    fn ranges_parts(&self) -> RangesParts<'_> {
        RangesParts {
            cfg: &self.cfg,
            metrics: &self.metrics,
            ranges: &self.verifier.ranges,
        }
    }

    fn sync_parts(&self) -> SyncParts<'_> {
        SyncParts {
            cfg: &self.cfg,
            metrics: &self.metrics,
            limiter: &self.limiter,
            fleet_sync: &self.fleet_sync,
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
        let nonces = if self.cfg.signed_agents.enabled() {
            self.verifier.nonces.precreate(store)?
        } else {
            0
        };
        Ok(buckets + self.verifier.verdicts.precreate(store)? + nonces)
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
            self.verifier.verdicts.claim_slots()
        )
    }

    /// Root: the wake-up arrived; dispatch queued callouts.
    pub fn on_wake(&self, host: &mut dyn Host) {
        self.verifier.wake_arrived();
        let now = self.clock.exact_ns(host).unwrap_or(0);
        let mut resumed = verifier_callouts::dispatch_queued(self.verify_parts(), host, now);
        resumed.extend(signature_callouts::dispatch_queued(
            self.verify_parts(),
            host,
            now,
        ));
        self.resume(host, resumed);
    }

    /// Most body bytes to read for the answer to callout `token`: a fleet sync's answer
    /// is larger than a verdict, published ranges larger still (one byte over their bound,
    /// so that an oversize answer is refused, never read truncated).
    pub fn callout_body_limit(&self, token: u32) -> usize {
        if self
            .verifier
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
            crate::fleet::MAX_SYNC_BODY
        } else {
            verification::MAX_VERIFIER_BODY
        }
    }

    /// Root: the answer to callout `token` arrived (`status` `None`: no response; `body` at
    /// most [`Worker::callout_body_limit`] bytes): a fleet sync's, published ranges' or a
    /// verdict's.
    pub fn on_callout_response(
        &self,
        host: &mut dyn Host,
        token: u32,
        status: Option<&[u8]>,
        body: &[u8],
    ) {
        let now = self.clock.exact_ns(host).unwrap_or(0);
        if sync::on_response(self.sync_parts(), host, token, status, body, now) {
            return;
        }
        if self
            .verifier
            .ranges
            .try_borrow()
            .is_ok_and(|r| r.is_in_flight(token))
        {
            return published_ranges::on_response(self.ranges_parts(), host, status, body);
        }
        if let Some(resumed) =
            signature_callouts::on_response(self.verify_parts(), host, token, status, body, now)
        {
            return self.resume(host, resumed);
        }
        let resumed = verifier_callouts::on_callout_response(
            self.verify_parts(),
            host,
            token,
            status,
            body,
            now,
        );
        self.resume(host, resumed);
    }

    /// The root tick period this configuration needs, ms: [`TICK_MS`] (shedding and the
    /// verifier's safety net need a second, and run on the tick when a second is due), or
    /// the sync interval if fleet mode syncs more often.
    pub fn tick_period_ms(cfg: &Config) -> u32 {
        let fleet = cfg.fleet.enabled.then_some(cfg.fleet.sync_interval_ms);
        fleet.map_or(TICK_MS, |f| f.min(TICK_MS))
    }

    /// Root: periodic tick: fleet sync, published ranges, shedding (about once a second),
    /// and the safety net that resumes requests whose deadline passed.
    pub fn on_tick(&self, host: &mut dyn Host) {
        let tick_ns = u64::from(Self::tick_period_ms(&self.cfg)) * 1_000_000;
        // Unspent leased tokens go back to their buckets every tick (crate::limits::lease),
        // give-backs held back are written and the places in flight of live requests are
        // renewed (crate::limits::in_flight).
        self.tend_places(host);
        // The tick's reading is what requests decided in memory go by (crate::clock).
        if let Some(now) = self.clock.exact_ns(host) {
            if self.cfg.fleet.enabled {
                sync::tick(self.sync_parts(), host, now, tick_ns);
            }
            published_ranges::tick(self.ranges_parts(), host, now);
            if self.cfg.shedding.enabled {
                self.shedder
                    .tick(&self.cfg, &self.metrics, host, now, tick_ns);
            }
        }
        let empty = self
            .verifier
            .flights
            .try_borrow()
            .map_or(true, |f| f.is_empty())
            && self
                .verifier
                .signatures
                .try_borrow()
                .map_or(true, |c| c.is_empty());
        if empty {
            return;
        }
        let now = host.now_ns().unwrap_or(u64::MAX);
        let mut resumed = verifier_callouts::expire(self.verify_parts(), host, now);
        resumed.extend(signature_callouts::expire(self.verify_parts(), host, now));
        resumed.extend(signature_callouts::dispatch_queued(
            self.verify_parts(),
            host,
            now,
        ));
        resumed.extend(verifier_callouts::dispatch_queued(
            self.verify_parts(),
            host,
            now,
        ));
        self.resume(host, resumed);
    }

    /// Root tick, also of a worker a reconfiguration replaced while its requests still
    /// live: gives unspent leased tokens back ([`crate::limits::lease`]), writes the
    /// give-backs of places in flight held back, and renews the places its live requests
    /// hold ([`crate::limits::in_flight`]).
    pub fn tend_places(&self, host: &mut dyn Host) {
        if let Ok(mut l) = self.limiter.try_borrow_mut() {
            l.return_leases(host.shared_data());
            if let Some(now) = host.now_ns() {
                l.tend_places(host.shared_data(), now);
            }
        }
    }

    /// Root: the root context goes away; nothing may stay paused.
    pub fn on_root_done(&self, host: &mut dyn Host) {
        // Leases back, held-back give-backs written (crate::limits::in_flight).
        self.tend_places(host);
        let now = host.now_ns().unwrap_or(0);
        let mut resumed = verifier_callouts::drain(self.verify_parts(), host, now);
        resumed.extend(signature_callouts::drain(self.verify_parts(), host));
        self.resume(host, resumed);
    }

    /// Resumes each paused request with its class (requests already gone are skipped).
    fn resume(&self, host: &mut dyn Host, resolutions: Vec<Resolution<Handle>>) {
        for r in resolutions {
            if let Some(e) = r.event {
                self.metrics.count_verify(host, e);
            }
            request::resume(self.request_parts(), host, &r.waiter, r.class);
        }
    }
}
