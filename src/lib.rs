//! crawlguard: a rate-limiting proxy-wasm HTTP filter for Envoy / Istio that keeps real
//! search and AI crawlers healthy while throttling everything that merely claims to be one.
//!
//! The logic lives in plain modules tested on the host (time, store and randomness are
//! arguments). Only the proxy-wasm glue is wasm-specific: the root context below parses the
//! configuration once and hands an `Rc` of the per-VM state to each small request context
//! (`filter.rs`), which gathers the request fields, asks [`engine::decide`] and acts.

pub mod bucket;
pub mod classify;
pub mod client_ip;
pub mod config;
pub mod engine;
pub mod metrics;
pub mod respond;
pub mod rewrite;
pub mod store;
pub mod verify;

#[cfg(target_arch = "wasm32")]
mod filter;
#[cfg(target_arch = "wasm32")]
mod host;

#[cfg(target_arch = "wasm32")]
mod root {
    use crate::config;
    use crate::engine::Limiter;
    use crate::filter::{Filter, Shared};
    use crate::host::{self, HostStore};
    use crate::metrics::Metrics;
    use crate::store::{self, StoreShape};
    use crate::verify::VerdictCache;
    use proxy_wasm::hostcalls;
    use proxy_wasm::traits::{Context, HttpContext, RootContext};
    use proxy_wasm::types::{BufferType, ContextType, LogLevel};
    use std::rc::Rc;

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Trace);
        proxy_wasm::set_root_context(|_| Box::new(Root::default()));
    }}

    #[derive(Default)]
    struct Root {
        shared: Option<Rc<Shared>>,
    }

    impl Context for Root {}

    impl RootContext for Root {
        /// Parses and validates the whole configuration; refuses it (one error line naming
        /// the field) rather than run with a half-understood one.
        fn on_configure(&mut self, _size: usize) -> bool {
            let raw = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX)
                .ok()
                .flatten()
                .unwrap_or_default();
            let cfg = match config::parse(&raw) {
                Ok(c) => c,
                Err(e) => {
                    log::error!("invalid configuration: {e}");
                    return false;
                }
            };
            for w in &cfg.warnings {
                log::warn!("configuration warning: {w}");
            }
            let shape = StoreShape {
                slots: cfg.store.slots,
                hash_seed: cfg.store.hash_seed,
            };
            if let Some(change) = store::record_shape(&HostStore, shape) {
                log::warn!("{change}");
            }
            let limiter = Limiter::new(&cfg);
            let verdicts = VerdictCache::new(cfg.verifier.cache_slots);
            let created = limiter
                .table()
                .precreate(&HostStore)
                .and_then(|b| Ok(b + verdicts.precreate(&HostStore)?));
            if let Err(e) = created {
                log::warn!("could not pre-create shared-data slots ({e:?}); continuing");
            }
            let metrics = Metrics::define(&cfg, &mut host::define_counter);
            log::info!(
                "configured: mode {:?}, {} limits, {} routes, {} bots, {} bucket slots",
                cfg.mode,
                cfg.limits.len(),
                cfg.routes.len(),
                cfg.classifier.entries().len(),
                limiter.table().len()
            );
            self.shared = Some(Rc::new(Shared::new(cfg, limiter, verdicts, metrics)));
            true
        }

        fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
            // Always Some: the SDK panics on None. Unconfigured = a pass-through context.
            Some(Box::new(Filter::new(self.shared.clone())))
        }

        fn get_type(&self) -> Option<ContextType> {
            Some(ContextType::HttpContext)
        }
    }
}
