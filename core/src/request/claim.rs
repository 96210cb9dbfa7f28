//! A request's crawler claim: decided by the published ranges or the verdict cache now, or
//! paused on the claim's verifier flight ([`crate::identity::verification`]); and a signed
//! agent's claim, its Web Bot Auth signature ([`crate::identity::signed_agents`]).

use super::{Facts, Handle, Phase, RequestParts, RequestState, Step};
use crate::host::{ContextId, Host};
use crate::identity::class::Class;
use crate::identity::signed_agents::{self, Signed};
use crate::identity::verification::{self, Check};
use crate::identity::verifier_flights::{Claim, Waiter};

/// The class of a `verify: true` claim from what is known now, or `None` after pausing the
/// request on the claim's flight.
pub(super) fn verify_claim(
    me: Handle,
    context: ContextId,
    w: RequestParts<'_>,
    host: &mut dyn Host,
    facts: &Facts,
    bot_id: &str,
    bot_class: Class,
) -> Option<Class> {
    // The claim is about the full address; the prefix groups it like the buckets do.
    let Some(ip) = facts.client_ip else {
        return Some(Class::UnverifiedBot);
    };
    // The sidecar's published ranges decide range-verifiable claims here, no callout.
    let by_ranges = w
        .verifier
        .ranges
        .try_borrow()
        .ok()
        .and_then(|r| r.verdict(ip, bot_id));
    if let Some(v) = by_ranges {
        let event = match v {
            crate::identity::verifier_answer::Verdict::Verified => {
                crate::metrics::VerifyEvent::RangeVerified
            }
            _ => crate::metrics::VerifyEvent::RangeSpoofed,
        };
        w.metrics.count_verify(host, event);
        return Some(crate::identity::verifier_answer::class_for(v, bot_class));
    }
    let prefix = facts.client_prefix.unwrap_or(ip);
    let (fp, prefix_fp) = match w.limiter.try_borrow() {
        Ok(l) => (
            l.claim_fingerprint(ip, bot_id),
            l.prefix_fingerprint(prefix),
        ),
        Err(_) => return Some(Class::UnverifiedBot),
    };
    // A warm verified verdict this worker copied: no shared data, no clock read (the
    // worker's last reading; crate::identity::local_verdicts states the bound).
    let copied = w.clock.coarse_ns().is_some_and(|t| {
        w.verifier
            .local
            .try_borrow_mut()
            .is_ok_and(|mut l| l.verified(fp, t))
    });
    if copied {
        w.metrics
            .count_verify(host, crate::metrics::VerifyEvent::CacheHit);
        return Some(crate::identity::verifier_answer::class_for(
            crate::identity::verifier_answer::Verdict::Verified,
            bot_class,
        ));
    }
    let Some(now) = w.clock.exact_ns(host) else {
        // No clock: no cache, no deadline. Decide as a verifier error would.
        return Some(match w.cfg.verifier.on_error {
            crate::config::OnError::UnverifiedBot => Class::UnverifiedBot,
            crate::config::OnError::ClaimedClass => bot_class,
        });
    };
    let claim = Claim {
        fp,
        prefix_fp,
        ip,
        bot_id: bot_id.to_string(),
        bot_class,
    };
    let waiter = Waiter {
        context,
        handle: me,
        deadline_ns: now.saturating_add(u64::from(w.cfg.verifier.timeout_ms) * 1_000_000),
    };
    match verification::check(w.verify(), host, &claim, waiter, now) {
        Check::Class(class) => Some(class),
        Check::Wait => None,
    }
}

impl RequestState {
    /// A signed agent's request: decided (`Ok`: forwarded or answered with the agent's
    /// class, `spoofed` or `verifier.on_error`), or paused for its signature's check (`Ok`
    /// too); `Err(facts)` when it carries no signature of a known agent (decided as if
    /// unsigned, by its User-Agent).
    pub(super) fn on_signature(
        &mut self,
        me: &Handle,
        context: ContextId,
        w: RequestParts<'_>,
        host: &mut dyn Host,
        mut facts: Facts,
    ) -> Result<Step, Facts> {
        let waiter = |deadline_ns| Waiter {
            context,
            handle: me.clone(),
            deadline_ns,
        };
        match signed_agents::judge(w.verify(), host, waiter) {
            Signed::Unsigned => Err(facts),
            Signed::Class(class, agent) => {
                facts.claimed = Some(agent.class);
                Ok(self.decide(w, host, &facts, class, Some(&agent.id), None))
            }
            Signed::Wait(agent) => {
                facts.claimed = Some(agent.class);
                facts.bot = Some(agent.id.clone());
                self.phase = Phase::AwaitingVerdict(Box::new(facts));
                Ok(Step::Pause)
            }
        }
    }
}

/// Resumes a request paused on a verdict, with `class` (root side; the request may be gone,
/// or already resumed, in which case nothing happens).
pub fn resume(w: RequestParts<'_>, host: &mut dyn Host, waiter: &Waiter<Handle>, class: Class) {
    let Some(rc) = waiter.handle.upgrade() else {
        return;
    };
    let Ok(mut state) = rc.try_borrow_mut() else {
        return;
    };
    if !state.is_awaiting_verdict() || host.switch_to(waiter.context).is_err() {
        return;
    }
    if state.on_verdict(w, host, class) == Some(Step::Continue) {
        let _ = host.resume_request();
    }
}
