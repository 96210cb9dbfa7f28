//! The per-request proxy-wasm context: gather fields, classify, verify the claim (callout),
//! decide, act. Every path either continues, resumes, or answers the request.

use crate::classify::Class;
use crate::client_ip;
use crate::config::{Config, IpSource, OnError};
use crate::engine::{self, Decision, Limiter, Request};
use crate::host::{self, HostStore};
use crate::metrics::{Metrics, VerifyEvent};
use crate::respond;
use crate::rewrite;
use crate::verify::{self, BotVerdict, Cached, VerdictCache, VerifyError};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::Duration;

/// Largest verifier response body read, bytes (answers are ~200 bytes).
const MAX_VERIFIER_BODY: usize = 4096;
/// Extra life of an in-flight marker past the callout timeout, ns.
const IN_FLIGHT_SLACK_NS: u64 = 1_000_000_000;
/// Minimum gap between two warnings of one kind per VM, ns.
const WARN_EVERY_NS: u64 = 10_000_000_000;

/// A warning logged at most once per [`WARN_EVERY_NS`] per VM, so a failing dependency
/// cannot flood Envoy's log at request rate.
#[derive(Default)]
struct Throttle {
    last_ns: Cell<u64>,
}

impl Throttle {
    /// True (and remembers `now`) when the last warning is old enough.
    fn ready(&self, now: u64) -> bool {
        let due = now.saturating_sub(self.last_ns.get()) > WARN_EVERY_NS;
        if due {
            self.last_ns.set(now);
        }
        due
    }
}

/// Per-VM state shared by the root and every request context.
pub(crate) struct Shared {
    cfg: Config,
    limiter: RefCell<Limiter>,
    verdicts: VerdictCache,
    metrics: Metrics,
    store_warn: Throttle,
    verifier_warn: Throttle,
}

impl Shared {
    pub(crate) fn new(
        cfg: Config,
        limiter: Limiter,
        verdicts: VerdictCache,
        metrics: Metrics,
    ) -> Shared {
        Shared {
            cfg,
            limiter: RefCell::new(limiter),
            verdicts,
            metrics,
            store_warn: Throttle::default(),
            verifier_warn: Throttle::default(),
        }
    }

    fn verify_event(&self, e: VerifyEvent) {
        self.metrics.record_verify(e, &mut host::increment);
    }
}

/// A claim whose verdict is being fetched while the request is paused.
struct Pending {
    token: u32,
    ip: IpAddr,
    fp: u64,
    bot_id: String,
    bot_class: Class,
}

/// One request.
pub(crate) struct Filter {
    shared: Option<Rc<Shared>>,
    /// Set when we answered locally; the response path must not rewrite our own reply.
    local_reply: bool,
    pending: Option<Pending>,
    /// The class the request was forwarded with (for the response path).
    class: Option<Class>,
}

impl Filter {
    pub(crate) fn new(shared: Option<Rc<Shared>>) -> Filter {
        Filter {
            shared,
            local_reply: false,
            pending: None,
            class: None,
        }
    }
}

fn header(name: &str) -> Option<Vec<u8>> {
    hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
        .ok()
        .flatten()
}

/// Every line of request header `name` (Envoy hands single-value reads only the first line;
/// a key header must be seen whole). One host call, made only for `header:<name>` keys.
fn header_lines(name: &str) -> Vec<Vec<u8>> {
    hostcalls::get_map_bytes(MapType::HttpRequestHeaders)
        .map(|m| {
            m.into_iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
                .collect()
        })
        .unwrap_or_default()
}

/// The fields both verification and limiting need, read once per callback (each is a host
/// call): the time, the downstream address and, when configured, `x-forwarded-for`.
struct Fields {
    now: Option<u64>,
    remote: Option<Vec<u8>>,
    xff: Option<Vec<u8>>,
}

impl Fields {
    fn read(cfg: &Config) -> Fields {
        Fields {
            now: host::now_ns(),
            remote: hostcalls::get_property(vec!["source", "address"])
                .ok()
                .flatten(),
            xff: match cfg.client_ip.source {
                IpSource::Xff => header("x-forwarded-for"),
                IpSource::RemoteAddress => None,
            },
        }
    }
}

