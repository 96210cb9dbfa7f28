//! One request, as a state machine driven by the proxy-wasm callbacks through [`Host`]:
//!
//! ```text
//! Start --exempt path--------------------------------------> Exempt (forwarded, no class)
//!   |--classify; claim to verify, no usable verdict--------> AwaitingVerdict --verdict--+
//!   |--class known (browser, script, cached verdict, ...)-----------------------------+
//!                                                                                     v
//!                         shed (origin unhealthy) or limits: Forwarded or Replied (429/503/400)
//! AwaitingVerdict --the stream ends first (client gone)--> Ended (a late verdict decides nothing)
//! ```
//!
//! On the response path (`request/response_path.rs`) an upstream rejection (or a degraded
//! page for a verified crawler) is replaced by crawlguard's own; a request answered by
//! crawlguard itself is never rewritten. `filter.rs` only translates callbacks into these
//! calls.

use crate::clock::{OnHost, WorkerClock};
use crate::config::Config;
use crate::host::{ContextId, Host, LocalReply};
use crate::identity::browser_checks;
use crate::identity::class::Class;
use crate::identity::verification::{VerificationState, VerifyParts};
use crate::limits::limiter::{Decision, Limiter, Place, RequestKeys, Reservation};
use crate::log_limit::WarnEvery10s;
use crate::metrics::{Metrics, PerKey};
use crate::protection::shedder::Shedder;
use crate::response::rejection::{self, Jitter};
use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Weak;

mod claim;
mod exempt;
mod facts;
mod response_path;

pub use claim::resume;
use claim::verify_claim;
pub use facts::{path_only, Facts};
pub use response_path::parse_cost;

/// How the root context refers to a paused request (weak: the request may be gone).
pub type Handle = Weak<RefCell<RequestState>>;

/// What a request reads and changes of its worker (`worker::Worker::request_parts`): each
/// component by reference.
#[derive(Clone, Copy)]
pub struct RequestParts<'a> {
    /// The configuration.
    pub cfg: &'a Config,
    /// Counter ids.
    pub metrics: &'a Metrics,
    /// The buckets.
    pub limiter: &'a RefCell<Limiter>,
    /// Verdicts, flights, published ranges.
    pub verifier: &'a VerificationState<Handle>,
    /// The shed levels in force, and origin health counts.
    pub shedder: &'a Shedder,
    /// Retry-After jitter.
    pub jitter: &'a Jitter,
    /// Shared-store trouble warnings.
    pub store_warning: &'a WarnEvery10s,
    /// The worker's last reading of the host's clock.
    pub clock: &'a WorkerClock,
}

impl<'a> RequestParts<'a> {
    /// The parts verification needs.
    pub fn verify(&self) -> VerifyParts<'a, Handle> {
        VerifyParts {
            cfg: self.cfg,
            metrics: self.metrics,
            verifier: self.verifier,
        }
    }
}

/// What the proxy should do with the request after a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Go on (forward, or let our local reply go out).
    Continue,
    /// Stop here: paused for a verdict, or answered locally.
    Pause,
}

/// Where the request is.
#[derive(Debug, Default)]
enum Phase {
    /// Request headers not seen yet (or the filter did not handle them).
    #[default]
    Start,
    /// An exempt path, forwarded untouched by limits and verification.
    Exempt,
    /// Paused until its claim's verdict arrives.
    AwaitingVerdict(Box<Facts>),
    /// Sent upstream.
    Forwarded {
        /// The class it was sent with.
        class: Class,
        /// Cost reservations to settle on the response.
        reservations: Vec<Reservation>,
        /// Its route.
        route: usize,
        /// When it was sent, ns (kept only when shedding measures the origin).
        sent_at_ns: Option<u64>,
        /// Its client prefix (what its response counts for in the origin's health).
        client: Option<IpAddr>,
    },
    /// Answered locally by crawlguard.
    Replied,
    /// The stream ended (the client went away) while it waited for its verdict: a verdict
    /// that arrives before the context is deleted decides and charges nothing.
    Ended,
}

/// One request's state (held by its proxy-wasm context, and weakly by a flight while
/// paused).
#[derive(Debug, Default)]
pub struct RequestState {
    phase: Phase,
    /// The request's route (set with its facts).
    route: usize,
    /// When the limits let it through, ns (only when shedding measures the origin).
    sent_at_ns: Option<u64>,
    /// The client prefix (set with the facts).
    client_prefix: Option<IpAddr>,
    /// The limit (index in [`Config::limits`]) that would have rejected it in shadow mode.
    shadow_limit: Option<usize>,
    /// Places in flight of concurrency limits it holds until its stream ends.
    places: Vec<Place>,
}

