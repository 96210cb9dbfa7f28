//! crawlguard: a rate-limiting proxy-wasm HTTP filter for Envoy / Istio that keeps real
//! search and AI crawlers healthy while throttling everything that merely claims to be one.
//!
//! This crate is the wasm module and only glue: all policy is in `crawlguard-core`, which
//! knows the proxy only through its `host::Host` seam. Here:
//! - `filter.rs` maps the proxy-wasm root and HTTP callbacks onto the core's worker and
//!   request state machine;
//! - `wasm_host.rs` is the one `Host` over the proxy-wasm ABI;
//! - [`header_map`] is the ABI's header map wire format (compiled on the host too, for its
//!   tests and fuzz target).

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

pub mod header_map;

#[cfg(target_arch = "wasm32")]
mod filter;
#[cfg(target_arch = "wasm32")]
mod wasm_host;

#[cfg(target_arch = "wasm32")]
proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Trace);
    proxy_wasm::set_root_context(|_| Box::<filter::Root>::default());
}}
