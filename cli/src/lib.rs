#![warn(missing_docs)]
//! The `crawlguard` command (binary in `main.rs`), as a library so tests and benches can
//! drive each part:
//! - [`report`]: per class and bot id, what an access log says happened;
//! - [`replay`]: what a configuration would have done to a log's traffic, with the filter's
//!   own request machine and worker (driven by [`host`], a one-request `Host`) on a
//!   virtual clock;
//! - [`check`]: configuration validation, exactly as `on_configure` does it;
//! - [`cli`]: the command line (clap) and the subcommands' output.
//!
//! Inputs are read by [`input`] (files or stdin, plain or gzip, streaming) and parsed by
//! [`logfmt`] (Envoy default, crawlguard's own format, Envoy JSON, nginx/Apache combined).

pub mod check;
pub mod cli;
pub mod host;
pub mod input;
pub mod logfmt;
pub mod minutes;
pub mod offline;
pub mod plot;
pub mod replay;
pub mod replay_store;
pub mod report;
pub mod stats;
pub mod status;
pub mod table;
pub mod time;
pub mod timeline;
