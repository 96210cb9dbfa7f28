//! What a signed agent's request came to: the counter `crawlguard.signature.<event>` it
//! increments ([`crate::metrics::Metrics::count_signature`]).

use crawlguard_contract::signature::Outcome;

/// What a signed request of a known agent came to (`crawlguard.signature.<event>`): the
/// sidecar's outcome ([`Outcome`]), or the filter's own findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureEvent {
    /// The sidecar's answer.
    Outcome(Outcome),
    /// A verified signature whose nonce was already accepted within its window.
    Replayed,
    /// The sidecar's answer is about another agent than the one the filter matched in
    /// `Signature-Agent` (it names several origins and the signature covers another):
    /// `spoofed`.
    AgentMismatch,
    /// A verified signature whose nonce could not be recorded (the nonce store is full of
    /// nonces still in their windows, or shared data failed): `verifier.on_error`.
    NonceStoreFull,
    /// No answer: the callout failed, timed out, answered another status (`503`: no key
    /// directory) or a malformed body, or too many checks were in flight:
    /// `verifier.on_error`.
    Error,
}

impl SignatureEvent {
    /// The filter's own events, after the outcomes.
    const EXTRA: [SignatureEvent; 4] = [
        SignatureEvent::Replayed,
        SignatureEvent::AgentMismatch,
        SignatureEvent::NonceStoreFull,
        SignatureEvent::Error,
    ];

    /// The counter name part.
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureEvent::Outcome(o) => o.as_str(),
            SignatureEvent::Replayed => "replayed",
            SignatureEvent::AgentMismatch => "agent_mismatch",
            SignatureEvent::NonceStoreFull => "nonce_store_full",
            SignatureEvent::Error => "error",
        }
    }

    /// Every event's name, in counter order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Outcome::ALL
            .into_iter()
            .map(SignatureEvent::Outcome)
            .chain(Self::EXTRA)
            .map(SignatureEvent::as_str)
    }

    /// Its position in [`SignatureEvent::names`].
    pub fn index(self) -> usize {
        match self {
            SignatureEvent::Outcome(o) => Outcome::ALL.iter().position(|x| *x == o).unwrap_or(0),
            e => Outcome::ALL.len() + Self::EXTRA.iter().position(|x| *x == e).unwrap_or(0),
        }
    }
}
