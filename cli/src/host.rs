//! The proxy replay runs the filter in: an implementation of the filter's [`Host`] seam for
//! one request at a time, and the driver that calls the request machine the way Envoy (and
//! `crawlguard_testkit::FakeProxy`) does: request headers, root wake-up,
//! verifier answers, response headers.
//!
//! It is `FakeProxy` specialised for a replay: a log is replayed one request after another
//! (a request paused for a verdict is resumed before the next one starts, since the verdict
//! is answered at once), so the host keeps one request in reusable buffers instead of maps
//! of contexts and header lists, and counters in a vector; its shared data ([`Store`]) has
//! the semantics of Envoy's (and of the filter's test `MemStore`: values with a CAS token
//! from one global counter) with a faster hash and in-place updates. The decision code, the
//! worker and the verdict cache are the filter's own.

use crate::logfmt::LoggedSignals;
use crate::replay_store::Store;
use crawlguard_core::config::Config;
use crawlguard_core::host::{Callout, ContextId, Host, HostError, LocalReply};
use crawlguard_core::identity::classify::Class;
use crawlguard_core::request::{RequestState, Step};
use crawlguard_core::store::SharedData;
use crawlguard_core::worker::{self, Worker};
use std::cell::RefCell;
use std::rc::Rc;

/// The root context id (requests are numbered from 2).
const ROOT: ContextId = 1;

/// The request being replayed.
#[derive(Debug, Default)]
pub struct Req {
    /// Context id.
    pub ctx: ContextId,
    /// `:path`.
    pub path: Vec<u8>,
    /// `:method`.
    pub method: Vec<u8>,
    /// `user-agent`, if sent.
    pub ua: Option<Vec<u8>>,
    /// `x-forwarded-for`, if sent.
    pub xff: Option<Vec<u8>>,
    /// `source.address`.
    pub downstream: Option<Vec<u8>>,
    /// The class header as the filter set it.
    pub class: Option<Vec<u8>>,
    /// `:status` of the upstream response.
    pub status: Vec<u8>,
    /// The local reply's status, if crawlguard answered.
    pub reply: Option<u16>,
    /// The reply's `ratelimit-policy` header.
    pub policy: Option<String>,
    /// What the log says of the client beyond its request line.
    pub signals: OwnedSignals,
}

/// [`LoggedSignals`], owned: the replayed request's TLS, protocol, JA4, network and browser
/// headers, each `None` when the log does not carry it.
#[derive(Debug, Default)]
pub struct OwnedSignals {
    /// The connection was TLS.
    pub tls: Option<bool>,
    /// `HTTP/1.1`, `HTTP/2`.
    pub protocol: Option<Vec<u8>>,
    /// The JA4 header's value (`Some(None)`: logged as absent).
    pub ja4: Option<Option<Vec<u8>>>,
    /// The ASN header's value.
    pub asn: Option<Option<Vec<u8>>>,
    /// `Sec-Fetch-Site`.
    pub sec_fetch_site: Option<Option<Vec<u8>>>,
    /// `Sec-CH-UA`.
    pub sec_ch_ua: Option<Option<Vec<u8>>>,
}

impl OwnedSignals {
    fn set(&mut self, s: &LoggedSignals<'_>) {
        let own = |v: Option<Option<&[u8]>>| v.map(|v| v.map(<[u8]>::to_vec));
        *self = OwnedSignals {
            tls: s.tls,
            protocol: s.protocol.map(<[u8]>::to_vec),
            ja4: own(s.ja4),
            asn: own(s.asn),
            sec_fetch_site: own(s.sec_fetch_site),
            sec_ch_ua: own(s.sec_ch_ua),
        };
    }
}

/// The [`Host`] of a replay.
pub struct ReplayHost {
    /// Virtual clock, ns since the epoch.
    pub now_ns: u64,
    store: Store,
    class_header: String,
    /// `client_signals.ja4_header` and `asn_header`: read from the log's `ja4` and `asn`.
    ja4_header: Option<String>,
    asn_header: Option<String>,
    /// The current request.
    pub req: Req,
    /// Counter and gauge values by metric id.
    metrics: Vec<u64>,
    /// Callouts dispatched and not answered yet: (token, path).
    pub callouts: Vec<(u32, String)>,
    next_token: u32,
}