impl Context for Filter {
    fn on_http_call_response(
        &mut self,
        token: u32,
        _headers: usize,
        body_size: usize,
        _trailers: usize,
    ) {
        let Some(sh) = self.shared.clone() else {
            return;
        };
        let Some(p) = self.pending.take_if(|p| p.token == token) else {
            return;
        };
        let fields = Fields::read(&sh.cfg);
        let now = fields.now.unwrap_or(0);
        let status = hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten();
        let body = hostcalls::get_buffer(
            BufferType::HttpCallResponseBody,
            0,
            body_size.min(MAX_VERIFIER_BODY),
        )
        .ok()
        .flatten()
        .unwrap_or_default();
        let class = match verify::parse_response(status.as_deref(), &body, p.ip, &p.bot_id) {
            Ok(a) => {
                let cap_s = match a.verdict {
                    BotVerdict::Unknown => sh.cfg.verifier.unknown_ttl_s,
                    _ => sh.cfg.verifier.max_ttl_s,
                };
                let ttl_ns = a.ttl_s.min(u64::from(cap_s)).saturating_mul(1_000_000_000);
                let _ = sh
                    .verdicts
                    .put(&HostStore, p.fp, a.verdict, now.saturating_add(ttl_ns));
                sh.verify_event(match a.verdict {
                    BotVerdict::Verified => VerifyEvent::Verified,
                    BotVerdict::Spoofed => VerifyEvent::Spoofed,
                    BotVerdict::Unknown => VerifyEvent::Unknown,
                });
                log::debug!(
                    "verdict {} for {} claiming {}",
                    a.verdict.as_str(),
                    p.ip,
                    p.bot_id
                );
                verify::class_for(a.verdict, p.bot_class)
            }
            Err(e) => self.verifier_error(&sh, &p, e, now),
        };
        if self.limit(&sh, &fields, class) == Action::Continue {
            let _ = hostcalls::resume_http_request();
        }
    }
}

fn on_error_class(cfg: &Config, bot_class: Class) -> Class {
    match cfg.verifier.on_error {
        OnError::UnverifiedBot => Class::UnverifiedBot,
        OnError::ClaimedClass => bot_class,
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _n: usize, _eos: bool) -> Action {
        let Some(sh) = self.shared.clone() else {
            return Action::Continue;
        };
        // Never trust a class header sent by the client.
        let _ =
            hostcalls::set_map_value_bytes(MapType::HttpRequestHeaders, &sh.cfg.class_header, None);
        let ua = header("user-agent");
        let c = sh.cfg.classifier.classify(ua.as_deref());
        let fields = Fields::read(&sh.cfg);
        let class = match c.bot {
            Some(bot) if bot.verify && sh.cfg.verifier.enabled => {
                match self.verify_claim(&sh, &fields, &bot.id, bot.class) {
                    Some(class) => class,
                    None => return Action::Pause, // resumed by on_http_call_response
                }
            }
            _ => c.class,
        };
        self.limit(&sh, &fields, class)
    }

    fn on_http_response_headers(&mut self, _n: usize, eos: bool) -> Action {
        if self.local_reply {
            // Our own reply: already normalised, never rewritten a second time.
            return Action::Continue;
        }
        let Some(sh) = self.shared.clone() else {
            return Action::Continue;
        };
        self.normalise_response(&sh, eos)
    }
}

