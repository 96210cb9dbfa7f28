//! Signed agents, request side: a request carrying a Web Bot Auth signature
//! (`Signature-Input` with `tag="web-bot-auth"`, `Signature`, and a `Signature-Agent` naming
//! a known agent's origin, `signed_agents.agents` and the catalog's) is decided by its
//! signature before anything its User-Agent says (a signing agent sends a browser's), by
//! one callout to the sidecar (`POST /v1/signature`, [`crawlguard_contract::signature`])
//! with the parts of the request a signature can cover: the ed25519 verifier does not fit
//! the module (README, "Signed agents"). In `enforce` mode the request pauses for the
//! answer (at most `verifier.timeout_ms`); in `shadow` mode the check runs without it.
//! The root side is [`crate::identity::signature_callouts`].
//!
//! A request without the three headers, without the tag (counted `missing_tag`) or naming
//! no known agent (counted `unknown_agent`) is decided as if unsigned: it proves nothing,
//! and a header anyone can add must not cost a callout.
//!
//! The checks in flight live per worker in
//! [`crate::identity::signature_checks::SignatureChecks`], bounded: a signed request beyond
//! it is a verifier error (`verifier.on_error`, counted `error`).

use crate::config::{OnError, SignedAgent, SignedAgentsMode};
use crate::host::Host;
use crate::identity::class::Class;
use crate::identity::signature_checks::SignatureCheck;
use crate::identity::signature_event::SignatureEvent;
use crate::identity::verification::{VerifyParts, NS_PER_MS};
use crate::identity::verifier_flights::{FlightState, Waiter};
use crawlguard_contract::signature::{Outcome, Request, MAX_HEADERS, MAX_REQUEST_BYTES};

/// What a request's signature decides now.
#[derive(Debug)]
pub enum Signed<'c> {
    /// No signature of a known agent: decide as if unsigned.
    Unsigned,
    /// Decided without an answer: `spoofed` for a signed request too large to check
    /// (more than the contract's bounds), `verifier.on_error` when no check can be made
    /// (no clock, too many checks in flight, no wake-up).
    Class(Class, &'c SignedAgent),
    /// Paused until the sidecar answers.
    Wait(&'c SignedAgent),
}

/// The class of a signature that could not be checked (`verifier.on_error`).
pub fn on_error_class(on_error: OnError, agent: &SignedAgent) -> Class {
    match on_error {
        OnError::UnverifiedBot => Class::UnverifiedBot,
        OnError::ClaimedClass => agent.class,
    }
}

/// Every line of `name`, as text (bytes that are not UTF-8 replaced: such a line never
/// verifies).
fn lines(host: &mut dyn Host, name: &str) -> Vec<String> {
    host.request_header_lines(name)
        .into_iter()
        .map(|l| String::from_utf8_lossy(&l).into_owned())
        .collect()
}

/// The agent whose origin `Signature-Agent` names, as an sf-string (`"https://a.example"`,
/// with or without a trailing `/`), whether the field is a single string or a dictionary.
fn named_agent<'c>(
    agents: &'c [SignedAgent],
    signature_agent: &[String],
) -> Option<(usize, &'c SignedAgent)> {
    agents.iter().enumerate().find(|(_, a)| {
        let quoted = format!("\"{}\"", a.origin);
        let slashed = format!("\"{}/\"", a.origin);
        signature_agent
            .iter()
            .any(|l| l.contains(&quoted) || l.contains(&slashed))
    })
}