impl RequestState {
    /// The class the request was forwarded with, if it was.
    pub fn forwarded_class(&self) -> Option<Class> {
        match self.phase {
            Phase::Forwarded { class, .. } => Some(class),
            _ => None,
        }
    }

    /// True while paused for a verdict.
    pub fn is_awaiting_verdict(&self) -> bool {
        matches!(self.phase, Phase::AwaitingVerdict(_))
    }

    /// True once crawlguard answered the request itself.
    pub fn replied(&self) -> bool {
        matches!(self.phase, Phase::Replied)
    }

    /// The limit (index in [`Config::limits`]) that would have rejected the request had it
    /// been enforced: set when a limit in shadow mode counted it `shadow_limited` and it was
    /// forwarded anyway (what `crawlguard replay` reports per limit).
    pub fn shadow_limited_by(&self) -> Option<usize> {
        self.shadow_limit
    }

    /// Request headers arrived. `me` is this request's own handle and `context` its
    /// context id (kept by a flight if the request pauses for a verdict).
    pub fn on_request_headers(
        &mut self,
        me: Handle,
        context: ContextId,
        w: RequestParts<'_>,
        host: &mut dyn Host,
    ) -> Step {
        let cfg = w.cfg;
        // Never trust a class header sent by the client. Every way out of this machine
        // other than an exempt path sets the header with one replace call, which in Envoy
        // removes every line the client sent before adding ours (integration tests send
        // several lines and see one value upstream), so only an exempt path removes it.
        let facts = Facts::read(cfg, host);
        if facts.exempt {
            // Before classification and verification: robots.txt and sitemaps are never
            // paused, limited by a class limit or shed (only their own per-client limit).
            return self.exempt(w, host, &facts);
        }
        // A verified signature names the agent whatever its User-Agent says: decided first.
        let mut facts = match self.on_signature(&me, context, w, host, facts) {
            Ok(step) => return step,
            Err(unsigned) => unsigned,
        };
        let ua = host.request_header("user-agent");
        let c = cfg.classifier.classify(ua.as_deref());
        let mut asn = None;
        let class = match c.bot {
            Some(bot) if bot.verify && cfg.verifier.enabled => {
                facts.claimed = Some(bot.class);
                match verify_claim(me, context, w, host, &facts, &bot.id, bot.class) {
                    Some(class) => class,
                    None => {
                        facts.bot = Some(bot.id.clone());
                        self.phase = Phase::AwaitingVerdict(Box::new(facts));
                        return Step::Pause;
                    }
                }
            }
            _ if c.class == Class::Human => {
                // A browser claim: checked like a crawler claim, by what the browser sends.
                let judged = browser_checks::judge(cfg, host, ua.as_deref().unwrap_or_default());
                w.metrics
                    .record_browser_checks(judged.failed, &mut |id| host.increment(id));
                asn = judged.asn;
                judged.class()
            }
            _ => c.class,
        };
        let bot = c.bot.map(|b| b.id.as_str());
        self.decide(w, host, &facts, class, bot, asn)
    }

    /// The verdict arrived while paused: decide with `class`. Returns what the proxy should
    /// do; `Continue` means the caller must resume the request.
    fn on_verdict(
        &mut self,
        w: RequestParts<'_>,
        host: &mut dyn Host,
        class: Class,
    ) -> Option<Step> {
        let Phase::AwaitingVerdict(facts) = std::mem::take(&mut self.phase) else {
            return None;
        };
        Some(self.decide(w, host, &facts, class, facts.bot.as_deref(), None))
    }

