//! The `signed_agents` section: Web Bot Auth signatures (RFC 9421 with
//! `tag="web-bot-auth"`), verified by the sidecar (`POST /v1/signature`), give an agent that
//! browses with a browser User-Agent its own class and bot id.

use super::error::err;
use super::ConfigError;
use crate::identity::catalog::builtin_signed_agents;
use crate::identity::class::Class;
use crawlguard_contract::bot_id::is_valid_bot_id;
use crawlguard_contract::catalog::is_agent_origin;
use serde::Deserialize;

/// `signed_agents.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignedAgentsMode {
    /// A signed request of a known agent waits for its check: verified, it gets the agent's
    /// class and bot id; refused, `spoofed`.
    #[default]
    Enforce,
    /// Every signed request of a known agent is checked without waiting, and counted
    /// (`crawlguard.signature.<result>`): what enforcing would do; the class stays as if
    /// unsigned.
    Shadow,
    /// Signatures are not looked at.
    Off,
}

/// One signing agent: the origin its `Signature-Agent` names, and who it is then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedAgent {
    /// Bot id (the `bot` limit key): one bucket per agent.
    pub id: String,
    /// `https://<host>[:<port>]`.
    pub origin: String,
    /// The class a verified signature gets (a crawler class).
    pub class: Class,
}

/// `signed_agents`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedAgents {
    /// `enforce`, `shadow` or `off`.
    pub mode: SignedAgentsMode,
    /// The configured agents first, then the catalog's whose id and origin they do not
    /// take.
    pub agents: Vec<SignedAgent>,
    /// Nonces remembered at once per Envoy (shared data), 16..=1048576.
    pub nonce_slots: u32,
}

impl SignedAgents {
    /// Whether signatures are looked at.
    pub fn enabled(&self) -> bool {
        self.mode != SignedAgentsMode::Off
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    id: String,
    origin: String,
    class: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSignedAgents {
    #[serde(default)]
    mode: SignedAgentsMode,
    #[serde(default)]
    agents: Vec<RawAgent>,
    nonce_slots: Option<u32>,
}

/// The default of `signed_agents.nonce_slots`: 16,384 slots (about 2 MB of shared data) for
/// all agents together, holding 14,505 live nonces before the first refusal
/// ([`crate::identity::nonce_store`]): about 120 signed requests per second with 60-second
/// signatures, which hold their slot about 120 s (`expires` + the sidecar's 60-s skew).
pub const DEFAULT_NONCE_SLOTS: u32 = 16_384;

/// An origin as `Signature-Agent` names it, in one spelling: lowercased (scheme and host
/// are case-insensitive, RFC 3986 section 6.2.2.1; an origin has no path) and without
/// https's default port `:443` (section 6.2.3), so `https://A.example:443` and
/// `https://a.example` are one agent.
fn normalise_origin(origin: &str) -> String {
    let lower = origin.to_ascii_lowercase();
    match lower.rsplit_once(':') {
        Some((host, "443")) if host != "https" => host.to_string(),
        _ => lower,
    }
}

/// `signed_agents`: `bot_ids` are the classifier's bot ids (an agent may not share one's
/// bucket).
pub(super) fn compile(
    raw: &RawSignedAgents,
    bot_ids: &[&str],
) -> Result<SignedAgents, ConfigError> {
    let mut agents: Vec<SignedAgent> = Vec::new();
    for (i, a) in raw.agents.iter().enumerate() {
        let field = |f: &str| format!("signed_agents.agents[{i}].{f}");
        if !is_valid_bot_id(&a.id) || bot_ids.contains(&a.id.as_str()) {
            return Err(err(
                field("id"),
                "must be 1..=64 bytes of [a-z0-9._-] and no bot's id",
            ));
        }
        let origin = normalise_origin(&a.origin);
        if !is_agent_origin(&origin) {
            return Err(err(
                field("origin"),
                "must be https://<host>[:<port>], without a path",
            ));
        }
        if let Some(j) = agents.iter().position(|b| b.id == a.id) {
            return Err(err(
                field("id"),
                format!("is also signed_agents.agents[{j}].id"),
            ));
        }
        if let Some(j) = agents.iter().position(|b| b.origin == origin) {
            return Err(err(
                field("origin"),
                format!(
                    "{origin:?} is also signed_agents.agents[{j}].origin (the host lowercased, \
                     the default port :443 dropped)"
                ),
            ));
        }
        let class = Class::parse(&a.class)
            .filter(|c| c.is_crawler())
            .ok_or_else(|| {
                err(
                    field("class"),
                    "must be search_crawler, ai_retriever or ai_trainer",
                )
            })?;
        agents.push(SignedAgent {
            id: a.id.clone(),
            origin,
            class,
        });
    }
    for b in builtin_signed_agents() {
        if !agents.iter().any(|a| a.id == b.id || a.origin == b.origin) {
            agents.push(SignedAgent {
                id: b.id.to_string(),
                origin: b.origin.to_string(),
                class: b.class.into(),
            });
        }
    }
    let nonce_slots = raw.nonce_slots.unwrap_or(DEFAULT_NONCE_SLOTS);
    if !(16..=1_048_576).contains(&nonce_slots) {
        return Err(err("signed_agents.nonce_slots", "must be 16..=1048576"));
    }
    Ok(SignedAgents {
        mode: raw.mode,
        agents,
        nonce_slots,
    })
}
