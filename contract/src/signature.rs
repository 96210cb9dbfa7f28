//! The signature contract (filter <-> sidecar) for signed agents (Web Bot Auth: RFC 9421
//! HTTP Message Signatures with `tag="web-bot-auth"`, draft-meunier-web-bot-auth-architecture).
//!
//! The filter does not verify an ed25519 signature itself: the verifier alone added 42,769
//! bytes to a module then at 637,927 (the build fails at 640,000; README "Signed agents").
//! So it sends what a signature covers to the sidecar, one callout per signed request:
//! `POST /v1/signature` with a [`Request`] as JSON, answered `200` with an [`Answer`], or
//! `503` when the agent's key directory cannot be had (never fetched, and no copy in memory
//! or on disk). The sidecar parses `Signature-Input`, `Signature` and `Signature-Agent`,
//! checks the tag, the window and the covered components, finds the key by its JWK
//! thumbprint in the agent's directory and verifies. A signature is per request: nothing
//! about a verdict is cached anywhere, only the agents' keys (in the sidecar).
//!
//! Compatibility rule: a reader ignores fields it does not know; a `result` it does not know
//! is no result (the filter counts it as a verifier error, never as a verdict); `nonce` and
//! `valid_until` may be absent (`null`/missing: no nonce; no end known).

use serde::{Deserialize, Serialize};

/// The path of the signature endpoint.
pub const PATH: &str = "/v1/signature";

/// Largest request body a sidecar accepts, bytes (the filter sends at most this).
pub const MAX_REQUEST_BYTES: usize = 32_768;

/// Most header fields a request carries (the signature's three and the fields it covers).
pub const MAX_HEADERS: usize = 32;

/// A signed request, as the filter saw it: what its signature can cover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// `:method`.
    pub method: String,
    /// `:authority` (the `Host`), as the client sent it.
    pub authority: String,
    /// `:scheme` (`https` or `http`).
    pub scheme: String,
    /// `:path` with its query.
    pub path: String,
    /// Header fields, lowercase names, one entry per line in request order:
    /// `signature-input`, `signature`, `signature-agent` and every field `Signature-Input`
    /// names.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The request as JSON text (what the filter sends).
    pub fn to_json(&self) -> Vec<u8> {
        // Only strings: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// What the sidecar found, one value per reason (each is a filter counter,
/// `crawlguard.signature.<result>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The signature verifies with a key of the agent's directory.
    Verified,
    /// No `Signature-Input` member has `tag="web-bot-auth"`.
    MissingTag,
    /// A header does not parse (RFC 8941), a parameter has the wrong type, `created`,
    /// `expires` or `keyid` is missing, or `Signature` has no byte sequence for the label.
    Malformed,
    /// `expires` is in the past (beyond the allowed skew).
    Expired,
    /// `created` is in the future (beyond the allowed skew).
    CreatedInFuture,
    /// `expires - created` is longer than the sidecar allows (a long-lived signature is a
    /// replay waiting to happen).
    ValidityTooLong,
    /// The covered components lack `@authority` (or `@target-uri`), or `signature-agent`
    /// while the request has that header, or a covered field is absent.
    MissingComponent,
    /// `alg` names another algorithm than `ed25519`.
    UnsupportedAlg,
    /// `Signature-Agent` is missing or names an origin the sidecar's allowlist lacks.
    UnknownAgent,
    /// The agent's directory has no key with this thumbprint.
    UnknownKey,
    /// The key is there and the signature does not verify: a tampered covered component,
    /// another authority, another key.
    BadSignature,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 11] = [
        Outcome::Verified,
        Outcome::MissingTag,
        Outcome::Malformed,
        Outcome::Expired,
        Outcome::CreatedInFuture,
        Outcome::ValidityTooLong,
        Outcome::MissingComponent,
        Outcome::UnsupportedAlg,
        Outcome::UnknownAgent,
        Outcome::UnknownKey,
        Outcome::BadSignature,
    ];

    /// The wire spelling, also the counter and metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Verified => "verified",
            Outcome::MissingTag => "missing_tag",
            Outcome::Malformed => "malformed",
            Outcome::Expired => "expired",
            Outcome::CreatedInFuture => "created_in_future",
            Outcome::ValidityTooLong => "validity_too_long",
            Outcome::MissingComponent => "missing_component",
            Outcome::UnsupportedAlg => "unsupported_alg",
            Outcome::UnknownAgent => "unknown_agent",
            Outcome::UnknownKey => "unknown_key",
            Outcome::BadSignature => "bad_signature",
        }
    }
}

/// The JSON body of a `200` from `POST /v1/signature`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// What the sidecar found.
    pub result: Outcome,
    /// The agent origin the signature names (`""` when none could be read).
    #[serde(default)]
    pub agent: String,
    /// The signature's `keyid` (`""` when none could be read).
    #[serde(default)]
    pub keyid: String,
    /// The signature's `nonce`, if it has one: with `verified`, the filter accepts it once
    /// until `valid_until`.
    #[serde(default)]
    pub nonce: Option<String>,
    /// The last second (since the Unix epoch) the sidecar would still accept this
    /// signature: its `expires` plus the allowed clock skew. Its nonce must be remembered
    /// until then.
    #[serde(default)]
    pub valid_until: Option<u64>,
}

impl Answer {
    /// The answer as JSON text (what the sidecar sends).
    pub fn to_json(&self) -> String {
        // Only strings, integers and unit variants: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses an answer body; `Err` carries serde_json's message (an unknown `result` too).
    pub fn from_json(body: &[u8]) -> Result<Answer, String> {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_spell_their_outcome() {
        let a = Answer {
            result: Outcome::Verified,
            agent: "https://chatgpt.com".into(),
            keyid: "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U".into(),
            nonce: Some("n1".into()),
            valid_until: Some(1_735_693_260),
        };
        assert_eq!(
            a.to_json(),
            r#"{"result":"verified","agent":"https://chatgpt.com","keyid":"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U","nonce":"n1","valid_until":1735693260}"#
        );
        assert_eq!(Answer::from_json(a.to_json().as_bytes()), Ok(a));
        for o in Outcome::ALL {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
        }
    }

    #[test]
    fn unknown_fields_are_ignored_and_an_unknown_result_is_refused() {
        let a = Answer::from_json(br#"{"result":"bad_signature","extra":1}"#).unwrap();
        assert_eq!(a.result, Outcome::BadSignature);
        assert_eq!((a.agent.as_str(), a.nonce, a.valid_until), ("", None, None));
        assert!(Answer::from_json(br#"{"result":"revoked"}"#).is_err());
        assert!(Answer::from_json(b"").is_err());
    }

    #[test]
    fn a_request_is_json_with_header_pairs() {
        let r = Request {
            method: "GET".into(),
            authority: "example.com".into(),
            scheme: "https".into(),
            path: "/a?b=1".into(),
            headers: vec![("signature-agent".into(), "\"https://chatgpt.com\"".into())],
        };
        let json = String::from_utf8(r.to_json()).unwrap();
        assert_eq!(
            json,
            r#"{"method":"GET","authority":"example.com","scheme":"https","path":"/a?b=1","headers":[["signature-agent","\"https://chatgpt.com\""]]}"#
        );
        assert_eq!(serde_json::from_str::<Request>(&json).unwrap(), r);
    }
}
