//! crawlguard: a rate-limiting proxy-wasm HTTP filter for Envoy / Istio that keeps real
//! search and AI crawlers healthy while throttling everything that merely claims to be one.
//!
//! The logic lives in plain modules tested on the host (time, store and randomness are
//! arguments); this file is only the proxy-wasm glue: a root context that parses the
//! configuration once, and a small per-request context that gathers the request fields,
//! asks [`engine::decide`] and acts on the outcome.

pub mod bucket;
pub mod classify;
pub mod client_ip;
pub mod config;
pub mod engine;
pub mod metrics;
pub mod respond;
pub mod store;
pub mod verify;

#[cfg(target_arch = "wasm32")]
mod host;

#[cfg(target_arch = "wasm32")]
mod glue {
    use crate::classify::Class;
    use crate::config::{self, Config, IpSource};
    use crate::engine::{self, Decision, Limiter, Request};
    use crate::host::{self, HostStore};
    use crate::metrics::Metrics;
    use crate::respond;
    use proxy_wasm::hostcalls;
    use proxy_wasm::traits::{Context, HttpContext, RootContext};
    use proxy_wasm::types::{Action, ContextType, LogLevel, MapType};
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Trace);
        proxy_wasm::set_root_context(|_| Box::new(Root::default()));
    }}

    /// Per-VM state shared by the root and every request context.
    struct Shared {
        cfg: Config,
        limiter: RefCell<Limiter>,
        metrics: Metrics,
        last_store_warn_ns: Cell<u64>,
    }

    #[derive(Default)]
    struct Root {
        shared: Option<Rc<Shared>>,
    }

    impl Context for Root {}

    impl RootContext for Root {
        fn on_configure(&mut self, _size: usize) -> bool {
            let raw = hostcalls::get_buffer(
                proxy_wasm::types::BufferType::PluginConfiguration,
                0,
                usize::MAX,
            )
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
            let limiter = Limiter::new(&cfg);
            match limiter.table().precreate(&HostStore) {
                Ok(n) => log::debug!("{n} of {} bucket slots created", limiter.table().len()),
                Err(e) => log::warn!("could not pre-create slots ({e:?}); continuing"),
            }
            let metrics = Metrics::define(&cfg, &mut host::define_counter);
            log::info!(
                "configured: mode {:?}, {} limits, {} routes, {} bots",
                cfg.mode,
                cfg.limits.len(),
                cfg.routes.len(),
                cfg.classifier.entries().len()
            );
            self.shared = Some(Rc::new(Shared {
                cfg,
                limiter: RefCell::new(limiter),
                metrics,
                last_store_warn_ns: Cell::new(0),
            }));
            true
        }

        fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
            let shared = self.shared.clone()?;
            Some(Box::new(Filter {
                shared,
                local_reply: false,
            }))
        }

        fn get_type(&self) -> Option<ContextType> {
            Some(ContextType::HttpContext)
        }
    }

    struct Filter {
        shared: Rc<Shared>,
        /// Set when we answered locally; the response path must not rewrite our own reply.
        local_reply: bool,
    }

    impl Context for Filter {}

    fn header(name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
            .ok()
            .flatten()
    }

    impl HttpContext for Filter {
        fn on_http_request_headers(&mut self, _n: usize, _eos: bool) -> Action {
            let sh = Rc::clone(&self.shared);
            let cfg = &sh.cfg;
            // Never trust a class header sent by the client.
            let _ = hostcalls::set_map_value_bytes(
                MapType::HttpRequestHeaders,
                &cfg.class_header,
                None,
            );
            let ua = header("user-agent");
            let class = cfg.classifier.classify(ua.as_deref()).class;
            // Seam: the verifier callout (verify::reclass) re-classes `verify: true` claims.
            let Some(now) = host::now_ns() else {
                return self.forward(class);
            };
            let path = header(":path").unwrap_or_default();
            let remote = hostcalls::get_property(vec!["source", "address"])
                .ok()
                .flatten();
            let xff = match cfg.client_ip.source {
                IpSource::Xff => header("x-forwarded-for"),
                IpSource::RemoteAddress => None,
            };
            let req = Request {
                path: &path,
                remote_address: remote.as_deref(),
                xff: xff.as_deref(),
                header: &header,
            };
            let out = match sh.limiter.try_borrow_mut() {
                Ok(mut lim) => engine::decide(
                    cfg,
                    &mut lim,
                    &HostStore,
                    &req,
                    class,
                    now,
                    &mut host::random_u32,
                ),
                Err(_) => return self.forward(class),
            };
            sh.metrics.record(class, &out, &mut host::increment);
            if out.store.fell_back()
                && now.saturating_sub(sh.last_store_warn_ns.get()) > 10_000_000_000
            {
                sh.last_store_warn_ns.set(now);
                log::warn!(
                    "shared store unavailable, using local buckets: {:?}",
                    out.store
                );
            }
            match out.decision {
                Decision::Limited(r) => {
                    let limit = cfg.limits.get(r.limit);
                    log::debug!(
                        "limited class={} route={} limit={} key={} retry_after_s={} status={}",
                        class.as_str(),
                        cfg.route_name(out.route),
                        limit.map_or("?", |l| l.name.as_str()),
                        limit.map_or("?", |l| l.key.kind_str()),
                        r.retry_after_s,
                        r.status
                    );
                    let rl = limit.filter(|_| cfg.ratelimit_headers).map(|l| {
                        (
                            l.name.as_str(),
                            l.burst,
                            (f64::from(l.burst) / l.rate_per_s).ceil() as u64,
                        )
                    });
                    let rej = respond::rejection(r.status, r.retry_after_s, rl);
                    let headers: Vec<(&str, &str)> =
                        rej.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    if hostcalls::send_http_response(
                        u32::from(rej.status),
                        headers,
                        Some(rej.body.as_bytes()),
                    )
                    .is_ok()
                    {
                        self.local_reply = true;
                        return Action::Pause;
                    }
                    self.forward(class)
                }
                _ => self.forward(class),
            }
        }

        fn on_http_response_headers(&mut self, _n: usize, _eos: bool) -> Action {
            if self.local_reply {
                // Our own rejection: already normalised, never rewritten a second time.
                return Action::Continue;
            }
            // Seam: normalisation of upstream 429/503 responses.
            Action::Continue
        }
    }

    impl Filter {
        /// Lets the request go upstream, annotated with its class.
        fn forward(&self, class: Class) -> Action {
            let _ = hostcalls::set_map_value_bytes(
                MapType::HttpRequestHeaders,
                &self.shared.cfg.class_header,
                Some(class.as_str().as_bytes()),
            );
            Action::Continue
        }
    }
}