impl Host for ReplayHost {
    fn now_ns(&mut self) -> Option<u64> {
        Some(self.now_ns)
    }

    fn random_u32(&mut self) -> u32 {
        0
    }

    fn request_header(&mut self, name: &str) -> Option<Vec<u8>> {
        // A browser check's header the log does not carry reads as sent (unknown: the check
        // passes, as it would without the input); one it carries reads as logged.
        let logged_or_sent = |v: &Option<Option<Vec<u8>>>| match v {
            Some(v) => v.clone(),
            None => Some(Vec::new()),
        };
        let s = &self.req.signals;
        match name {
            ":path" => Some(self.req.path.clone()),
            ":method" => Some(self.req.method.clone()),
            "user-agent" => self.req.ua.clone(),
            "x-forwarded-for" => self.req.xff.clone(),
            "sec-fetch-site" => logged_or_sent(&s.sec_fetch_site),
            "sec-ch-ua" => logged_or_sent(&s.sec_ch_ua),
            n if n == self.class_header => self.req.class.clone(),
            n if Some(n) == self.ja4_header.as_deref() => s.ja4.clone().flatten(),
            n if Some(n) == self.asn_header.as_deref() => s.asn.clone().flatten(),
            _ => None,
        }
    }

    fn request_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        self.request_header(name).into_iter().collect()
    }

    fn set_request_header(&mut self, name: &str, value: Option<&[u8]>) {
        if name == self.class_header || name.eq_ignore_ascii_case(&self.class_header) {
            set_opt(&mut self.req.class, value);
        }
    }

    fn downstream_address(&mut self) -> Option<Vec<u8>> {
        self.req.downstream.clone()
    }

    fn downstream_tls(&mut self) -> bool {
        // Only a log that says so (`tls=`): otherwise the checks that need TLS pass.
        self.req.signals.tls.unwrap_or(false)
    }

    fn request_protocol(&mut self) -> Option<Vec<u8>> {
        self.req.signals.protocol.clone()
    }

    fn response_header(&mut self, name: &str) -> Option<Vec<u8>> {
        (name == ":status").then(|| self.req.status.clone())
    }

    fn response_header_lines(&mut self, name: &str) -> Vec<Vec<u8>> {
        self.response_header(name).into_iter().collect()
    }

    fn remove_response_header(&mut self, _name: &str) {
        // The response of a replay is its status alone: there is no other header to remove
        // (the cost headers the filter removes are not in access logs).
    }

    fn send_reply(&mut self, reply: &LocalReply<'_>) -> Result<(), HostError> {
        self.req.reply = Some(reply.status);
        self.req.policy = reply
            .headers
            .iter()
            .find(|(k, _)| *k == "ratelimit-policy")
            .map(|(_, v)| v.clone());
        Ok(())
    }

    fn resume_request(&mut self) -> Result<(), HostError> {
        Ok(())
    }

    fn add_to_counter(&mut self, id: u32, n: u64) {
        if let Some(c) = self.metrics.get_mut(id as usize) {
            *c += n;
        }
    }

    fn set_gauge(&mut self, id: u32, value: u64) {
        if let Some(g) = self.metrics.get_mut(id as usize) {
            *g = value;
        }
    }

    fn shared_data(&self) -> &dyn SharedData {
        &self.store
    }

    fn dispatch_callout(&mut self, c: &Callout<'_>) -> Result<u32, HostError> {
        self.next_token = self.next_token.wrapping_add(1).max(1);
        self.callouts.push((self.next_token, c.path.to_string()));
        Ok(self.next_token)
    }

    fn wake_root(&mut self) -> Result<(), HostError> {
        Ok(())
    }

    fn switch_to(&mut self, context: ContextId) -> Result<(), HostError> {
        if context == self.req.ctx || context == ROOT {
            Ok(())
        } else {
            Err(HostError(2))
        }
    }
}

