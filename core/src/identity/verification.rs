//! Verifying crawler claims: what the verdict cache says, when to call the verifier, and
//! what a request gets while and after it does.
//!
//! Request side ([`check`]): a fresh cached verdict decides; during a failed callout's
//! backoff a stale verdict stands in (stale-if-error), else `verifier.on_error`; a prefix
//! that already produced `verifier.max_spoofed_per_prefix` spoofed verdicts gets `spoofed`
//! without a callout; otherwise the request is paused on the claim's flight ([`crate::identity::verifier_flights`]).
//!
//! Root side (per worker): [`crate::identity::verifier_callouts`] dispatches the callouts and
//! resumes the paused requests with their answers, as [`Resolution`]s.

use crate::config::{Config, OnError};
use crate::host::Host;
use crate::identity::class::Class;
use crate::identity::local_verdicts::LocalVerdicts;
use crate::identity::nonce_store::NonceStore;
use crate::identity::published_ranges::RangesState;
use crate::identity::signature_checks::SignatureChecks;
use crate::identity::verdict_cache::{ClaimEntry, VerdictCache};
use crate::identity::verifier_answer::{self, Verdict, VerifyError};
use crate::identity::verifier_flights::{Claim, Flights, Joined, Waiter};
use crate::log_limit::WarnEvery10s;
use crate::metrics::{Metrics, VerifyEvent};
use std::cell::{Cell, RefCell};

/// Largest verifier response body read, bytes (answers are ~200 bytes).
pub const MAX_VERIFIER_BODY: usize = 4096;

pub(crate) const NS_PER_S: u64 = 1_000_000_000;
pub(crate) const NS_PER_MS: u64 = 1_000_000;

/// One worker's verification state; `W` is how the root refers to a paused request
/// (`request::Handle`).
#[derive(Debug)]
pub struct VerificationState<W> {
    /// Crawler verdicts and per-prefix spoofed counts (shared data).
    pub verdicts: VerdictCache,
    /// This worker's copies of warm verified verdicts
    /// ([`crate::identity::local_verdicts`]).
    pub local: RefCell<LocalVerdicts>,
    /// Verifier callouts in flight on this worker and the requests paused on them.
    pub flights: RefCell<Flights<W>>,
    /// The sidecar's published ranges in use and their fetch
    /// ([`crate::identity::published_ranges`]).
    pub ranges: RefCell<RangesState>,
    /// Signed agents' checks in flight on this worker
    /// ([`crate::identity::signed_agents`]).
    pub signatures: RefCell<SignatureChecks<W>>,
    /// Signed agents' nonces, shared by the workers (replay protection).
    pub nonces: NonceStore,
    /// Verifier error warnings.
    pub warning: WarnEvery10s,
    /// A root wake-up is already queued (one is enough for any number of new flights).
    wake_pending: Cell<bool>,
}

impl<W> VerificationState<W> {
    /// An empty verifier for `cfg` (`verifier.cache_slots`, `store.cas_retries`).
    pub fn new(cfg: &Config) -> VerificationState<W> {
        VerificationState {
            verdicts: VerdictCache::new(cfg.verifier.cache_slots, cfg.store.cas_retries),
            local: RefCell::new(LocalVerdicts::default()),
            flights: RefCell::new(Flights::default()),
            ranges: RefCell::new(RangesState::default()),
            signatures: RefCell::new(SignatureChecks::default()),
            nonces: NonceStore::new(
                cfg.signed_agents.nonce_slots,
                cfg.store.cas_retries,
                cfg.store
                    .hash_seed
                    .unwrap_or(crate::store::PUBLISHED_HASH_SEED),
            ),
            warning: WarnEvery10s::default(),
            wake_pending: Cell::new(false),
        }
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

    /// The wake-up arrived: the next new flight needs another.
    pub fn wake_arrived(&self) {
        self.wake_pending.set(false);
    }
}

/// What verification reads and changes of its worker.
pub struct VerifyParts<'a, W> {
    /// The configuration (`verifier` section).
    pub cfg: &'a Config,
    /// The verification counters.
    pub metrics: &'a Metrics,
    /// The worker's verification state.
    pub verifier: &'a VerificationState<W>,
}

impl<W> Clone for VerifyParts<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for VerifyParts<'_, W> {}

/// A paused request to resume with a class; `event` is counted for it when set.
#[derive(Debug)]
pub struct Resolution<W> {
    /// The paused request.
    pub waiter: Waiter<W>,
    /// The class it continues with.
    pub class: Class,
    /// A verification event of its own (e.g. a stale verdict stood in).
    pub event: Option<VerifyEvent>,
}

/// What [`check`] decided for a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The request continues now with this class.
    Class(Class),
    /// The request was paused on its claim's flight; it is resumed later.
    Wait,
}

/// The class of a claim the verifier could not decide (`verifier.on_error`).
fn on_error_class<W: Clone>(w: VerifyParts<'_, W>, bot_class: Class) -> Class {
    match w.cfg.verifier.on_error {
        OnError::UnverifiedBot => Class::UnverifiedBot,
        OnError::ClaimedClass => bot_class,
    }
}

