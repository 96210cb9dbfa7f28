//! The way back of one request: its response headers (upstream rejections rewritten, origin
//! health recorded, costs settled) and its stream's end (reservations nobody settled).

use super::{Phase, RequestParts, RequestState, Step};
use crate::host::Host;
use crate::response::rejection;
use crate::response::rewrite;

/// The cost an origin reports: a whole number of tokens, at most 1,000,000 (`None` for
/// anything else: the reservation stands).
pub fn parse_cost(value: &[u8]) -> Option<u32> {
    let v = value.trim_ascii();
    if v.is_empty() || v.len() > 7 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v)
        .ok()?
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= 1_000_000)
}

impl RequestState {
    /// Response headers arrived: replaces an upstream rejection (or a degraded page for a
    /// verified crawler) with crawlguard's own, decided from headers alone; Envoy then drops
    /// the upstream body unread. Our own replies are never rewritten.
    pub fn on_response_headers(
        &mut self,
        w: RequestParts<'_>,
        host: &mut dyn Host,
        eos: bool,
    ) -> Step {
        if self.replied() {
            return Step::Continue;
        }
        let cfg = w.cfg;
        if !cfg.cost_headers.is_empty() {
            self.settle_costs(w, host);
        }
        // The status is one host call that returns a buffer (about 11,000 instructions per
        // request in Envoy, bench/profile.md): read only for what needs it, the rewrite of
        // upstream rejections and the origin's health under shedding.
        let timed = match self.phase {
            Phase::Forwarded {
                route,
                sent_at_ns: Some(sent),
                client,
                ..
            } => Some((route, sent, client)),
            _ => None,
        };
        if !cfg.rewrite.enabled && timed.is_none() {
            return Step::Continue;
        }
        let status = host.response_header(":status");
        if let Some((route, sent, client)) = timed {
            // The origin's health: time from forwarding to response headers, and 5xx
            // (Envoy's own 503/504 for resets and timeouts included).
            let now = host.now_ns().unwrap_or(sent);
            let error = status.as_deref().is_some_and(|s| s.first() == Some(&b'5'));
            w.shedder.record_response(
                w.cfg,
                route,
                now.saturating_sub(sent) / 1_000_000,
                error,
                client,
            );
        }
        // Cheap exit for the common case before reading anything else.
        let code = status.as_deref().unwrap_or_default();
        let num = std::str::from_utf8(code)
            .ok()
            .and_then(|c| c.parse::<u16>().ok());
        // The degraded header matters only on a 200; read it only then.
        let degraded = num == Some(200)
            && cfg
                .degraded
                .as_deref()
                .is_some_and(|h| host.response_header(h).is_some());
        let candidate = cfg.rewrite.enabled
            && num.is_some_and(|n| cfg.rewrite.statuses.contains(&n) || degraded);
        if !candidate {
            return Step::Continue;
        }
        // Not forwarded by us (a filter before ours answered, or an exempt path): classify
        // now, by User-Agent alone (claims count as unverified).
        let class = self.forwarded_class().unwrap_or_else(|| {
            cfg.classifier
                .classify(host.request_header("user-agent").as_deref())
                .class
        });
        let retry_after = host.response_header_lines("retry-after");
        let cache_control = host.response_header("cache-control");
        let has_body = !eos
            && host
                .response_header("content-length")
                .is_none_or(|l| l.trim_ascii() != b"0");
        let up = rewrite::Upstream {
            status: status.as_deref(),
            retry_after: &retry_after,
            cache_control: cache_control.as_deref(),
            degraded,
            has_body,
        };
        let now_s = host.now_ns().unwrap_or(0) / 1_000_000_000;
        let Some(plan) = rewrite::plan(cfg, class, &up, now_s, &mut || w.jitter.next_u32()) else {
            return Step::Continue;
        };
        w.metrics
            .record_rewrite(&plan, &mut |id| host.increment(id));
        log::debug!(
            "normalised upstream {} -> {} class={} retry_after_s={} {:?}",
            String::from_utf8_lossy(code),
            plan.status,
            class.as_str(),
            plan.retry_after_s,
            plan.fixes
        );
        let rej = rejection::rejection(plan.status, plan.retry_after_s, None);
        if self.reply(host, &rej, rejection::DETAILS_NORMALISED) {
            Step::Pause
        } else {
            Step::Continue
        }
    }

    /// The stream ended (Envoy's access-log callback, after everything else, however the
    /// stream ended: a complete response, a reset by either side, a timeout, a local reply):
    /// the places in flight the request held are given back, and reservations no response
    /// settled (the client or the origin went away first) settle at what they reserved,
    /// which ends their flight ([`crate::limits::cost`]).
    pub fn on_stream_end(&mut self, w: RequestParts<'_>, host: &mut dyn Host) {
        if self.is_awaiting_verdict() {
            self.phase = Phase::Ended;
            return;
        }
        let places = std::mem::take(&mut self.places);
        let reservations = match &mut self.phase {
            Phase::Forwarded { reservations, .. } => std::mem::take(reservations),
            _ => Vec::new(),
        };
        if places.is_empty() && reservations.is_empty() {
            return;
        }
        let now = host.now_ns().unwrap_or(0);
        if let Ok(mut lim) = w.limiter.try_borrow_mut() {
            for r in &reservations {
                lim.settle(w.cfg, host.shared_data(), r, None, now);
            }
            for p in places {
                lim.release_place(host.shared_data(), p, now);
            }
        }
    }

    /// Settles the request's cost reservations at what the origin reports in each limit's
    /// cost header (missing or invalid: at the reservation), then removes every cost header
    /// from the response: it is for crawlguard, not for the client.
    fn settle_costs(&mut self, w: RequestParts<'_>, host: &mut dyn Host) {
        let cfg = w.cfg;
        let reservations = match &mut self.phase {
            Phase::Forwarded { reservations, .. } => std::mem::take(reservations),
            _ => Vec::new(),
        };
        if !reservations.is_empty() {
            let now = host.now_ns().unwrap_or(0);
            for r in &reservations {
                let actual = cfg
                    .limits
                    .get(r.limit)
                    .and_then(|l| l.cost.as_ref())
                    .and_then(|c| host.response_header(&c.from_response_header))
                    .and_then(|v| parse_cost(&v));
                if let Ok(mut lim) = w.limiter.try_borrow_mut() {
                    lim.settle(cfg, host.shared_data(), r, actual, now);
                }
            }
        }
        for name in &cfg.cost_headers {
            host.remove_response_header(name);
        }
    }
}