    /// Takes tokens for `class` and forwards (annotated with the class) or answers locally;
    /// `bot` is the catalog bot id the User-Agent names (the `bot` key), `asn` the client's
    /// network if the browser checks read it already (`None`: not read).
    fn decide(
        &mut self,
        w: RequestParts<'_>,
        host: &mut dyn Host,
        facts: &Facts,
        class: Class,
        bot: Option<&str>,
        asn: Option<Option<u32>>,
    ) -> Step {
        let cfg = w.cfg;
        self.route = facts.route;
        self.client_prefix = facts.client_prefix;
        // A binary search over the catalog's ids: no allocation on the allow path.
        let bot_ids = w.metrics.per_key.bot(bot);
        // The clock is read when the decision touches shared state or needs exact time
        // (crate::clock); a worker that never read it reads it now.
        let mut exact = None;
        if w.clock.coarse_ns().is_none() || cfg.shedding.enabled {
            let Some(now) = w.clock.exact_ns(host) else {
                PerKey::record_bot(bot_ids, false, &mut |id| host.increment(id));
                return self.forward(cfg, host, class, Vec::new());
            };
            exact = Some(now);
        }
        if let (true, Some(now)) = (cfg.shedding.enabled, exact) {
            self.sent_at_ns = Some(now);
            if w.shedder.is_shed(w.cfg, class, facts.route) {
                if let Some(step) = self.shed(w, host, class, facts) {
                    PerKey::record_bot(bot_ids, true, &mut |id| host.increment(id));
                    return step;
                }
            }
        }
        let key_headers = facts::read_key_headers(cfg, host);
        // The network, for `asn` keys: read here unless a browser check read it.
        let asn = match (asn, &cfg.client_signals.asn_header) {
            (Some(read), _) => read,
            (None, Some(h)) if cfg.asn_keyed(class) => host
                .request_header(h)
                .and_then(|v| crate::config::parse_asn(&v)),
            (None, _) => None,
        };
        let keys = RequestKeys {
            route: facts.route,
            client: facts.client_prefix,
            client_ip: facts.client_ip,
            bot,
            path: &facts.path,
            asn,
            key_headers: &key_headers,
            // Under `on_error: claimed_class` the claimed class may stand in for a verdict
            // the verifier never gave (an attacker can make its own lookup fail), so only
            // with the default `unverified_bot` does the class prove a verified claim.
            verified_claim: facts.claimed == Some(class)
                && cfg.verifier.on_error == crate::config::OnError::UnverifiedBot,
        };
        let mut env = OnHost {
            host,
            clock: w.clock,
            exact,
        };
        let mut out = match w.limiter.try_borrow_mut() {
            Ok(mut lim) => crate::limits::decision::decide_in(
                cfg,
                &mut lim,
                &mut env,
                &keys,
                class,
                &mut || w.jitter.next_u32(),
            ),
            Err(_) => return self.forward(cfg, host, class, Vec::new()),
        };
        let now = env.time_ns();
        w.metrics.record(class, &out, &mut |id| host.increment(id));
        let rejected = matches!(out.decision, Decision::Limited(_));
        PerKey::record_bot(bot_ids, rejected, &mut |id| host.increment(id));
        // Held until the stream ends (empty unless the request goes on).
        self.places = std::mem::take(&mut out.places);
        if out.store.fell_back() && w.store_warning.due(now) {
            log::warn!(
                "shared store unavailable, using local buckets: {:?}",
                out.store
            );
        }
        let r = match out.decision {
            Decision::Limited(r) => r,
            Decision::ShadowLimited(r) => {
                // Shadow mode: say what enforcement would have done, then forward.
                self.shadow_limit = Some(r.limit);
                log::debug!(
                    "shadow_limited class={} route={} limit={} retry_after_s={} status={}",
                    class.as_str(),
                    cfg.route_name(out.route),
                    cfg.limits.get(r.limit).map_or("?", |l| l.name.as_str()),
                    r.retry_after_s,
                    r.status
                );
                return self.forward(cfg, host, class, std::mem::take(&mut out.reservations));
            }
            Decision::Malformed { limit } | Decision::ShadowMalformed { limit } => {
                let shadow = matches!(out.decision, Decision::ShadowMalformed { .. });
                return self.on_malformed(cfg, host, class, &mut out, limit, shadow);
            }
            Decision::Allowed => {
                return self.forward(cfg, host, class, std::mem::take(&mut out.reservations))
            }
        };
        self.on_limited(cfg, host, class, out.route, r)
    }

    /// A key header named more than `MAX_KEY_VALUES` values for limit `limit`: a 400 (or,
    /// `shadow`, counted and forwarded).
    fn on_malformed(
        &mut self,
        cfg: &Config,
        host: &mut dyn Host,
        class: Class,
        out: &mut crate::limits::limiter::LimitResult,
        limit: usize,
        shadow: bool,
    ) -> Step {
        log::debug!(
            "{}malformed_key class={} route={} limit={} (more than {} key values)",
            if shadow { "shadow_" } else { "" },
            class.as_str(),
            cfg.route_name(out.route),
            cfg.limits.get(limit).map_or("?", |l| l.name.as_str()),
            crate::limits::bucket_key::MAX_KEY_VALUES
        );
        if shadow {
            // Forwarded as under any shadow outcome: the enforced limits charged it,
            // and their cost reservations settle on the response.
            self.shadow_limit = Some(limit);
            return self.forward(cfg, host, class, std::mem::take(&mut out.reservations));
        }
        host.set_request_header(&cfg.class_header, Some(class.as_str().as_bytes()));
        if self.reply(
            host,
            &rejection::malformed_key(),
            rejection::DETAILS_MALFORMED_KEY,
        ) {
            Step::Pause
        } else {
            self.forward(cfg, host, class, Vec::new())
        }
    }

