//! crawlguard: a rate-limiting proxy-wasm HTTP filter for Envoy / Istio that keeps real
//! search and AI crawlers healthy while throttling everything that merely claims to be one.
//!
//! The request logic lives in plain modules tested on the host: a request is a state
//! machine ([`request`]) over one seam to the proxy ([`host::Host`]), and each worker keeps
//! its state in a [`worker::Worker`]. Only `filter.rs` (callbacks -> machine) and
//! `wasm_host.rs` (the `Host` over the proxy-wasm ABI) are wasm-specific.
//!
//! In the order a request meets them: [`client_ip`], [`classify`] (the matcher over the
//! [`catalog`], giving a [`class`]), [`verification`] ([`ranges`], [`verdict_cache`], [`flights`],
//! [`verify`]), [`shedding`] ([`origin_health`], [`top_clients`]), [`limiter`] ([`bucket`], [`escalation`],
//! [`store`], [`slot_table`], [`local_store`], [`lease`], and in fleet mode [`fleet`]), [`respond`], and
//! on the way back [`rewrite`]; [`metrics`] counts it all; [`config`] is parsed once per
//! worker. README's "Code map" has one line per module.
//! What the filter shares with the verifier sidecar (wire types, bot ids, the catalog data
//! file) is in the `crawlguard-contract` crate.

// The no-panic rule (a panic kills the worker's VM): no unwrap, expect, panic or indexing
// outside tests; each exception says why it cannot fail.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod bucket;
pub mod catalog;
pub mod class;
pub mod classify;
pub mod client_ip;
pub mod config;
pub mod cost;
pub mod escalation;
// A test fake of the host (not in the module); it panics on a misused fake.
#[cfg(not(target_arch = "wasm32"))]
#[allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]
pub mod fake_host;
pub mod fleet;
pub mod flights;
pub mod header_map;
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

#[cfg(target_arch = "wasm32")]
mod filter;
#[cfg(target_arch = "wasm32")]
mod wasm_host;

#[cfg(target_arch = "wasm32")]
proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Trace);
    proxy_wasm::set_root_context(|_| Box::<filter::Root>::default());
}}
