//! Test fakes for crawlguard-core: [`FakeHost`] implements [`Host`] over fake request
//! contexts, shared data ([`MemStore`]), counters by name, a recorded list of callouts and a
//! settable clock ([`fake_host`]); [`FakeProxy`] drives whole requests through a [`Worker`]
//! the way Envoy drives the filter: request headers, root wake-ups, callout answers, ticks,
//! response headers ([`fake_proxy`]). A dev-dependency only: never compiled into the wasm
//! module.
//!
//! The fakes panic on a misused fake (a test bug), so the core's no-panic lints do not
//! apply here.
//!
//! [`Host`]: crawlguard_core::host::Host
//! [`Worker`]: crawlguard_core::worker::Worker

pub mod fake_host;
pub mod fake_proxy;

pub use crawlguard_core::store::mem::{Fault, MemStore};
pub use fake_host::{FakeHost, FakeRequest, SentCallout, SentReply};
pub use fake_proxy::{FakeProxy, ROOT};
