//! The configuration document as serde reads it: every field optional (its default comes
//! from `defaults.rs`), unknown fields refused. `compile.rs` turns it into [`super::Config`].

use super::{
    BotsMode, BrowserCheckMode, ClientIpConfig, FleetConfig, Mode, RewriteConfig, Route,
    StoreConfig, VerifierConfig,
};
use crate::identity::catalog::BotEntry;
use crate::identity::class::Class;
use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

/// A JSON object read as a map, refusing a key that appears twice: serde's maps keep the
/// last value, so `{"human": {...}, "human": {}}` silently dropped the first entry, even an
/// invalid one. Duplicate struct fields are refused by serde itself.
///
/// Errors: `duplicate key "<key>"` (at the map's path).
fn unique_keys<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct Unique<V>(PhantomData<V>);
    impl<'de, V: Deserialize<'de>> Visitor<'de> for Unique<V> {
        type Value = BTreeMap<String, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = m.next_key::<String>()? {
                if out.contains_key(&k) {
                    return Err(A::Error::custom(format!("duplicate key {k:?}")));
                }
                let v = m.next_value()?;
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Unique(PhantomData))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) mode: Mode,
    #[serde(default)]
    pub(super) client_ip: ClientIpConfig,
    #[serde(default)]
    pub(super) bots: Vec<BotEntry>,
    #[serde(default)]
    pub(super) bots_mode: BotsMode,
    pub(super) non_browser_class: Option<Class>,
    #[serde(default, deserialize_with = "unique_keys")]
    pub(super) classes: BTreeMap<String, RawClassPolicy>,
    #[serde(default)]
    pub(super) routes: Vec<Route>,
    pub(super) limits: Option<Vec<RawLimit>>,
    pub(super) exempt_paths: Option<Vec<String>>,
    #[serde(default)]
    pub(super) exempt_limit: RawExemptLimit,
    pub(super) class_header: Option<String>,
    #[serde(default)]
    pub(super) ratelimit_headers: bool,
    #[serde(default)]
    pub(super) store: StoreConfig,
    #[serde(default)]
    pub(super) verifier: VerifierConfig,
    #[serde(default)]
    pub(super) fleet: FleetConfig,
    #[serde(default)]
    pub(super) rewrite: RewriteConfig,
    #[serde(default)]
    pub(super) degraded: Option<String>,
    #[serde(default)]
    pub(super) shedding: RawShedding,
    #[serde(default, deserialize_with = "unique_keys")]
    pub(super) browser_checks: BTreeMap<String, BrowserCheckMode>,
    #[serde(default)]
    pub(super) client_signals: super::client_signals::RawClientSignals,
    #[serde(default)]
    pub(super) signed_agents: super::signed_agents::RawSignedAgents,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClassPolicy {
    pub(super) retry_after: Option<RawRetryAfter>,
    pub(super) reject_status: Option<u16>,
    pub(super) escalation: Option<RawEscalation>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEscalation {
    pub(super) enabled: Option<bool>,
    pub(super) after_ignored: Option<u16>,
    pub(super) factor: Option<f64>,
    pub(super) max_s: Option<u32>,
    pub(super) decay_s: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetryAfter {
    pub(super) min_s: Option<u32>,
    pub(super) max_s: Option<u32>,
    pub(super) jitter_s: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) name: String,
    pub(super) class: String,
    pub(super) route: String,
    #[serde(default)]
    pub(super) rate_per_s: Option<f64>,
    #[serde(default)]
    pub(super) burst: Option<u32>,
    #[serde(default)]
    pub(super) max_in_flight: Option<u32>,
    pub(super) key: RawKey,
    #[serde(default)]
    pub(super) ipv4_prefix_len: Option<u32>,
    #[serde(default)]
    pub(super) ipv6_prefix_len: Option<u32>,
    #[serde(default)]
    pub(super) mode: Option<Mode>,
    #[serde(default)]
    pub(super) cost: Option<RawCost>,
}

impl RawLimit {
    /// The key as the README's tables show it, with a limit's own address prefix after it
    /// (`client_ip /24 /48`; a prefix not given is shown as `-`).
    pub(super) fn key_label(&self) -> String {
        let len = |l: Option<u32>| l.map_or("-".to_string(), |l| l.to_string());
        match (self.ipv4_prefix_len, self.ipv6_prefix_len) {
            (None, None) => self.key.to_string(),
            (v4, v6) => format!("{} /{} /{}", self.key, len(v4), len(v6)),
        }
    }
}

/// `limits[].key`: one part (`"client_ip"`), or a compound key's parts (`["bot", "path"]`).
/// Read by a visitor, not `#[serde(untagged)]`, whose buffering machinery would add about
/// 20 kB to the filter module.
#[derive(Debug, Clone)]
pub(super) enum RawKey {
    One(String),
    Compound(Vec<String>),
}

impl<'de> Deserialize<'de> for RawKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = RawKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key string or a list of key strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawKey, E> {
                Ok(RawKey::One(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RawKey, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    parts.push(p);
                }
                Ok(RawKey::Compound(parts))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}

impl std::fmt::Display for RawKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawKey::One(k) => f.write_str(k),
            RawKey::Compound(parts) => f.write_str(&parts.join(" + ")),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCost {
    pub(super) reserve: u32,
    #[serde(default)]
    pub(super) max_in_flight: Option<u32>,
    pub(super) from_response_header: String,
}

/// `exempt_limit`: every field optional (defaults in `defaults.rs`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExemptLimit {
    pub(super) enabled: Option<bool>,
    pub(super) rate_per_s: Option<f64>,
    pub(super) burst: Option<u32>,
    pub(super) mode: Option<Mode>,
    pub(super) retry_after: Option<RawRetryAfter>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShedding {
    pub(super) enabled: Option<bool>,
    pub(super) mode: Option<Mode>,
    pub(super) latency_ms: Option<u32>,
    pub(super) error_ratio: Option<f64>,
    pub(super) window_s: Option<u32>,
    pub(super) min_requests: Option<u32>,
    pub(super) step_s: Option<u32>,
    pub(super) min_clients: Option<u32>,
    pub(super) order: Option<Vec<Class>>,
    pub(super) retry_after: Option<RawRetryAfter>,
    #[serde(default, deserialize_with = "unique_keys")]
    pub(super) routes: BTreeMap<String, RawShedOverride>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShedOverride {
    pub(super) latency_ms: Option<u32>,
    pub(super) error_ratio: Option<f64>,
}