/// One worker of a replayed Envoy and its host.
pub struct ReplayProxy {
    /// The host.
    pub host: ReplayHost,
    /// The filter's worker.
    pub worker: Rc<Worker>,
    /// Counter names by id.
    pub metric_names: Vec<String>,
    next_ctx: ContextId,
}

/// A request to replay.
pub struct Request<'a> {
    /// `:path`.
    pub path: &'a [u8],
    /// `:method`.
    pub method: &'a [u8],
    /// `user-agent`.
    pub ua: Option<&'a [u8]>,
    /// `x-forwarded-for`.
    pub xff: Option<&'a [u8]>,
    /// `source.address`.
    pub downstream: Option<&'a [u8]>,
    /// What the log says of the client beyond its request line.
    pub signals: LoggedSignals<'a>,
}

fn set(dst: &mut Vec<u8>, src: &[u8]) {
    dst.clear();
    dst.extend_from_slice(src);
}

fn set_opt(dst: &mut Option<Vec<u8>>, src: Option<&[u8]>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => set(d, s),
        (None, Some(s)) => *dst = Some(s.to_vec()),
        (_, None) => *dst = None,
    }
}

impl ReplayProxy {
    /// A worker for `cfg`, its shared-data slots created.
    pub fn new(cfg: Config) -> ReplayProxy {
        let mut names: Vec<String> = vec![String::new()];
        let class_header = cfg.class_header.clone();
        let mut host = ReplayHost {
            now_ns: 0,
            store: Store::default(),
            class_header,
            ja4_header: cfg.client_signals.ja4_header.clone(),
            asn_header: cfg.client_signals.asn_header.clone(),
            req: Req::default(),
            metrics: Vec::new(),
            callouts: Vec::new(),
            next_token: 0,
        };
        // As `on_configure` (worker::configure). No draw: an unset store.hash_seed is the
        // published one, so a replay hashes alike on every run.
        let worker = worker::configure(
            cfg,
            &host.store,
            &mut || None,
            &mut |n, _kind| {
                names.push(n.to_string());
                u32::try_from(names.len() - 1).ok()
            },
            42,
        );
        host.metrics = vec![0; names.len()];
        ReplayProxy {
            host,
            worker: Rc::new(worker),
            metric_names: names,
            next_ctx: ROOT + 1,
        }
    }

