//! crawlguard-core: all of the crawlguard filter's policy, with no proxy-wasm dependency:
//! classification, verification, limits, shedding, rewrite decisions and configuration.
//!
//! A request is a state machine ([`request`]) over one seam to the proxy ([`host::Host`]),
//! and each worker keeps its state in a [`worker::Worker`]. The `crawlguard` crate (the wasm
//! module) is the glue: its `filter.rs` maps proxy-wasm callbacks onto the machine and its
//! `wasm_host.rs` is the one `Host` over the proxy-wasm ABI. The `crawlguard-testkit` crate
//! holds the host fake the tests drive it with.
//!
//! The folders are the domains, in the order a request meets them:
//! - [`identity`]: who the client is: its address, the User-Agent's class and claim, and
//!   the claim's verification (published ranges, cached verdicts, verifier callouts);
//! - [`protection`]: the origin's health and the shed level per route;
//! - [`limits`]: the limit decision over token buckets, Retry-After compliance,
//!   escalation, costs and leases;
//! - [`store`]: where limit state lives (shared-data slot table, per-worker fallback);
//!   [`fleet`] syncs it across Envoys;
//! - [`response`]: our rejections, and the origin's responses rewritten on the way back.
//!
//! [`request`] is one request through them, [`worker`] composes a worker's state and the
//! root context's events, [`host`] is the seam to the proxy, [`metrics`] counts it all,
//! [`config`] is parsed once per worker. ARCHITECTURE.md is the map.
//! What the filter shares with the verifier sidecar (wire types, bot ids, the catalog data
//! file) is in the `crawlguard-contract` crate.

// The no-panic rule (a panic kills the worker's VM) is enforced by `[lints.clippy]` in
// Cargo.toml: no unwrap, expect, panic or indexing outside tests; each local exception says
// why it cannot fail.

pub mod clock;
pub mod config;
pub mod fleet;
pub mod host;
pub mod identity;
pub mod limits;
pub mod log_limit;
pub mod metrics;
pub mod protection;
pub mod request;
pub mod response;
pub mod store;
pub mod worker;
