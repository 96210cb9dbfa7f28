//! proxy-wasm glue only: the root context (configuration, the worker's wake-up queue,
//! verifier callout answers, ticks) and the per-request context, each callback translated
//! into a call on [`Worker`] or [`RequestState`] with a [`WasmHost`]. No policy lives here.

use crate::wasm_host::{self, HostStore, WasmHost};
use crawlguard_core::config;
use crawlguard_core::request::{RequestState, Step};
use crawlguard_core::worker::{self, Worker};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType};
use std::cell::RefCell;
use std::rc::{Rc, Weak};

fn action(step: Step) -> Action {
    match step {
        Step::Continue => Action::Continue,
        Step::Pause => Action::Pause,
    }
}

/// The root context of one worker.
#[derive(Default)]
pub(crate) struct Root {
    worker: Option<Rc<Worker>>,
    /// Workers a reconfiguration replaced, while requests they admitted still live: their
    /// places in flight are renewed on the tick until the last request ends.
    retired: Vec<Weak<Worker>>,
    host: WasmHost,
}

impl Context for Root {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _: usize) {
        self.host.forget_request_headers();
        let Some(w) = self.worker.clone() else {
            return;
        };
        let (status, body) = wasm_host::callout_response(body_size, w.callout_body_limit(token));
        w.on_callout_response(&mut self.host, token, status.as_deref(), &body);
        // Callout answers are rare (syncs, verdicts): their counters go out now, and a
        // flush here is not counted in crawlguard.stats.flushes (only the tick's are).
        wasm_host::flush_counters(None);
    }

    fn on_done(&mut self) -> bool {
        if let Some(w) = self.worker.take() {
            w.on_root_done(&mut self.host);
            wasm_host::flush_counters(w.metrics.flushes);
        }
        true
    }
}

impl RootContext for Root {
    /// Parses and validates the whole configuration; refuses it (one error line naming the
    /// field) rather than run with a half-understood one.
    fn on_configure(&mut self, _size: usize) -> bool {
        let raw = wasm_host::plugin_configuration();
        let cfg = match config::parse(&raw) {
            Ok(c) => c,
            Err(e) => {
                log::error!("invalid configuration: {e}");
                return false;
            }
        };
        // A reconfiguration replaces the worker: release what the old one still holds.
        if let Some(old) = self.worker.take() {
            old.on_root_done(&mut self.host);
            wasm_host::flush_counters(old.metrics.flushes);
            self.retired.push(Rc::downgrade(&old));
        }
        let mut draw = || {
            let (a, b) = (getrandom::u32().ok()?, getrandom::u32().ok()?);
            Some(u64::from(a) << 32 | u64::from(b))
        };
        let seed = u64::from(getrandom::u32().unwrap_or(0)) << 32
            | u64::from(getrandom::u32().unwrap_or(0));
        let worker = worker::configure(
            cfg,
            &HostStore,
            &mut draw,
            &mut wasm_host::define_metric,
            seed,
        );
        // This worker's own wake-up queue (a unique name: every worker registers one).
        let name = format!("crawlguard.wake.{seed:016x}");
        self.host.queue = wasm_host::register_queue(&name);
        if self.host.queue.is_none() {
            log::warn!("could not register shared queue {name}: verifier callouts are errors");
        }
        // Always a tick: it flushes the counters (metrics::STATS_FLUSH_MS).
        if !wasm_host::set_tick_period_ms(Worker::tick_period_ms(&worker.cfg)) {
            log::warn!(
                "could not set the tick period: counters are flushed only on reconfiguration"
            );
        }
        log::info!("{}", worker.summary());
        self.worker = Some(Rc::new(worker));
        true
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        self.host.forget_request_headers();
        wasm_host::drain_queue(queue_id);
        if let Some(w) = self.worker.clone() {
            w.on_wake(&mut self.host);
        }
    }

    fn on_tick(&mut self) {
        self.host.forget_request_headers();
        self.retired.retain(|w| w.strong_count() > 0);
        for old in self.retired.iter().filter_map(Weak::upgrade) {
            old.tend_places(&mut self.host);
        }
        if let Some(w) = self.worker.clone() {
            w.on_tick(&mut self.host);
            wasm_host::flush_counters(w.metrics.flushes);
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        // Always Some: the SDK panics on None. Unconfigured = a pass-through context.
        Some(Box::new(Filter {
            id: context_id,
            worker: self.worker.clone(),
            host: WasmHost::new(self.host.queue),
            state: Rc::new(RefCell::new(RequestState::default())),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// One request's context.
pub(crate) struct Filter {
    id: u32,
    worker: Option<Rc<Worker>>,
    host: WasmHost,
    state: Rc<RefCell<RequestState>>,
}

impl Context for Filter {}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _n: usize, _eos: bool) -> Action {
        self.host.forget_request_headers();
        let Some(w) = self.worker.as_deref() else {
            return Action::Continue;
        };
        let me = Rc::downgrade(&self.state);
        match self.state.try_borrow_mut() {
            Ok(mut st) => {
                action(st.on_request_headers(me, self.id, w.request_parts(), &mut self.host))
            }
            Err(_) => Action::Continue,
        }
    }

    fn on_http_request_body(&mut self, _n: usize, end_of_stream: bool) -> Action {
        self.host.forget_request_headers();
        // Only the end matters: the origin's clock starts when it has the whole request.
        // Continue, as without this callback (a paused request stays paused on headers).
        if end_of_stream {
            if let Ok(mut st) = self.state.try_borrow_mut() {
                st.on_request_body_end(&mut self.host);
            }
        }
        Action::Continue
    }

    fn on_log(&mut self) {
        self.host.forget_request_headers();
        let Some(w) = self.worker.as_deref() else {
            return;
        };
        if let Ok(mut st) = self.state.try_borrow_mut() {
            st.on_stream_end(w.request_parts(), &mut self.host);
        }
    }

    fn on_http_response_headers(&mut self, _n: usize, eos: bool) -> Action {
        self.host.forget_request_headers();
        let Some(w) = self.worker.as_deref() else {
            return Action::Continue;
        };
        match self.state.try_borrow_mut() {
            Ok(mut st) => action(st.on_response_headers(w.request_parts(), &mut self.host, eos)),
            Err(_) => Action::Continue,
        }
    }
}
