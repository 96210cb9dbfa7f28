//! The one seam between crawlguard's request logic and the proxy: [`Host`].
//!
//! Everything the request machine ([`crate::request`]) and the per-worker verification
//! ([`crate::identity::verification`]) need from Envoy goes through this trait: the current request's
//! headers and downstream address, time, randomness, local replies, resuming a paused
//! request, counters, shared data, verifier callouts and switching between request contexts.
//! `wasm_host.rs` implements it over the proxy-wasm ABI; `crawlguard_testkit::fake_host` implements it
//! in memory, so whole requests are tested on the host without Envoy.
//!
//! "The current request" is proxy-wasm's *effective context*: the request whose callback is
//! running, or the one selected with [`Host::switch_to`] (the root context does that to
//! resume requests that waited for a verdict).

use crate::store::SharedData;

/// The root context's tick period, ms, unless fleet mode asks for a shorter one
/// (`worker::Worker::tick_period_ms`): on every tick each worker flushes its counters, gives
/// back its unspent token leases and applies the shared shed levels.
pub const TICK_MS: u32 = 250;

/// A proxy-wasm context id (one per request, one per root).
pub type ContextId = u32;

/// A host call that failed (the raw proxy-wasm status, when there is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostError(pub u32);

/// A callout to the sidecar: `<method> <path>` to `cluster` with `:authority` (and, with a
/// body, `content-type: application/json`), answered within `timeout_ms`. The verifier's is
/// a `GET` (`sidecar/README.md`, "API"); a fleet sync is a `POST` with a JSON body
/// (`crawlguard_contract::fleet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Callout<'a> {
    /// `:method`: `GET` or `POST`.
    pub method: &'a str,
    /// Envoy cluster name.
    pub cluster: &'a str,
    /// `:authority` sent.
    pub authority: &'a str,
    /// `:path`, e.g. `/v1/verify?ip=192.0.2.1&bot=googlebot`.
    pub path: &'a str,
    /// How long Envoy waits for the answer before failing the call, ms.
    pub timeout_ms: u64,
    /// Request body (JSON); empty for none.
    pub body: &'a [u8],
}

/// A local reply: status, `%RESPONSE_CODE_DETAILS%`, headers and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalReply<'a> {
    /// HTTP status.
    pub status: u16,
    /// Shown as `%RESPONSE_CODE_DETAILS%` in access logs.
    pub details: &'a str,
    /// Response headers (lowercase names).
    pub headers: &'a [(&'static str, String)],
    /// Body bytes.
    pub body: &'a [u8],
}

/// The proxy, as the request logic sees it. Header reads return raw bytes as Envoy holds
/// them (any bytes, not necessarily UTF-8); a failed host call reads as absent, never as an
/// error that could fail a request.
pub trait Host {
    /// Wall-clock time, ns since the Unix epoch; `None` if the host fails.
    fn now_ns(&mut self) -> Option<u64>;
    /// A uniform random u32 (0 if unavailable: jitter is a spreading aid, not security).
    fn random_u32(&mut self) -> u32;
    /// The first value of request header `name` (lowercase), or a pseudo-header (`:path`).
    fn request_header(&mut self, name: &str) -> Option<Vec<u8>>;
    /// Every line of request header `name`, in order (single reads see only the first).
    fn request_header_lines(&mut self, name: &str) -> Vec<Vec<u8>>;
    /// Replaces request header `name` (every line) with `value`, or removes it (`None`).
    fn set_request_header(&mut self, name: &str, value: Option<&[u8]>);
    /// The downstream address as Envoy reports it (`source.address`, e.g. `1.2.3.4:5678`).
    fn downstream_address(&mut self) -> Option<Vec<u8>>;
    /// Whether the downstream connection is TLS (Envoy's `connection.tls_version` attribute
    /// is set): what the browser checks' `secure_only` needs.
    fn downstream_tls(&mut self) -> bool;
    /// The request's HTTP version as Envoy's `request.protocol` attribute names it
    /// (`HTTP/1.0`, `HTTP/1.1`, `HTTP/2`, `HTTP/3`); `None` if the host does not say.
    fn request_protocol(&mut self) -> Option<Vec<u8>>;
    /// The first value of response header `name` (lowercase), or `:status`.
    fn response_header(&mut self, name: &str) -> Option<Vec<u8>>;
    /// Every line of response header `name`, in order.
    fn response_header_lines(&mut self, name: &str) -> Vec<Vec<u8>>;
    /// Removes response header `name` (every line).
    fn remove_response_header(&mut self, name: &str);
    /// Answers the current request locally (Envoy `sendLocalReply`, applied after the
    /// current callback returns). `Err` if the host refused: the caller fails open.
    fn send_reply(&mut self, reply: &LocalReply<'_>) -> Result<(), HostError>;
    /// Resumes the current (paused) request (applied after the current callback returns).
    fn resume_request(&mut self) -> Result<(), HostError>;
    /// Adds 1 to counter `id` (a host metric id); errors are ignored.
    fn increment(&mut self, id: u32) {
        self.add_to_counter(id, 1);
    }
    /// Adds `n` to counter `id`; errors are ignored.
    fn add_to_counter(&mut self, id: u32, n: u64);
    /// Sets gauge `id` to `value`; errors are ignored.
    fn set_gauge(&mut self, id: u32, value: u64);
    /// proxy-wasm shared data, seen by every worker of this Envoy.
    fn shared_data(&self) -> &dyn SharedData;
    /// Starts a verifier callout; its answer arrives as the root context's callout response
    /// with the returned token (the glue reads it and hands it to
    /// [`crate::worker::Worker::on_callout_response`]). Must be called from a root context
    /// callback.
    fn dispatch_callout(&mut self, callout: &Callout<'_>) -> Result<u32, HostError>;
    /// Asks for a root context callback on this worker soon (proxy-wasm shared queue
    /// `on_queue_ready`), where callouts can be dispatched.
    fn wake_root(&mut self) -> Result<(), HostError>;
    /// Makes `context` the current request (proxy-wasm `set_effective_context`). `Err` if
    /// it no longer exists.
    fn switch_to(&mut self, context: ContextId) -> Result<(), HostError>;
}
