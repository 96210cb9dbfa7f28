//! crawlguard-contract: what the filter, the verifier sidecar and the tests all use, kept in
//! one place so they cannot drift apart.
//!
//! - [`verify`]: the verifier contract, `GET /v1/verify?ip=<ip>&bot=<bot id>` and its 200 JSON
//!   [`verify::Answer`] (the HTTP API: `sidecar/README.md`).
//! - [`fleet`]: the fleet-sync contract, `POST /v1/fleet/sync` (bucket consumption in,
//!   fleet-wide bucket state out).
//! - [`ranges`]: the published-ranges contract, `GET /v1/ranges` (the IP ranges the sidecar
//!   verifies bots by, so the filter decides those claims itself) and its lookup table.
//! - [`signature`]: the signature contract, `POST /v1/signature` (a signed agent's request
//!   in, what its Web Bot Auth signature is worth out).
//! - [`bot_id`]: what a bot id may look like.
//! - [`cloud_zones`]: reverse-DNS zones anyone can rent a machine under, never FCrDNS proof.
//! - [`ja4`]: JA4 TLS fingerprints and the patterns the catalog names TLS stacks by.
//! - [`catalog`]: the built-in bot catalog, a data file (`catalog/bots.json`) embedded at build
//!   time: User-Agent tokens and class for the filter, FCrDNS domains and range-file names for
//!   the sidecar, the vendor's documentation for people.
//!
//! The crate is compiled into the wasm filter, so it depends on serde and serde_json only and
//! never panics on its inputs.

// Compiled into the filter: the filter's no-panic rule holds here too (no unwrap, expect,
// panic or indexing outside tests).
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

pub mod bot_id;
pub mod catalog;
pub mod cloud_zones;
pub mod fleet;
pub mod ja4;
pub mod ranges;
pub mod signature;
pub mod verify;
