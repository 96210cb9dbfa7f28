//! crawlguard-core: all of the crawlguard filter's policy, with no proxy-wasm dependency:
//! classification, verification, limits, shedding, rewrite decisions and configuration.
//!
//! A request is a state machine ([`request`]) over one seam to the proxy ([`host::Host`]),
//! and each worker keeps its state in a [`worker::Worker`]. The `crawlguard` crate (the wasm
//! module) is the glue: its `filter.rs` maps proxy-wasm callbacks onto the machine and its
//! `wasm_host.rs` is the one `Host` over the proxy-wasm ABI. The `crawlguard-testkit` crate
//! holds the host fake the tests drive it with.
//!
//! In the order a request meets them: [`client_ip`], [`classify`] (the matcher over the
//! [`catalog`], giving a [`class`]), [`verification`] ([`ranges`], [`verdict_cache`], [`flights`],
//! [`verify`]), [`shedding`] ([`origin_health`], [`top_clients`]), [`limiter`] ([`bucket`], [`escalation`],
//! [`store`], [`slot_table`], [`local_store`], [`lease`], and in fleet mode [`fleet`]), [`respond`], and
//! on the way back [`rewrite`]; [`metrics`] counts it all; [`config`] is parsed once per
//! worker. README's "Code map" has one line per module.
//! What the filter shares with the verifier sidecar (wire types, bot ids, the catalog data
//! file) is in the `crawlguard-contract` crate.

// The no-panic rule (a panic kills the worker's VM) is enforced by `[lints.clippy]` in
// Cargo.toml: no unwrap, expect, panic or indexing outside tests; each local exception says
// why it cannot fail.

pub mod bucket;
pub mod catalog;
pub mod class;
pub mod classify;
pub mod client_ip;
pub mod config;
pub mod cost;
pub mod escalation;
pub mod fleet;
pub mod flights;
pub mod host;
pub mod lease;
pub mod limit_decision;
pub mod limiter;
pub mod local_store;
pub mod metrics;
pub mod origin_health;
pub mod ranges;
pub mod request;
pub mod respond;
pub mod rewrite;
pub mod shedding;
pub mod slot_table;
pub mod store;
pub mod top_clients;
pub mod verdict_cache;
pub mod verification;
pub mod verify;
pub mod worker;
