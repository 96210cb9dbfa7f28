//! The signed agents' metrics (prefix `crawlguard_sidecar_`). Label values are bounded:
//! `result` is an [`Outcome`] or a fixed fetch result, `agent` an allowed origin.

use crawlguard_contract::signature::Outcome;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels of `signatures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// An outcome (`verified`, `bad_signature`, ...).
    pub result: String,
}

/// Labels of `agent_directory_fetches_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FetchLabels {
    /// The agent origin.
    pub agent: String,
    /// `ok`, `timeout`, `redirect`, `refused_address`, `status`, `too_large`, `invalid`,
    /// `error`.
    pub result: String,
}

/// Labels of the per-agent series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabels {
    /// The agent origin.
    pub agent: String,
}

/// Every signed-agent metric.
#[derive(Clone)]
pub struct AgentMetrics {
    /// Signatures answered, by outcome.
    pub signatures: Family<ResultLabels, Counter>,
    /// Signatures answered `503`: the agent's directory could not be had.
    pub errors: Counter,
    /// Directory fetches, by agent and result.
    pub fetches: Family<FetchLabels, Counter>,
    /// Signatures checked with a directory past its lifetime because fetching it failed.
    pub stale: Family<AgentLabels, Counter>,
    /// Ed25519 keys in use per agent.
    pub keys: Family<AgentLabels, Gauge>,
    /// Time of one ed25519 verification, seconds.
    pub verify_seconds: Histogram,
}

impl AgentMetrics {
    /// Creates and registers them.
    pub fn register(registry: &mut Registry) -> AgentMetrics {
        let m = AgentMetrics {
            signatures: Family::default(),
            errors: Counter::default(),
            fetches: Family::default(),
            stale: Family::default(),
            keys: Family::default(),
            // 4 us .. ~130 ms.
            verify_seconds: Histogram::new(exponential_buckets(0.000_004, 2.0, 16)),
        };
        registry.register(
            "signatures",
            "Signed requests checked (POST /v1/signature), by result",
            m.signatures.clone(),
        );
        registry.register(
            "signature_errors",
            "Signed requests answered 503: the agent's key directory could not be had",
            m.errors.clone(),
        );
        registry.register(
            "agent_directory_fetches",
            "Key directory fetches, by agent origin and result",
            m.fetches.clone(),
        );
        registry.register(
            "agent_directory_stale",
            "Signatures checked with keys past their lifetime while fetching the directory fails",
            m.stale.clone(),
        );
        registry.register(
            "agent_directory_keys",
            "Ed25519 keys in use per agent origin",
            m.keys.clone(),
        );
        registry.register(
            "signature_verify_seconds",
            "Time of one ed25519 signature verification",
            m.verify_seconds.clone(),
        );
        m
    }

    /// Counts one answered signature.
    pub fn count(&self, o: Outcome) {
        self.signatures
            .get_or_create(&ResultLabels {
                result: o.as_str().to_string(),
            })
            .inc();
    }

    /// Counts one fetch of `agent`'s directory.
    pub fn fetched(&self, agent: &str, result: &str) {
        self.fetches
            .get_or_create(&FetchLabels {
                agent: agent.to_string(),
                result: result.to_string(),
            })
            .inc();
    }
}