impl Filter {
    /// The class of a `verify: true` claim from the verdict cache, or `None` after starting
    /// a callout (the request is then paused).
    fn verify_claim(
        &mut self,
        sh: &Shared,
        f: &Fields,
        bot_id: &str,
        bot_class: Class,
    ) -> Option<Class> {
        let cfg = &sh.cfg;
        let Some(now) = f.now else {
            return Some(on_error_class(cfg, bot_class));
        };
        // The claim is about the full address, not the bucket prefix.
        let Some(ip) = client_ip::client_ip(&cfg.client_ip, f.remote.as_deref(), f.xff.as_deref())
        else {
            return Some(Class::UnverifiedBot);
        };
        let Ok(fp) = sh
            .limiter
            .try_borrow()
            .map(|l| l.claim_fingerprint(ip, bot_id))
        else {
            return Some(on_error_class(cfg, bot_class));
        };
        let cas = match sh.verdicts.lookup(&HostStore, fp, now) {
            Cached::Fresh(v) => {
                sh.verify_event(VerifyEvent::CacheHit);
                return Some(verify::class_for(v, bot_class));
            }
            Cached::Error => {
                sh.verify_event(VerifyEvent::CacheHit);
                return Some(on_error_class(cfg, bot_class));
            }
            Cached::InFlight => {
                sh.verify_event(VerifyEvent::InFlight);
                return Some(Class::UnverifiedBot);
            }
            Cached::Miss { cas } => cas,
        };
        sh.verify_event(VerifyEvent::CacheMiss);
        let timeout_ns = u64::from(cfg.verifier.timeout_ms) * 1_000_000;
        if !sh
            .verdicts
            .mark_in_flight(&HostStore, fp, now + timeout_ns + IN_FLIGHT_SLACK_NS, cas)
        {
            // Another worker just started the callout for this claim.
            sh.verify_event(VerifyEvent::InFlight);
            return Some(Class::UnverifiedBot);
        }
        let path = verify::request_path(ip, bot_id);
        let headers = vec![
            (":method", "GET"),
            (":path", path.as_str()),
            (":authority", cfg.verifier.authority.as_str()),
            ("accept", "application/json"),
        ];
        let timeout = Duration::from_millis(u64::from(cfg.verifier.timeout_ms));
        let pending = |token| Pending {
            token,
            ip,
            fp,
            bot_id: bot_id.to_string(),
            bot_class,
        };
        match hostcalls::dispatch_http_call(&cfg.verifier.cluster, headers, None, vec![], timeout) {
            Ok(token) => {
                self.pending = Some(pending(token));
                None
            }
            // Refused at dispatch (e.g. no such cluster): no callback will come.
            Err(_) => Some(self.verifier_error(sh, &pending(0), VerifyError::Dispatch, now)),
        }
    }

    fn verifier_error(&self, sh: &Shared, p: &Pending, e: VerifyError, now: u64) -> Class {
        let cfg = &sh.cfg;
        let ttl_ns = u64::from(cfg.verifier.error_ttl_s) * 1_000_000_000;
        let _ = sh
            .verdicts
            .put_error(&HostStore, p.fp, now.saturating_add(ttl_ns));
        sh.verify_event(VerifyEvent::Error);
        if sh.verifier_warn.ready(now) {
            log::warn!(
                "verifier error ({}) for {} claiming {}: {e:?} (further errors only counted \
                 in crawlguard.verify.error for 10 s)",
                e.kind(),
                p.ip,
                p.bot_id
            );
        }
        on_error_class(cfg, p.bot_class)
    }

    /// Takes tokens for `class` and acts: forwards (Continue) or answers locally (Pause).
    fn limit(&mut self, sh: &Shared, f: &Fields, class: Class) -> Action {
        let cfg = &sh.cfg;
        let Some(now) = f.now else {
            return self.forward(cfg, class);
        };
        let path = header(":path").unwrap_or_default();
        let req = Request {
            path: &path,
            remote_address: f.remote.as_deref(),
            xff: f.xff.as_deref(),
            header: &header_lines,
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
            Err(_) => return self.forward(cfg, class),
        };
        sh.metrics.record(class, &out, &mut host::increment);
        if out.store.fell_back() && sh.store_warn.ready(now) {
            log::warn!(
                "shared store unavailable, using local buckets: {:?}",
                out.store
            );
        }
        let r = match out.decision {
            Decision::Limited(r) => r,
            Decision::ShadowLimited(r) => {
                // Shadow mode: say what enforcement would have done, then forward.
                log::debug!(
                    "shadow_limited class={} route={} limit={} retry_after_s={} status={}",
                    class.as_str(),
                    cfg.route_name(out.route),
                    cfg.limits.get(r.limit).map_or("?", |l| l.name.as_str()),
                    r.retry_after_s,
                    r.status
                );
                return self.forward(cfg, class);
            }
            Decision::Malformed { limit } | Decision::ShadowMalformed { limit } => {
                let shadow = matches!(out.decision, Decision::ShadowMalformed { .. });
                log::debug!(
                    "{}malformed_key class={} route={} limit={} (more than {} key values)",
                    if shadow { "shadow_" } else { "" },
                    class.as_str(),
                    cfg.route_name(out.route),
                    cfg.limits.get(limit).map_or("?", |l| l.name.as_str()),
                    engine::MAX_KEY_VALUES
                );
                if shadow {
                    return self.forward(cfg, class);
                }
                let _ = hostcalls::set_map_value_bytes(
                    MapType::HttpRequestHeaders,
                    &cfg.class_header,
                    Some(class.as_str().as_bytes()),
                );
                return match self.reply(&respond::malformed_key(), respond::DETAILS_MALFORMED_KEY) {
                    Some(action) => action,
                    None => self.forward(cfg, class),
                };
            }
            Decision::Allowed | Decision::Exempt => return self.forward(cfg, class),
        };
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
        // Annotate the rejected request too, so access logs show the class (%REQ(...)%).
        let _ = hostcalls::set_map_value_bytes(
            MapType::HttpRequestHeaders,
            &cfg.class_header,
            Some(class.as_str().as_bytes()),
        );
        match self.reply(&rej, respond::DETAILS_LIMITED) {
            Some(action) => action,
            None => self.forward(cfg, class),
        }
    }

