//! Signed agents, root side (per worker): the checks queued by
//! [`crate::identity::signed_agents::judge`] are sent to the sidecar from the root context
//! ([`dispatch_queued`], on the same wake-up as verifier callouts), and each answer
//! ([`on_response`]) gives its request a class:
//!
//! - `verified`: the agent's class, once its nonce is taken in the [`NonceStore`] (a nonce
//!   already taken within its window is a replay: `spoofed`, counted `replayed`; one that
//!   finds no room: `verifier.on_error`, counted `nonce_store_full`);
//! - `unknown_agent` (the sidecar does not allow the origin the filter knows):
//!   `verifier.on_error`, and a warning: the two allowlists differ;
//! - `verified` or `unknown_agent` about another origin than the one the filter matched
//!   (`agent_mismatch`): `spoofed`;
//! - every other outcome: `spoofed`, counted by its reason;
//! - no good answer (timeout, another status, a malformed body): `verifier.on_error`,
//!   counted `error`.
//!
//! Nothing is cached: a signature is good for one request. A request given up on before
//! its answer ([`expire`], [`drain`]) gets `verifier.on_error`.

use crate::config::SignedAgent;
use crate::host::{Callout, Host};
use crate::identity::class::Class;
use crate::identity::nonce_store::Accepted;
use crate::identity::signature_event::SignatureEvent;
use crate::identity::signed_agents::on_error_class;
use crate::identity::verification::{Resolution, VerifyParts, NS_PER_MS, NS_PER_S};
use crawlguard_contract::signature::{Answer, Outcome, PATH};

/// The class and event of one answer about a signature of `agent` at `now_ns`.
fn judge_answer<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    agent: &SignedAgent,
    answer: Result<Answer, String>,
    now_ns: u64,
) -> (Class, SignatureEvent) {
    let on_error = on_error_class(w.cfg.verifier.on_error, agent);
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            if w.verifier.warning.due(now_ns) {
                log::warn!("signature check for {} failed: {e}", agent.origin);
            }
            return (on_error, SignatureEvent::Error);
        }
    };
    match answer.result {
        // The sidecar judged another agent than the one the filter matched (a
        // `Signature-Agent` naming several origins, the signature covering another): the
        // claim of this one is unproven, whatever the answer says of the other, and the
        // sender chose it, so it is refused like a bad signature. As `verifier.on_error`
        // it let anyone with no key spend the agent's bucket under `claimed_class`.
        Outcome::Verified | Outcome::UnknownAgent if answer.agent != agent.origin => {
            (Class::Spoofed, SignatureEvent::AgentMismatch)
        }
        Outcome::Verified => {
            let Some(nonce) = answer.nonce else {
                return (agent.class, SignatureEvent::Outcome(Outcome::Verified));
            };
            let until_ns = answer
                .valid_until
                .unwrap_or(0)
                .saturating_mul(NS_PER_S)
                .max(now_ns.saturating_add(NS_PER_S));
            let fp = w.verifier.nonces.fingerprint(&agent.origin, &nonce);
            match w
                .verifier
                .nonces
                .accept(host.shared_data(), fp, now_ns, until_ns)
            {
                Accepted::Fresh => (agent.class, SignatureEvent::Outcome(Outcome::Verified)),
                Accepted::Replayed => (Class::Spoofed, SignatureEvent::Replayed),
                Accepted::Full => {
                    if w.verifier.warning.due(now_ns) {
                        log::warn!(
                            "signed_agents.nonce_slots: no room for a nonce of {}: verified \
                             signatures get verifier.on_error until nonces expire",
                            agent.origin
                        );
                    }
                    (on_error, SignatureEvent::NonceStoreFull)
                }
            }
        }
        Outcome::UnknownAgent => {
            if w.verifier.warning.due(now_ns) {
                log::warn!(
                    "the sidecar does not allow agent {}: add it to the sidecar's agents.origins",
                    agent.origin
                );
            }
            (on_error, SignatureEvent::Outcome(Outcome::UnknownAgent))
        }
        o => (Class::Spoofed, SignatureEvent::Outcome(o)),
    }
}