    /// A counter's value by name (0 if unknown).
    pub fn counter(&self, name: &str) -> u64 {
        self.metric_names
            .iter()
            .position(|n| n == name)
            .and_then(|i| self.host.metrics.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// Runs request `r` through the filter: request headers, then (if it paused for a
    /// verdict) root wake-ups with every callout answered by `answer(path) -> (status,
    /// body)`, then the upstream's response `status` if the request was forwarded, then the
    /// stream's end, at once.
    pub fn run(
        &mut self,
        r: &Request<'_>,
        status: u16,
        answer: &mut dyn FnMut(&str) -> (u16, String),
    ) -> ReplayOutcome {
        let (out, open) = self.run_open(r, status, answer);
        if let Some(state) = open {
            self.end_stream(&state);
        }
        out
    }

    /// The stream of a request [`ReplayProxy::run_open`] left open ends now (at
    /// `host.now_ns`): it gives back its places in flight and settles its reservations, as
    /// Envoy's end-of-stream callback does.
    pub fn end_stream(&mut self, state: &Rc<RefCell<RequestState>>) {
        state
            .borrow_mut()
            .on_stream_end(self.worker.request_parts(), &mut self.host);
    }

    /// [`ReplayProxy::run`] without the stream's end: a forwarded request's state is
    /// returned, to end with [`ReplayProxy::end_stream`] when the log says it ended (its
    /// places in flight count meanwhile).
    pub fn run_open(
        &mut self,
        r: &Request<'_>,
        status: u16,
        answer: &mut dyn FnMut(&str) -> (u16, String),
    ) -> (ReplayOutcome, Option<Rc<RefCell<RequestState>>>) {
        let ctx = self.next_ctx;
        self.next_ctx = self.next_ctx.wrapping_add(1).max(ROOT + 1);
        let q = &mut self.host.req;
        q.ctx = ctx;
        set(&mut q.path, r.path);
        set(&mut q.method, r.method);
        set_opt(&mut q.ua, r.ua);
        set_opt(&mut q.xff, r.xff);
        set_opt(&mut q.downstream, r.downstream);
        q.signals.set(&r.signals);
        q.reply = None;
        q.policy = None;
        let state = Rc::new(RefCell::new(RequestState::default()));
        let step = state.borrow_mut().on_request_headers(
            Rc::downgrade(&state),
            ctx,
            self.worker.request_parts(),
            &mut self.host,
        );
        if step == Step::Pause && self.host.req.reply.is_none() {
            // Paused for a verdict: the root dispatches the callout, the answer comes back
            // at once (same virtual instant) and resumes the request.
            for _ in 0..4 {
                self.worker.on_wake(&mut self.host);
                if self.host.callouts.is_empty() {
                    break;
                }
                for (token, path) in std::mem::take(&mut self.host.callouts) {
                    let (st, body) = answer(&path);
                    let st = st.to_string();
                    self.worker.on_callout_response(
                        &mut self.host,
                        token,
                        Some(st.as_bytes()),
                        body.as_bytes(),
                    );
                }
                if !state.borrow().is_awaiting_verdict() {
                    break;
                }
            }
        }
        let mut out = ReplayOutcome {
            class: self
                .host
                .req
                .class
                .as_deref()
                .and_then(|c| std::str::from_utf8(c).ok())
                .and_then(Class::parse),
            reply: self.host.req.reply,
            policy: self.host.req.policy.take(),
            normalised: false,
            unresolved: state.borrow().is_awaiting_verdict(),
            shadow_limit: state.borrow().shadow_limited_by(),
        };
        let forwarded = state.borrow().forwarded_class().is_some();
        let cfg = &self.worker.cfg;
        // The upstream answered as it did in the log: the response path runs when that
        // status is one it rewrites. For any other status it would only settle cost
        // reservations (with no cost header in a log: at the reservation, which the stream's
        // end below does), remove cost headers (there are none) and time the origin for
        // shedding (off in a replay), so it is skipped.
        let acts = cfg.rewrite.enabled
            && (cfg.rewrite.statuses.contains(&status)
                || (status == 200 && cfg.degraded.is_some()));
        if forwarded && acts {
            let s = status.min(999);
            self.host.req.status = vec![
                b'0' + (s / 100) as u8,
                b'0' + (s / 10 % 10) as u8,
                b'0' + (s % 10) as u8,
            ];
            state.borrow_mut().on_response_headers(
                self.worker.request_parts(),
                &mut self.host,
                true,
            );
            out.normalised = self.host.req.reply.is_some();
        }
        // The stream ends when the caller says: a reservation no response settled settles
        // at what it reserved (changing no tokens) and stops counting toward its key's
        // `cost.max_in_flight`, and the places in flight are given back, as in Envoy.
        (out, forwarded.then_some(state))
    }
}

/// What the filter did with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// The class it forwarded (or rejected) the request with; `None` for an exempt path.
    pub class: Option<Class>,
    /// The status of crawlguard's own rejection, if it rejected the request.
    pub reply: Option<u16>,
    /// The rejection's `ratelimit-policy` (names the limit).
    pub policy: Option<String>,
    /// Forwarded, and the upstream's answer (429/503) was normalised on the way back.
    pub normalised: bool,
    /// Still paused for a verdict after every callout was answered (a bug if ever true).
    pub unresolved: bool,
    /// Forwarded although this limit (index in `Config::limits`), in shadow mode, would
    /// have rejected it (counted `shadow_limited`).
    pub shadow_limit: Option<usize>,
}
