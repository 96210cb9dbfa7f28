//! An in-memory proxy for host tests: [`FakeHost`] implements [`Host`] over fake request
//! contexts, shared data ([`MemStore`]), counters by name, a recorded list of callouts and a
//! settable clock; [`FakeProxy`] drives whole requests through a [`Worker`] the way Envoy
//! drives the filter (request headers, root wake-ups, callout answers, ticks, response
//! headers). A dev-dependency only: never compiled into the wasm module.
//!
//! The fakes panic on a misused fake (a test bug), so the core's no-panic lints do not
//! apply here.

pub use crawlguard_core::store::mem::{Fault, MemStore};

use crawlguard_contract::verify as wire;
use crawlguard_core::config::{self, Config};
use crawlguard_core::host::{Callout, ContextId, Host, HostError, LocalReply};
use crawlguard_core::metrics::Metrics;
use crawlguard_core::request::{RequestState, Step};
use crawlguard_core::store::SharedData;
use crawlguard_core::worker::Worker;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A local reply as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentReply {
    /// Status.
    pub status: u16,
    /// `%RESPONSE_CODE_DETAILS%`.
    pub details: String,
    /// Headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl SentReply {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One fake request context.
#[derive(Debug, Clone, Default)]
pub struct FakeRequest {
    /// Request headers (lowercase names; repeated names = several lines), pseudo-headers too.
    pub request_headers: Vec<(String, Vec<u8>)>,
    /// Response headers, `:status` included.
    pub response_headers: Vec<(String, Vec<u8>)>,
    /// `source.address`.
    pub downstream: Option<Vec<u8>>,
    /// The local reply, once sent.
    pub reply: Option<SentReply>,
    /// How many times it was resumed.
    pub resumed: u32,
}

impl FakeRequest {
    /// The first value of request header `name`.
    pub fn request_header(&self, name: &str) -> Option<&[u8]> {
        self.request_headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// A callout as dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentCallout {
    /// Token returned.
    pub token: u32,
    /// Cluster.
    pub cluster: String,
    /// `:method`.
    pub method: String,
    /// `:path`.
    pub path: String,
    /// Timeout, ms.
    pub timeout_ms: u64,
    /// Request body.
    pub body: Vec<u8>,
}

/// The in-memory [`Host`].
#[derive(Debug, Default)]
pub struct FakeHost {
    /// The clock, ns since the Unix epoch (`None`: the host fails to tell time).
    pub now_ns: Option<u64>,
    /// Shared data (an `Rc`, so several fake workers can share one Envoy's store).
    pub store: Rc<MemStore>,
    /// Request contexts by id.
    pub requests: HashMap<ContextId, FakeRequest>,
    /// The effective context.
    pub current: ContextId,
    /// Counter values by metric id.
    pub counters: HashMap<u32, u64>,
    /// Gauge values by metric id.
    pub gauges: HashMap<u32, u64>,
    /// Metric names by id (filled by [`FakeHost::define`]).
    pub metric_names: HashMap<u32, String>,
    /// Every callout dispatched, in order.
    pub callouts: Vec<SentCallout>,
    /// Root wake-ups requested.
    pub wakes: u32,
    /// Make `dispatch_callout` fail.
    pub refuse_dispatch: bool,
    /// Make `wake_root` fail.
    pub refuse_wake: bool,
    /// Make `send_reply` fail.
    pub refuse_reply: bool,
    /// Value returned by `random_u32`.
    pub random: u32,
    /// Every [`Host`] call that is a proxy-wasm host call in the real module, in order
    /// (`"get request header :path"`, `"now"`, ...); shared-data calls are counted by the
    /// store ([`MemStore::calls`]). Counter increments are not here: the module buffers
    /// them in VM memory (`metrics::CounterBuffer`) and hands them over on the tick.
    pub host_calls: Vec<String>,
}

impl FakeHost {
    /// Defines a metric (for [`Metrics::define`]): ids 1, 2, ... in definition order.
    pub fn define(
        &mut self,
        name: &str,
        _kind: crawlguard_core::metrics::MetricKind,
    ) -> Option<u32> {
        let id = u32::try_from(self.metric_names.len() + 1).ok()?;
        self.metric_names.insert(id, name.to_string());
        Some(id)
    }

    /// A counter's value by name (0 if never incremented or unknown).
    pub fn counter(&self, name: &str) -> u64 {
        self.id_of(name)
            .and_then(|id| self.counters.get(&id))
            .copied()
            .unwrap_or(0)
    }

    /// A gauge's value by name (`None` if never set or unknown).
    pub fn gauge(&self, name: &str) -> Option<u64> {
        self.id_of(name)
            .and_then(|id| self.gauges.get(&id))
            .copied()
    }

    fn id_of(&self, name: &str) -> Option<u32> {
        self.metric_names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(id, _)| *id)
    }

    fn cur(&mut self) -> Option<&mut FakeRequest> {
        self.requests.get_mut(&self.current)
    }
}

fn lines(map: &[(String, Vec<u8>)], name: &str) -> Vec<Vec<u8>> {
    map.iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

impl Host for FakeHost {
    fn now_ns(&mut self) -> Option<u64> {
        self.host_calls.push("now".into());
        self.now_ns
    }

    fn random_u32(&mut self) -> u32 {
        self.random
    }

    fn request_header(&mut self, name: &str) -> Option<Vec<u8>> {
        self.host_calls.push(format!("get request header {name}"));
        self.cur()
            .and_then(|r| lines(&r.request_headers, name).into_iter().next())
    }

    fn request_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        self.host_calls.push("get request header map".into());
        self.cur()
            .map(|r| lines(&r.request_headers, name))
            .unwrap_or_default()
    }

    fn set_request_header(&mut self, name: &str, value: Option<&[u8]>) {
        self.host_calls.push(match value {
            Some(_) => format!("replace request header {name}"),
            None => format!("remove request header {name}"),
        });
        if let Some(r) = self.cur() {
            r.request_headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case(name));
            if let Some(v) = value {
                r.request_headers.push((name.to_string(), v.to_vec()));
            }
        }
    }

    fn downstream_address(&mut self) -> Option<Vec<u8>> {
        self.host_calls.push("get property source.address".into());
        self.cur().and_then(|r| r.downstream.clone())
    }

    fn response_header(&mut self, name: &str) -> Option<Vec<u8>> {
        self.host_calls.push(format!("get response header {name}"));
        self.cur()
            .and_then(|r| lines(&r.response_headers, name).into_iter().next())
    }

    fn response_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        self.host_calls.push("get response header map".into());
        self.cur()
            .map(|r| lines(&r.response_headers, name))
            .unwrap_or_default()
    }

    fn remove_response_header(&mut self, name: &str) {
        self.host_calls
            .push(format!("remove response header {name}"));
        if let Some(r) = self.cur() {
            r.response_headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        }
    }

    fn send_reply(&mut self, reply: &LocalReply<'_>) -> Result<(), HostError> {
        self.host_calls.push("send local reply".into());
        if self.refuse_reply {
            return Err(HostError(2));
        }
        let r = self.cur().ok_or(HostError(2))?;
        r.reply = Some(SentReply {
            status: reply.status,
            details: reply.details.to_string(),
            headers: reply
                .headers
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
            body: reply.body.to_vec(),
        });
        Ok(())
    }

    fn resume_request(&mut self) -> Result<(), HostError> {
        let r = self.cur().ok_or(HostError(2))?;
        r.resumed += 1;
        Ok(())
    }

    fn add_to_counter(&mut self, id: u32, n: u64) {
        let c = self.counters.entry(id).or_insert(0);
        *c = c.saturating_add(n);
    }

    fn set_gauge(&mut self, id: u32, value: u64) {
        self.gauges.insert(id, value);
    }

    fn shared_data(&self) -> &dyn SharedData {
        &*self.store
    }

    fn dispatch_callout(&mut self, c: &Callout<'_>) -> Result<u32, HostError> {
        if self.refuse_dispatch {
            return Err(HostError(2));
        }
        let token = u32::try_from(self.callouts.len() + 1).unwrap_or(u32::MAX);
        self.callouts.push(SentCallout {
            token,
            cluster: c.cluster.to_string(),
            method: c.method.to_string(),
            path: c.path.to_string(),
            timeout_ms: c.timeout_ms,
            body: c.body.to_vec(),
        });
        Ok(token)
    }

    fn wake_root(&mut self) -> Result<(), HostError> {
        if self.refuse_wake {
            return Err(HostError(1));
        }
        self.wakes += 1;
        Ok(())
    }

    fn switch_to(&mut self, context: ContextId) -> Result<(), HostError> {
        if !self.requests.contains_key(&context) {
            return Err(HostError(2));
        }
        self.current = context;
        Ok(())
    }
}