    /// Sends `rej` as a local reply; `None` if the host refused (the caller fails open).
    fn reply(&mut self, rej: &respond::Rejection, details: &str) -> Option<Action> {
        host::send_local_response(rej.status, details, &rej.headers, rej.body.as_bytes()).ok()?;
        self.local_reply = true;
        Some(Action::Pause)
    }

    /// Replaces an upstream rejection (or a degraded page for a crawler) with crawlguard's
    /// own, decided from headers alone; Envoy then drops the upstream body unread.
    fn normalise_response(&mut self, sh: &Shared, eos: bool) -> Action {
        let cfg = &sh.cfg;
        let resp = |name: &str| {
            hostcalls::get_map_value_bytes(MapType::HttpResponseHeaders, name)
                .ok()
                .flatten()
        };
        let status = resp(":status");
        // Cheap exit for the common case before reading anything else.
        let code = status.as_deref().unwrap_or_default();
        let num = std::str::from_utf8(code)
            .ok()
            .and_then(|c| c.parse::<u16>().ok());
        // The degraded header matters only on a 200; read it only then.
        let degraded =
            num == Some(200) && cfg.degraded.as_deref().is_some_and(|h| resp(h).is_some());
        let candidate = cfg.rewrite.enabled
            && num.is_some_and(|n| cfg.rewrite.statuses.contains(&n) || degraded);
        if !candidate {
            return Action::Continue;
        }
        // A rejection by a filter before ours never reached our request path: classify now.
        let class = self.class.unwrap_or_else(|| {
            cfg.classifier
                .classify(header("user-agent").as_deref())
                .class
        });
        let retry_after: Vec<Vec<u8>> = hostcalls::get_map_bytes(MapType::HttpResponseHeaders)
            .map(|m| {
                m.into_iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
                    .map(|(_, v)| v)
                    .collect()
            })
            .unwrap_or_default();
        let cache_control = resp("cache-control");
        let has_body = !eos && resp("content-length").is_none_or(|l| l.trim_ascii() != b"0");
        let up = rewrite::Upstream {
            status: status.as_deref(),
            retry_after: &retry_after,
            cache_control: cache_control.as_deref(),
            degraded,
            has_body,
        };
        let now_s = host::now_ns().unwrap_or(0) / 1_000_000_000;
        let Some(plan) = rewrite::plan(cfg, class, &up, now_s, &mut host::random_u32) else {
            return Action::Continue;
        };
        sh.metrics.record_rewrite(&plan, &mut host::increment);
        log::debug!(
            "normalised upstream {} -> {} class={} retry_after_s={} {:?}",
            String::from_utf8_lossy(code),
            plan.status,
            class.as_str(),
            plan.retry_after_s,
            plan.fixes
        );
        let rej = respond::rejection(plan.status, plan.retry_after_s, None);
        self.reply(&rej, respond::DETAILS_NORMALISED)
            .unwrap_or(Action::Continue)
    }

    /// Lets the request go upstream, annotated with its class.
    fn forward(&mut self, cfg: &Config, class: Class) -> Action {
        self.class = Some(class);
        let _ = hostcalls::set_map_value_bytes(
            MapType::HttpRequestHeaders,
            &cfg.class_header,
            Some(class.as_str().as_bytes()),
        );
        Action::Continue
    }
}