/// What the cache alone decides for `claim` at `now_ns`, with the event to count; `None`
/// when a callout is needed.
pub(crate) fn cached<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    claim: &Claim,
    now_ns: u64,
) -> Option<(Class, VerifyEvent)> {
    let entry = w
        .verifier
        .verdicts
        .claim(host.shared_data(), claim.fp, now_ns);
    if let Some(v) = entry.and_then(|e| e.fresh(now_ns)) {
        if let (Some(e), Verdict::Verified) = (entry, v) {
            if let Ok(mut l) = w.verifier.local.try_borrow_mut() {
                l.put_verified(claim.fp, now_ns, e.fresh_until_ns);
            }
        }
        return Some((
            verifier_answer::class_for(v, claim.bot_class),
            VerifyEvent::CacheHit,
        ));
    }
    if let Some(e) = entry.filter(|e| e.backing_off(now_ns)) {
        return Some(stand_in(w, claim, Some(e), now_ns));
    }
    let max = w.cfg.verifier.max_spoofed_per_prefix;
    if max > 0
        && w.verifier
            .verdicts
            .spoofed_in_prefix(host.shared_data(), claim.prefix_fp, now_ns)
            >= max
    {
        return Some((Class::Spoofed, VerifyEvent::PrefixSpoofed));
    }
    None
}

/// The class when no new verdict can be had: a stale verdict if there is one
/// ([`VerifyEvent::Stale`]), else `on_error` ([`VerifyEvent::CacheHit`] of a remembered error).
pub(crate) fn stand_in<W: Clone>(
    w: VerifyParts<'_, W>,
    claim: &Claim,
    entry: Option<ClaimEntry>,
    now_ns: u64,
) -> (Class, VerifyEvent) {
    match entry.and_then(|e| e.usable_on_error(now_ns)) {
        Some(v) => (
            verifier_answer::class_for(v, claim.bot_class),
            VerifyEvent::Stale,
        ),
        None => (on_error_class(w, claim.bot_class), VerifyEvent::CacheHit),
    }
}

/// Request side: the class of `claim` now, or [`Check::Wait`] after pausing `waiter` on the
/// claim's flight (a new flight wakes the root context to dispatch the callout).
pub fn check<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    claim: &Claim,
    waiter: Waiter<W>,
    now_ns: u64,
) -> Check {
    if let Some((class, event)) = cached(w, host, claim, now_ns) {
        w.metrics.count_verify(host, event);
        return Check::Class(class);
    }
    let joined = match w.verifier.flights.try_borrow_mut() {
        Ok(mut f) => f.join(claim, waiter),
        Err(_) => Joined::Full,
    };
    match joined {
        Joined::Existing => {
            w.metrics.count_verify(host, VerifyEvent::InFlight);
            Check::Wait
        }
        Joined::New => {
            w.metrics.count_verify(host, VerifyEvent::CacheMiss);
            if w.verifier.request_wake(host) {
                Check::Wait
            } else {
                // No root callback will come: take the flight back, decide now.
                if let Ok(mut f) = w.verifier.flights.try_borrow_mut() {
                    let _ = f.take(claim.fp);
                }
                let (class, stale) = record_error(w, host, claim, &VerifyError::Dispatch, now_ns);
                if let Some(e) = stale {
                    w.metrics.count_verify(host, e);
                }
                Check::Class(class)
            }
        }
        Joined::Full => {
            let (class, stale) = record_error(w, host, claim, &VerifyError::Overloaded, now_ns);
            if let Some(e) = stale {
                w.metrics.count_verify(host, e);
            }
            Check::Class(class)
        }
    }
}

/// Records a failed callout (backoff of `error_ttl_s`; counted once as
/// [`VerifyEvent::Error`]; warned at most every 10 s) and returns the class the claim's
/// requests get, with [`VerifyEvent::Stale`] when a stale verdict stands in (counted per
/// request by the caller).
pub(crate) fn record_error<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    claim: &Claim,
    error: &VerifyError,
    now_ns: u64,
) -> (Class, Option<VerifyEvent>) {
    let backoff_until =
        now_ns.saturating_add(u64::from(w.cfg.verifier.error_ttl_s).saturating_mul(NS_PER_S));
    let entry = w
        .verifier
        .verdicts
        .put_error(host.shared_data(), claim.fp, now_ns, backoff_until);
    w.metrics.count_verify(host, VerifyEvent::Error);
    if w.verifier.warning.due(now_ns) {
        log::warn!(
            "verifier error ({}) for {} claiming {}: {error:?} (further errors only counted \
             in crawlguard.verify.error for 10 s)",
            error.kind(),
            claim.ip,
            claim.bot_id
        );
    }
    let (class, event) = stand_in(w, claim, entry, now_ns);
    (class, (event == VerifyEvent::Stale).then_some(event))
}
