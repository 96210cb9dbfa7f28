//! Verifying crawler claims: what the verdict cache says, when to call the verifier, and
//! what a request gets while and after it does.
//!
//! Request side ([`check`]): a fresh cached verdict decides; during a failed callout's
//! backoff a stale verdict stands in (stale-if-error), else `verifier.on_error`; a prefix
//! that already produced `verifier.max_spoofed_per_prefix` spoofed verdicts gets `spoofed`
//! without a callout; otherwise the request is paused on the claim's flight ([`crate::identity::verifier_flights`]).
//!
//! Root side (per worker): callouts are dispatched from the root context ([`dispatch_queued`],
//! on a shared-queue wake-up), so their answers never depend on the request that asked
//! first still being there; an answer ([`on_callout_response`]) is cached, and every request
//! paused on the claim is resumed with it. Requests past their deadline are resumed by
//! [`expire`]; when the root goes away, [`drain`] resumes everything still paused.
//!
//! Every function here returns the requests to resume as [`Resolution`]s; the caller
//! switches to each one's context and lets its request machine continue.

use crate::config::{Config, OnError};
use crate::host::{Callout, Host};
use crate::identity::class::Class;
use crate::identity::published_ranges::RangesState;
use crate::identity::verdict_cache::{ClaimEntry, VerdictCache};
use crate::identity::verifier_answer::{self, Verdict, VerifyError};
use crate::identity::verifier_flights::{Claim, Flights, Joined, Waiter};
use crate::log_limit::WarnEvery10s;
use crate::metrics::{Metrics, VerifyEvent};
use std::cell::{Cell, RefCell};

/// Largest verifier response body read, bytes (answers are ~200 bytes).
pub const MAX_VERIFIER_BODY: usize = 4096;

const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_MS: u64 = 1_000_000;

/// One worker's verification state; `W` is how the root refers to a paused request
/// (`request::Handle`).
#[derive(Debug)]
pub struct VerificationState<W> {
    /// Crawler verdicts and per-prefix spoofed counts (shared data).
    pub verdicts: VerdictCache,
    /// Verifier callouts in flight on this worker and the requests paused on them.
    pub flights: RefCell<Flights<W>>,
    /// The sidecar's published ranges in use and their fetch
    /// ([`crate::identity::published_ranges`]).
    pub ranges: RefCell<RangesState>,
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
            flights: RefCell::new(Flights::default()),
            ranges: RefCell::new(RangesState::default()),
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
fn cached<W: Clone>(
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
fn stand_in<W: Clone>(
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

/// Caches a well-formed answer and returns the claim's class. A spoofed verdict counts
/// against the claim's prefix.
fn record_answer<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    claim: &Claim,
    answer: verifier_answer::CheckedAnswer,
    now_ns: u64,
) -> Class {
    let cfg = &w.cfg.verifier;
    let cap_s = match answer.verdict {
        Verdict::Unknown => cfg.unknown_ttl_s,
        _ => cfg.max_ttl_s,
    };
    let fresh_until =
        now_ns.saturating_add(answer.ttl_s.min(u64::from(cap_s)).saturating_mul(NS_PER_S));
    // "Could not decide" is not worth standing in for a later failure.
    let stale_for = match answer.verdict {
        Verdict::Unknown => 0,
        _ => u64::from(cfg.stale_if_error_s).saturating_mul(NS_PER_S),
    };
    let store = host.shared_data();
    let _ = w.verifier.verdicts.put_verdict(
        store,
        claim.fp,
        answer.verdict,
        now_ns,
        fresh_until,
        stale_for,
    );
    if answer.verdict == Verdict::Spoofed && cfg.max_spoofed_per_prefix > 0 {
        let _ = w
            .verifier
            .verdicts
            .count_spoofed(store, claim.prefix_fp, now_ns, fresh_until);
    }
    w.metrics.count_verify(
        host,
        match answer.verdict {
            Verdict::Verified => VerifyEvent::Verified,
            Verdict::Spoofed => VerifyEvent::Spoofed,
            Verdict::Unknown => VerifyEvent::Unknown,
        },
    );
    log::debug!(
        "verdict {} for {} claiming {}",
        answer.verdict.as_str(),
        claim.ip,
        claim.bot_id
    );
    verifier_answer::class_for(answer.verdict, claim.bot_class)
}

/// Records a failed callout (backoff of `error_ttl_s`; counted once as
/// [`VerifyEvent::Error`]; warned at most every 10 s) and returns the class the claim's
/// requests get, with [`VerifyEvent::Stale`] when a stale verdict stands in (counted per
/// request by the caller).
fn record_error<W: Clone>(
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

/// A request given up on without a new verdict (its deadline passed, or the root went
/// away): a stale verdict if there is one (with [`VerifyEvent::Stale`], counted per
/// request), else `on_error`. The error itself is counted per claim, not here.
fn give_up<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    claim: &Claim,
    now_ns: u64,
) -> (Class, Option<VerifyEvent>) {
    let entry = w
        .verifier
        .verdicts
        .claim(host.shared_data(), claim.fp, now_ns);
    let (class, event) = stand_in(w, claim, entry, now_ns);
    (class, (event == VerifyEvent::Stale).then_some(event))
}

/// Every waiter of claim `fp`'s flight, resolved with `class` (and `event` each).
fn resolve_flight<W: Clone>(
    w: VerifyParts<'_, W>,
    fp: u64,
    class: Class,
    event: Option<VerifyEvent>,
    out: &mut Vec<Resolution<W>>,
) {
    let flight = w
        .verifier
        .flights
        .try_borrow_mut()
        .ok()
        .and_then(|mut f| f.take(fp));
    if let Some(flight) = flight {
        out.extend(flight.waiters.into_iter().map(|waiter| Resolution {
            waiter,
            class,
            event,
        }));
    }
}

/// Root side: dispatches the callouts of queued flights, oldest deadline first. A flight
/// decided meanwhile (another worker cached a verdict, or its prefix is now blocked) is
/// resolved without a callout; one whose prefix already has
/// `verifier.max_spoofed_per_prefix` callouts in flight on this worker waits for one of them
/// to answer; one whose deadline passed, or whose dispatch is refused, is a verifier error.
pub fn dispatch_queued<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    now_ns: u64,
) -> Vec<Resolution<W>> {
    let mut out = Vec::new();
    let queued = match w.verifier.flights.try_borrow() {
        Ok(f) => f.queued(),
        Err(_) => return out,
    };
    let cfg = &w.cfg.verifier;
    for claim in queued {
        if let Some((class, event)) = cached(w, host, &claim, now_ns) {
            let event = (event != VerifyEvent::CacheHit).then_some(event);
            resolve_flight(w, claim.fp, class, event, &mut out);
            continue;
        }
        let (in_prefix, deadline) = match w.verifier.flights.try_borrow() {
            Ok(f) => (
                f.dispatched_in_prefix(claim.prefix_fp),
                f.deadline_ns(claim.fp),
            ),
            Err(_) => continue,
        };
        if cfg.max_spoofed_per_prefix > 0 && in_prefix >= cfg.max_spoofed_per_prefix {
            if deadline.is_some_and(|d| d > now_ns) {
                continue;
            }
            let (class, stale) = record_error(w, host, &claim, &VerifyError::NoResponse, now_ns);
            resolve_flight(w, claim.fp, class, stale, &mut out);
            continue;
        }
        let timeout_ms = deadline.map_or(0, |d| d.saturating_sub(now_ns) / NS_PER_MS);
        let path = crawlguard_contract::verify::request_path(claim.ip, &claim.bot_id);
        let dispatched = if timeout_ms == 0 {
            Err(VerifyError::NoResponse)
        } else {
            host.dispatch_callout(&Callout {
                method: "GET",
                cluster: &cfg.cluster,
                authority: &cfg.authority,
                path: &path,
                timeout_ms,
                body: &[],
            })
            .map_err(|_| VerifyError::Dispatch)
        };
        match dispatched {
            Ok(token) => {
                if let Ok(mut f) = w.verifier.flights.try_borrow_mut() {
                    f.dispatched(claim.fp, token);
                }
            }
            Err(e) => {
                let (class, stale) = record_error(w, host, &claim, &e, now_ns);
                resolve_flight(w, claim.fp, class, stale, &mut out);
            }
        }
    }
    out
}

/// Root side: the answer to callout `token` arrived: its `:status` (`None`: no response,
/// i.e. timeout, reset or refused) and body (at most [`MAX_VERIFIER_BODY`] bytes). Caches
/// it, resolves the claim's waiters, and dispatches flights that waited for a prefix slot.
pub fn on_callout_response<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    token: u32,
    status: Option<&[u8]>,
    body: &[u8],
    now_ns: u64,
) -> Vec<Resolution<W>> {
    let flight = w
        .verifier
        .flights
        .try_borrow_mut()
        .ok()
        .and_then(|mut f| f.take_by_token(token));
    let Some(flight) = flight else {
        return Vec::new();
    };
    let claim = &flight.claim;
    let (class, event) =
        match verifier_answer::parse_response(status, body, claim.ip, &claim.bot_id) {
            Ok(answer) => (record_answer(w, host, claim, answer, now_ns), None),
            Err(e) => record_error(w, host, claim, &e, now_ns),
        };
    let mut out: Vec<Resolution<W>> = flight
        .waiters
        .into_iter()
        .map(|waiter| Resolution {
            waiter,
            class,
            event,
        })
        .collect();
    out.extend(dispatch_queued(w, host, now_ns));
    out
}