/// The field names `Signature-Input` covers (quoted strings that are no derived component
/// and no parameter value: a parameter's `="..."` is skipped), lowercase, at most
/// [`MAX_HEADERS`].
fn covered_fields(input: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in input {
        let mut rest = line.as_str();
        while let Some(start) = rest.find('"') {
            let before = rest.get(..start).unwrap_or_default();
            let after = rest.get(start + 1..).unwrap_or_default();
            let Some(end) = after.find('"') else { break };
            let name = after.get(..end).unwrap_or_default();
            rest = after.get(end + 1..).unwrap_or_default();
            let is_param_value = before.ends_with('=');
            let is_field = !name.is_empty()
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'-'
                        || b == b'_'
                        || b == b'.'
                });
            if !is_param_value
                && is_field
                && !out.iter().any(|n| n == name)
                && out.len() < MAX_HEADERS
            {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The callout body for the current request: its method, authority, scheme, path, the
/// signature's fields and the fields it covers. `None` when it would exceed
/// [`MAX_REQUEST_BYTES`] or [`MAX_HEADERS`] lines.
fn request_body(
    host: &mut dyn Host,
    input: Vec<String>,
    agent_lines: Vec<String>,
) -> Option<Vec<u8>> {
    let text = |host: &mut dyn Host, name: &str| {
        host.request_header(name)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default()
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    for name in covered_fields(&input) {
        if !matches!(
            name.as_str(),
            "signature-input" | "signature" | "signature-agent"
        ) {
            headers.extend(lines(host, &name).into_iter().map(|v| (name.clone(), v)));
        }
    }
    let signature = lines(host, "signature");
    headers.extend(
        input
            .into_iter()
            .map(|v| ("signature-input".to_string(), v)),
    );
    headers.extend(signature.into_iter().map(|v| ("signature".to_string(), v)));
    headers.extend(
        agent_lines
            .into_iter()
            .map(|v| ("signature-agent".to_string(), v)),
    );
    if headers.len() > MAX_HEADERS {
        return None;
    }
    let req = Request {
        method: text(host, ":method"),
        authority: text(host, ":authority"),
        scheme: text(host, ":scheme"),
        path: text(host, ":path"),
        headers,
    };
    Some(req.to_json()).filter(|b| b.len() <= MAX_REQUEST_BYTES)
}

/// Request side: what the current request's signature decides. `waiter` pauses it (its
/// deadline is set here). Counts what it decides without the sidecar.
pub fn judge<'c, W: Clone>(
    w: VerifyParts<'c, W>,
    host: &mut dyn Host,
    waiter: impl FnOnce(u64) -> Waiter<W>,
) -> Signed<'c> {
    let sa = &w.cfg.signed_agents;
    if !sa.enabled() || !w.cfg.verifier.enabled || host.request_header("signature-input").is_none()
    {
        return Signed::Unsigned;
    }
    let input = lines(host, "signature-input");
    if !input.iter().any(|l| l.contains("tag=\"web-bot-auth\"")) {
        w.metrics
            .count_signature(host, SignatureEvent::Outcome(Outcome::MissingTag));
        return Signed::Unsigned;
    }
    let agent_lines = lines(host, "signature-agent");
    let Some((index, agent)) = named_agent(&sa.agents, &agent_lines) else {
        w.metrics
            .count_signature(host, SignatureEvent::Outcome(Outcome::UnknownAgent));
        return Signed::Unsigned;
    };
    let on_error = on_error_class(w.cfg.verifier.on_error, agent);
    let shadow = sa.mode == SignedAgentsMode::Shadow;
    let Some(body) = request_body(host, input, agent_lines) else {
        // A known agent's signature over more than a request may carry: refused.
        w.metrics
            .count_signature(host, SignatureEvent::Outcome(Outcome::Malformed));
        return if shadow {
            Signed::Unsigned
        } else {
            Signed::Class(Class::Spoofed, agent)
        };
    };
    let Some(now) = host.now_ns() else {
        w.metrics.count_signature(host, SignatureEvent::Error);
        return if shadow {
            Signed::Unsigned
        } else {
            Signed::Class(on_error, agent)
        };
    };
    let deadline_ns = now.saturating_add(u64::from(w.cfg.verifier.timeout_ms) * NS_PER_MS);
    let check = SignatureCheck {
        waiter: (!shadow).then(|| waiter(deadline_ns)),
        agent: index,
        body,
        state: FlightState::Queued,
        deadline_ns,
    };
    let added = match w.verifier.signatures.try_borrow_mut() {
        Ok(mut c) => c.add(check),
        Err(_) => None,
    };
    let woken = added.is_some() && w.verifier.request_wake(host);
    if !woken {
        // No root callback will come for it: taken back, it fails now.
        if let (Some(seq), Ok(mut c)) = (added, w.verifier.signatures.try_borrow_mut()) {
            let _ = c.take(seq);
        }
        w.metrics.count_signature(host, SignatureEvent::Error);
        return if shadow {
            Signed::Unsigned
        } else {
            Signed::Class(on_error, agent)
        };
    }
    if shadow {
        Signed::Unsigned
    } else {
        Signed::Wait(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covered_fields_are_the_quoted_names_not_parameter_values() {
        let input = vec![
            r#"sig1=("@authority" "signature-agent";key="agent1" "content-type" "x-a");created=1;keyid="k";tag="web-bot-auth""#.to_string(),
            r#"sig2=("X-Upper" "x-a" "@method")"#.to_string(),
        ];
        assert_eq!(
            covered_fields(&input),
            vec!["signature-agent", "content-type", "x-a"]
        );
    }

    #[test]
    fn the_agent_is_found_in_either_form_of_signature_agent() {
        let agents = vec![
            SignedAgent {
                id: "a".into(),
                origin: "https://a.example".into(),
                class: Class::AiRetriever,
            },
            SignedAgent {
                id: "b".into(),
                origin: "https://b.example".into(),
                class: Class::AiRetriever,
            },
        ];
        let find = |v: &str| named_agent(&agents, &[v.to_string()]).map(|(i, _)| i);
        assert_eq!(find("\"https://b.example\""), Some(1));
        assert_eq!(find("\"https://a.example/\""), Some(0));
        assert_eq!(find("agent1=\"https://b.example\""), Some(1));
        assert_eq!(find("\"https://a.example.evil\""), None);
        assert_eq!(find("\"https://evil/https://a.example\""), None);
    }
}
