//! Verifying crawler claims, root side (per worker): callouts are dispatched from the root
//! context ([`dispatch_queued`], on a shared-queue wake-up), so their answers never depend on
//! the request that asked first still being there; an answer ([`on_callout_response`]) is
//! cached, and every request paused on the claim is resumed with it. Requests past their
//! deadline are resumed by [`expire`]; when the root goes away, [`drain`] resumes everything
//! still paused. The request side is [`crate::identity::verification`].
//!
//! Every function here returns the requests to resume as [`Resolution`]s; the caller
//! switches to each one's context and lets its request machine continue.

use crate::host::{Callout, Host};
use crate::identity::class::Class;
use crate::identity::verification::{
    cached, record_error, stand_in, Resolution, VerifyParts, NS_PER_MS, NS_PER_S,
};
use crate::identity::verifier_answer::{self, Verdict, VerifyError};
use crate::identity::verifier_flights::{Claim, Waiter};
use crate::metrics::VerifyEvent;

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
    // This worker's copy follows its own answer at once (other workers' within
    // local_verdicts::REFRESH_NS).
    if let Ok(mut l) = w.verifier.local.try_borrow_mut() {
        match answer.verdict {
            Verdict::Verified => l.put_verified(claim.fp, now_ns, fresh_until),
            _ => l.forget(claim.fp),
        }
    }
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
/// i.e. timeout, reset or refused) and body (at most [`crate::identity::verification::MAX_VERIFIER_BODY`] bytes). Caches
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
