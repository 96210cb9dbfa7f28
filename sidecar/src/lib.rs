//! crawlguard-sidecar: tells the crawlguard filter whether a request that claims to be a
//! known bot really comes from that bot's operator.
//!
//! Methods per bot id (see [`catalog`] and [`config`]): published IP ranges ([`ranges`],
//! from files or from the vendors' URLs, fetched and kept fresh by [`fetch`]), then
//! forward-confirmed reverse DNS ([`verify::fcrdns`]). Verdicts are cached per
//! (ip, bot) with per-verdict lifetimes, and concurrent requests for one key share one
//! resolution ([`verify::Verifier`]). The HTTP API is in [`http`].
//!
//! Fleet mode (with `--redis`): [`fleet`] serves `POST /v1/fleet/sync`, which applies each
//! Envoy's bucket consumption to Redis atomically, and [`redis_store`] is the one Redis
//! client, which also shares FCrDNS verdicts across the fleet.
//!
//! Signed agents (Web Bot Auth): [`agents`] serves `POST /v1/signature`, verifying a signed
//! request's ed25519 signature with its agent's key directory (fetched safely, cached).
//!
//! The binary (`main.rs`: flags, configuration, the loads at start) runs the service with
//! [`serve`]; [`range_reports`] logs and counts what range loads and fetches did.

pub mod agents;
pub mod catalog;
pub mod check;
pub mod config;
pub mod domain;
pub mod fetch;
pub mod fleet;
pub mod http;
pub mod metrics;
pub mod range_reports;
pub mod ranges;
pub mod redis_store;
pub mod resolver;
pub mod serve;
pub mod verify;