    /// Over limit `r.limit`: the class's rejection (429 or 503, Retry-After, RateLimit
    /// headers when configured).
    fn on_limited(
        &mut self,
        cfg: &Config,
        host: &mut dyn Host,
        class: Class,
        route: usize,
        r: crate::limits::limiter::OverLimit,
    ) -> Step {
        let limit = cfg.limits.get(r.limit);
        log::debug!(
            "limited class={} route={} limit={} key={}{} retry_after_s={} status={}",
            class.as_str(),
            cfg.route_name(route),
            limit.map_or("?", |l| l.name.as_str()),
            limit.map_or_else(|| "?".to_string(), |l| l.key_label()),
            r.in_flight
                .map_or(String::new(), |m| format!(" in_flight={m}")),
            r.retry_after_s,
            r.status
        );
        let rl = limit
            .filter(|_| cfg.ratelimit_headers)
            .and_then(|l| Some((l.name.as_str(), rejection::quota(l, r.in_flight)?)));
        let rej = rejection::rejection(r.status, r.retry_after_s, rl);
        // Annotate the rejected request too, so access logs show the class (%REQ(...)%).
        host.set_request_header(&cfg.class_header, Some(class.as_str().as_bytes()));
        if self.reply(host, &rej, rejection::DETAILS_LIMITED) {
            Step::Pause
        } else {
            self.forward(cfg, host, class, Vec::new())
        }
    }

    /// The origin is unhealthy and `class` is shed on this route: 503 + Retry-After (base
    /// `step_s`, the soonest the level can fall, clamped to `shedding.retry_after`, plus
    /// jitter), no tokens taken. In shadow mode the shed is counted and the request goes on
    /// (`None`: carry on with the limits).
    fn shed(
        &mut self,
        w: RequestParts<'_>,
        host: &mut dyn Host,
        class: Class,
        facts: &Facts,
    ) -> Option<Step> {
        let cfg = w.cfg;
        let sh = &cfg.shedding;
        let shadow = sh.mode == crate::config::Mode::Shadow;
        w.metrics
            .record_shed(class, shadow, &mut |id| host.increment(id));
        log::debug!(
            "{}shed class={} route={}",
            if shadow { "shadow_" } else { "" },
            class.as_str(),
            cfg.route_name(facts.route)
        );
        if shadow {
            return None;
        }
        let wait_ns = u64::from(sh.step_s).saturating_mul(1_000_000_000);
        let ra = rejection::retry_after_s(wait_ns, &sh.retry_after, w.jitter.next_u32());
        let rej = rejection::rejection(503, ra, None);
        host.set_request_header(&cfg.class_header, Some(class.as_str().as_bytes()));
        if self.reply(host, &rej, rejection::DETAILS_SHED) {
            Some(Step::Pause)
        } else {
            Some(self.forward(cfg, host, class, Vec::new()))
        }
    }

    /// Sends `rej` as a local reply; false if the host refused (the caller fails open).
    fn reply(&mut self, host: &mut dyn Host, rej: &rejection::Rejection, details: &str) -> bool {
        let sent = host
            .send_reply(&LocalReply {
                status: rej.status,
                details,
                headers: &rej.headers,
                body: rej.body.as_bytes(),
            })
            .is_ok();
        if sent {
            self.phase = Phase::Replied;
        }
        sent
    }

    /// Lets the request go upstream, annotated with its class.
    fn forward(
        &mut self,
        cfg: &Config,
        host: &mut dyn Host,
        class: Class,
        reservations: Vec<Reservation>,
    ) -> Step {
        self.phase = Phase::Forwarded {
            class,
            reservations,
            route: self.route,
            sent_at_ns: self.sent_at_ns,
            client: self.client_prefix,
        };
        host.set_request_header(&cfg.class_header, Some(class.as_str().as_bytes()));
        Step::Continue
    }

    /// The request's body ended (it had one): the origin's latency, for shedding, counts
    /// from now, never the time the client took to send its body (a client trickling a
    /// body would otherwise make a fast origin look slow and shed everyone).
    pub fn on_request_body_end(&mut self, host: &mut dyn Host) {
        if let Phase::Forwarded {
            sent_at_ns: Some(sent),
            ..
        } = &mut self.phase
        {
            *sent = host.now_ns().unwrap_or(*sent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_cost, path_only};

    #[test]
    fn costs_are_whole_numbers_up_to_a_million() {
        assert_eq!(parse_cost(b"37"), Some(37));
        assert_eq!(parse_cost(b" 0 "), Some(0));
        assert_eq!(parse_cost(b"1000000"), Some(1_000_000));
        for bad in [
            &b""[..],
            b"1000001",
            b"-1",
            b"3.5",
            b"12a",
            b"99999999",
            b"\xff",
        ] {
            assert_eq!(parse_cost(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn path_only_strips_query_and_fragment() {
        assert_eq!(path_only(b"/a?b#c"), b"/a");
        assert_eq!(path_only(b"/a#c?d"), b"/a");
        assert_eq!(path_only(b""), b"");
    }
}