/// Root side: requests whose deadline passed (a safety net: callouts time out on their
/// own), each resolved as a verifier error for its claim. `crawlguard.verify.error` counts
/// one per claim that ends without a verdict: here, each queued flight dropped before its
/// callout; a dispatched flight's callout counts its own outcome (a timeout is one error,
/// whichever of the tick and the callout's timeout comes first).
pub fn expire<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    now_ns: u64,
) -> Vec<Resolution<W>> {
    let (late, dropped) = match w.verifier.flights.try_borrow_mut() {
        Ok(mut f) => f.expire(now_ns),
        Err(_) => return Vec::new(),
    };
    give_up_all(w, host, late, dropped, now_ns)
}

/// Root side, when the root context goes away (configuration update, shutdown): every
/// paused request is resumed now, as a verifier error for its claim (one error counted per
/// flight: none gets its callout's answer any more).
pub fn drain<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    now_ns: u64,
) -> Vec<Resolution<W>> {
    let (all, ended) = match w.verifier.flights.try_borrow_mut() {
        Ok(mut f) => f.drain(),
        Err(_) => return Vec::new(),
    };
    give_up_all(w, host, all, ended, now_ns)
}

/// `waiters` given up on, and `ended_flights` claims that end without a verdict (each
/// counted once as [`VerifyEvent::Error`]).
fn give_up_all<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    waiters: Vec<(Claim, Waiter<W>)>,
    ended_flights: usize,
    now_ns: u64,
) -> Vec<Resolution<W>> {
    for _ in 0..ended_flights {
        w.metrics.count_verify(host, VerifyEvent::Error);
    }
    waiters
        .into_iter()
        .map(|(claim, waiter)| {
            let (class, event) = give_up(w, host, &claim, now_ns);
            Resolution {
                waiter,
                class,
                event,
            }
        })
        .collect()
}
