//! An exempt path (`exempt_paths`: robots.txt, sitemaps): forwarded with no class, never
//! limited by a class limit, never shed, never paused for verification; only the exempt
//! paths' own generous per-client limit (`exempt_limit`) applies, so that one client cannot
//! flood them.

use super::{Facts, Phase, RequestParts, RequestState, Step};
use crate::config::Mode;
use crate::host::Host;
use crate::limits::decision::decide_exempt;
use crate::response::rejection;

impl RequestState {
    /// Decides a request for an exempt path: counted `crawlguard.exempt`; over the exempt
    /// limit of its client address, a 429 with the limit's Retry-After (counted
    /// `crawlguard.exempt_limited`; in shadow mode counted `crawlguard.exempt_shadow_limited`
    /// and forwarded); else forwarded without a class header (a client-sent one removed).
    pub(super) fn exempt(
        &mut self,
        w: RequestParts<'_>,
        host: &mut dyn Host,
        facts: &Facts,
    ) -> Step {
        let cfg = w.cfg;
        host.set_request_header(&cfg.class_header, None);
        w.metrics.record_exempt(&mut |id| host.increment(id));
        self.phase = Phase::Exempt;
        let (Some(ex), Some(now)) = (&cfg.exempt_limit, host.now_ns()) else {
            return Step::Continue;
        };
        let over = match w.limiter.try_borrow_mut() {
            Ok(mut lim) => {
                let (over, events) = decide_exempt(
                    ex,
                    &mut lim,
                    host.shared_data(),
                    facts.client_prefix,
                    now,
                    &mut || w.jitter.next_u32(),
                );
                if events.fell_back() && w.store_warning.due(now) {
                    log::warn!("shared store unavailable, using local buckets: {events:?}");
                }
                over
            }
            Err(_) => None,
        };
        let Some(r) = over else {
            return Step::Continue;
        };
        let shadow = ex.limit.mode == Mode::Shadow;
        w.metrics
            .record_exempt_limited(shadow, &mut |id| host.increment(id));
        log::debug!(
            "{}limited exempt path limit={} retry_after_s={}",
            if shadow { "shadow_" } else { "" },
            ex.limit.name,
            r.retry_after_s
        );
        if shadow {
            return Step::Continue;
        }
        let rl = cfg
            .ratelimit_headers
            .then(|| rejection::quota(&ex.limit, None))
            .flatten()
            .map(|q| (ex.limit.name.as_str(), q));
        let rej = rejection::rejection(r.status, r.retry_after_s, rl);
        if self.reply(host, &rej, rejection::DETAILS_LIMITED) {
            Step::Pause
        } else {
            Step::Continue
        }
    }
}
