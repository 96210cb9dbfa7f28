//! One worker of a fake Envoy ([`FakeProxy`]): a [`Worker`] over a [`FakeHost`], driven
//! like the proxy-wasm callbacks drive the filter.

use crate::fake_host::{FakeHost, FakeRequest};
use crawlguard_contract::verify as wire;
use crawlguard_core::config::{self, Config};
use crawlguard_core::host::ContextId;
use crawlguard_core::request::{RequestState, Step};
use crawlguard_core::store::mem::MemStore;
use crawlguard_core::worker::{self, Worker};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// The root context id [`FakeProxy`] uses (request contexts are numbered from 2).
pub const ROOT: ContextId = 1;

/// One worker of a fake Envoy: a [`Worker`] built from a configuration, a [`FakeHost`], and
/// the request states, driven like the proxy-wasm callbacks drive the filter.
pub struct FakeProxy {
    /// The host (clock, store, counters, requests, callouts).
    pub host: FakeHost,
    /// The worker.
    pub worker: Rc<Worker>,
    /// Requests started from now on come over TLS (`connection.tls_version` set).
    pub tls: bool,
    /// Requests started from now on have this `request.protocol` (`None`: not said).
    pub protocol: Option<String>,
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
    /// Configured as `on_configure` does it ([`worker::configure`]), with a fixed draw
    /// standing in for the random hash seed, so every worker over one store hashes alike.
    pub fn with_config(cfg: Config, now_ns: u64, store: Rc<MemStore>) -> FakeProxy {
        let mut host = FakeHost {
            now_ns: Some(now_ns),
            store,
            current: ROOT,
            ..FakeHost::default()
        };
        let store = host.store.clone();
        let worker = worker::configure(
            cfg,
            &*store,
            &mut || Some(0x5eed_5eed_5eed_5eed_u64),
            &mut |n, k| host.define(n, k),
            42,
        );
        FakeProxy {
            host,
            worker: Rc::new(worker),
            tls: false,
            protocol: None,
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
                tls: self.tls,
                protocol: self.protocol.clone(),
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