/// The root context id [`FakeProxy`] uses (request contexts are numbered from 2).
pub const ROOT: ContextId = 1;

/// One worker of a fake Envoy: a [`Worker`] built from a configuration, a [`FakeHost`], and
/// the request states, driven like the proxy-wasm callbacks drive the filter.
pub struct FakeProxy {
    /// The host (clock, store, counters, requests, callouts).
    pub host: FakeHost,
    /// The worker.
    pub worker: Rc<Worker>,
    states: HashMap<ContextId, Rc<RefCell<RequestState>>>,
    next_context: ContextId,
}

impl FakeProxy {
    /// A worker for configuration `json` at time `now_ns`, slots pre-created.
    ///
    /// Panics if `json` is invalid (tests give valid configurations).
    pub fn new(json: &str, now_ns: u64) -> FakeProxy {
        let cfg = config::parse(json.as_bytes()).unwrap_or_else(|e| panic!("config: {e}"));
        Self::with_config(cfg, now_ns, Rc::new(MemStore::default()))
    }

    /// Another worker of the same Envoy: the same configuration, the same shared store, its
    /// own VM state, at `now_ns`.
    pub fn second_worker(&self, now_ns: u64) -> FakeProxy {
        FakeProxy::with_config(self.worker.cfg.clone(), now_ns, self.host.store.clone())
    }

