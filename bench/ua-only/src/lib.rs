//! Benchmark floor: the cheapest useful proxy-wasm HTTP filter, reading one header per
//! request, so `make bench` can tell the cost of wasm itself from crawlguard's own.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| Box::new(Root));
}}

struct Root;

impl Context for Root {}

impl RootContext for Root {
    fn create_http_context(&self, _id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(UaOnly))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct UaOnly;

impl Context for UaOnly {}

impl HttpContext for UaOnly {
    fn on_http_request_headers(&mut self, _n: usize, _eos: bool) -> Action {
        // Read and touch the value so the call is not optimised away.
        let ua = self.get_http_request_header_bytes("user-agent");
        if ua.as_deref().is_some_and(|u| u.len() > 1 << 20) {
            log::warn!("huge user-agent");
        }
        Action::Continue
    }
}