/// Root side: sends the queued checks, oldest first. One whose deadline passed, or whose
/// dispatch is refused, resolves as an error.
pub fn dispatch_queued<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    now_ns: u64,
) -> Vec<Resolution<W>> {
    let mut out = Vec::new();
    let queued = match w.verifier.signatures.try_borrow() {
        Ok(c) => c.queued(),
        Err(_) => return out,
    };
    let cfg = &w.cfg.verifier;
    for (seq, deadline_ns, body) in queued {
        let timeout_ms = deadline_ns.saturating_sub(now_ns) / NS_PER_MS;
        let sent = (timeout_ms > 0)
            .then(|| {
                host.dispatch_callout(&Callout {
                    method: "POST",
                    cluster: &cfg.cluster,
                    authority: &cfg.authority,
                    path: PATH,
                    timeout_ms,
                    body: &body,
                })
                .ok()
            })
            .flatten();
        let Ok(mut checks) = w.verifier.signatures.try_borrow_mut() else {
            continue;
        };
        match sent {
            Some(token) => checks.dispatched(seq, token),
            None => {
                let check = checks.take(seq);
                drop(checks);
                if let Some(c) = check {
                    resolve(
                        w,
                        host,
                        c.agent,
                        c.waiter,
                        Err("dispatch refused or too late".into()),
                        now_ns,
                        &mut out,
                    );
                }
            }
        }
    }
    out
}

/// Counts and resolves one check's answer.
fn resolve<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    agent: usize,
    waiter: Option<crate::identity::verifier_flights::Waiter<W>>,
    answer: Result<Answer, String>,
    now_ns: u64,
    out: &mut Vec<Resolution<W>>,
) {
    let Some(agent) = w.cfg.signed_agents.agents.get(agent) else {
        return;
    };
    let (class, event) = judge_answer(w, host, agent, answer, now_ns);
    w.metrics.count_signature(host, event);
    log::debug!(
        "signature of {}: {} -> {}",
        agent.origin,
        event.as_str(),
        class.as_str()
    );
    if let Some(waiter) = waiter {
        out.push(Resolution {
            waiter,
            class,
            event: None,
        });
    }
}

/// Root side: the answer to callout `token` (`status` `None`: no response), if it is a
/// signature check's (`None` otherwise).
pub fn on_response<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    token: u32,
    status: Option<&[u8]>,
    body: &[u8],
    now_ns: u64,
) -> Option<Vec<Resolution<W>>> {
    let check = w
        .verifier
        .signatures
        .try_borrow_mut()
        .ok()
        .and_then(|mut c| c.take_by_token(token))?;
    let answer = match status {
        Some(b"200") => Answer::from_json(body),
        Some(s) => Err(format!("status {}", String::from_utf8_lossy(s))),
        None => Err("no response (timeout, reset or refused)".into()),
    };
    let mut out = Vec::new();
    resolve(w, host, check.agent, check.waiter, answer, now_ns, &mut out);
    Some(out)
}

/// Root side: requests past their deadline, resumed with `verifier.on_error` (their
/// dispatched checks stay, and their answers are still counted).
pub fn expire<W: Clone>(
    w: VerifyParts<'_, W>,
    host: &mut dyn Host,
    now_ns: u64,
) -> Vec<Resolution<W>> {
    let (late, dropped) = match w.verifier.signatures.try_borrow_mut() {
        Ok(mut c) => c.expire(now_ns),
        Err(_) => return Vec::new(),
    };
    for _ in 0..dropped {
        w.metrics.count_signature(host, SignatureEvent::Error);
    }
    give_up(w, late)
}

/// Root side, going away: every paused request resumed with `verifier.on_error`.
pub fn drain<W: Clone>(w: VerifyParts<'_, W>, host: &mut dyn Host) -> Vec<Resolution<W>> {
    let all = match w.verifier.signatures.try_borrow_mut() {
        Ok(mut c) => c.drain(),
        Err(_) => return Vec::new(),
    };
    for _ in &all {
        w.metrics.count_signature(host, SignatureEvent::Error);
    }
    give_up(w, all)
}

fn give_up<W: Clone>(
    w: VerifyParts<'_, W>,
    waiters: Vec<(usize, crate::identity::verifier_flights::Waiter<W>)>,
) -> Vec<Resolution<W>> {
    waiters
        .into_iter()
        .filter_map(|(agent, waiter)| {
            let agent = w.cfg.signed_agents.agents.get(agent)?;
            Some(Resolution {
                waiter,
                class: on_error_class(w.cfg.verifier.on_error, agent),
                event: None,
            })
        })
        .collect()
}