    /// A worker for `cfg` over an existing shared store (e.g. a second worker of the same
    /// Envoy: give it a clone of the first one's store handle).
    ///
    /// An unset `store.hash_seed` is resolved as `on_configure` does it
    /// ([`crawlguard_core::store::resolve_hash_seed`]), with a fixed draw standing in for the random
    /// one, so every worker over one store hashes alike.
    pub fn with_config(mut cfg: Config, now_ns: u64, store: Rc<MemStore>) -> FakeProxy {
        let (seed, _) =
            crawlguard_core::store::resolve_hash_seed(&*store, cfg.store.hash_seed, &mut || {
                Some(0x5eed_5eed_5eed_5eed_u64)
            });
        cfg.store.hash_seed = Some(seed);
        let mut host = FakeHost {
            now_ns: Some(now_ns),
            store,
            current: ROOT,
            ..FakeHost::default()
        };
        let metrics = Metrics::define(&cfg, &mut |n, k| host.define(n, k));
        let worker = Worker::new(cfg, metrics, 42);
        let _ = worker.precreate(&*host.store);
        FakeProxy {
            host,
            worker: Rc::new(worker),
            states: HashMap::new(),
            next_context: ROOT + 1,
        }
    }

    /// Starts a request with these headers (`:path`, `user-agent`, ...) from `downstream`
    /// (e.g. `"192.0.2.1:4000"`): calls `on_request_headers`. Returns its context and what
    /// the filter told the proxy.
    pub fn request(&mut self, headers: &[(&str, &str)], downstream: &str) -> (ContextId, Step) {
        let ctx = self.next_context;
        self.next_context += 1;
        self.host.requests.insert(
            ctx,
            FakeRequest {
                request_headers: headers
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), v.as_bytes().to_vec()))
                    .collect(),
                downstream: Some(downstream.as_bytes().to_vec()),
                ..FakeRequest::default()
            },
        );
        let state = Rc::new(RefCell::new(RequestState::default()));
        self.states.insert(ctx, state.clone());
        self.host.current = ctx;
        let step = state.borrow_mut().on_request_headers(
            Rc::downgrade(&state),
            ctx,
            self.worker.request_parts(),
            &mut self.host,
        );
        (ctx, step)
    }

    /// A GET of `path` with `user_agent` from `downstream`.
    pub fn get(&mut self, path: &str, user_agent: &str, downstream: &str) -> (ContextId, Step) {
        self.request(&[(":path", path), ("user-agent", user_agent)], downstream)
    }

    /// The upstream answered request `ctx` with these headers (`:status` first):
    /// calls `on_response_headers`.
    pub fn respond(
        &mut self,
        ctx: ContextId,
        headers: &[(&str, &str)],
        end_of_stream: bool,
    ) -> Step {
        let Some(state) = self.states.get(&ctx).cloned() else {
            return Step::Continue;
        };
        if let Some(r) = self.host.requests.get_mut(&ctx) {
            r.response_headers = headers
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.as_bytes().to_vec()))
                .collect();
        }
        self.host.current = ctx;
        let step = state.borrow_mut().on_response_headers(
            self.worker.request_parts(),
            &mut self.host,
            end_of_stream,
        );
        step
    }

    /// The client of request `ctx` went away: the stream ends (`on_log`, as Envoy calls it
    /// for every stream) and its context is destroyed.
    pub fn hang_up(&mut self, ctx: ContextId) {
        self.end_stream(ctx);
        self.states.remove(&ctx);
        self.host.requests.remove(&ctx);
    }

    /// The stream of request `ctx` ends (`on_log`) and its context lives on: Envoy deletes
    /// a context later, and root events (a callout's answer) may come in between.
    pub fn end_stream(&mut self, ctx: ContextId) {
        if let Some(state) = self.states.get(&ctx).cloned() {
            self.host.current = ctx;
            state
                .borrow_mut()
                .on_stream_end(self.worker.request_parts(), &mut self.host);
        }
    }

    /// Delivers the root wake-ups (`on_queue_ready`).
    pub fn wake(&mut self) {
        self.host.current = ROOT;
        self.worker.on_wake(&mut self.host);
    }

    /// Delivers the answer to callout `token` (`status` `None` = no response).
    pub fn answer(&mut self, token: u32, status: Option<&str>, body: &str) {
        self.host.current = ROOT;
        self.worker.on_callout_response(
            &mut self.host,
            token,
            status.map(str::as_bytes),
            body.as_bytes(),
        );
    }

    /// Delivers a verifier answer in the contract's JSON for callout `token`: `verdict` is
    /// `verified`, `spoofed` or `unknown` (method `fcrdns`, no host). Any other spelling
    /// delivers a body that is not an answer (a verifier error for the filter).
    pub fn verdict(&mut self, token: u32, ip: &str, bot: &str, verdict: &str, ttl_s: u64) {
        let body = match wire::Verdict::parse(verdict) {
            Some(verdict) => wire::Answer {
                ip: ip.to_string(),
                bot: bot.to_string(),
                verdict,
                method: wire::Method::Fcrdns,
                host: String::new(),
                ttl_s,
            }
            .to_json(),
            None => format!("not a verdict: {verdict}"),
        };
        self.answer(token, Some("200"), &body);
    }

    /// The token of the latest callout about `ip` (as written in its path).
    pub fn callout_for(&self, ip: &str) -> Option<u32> {
        let needle = format!("ip={ip}&");
        self.host
            .callouts
            .iter()
            .rev()
            .find(|c| c.path.contains(&needle))
            .map(|c| c.token)
    }

    /// Answers the latest callout about `ip` with `verdict` (TTL 3600 s); false if there is
    /// none.
    pub fn verdict_for(&mut self, ip: &str, bot: &str, verdict: &str) -> bool {
        match self.callout_for(ip) {
            Some(token) => {
                self.verdict(token, ip, bot, verdict, 3600);
                true
            }
            None => false,
        }
    }

    /// Delivers a root tick.
    pub fn tick(&mut self) {
        self.host.current = ROOT;
        self.worker.on_tick(&mut self.host);
    }

    /// The root context goes away.
    pub fn root_done(&mut self) {
        self.host.current = ROOT;
        self.worker.on_root_done(&mut self.host);
    }

    /// Moves the clock by `ns`.
    pub fn advance(&mut self, ns: u64) {
        self.host.now_ns = self.host.now_ns.map(|t| t.saturating_add(ns));
    }

    /// Request `ctx` as the fake proxy holds it.
    pub fn req(&self, ctx: ContextId) -> &FakeRequest {
        static EMPTY: std::sync::OnceLock<FakeRequest> = std::sync::OnceLock::new();
        self.host
            .requests
            .get(&ctx)
            .unwrap_or_else(|| EMPTY.get_or_init(FakeRequest::default))
    }

    /// The class header request `ctx` was forwarded (or rejected) with.
    pub fn class_of(&self, ctx: ContextId) -> Option<String> {
        let name = &self.worker.cfg.class_header;
        self.req(ctx)
            .request_header(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// The status the client of `ctx` got from crawlguard (a local reply), if any.
    pub fn reply_status(&self, ctx: ContextId) -> Option<u16> {
        self.req(ctx).reply.as_ref().map(|r| r.status)
    }

    /// A counter's value by name.
    pub fn counter(&self, name: &str) -> u64 {
        self.host.counter(name)
    }
}
