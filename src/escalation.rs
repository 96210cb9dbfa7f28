//! Retry-After compliance and escalation, per client key: a pure function of (stored
//! state, now, policy), like the bucket math.
//!
//! When crawlguard rejects a key it remembers when it told the client to come back
//! (`told_until_ns`). The key's next request is *ignored* when it comes before that time and
//! *honoured* when it comes after it (counted once: `crawlguard.class.<c>.retry_after_*`).
//! With escalation on for the class, a key that has ignored its Retry-After
//! `after_ignored` times is put in a *penalty*: rejected without consuming tokens, with a
//! Retry-After multiplied by `factor` for every further step, up to `max_s`. After `decay_s`
//! without an ignored request, the key starts over.

use crate::bucket::NS_PER_S;
use crate::config::Escalation;

/// What a key remembers between requests (zero: nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Compliance {
    /// The client was told to come back at this time, ns (0: not told, or it came back).
    pub told_until_ns: u64,
    /// Rejected without consuming tokens until then, ns (0: no penalty).
    pub penalty_until_ns: u64,
    /// `ignored` and `level` reset at this time, ns (the last ignored request + `decay_s`).
    pub forget_at_ns: u64,
    /// Ignored Retry-Afters counted since the last reset.
    pub ignored: u16,
    /// Escalation steps taken (the penalty's Retry-After is `base x factor^level`).
    pub level: u8,
}

/// How a request relates to the Retry-After its key was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// The key was not waiting for anything.
    Unremarkable,
    /// It came back before the time it was given.
    Ignored,
    /// It came back after it (the first request after the wait).
    Honoured,
}

impl Compliance {
    /// True when nothing is remembered at `now_ns` (the state can be dropped).
    pub fn is_idle(&self, now_ns: u64) -> bool {
        self.told_until_ns <= now_ns
            && self.penalty_until_ns <= now_ns
            && (self.forget_at_ns <= now_ns || (self.ignored == 0 && self.level == 0))
    }

    /// From when on nothing is remembered (if nothing changes), ns.
    pub fn idle_at_ns(&self) -> u64 {
        self.told_until_ns
            .max(self.penalty_until_ns)
            .max(self.forget_at_ns)
    }

    /// A request of this key arrives at `now_ns`: forgets what decayed, and says whether it
    /// ignored or honoured its Retry-After (an ignored one is counted toward escalation when
    /// `policy` is enabled).
    pub fn visit(&mut self, now_ns: u64, policy: &Escalation) -> Visit {
        if self.forget_at_ns != 0 && self.forget_at_ns <= now_ns {
            // Good behaviour for decay_s: the key starts over, penalty included.
            self.ignored = 0;
            self.level = 0;
            self.forget_at_ns = 0;
            self.penalty_until_ns = 0;
        }
        if self.told_until_ns == 0 {
            return Visit::Unremarkable;
        }
        if now_ns < self.told_until_ns {
            self.ignored = self.ignored.saturating_add(1);
            self.forget_at_ns =
                now_ns.saturating_add(u64::from(policy.decay_s).saturating_mul(NS_PER_S));
            Visit::Ignored
        } else {
            self.told_until_ns = 0;
            Visit::Honoured
        }
    }

    /// True while the key serves a penalty.
    pub fn in_penalty(&self, now_ns: u64) -> bool {
        now_ns < self.penalty_until_ns
    }

    /// The key is rejected at `now_ns` with a normal Retry-After of `base_s` seconds (already
    /// clamped to the class range). With escalation on and `after_ignored` ignored
    /// Retry-Afters, it escalates one step: the Retry-After becomes `base_s x factor^level`,
    /// capped at `max_s`, and the key serves it as a penalty. Remembers when the client was
    /// told to come back (`now + Retry-After`; the jitter added on the wire only makes the
    /// client later) and returns the Retry-After to send, before jitter, and whether it
    /// escalated.
    pub fn reject(&mut self, now_ns: u64, base_s: u32, policy: &Escalation) -> (u32, bool) {
        let escalate = policy.enabled && self.ignored >= policy.after_ignored.max(1);
        let ra_s = if escalate {
            self.level = self.level.saturating_add(1);
            let mut ra = f64::from(base_s.max(1));
            for _ in 0..self.level {
                ra *= policy.factor;
                if ra >= f64::from(policy.max_s) {
                    break;
                }
            }
            // Saturating float-to-int; never below the normal value, never above max_s.
            (ra.min(f64::from(policy.max_s)) as u32).max(base_s)
        } else {
            base_s
        };
        let until = now_ns.saturating_add(u64::from(ra_s).saturating_mul(NS_PER_S));
        if escalate {
            self.penalty_until_ns = until;
        }
        self.told_until_ns = until;
        (ra_s, escalate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    fn policy(enabled: bool) -> Escalation {
        Escalation {
            enabled,
            after_ignored: 3,
            factor: 2.0,
            max_s: 40,
            decay_s: 60,
        }
    }

    #[test]
    fn a_client_that_waits_honours_and_one_that_hammers_ignores() {
        let p = policy(false);
        let mut c = Compliance::default();
        assert_eq!(c.visit(T0, &p), Visit::Unremarkable);
        assert_eq!(c.reject(T0, 5, &p), (5, false));
        assert_eq!(c.visit(T0 + NS_PER_S, &p), Visit::Ignored);
        assert_eq!(c.visit(T0 + 5 * NS_PER_S, &p), Visit::Honoured);
        // Counted once: the next request is unremarkable.
        assert_eq!(c.visit(T0 + 6 * NS_PER_S, &p), Visit::Unremarkable);
        assert_eq!(c.ignored, 1);
        assert_eq!(c.level, 0);
    }

    #[test]
    fn ignoring_escalates_by_factor_up_to_max_then_decays() {
        let p = policy(true);
        let mut c = Compliance::default();
        let mut now = T0;
        let mut sent = Vec::new();
        for _ in 0..8 {
            let _ = c.visit(now, &p);
            sent.push(c.reject(now, 5, &p));
            now += NS_PER_S / 10;
        }
        // Three ignored Retry-Afters, then every further one doubles, capped at 40.
        assert_eq!(
            sent,
            [
                (5, false),
                (5, false),
                (5, false),
                (10, true),
                (20, true),
                (40, true),
                (40, true),
                (40, true)
            ]
        );
        assert!(c.in_penalty(now));
        // 60 s (decay_s) after the last ignored request it starts over.
        let later = now + 100 * NS_PER_S;
        assert_eq!(c.visit(later, &p), Visit::Honoured);
        assert_eq!((c.ignored, c.level), (0, 0));
        assert_eq!(c.reject(later, 5, &p), (5, false));
        assert!(c.is_idle(later + 70 * NS_PER_S));
    }

    #[test]
    fn escalation_off_never_penalises() {
        let p = policy(false);
        let mut c = Compliance::default();
        for i in 0..20 {
            let now = T0 + i;
            let _ = c.visit(now, &p);
            assert_eq!(c.reject(now, 7, &p), (7, false));
            assert!(!c.in_penalty(now));
        }
        assert_eq!(c.ignored, 19);
    }
}
