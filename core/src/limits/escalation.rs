//! Retry-After compliance and escalation, per client: a pure function of (stored state,
//! now, class, policy), like the bucket math.
//!
//! The client is an address and a class: the state lives in the slot of a `client_ip` key
//! and names the class it was told ([`Compliance::class`]). A request of another class at
//! the same address (a browser behind the NAT of a script) neither counts against it nor
//! serves its penalty, and a header key (a shared "missing" key, an account anyone can name)
//! never carries any (the limiter does not track them).
//!
//! When crawlguard rejects a key it remembers when it told the client to come back
//! (`told_until_ns`). The key's next request is *ignored* when it comes before that time and
//! *honoured* when it comes after it (counted once: `crawlguard.class.<c>.retry_after_*`).
//! With escalation on for the class, a key that has ignored its Retry-After
//! `after_ignored` times is put in a *penalty*: rejected without consuming tokens, with a
//! Retry-After of `retry_after.min_s x factor^step` for its step (1, 2, ...), up to `max_s`.
//! The step count alone sets it, never the penalty still to serve, so a flood climbs one
//! factor per request instead of compounding. A penalty lasts what its Retry-After said;
//! once it is served and `decay_s` has passed without an ignored request, the key starts
//! over.

use crate::config::{ClassPolicy, Escalation};
use crate::identity::class::Class;
use crate::limits::bucket::NS_PER_S;

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
    /// The class that was told (and serves the penalty); `None` before the first rejection.
    pub class: Option<Class>,
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

    /// A request of `class` from this key's address arrives at `now_ns`: forgets what
    /// decayed, and says whether it ignored or honoured its Retry-After (an ignored one is
    /// counted toward escalation when `policy` is enabled). A request of another class than
    /// the one told is unremarkable and changes nothing: it is another client.
    pub fn visit(&mut self, now_ns: u64, class: Class, policy: &Escalation) -> Visit {
        if self.forget_at_ns != 0 && self.forget_at_ns <= now_ns && !self.in_penalty(now_ns) {
            // Good behaviour for decay_s, and the penalty served: the key starts over. A
            // penalty longer than decay_s lasts what its Retry-After said.
            self.ignored = 0;
            self.level = 0;
            self.forget_at_ns = 0;
            self.penalty_until_ns = 0;
        }
        if self.told_until_ns == 0 || self.class != Some(class) {
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

    /// True while the key serves a penalty (whichever class earned it).
    pub fn in_penalty(&self, now_ns: u64) -> bool {
        now_ns < self.penalty_until_ns
    }

    /// True when a request of `class` is rejected by the penalty at `now_ns`: the class
    /// earned it and has escalation on (`policy`), so a class with escalation off never
    /// serves one.
    pub fn penalises(&self, now_ns: u64, class: Class, policy: &Escalation) -> bool {
        policy.enabled && self.class == Some(class) && self.in_penalty(now_ns)
    }

    /// A request of `class` is rejected at `now_ns`, by a class with `policy`; `normal_s` is
    /// the Retry-After it would get without escalation (already clamped to the class range;
    /// the class's `retry_after.min_s` while it serves a penalty, as its bucket is not
    /// asked). With escalation on and `after_ignored` ignored Retry-Afters, it escalates one
    /// step and serves [`penalty_s`] of that step as a penalty (never less than `normal_s`).
    /// Remembers when the client was told to come back (`now + Retry-After`; the jitter
    /// added on the wire only makes the client later) and returns the Retry-After to send,
    /// before jitter, s, and whether it escalated.
    ///
    /// While another class's state is still remembered here, it is kept as it is and the
    /// request gets `normal_s`: one address holds one client's record at a time, and a
    /// NAT-mate's rejection must neither take over nor wipe another client's penalty.
    pub fn reject(
        &mut self,
        now_ns: u64,
        class: Class,
        normal_s: u32,
        policy: &ClassPolicy,
    ) -> (u32, bool) {
        if self.class.is_some_and(|c| c != class) {
            if !self.is_idle(now_ns) {
                return (normal_s, false);
            }
            // Idle: whatever another class left carries no information.
            *self = Compliance::default();
        }
        self.class = Some(class);
        let esc = &policy.escalation;
        let escalate = esc.enabled && self.ignored >= esc.after_ignored.max(1);
        let ra_s = if escalate {
            self.level = self.level.saturating_add(1);
            penalty_s(self.level, policy).max(normal_s)
        } else {
            normal_s
        };
        let until = now_ns.saturating_add(u64::from(ra_s).saturating_mul(NS_PER_S));
        if escalate {
            self.penalty_until_ns = until;
        }
        self.told_until_ns = until;
        (ra_s, escalate)
    }
}

/// Retry-After of escalation step `step` (1 = the first) for a class with `policy`, s:
/// `retry_after.min_s x escalation.factor^step`, capped at `escalation.max_s` (step 0: the
/// base itself). Depends on nothing else, so the same step always gets the same wait.
pub fn penalty_s(step: u8, policy: &ClassPolicy) -> u32 {
    let esc = &policy.escalation;
    let cap = f64::from(esc.max_s);
    let mut ra = f64::from(policy.retry_after.min_s.max(1));
    for _ in 0..step {
        if ra >= cap {
            break;
        }
        ra *= esc.factor;
    }
    // Saturating float-to-int; max_s bounds it.
    ra.min(cap) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RetryAfter;

    const T0: u64 = 1_700_000_000 * NS_PER_S;
    /// The class of the client under test.
    const S: Class = Class::Script;

    /// Retry-After 5..300 s, escalation after 3 ignored, x2 per step up to 40 s.
    fn policy(enabled: bool) -> ClassPolicy {
        ClassPolicy {
            retry_after: RetryAfter {
                min_s: 5,
                max_s: 300,
                jitter_s: 0,
            },
            reject_status: 429,
            escalation: Escalation {
                enabled,
                after_ignored: 3,
                factor: 2.0,
                max_s: 40,
                decay_s: 60,
            },
        }
    }

    #[test]
    fn a_client_that_waits_honours_and_one_that_hammers_ignores() {
        let p = policy(false);
        let e = &p.escalation;
        let mut c = Compliance::default();
        assert_eq!(c.visit(T0, S, e), Visit::Unremarkable);
        assert_eq!(c.reject(T0, S, 5, &p), (5, false));
        assert_eq!(c.visit(T0 + NS_PER_S, S, e), Visit::Ignored);
        assert_eq!(c.visit(T0 + 5 * NS_PER_S, S, e), Visit::Honoured);
        // Counted once: the next request is unremarkable.
        assert_eq!(c.visit(T0 + 6 * NS_PER_S, S, e), Visit::Unremarkable);
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
            let _ = c.visit(now, S, &p.escalation);
            sent.push(c.reject(now, S, 5, &p));
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
        assert_eq!(c.visit(later, S, &p.escalation), Visit::Honoured);
        assert_eq!((c.ignored, c.level), (0, 0));
        assert_eq!(c.reject(later, S, 5, &p), (5, false));
        assert!(c.is_idle(later + 70 * NS_PER_S));
    }

    #[test]
    fn a_step_waits_min_s_times_factor_to_the_step_whatever_is_left_to_serve() {
        let mut p = policy(true);
        p.retry_after.min_s = 1;
        p.escalation.max_s = 3_600;
        let steps: Vec<u32> = (0..=13).map(|s| penalty_s(s, &p)).collect();
        assert_eq!(
            steps,
            [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600]
        );
        assert_eq!(penalty_s(u8::MAX, &p), 3_600);
        // A longer normal wait (a slow bucket) is never cut by a step.
        let mut c = Compliance {
            ignored: 3,
            class: Some(S),
            ..Compliance::default()
        };
        assert_eq!(c.reject(T0, S, 20, &p), (20, true));
        assert_eq!(c.reject(T0, S, 1, &p), (4, true));
        // A factor of 1.5 rounds down to whole seconds: 3 x 1.5^3 = 10.125.
        p.retry_after.min_s = 3;
        p.escalation.factor = 1.5;
        assert_eq!(penalty_s(3, &p), 10);
    }

    #[test]
    fn escalation_off_never_penalises() {
        let p = policy(false);
        let mut c = Compliance::default();
        for i in 0..20 {
            let now = T0 + i;
            let _ = c.visit(now, S, &p.escalation);
            assert_eq!(c.reject(now, S, 7, &p), (7, false));
            assert!(!c.in_penalty(now));
        }
        assert_eq!(c.ignored, 19);
    }

    #[test]
    fn another_class_at_the_address_is_another_client() {
        let p = policy(true);
        let e = &p.escalation;
        let h = Class::Human;
        let mut c = Compliance::default();
        let mut now = T0;
        // The script ignores three Retry-Afters and serves a penalty.
        for _ in 0..4 {
            let _ = c.visit(now, S, e);
            let _ = c.reject(now, S, 5, &p);
            now += NS_PER_S / 10;
        }
        assert!(c.penalises(now, S, e));
        // A browser behind the same address: not ignoring anything, never penalised, and its
        // own rejection neither takes over nor wipes the script's record.
        assert_eq!(c.visit(now, h, e), Visit::Unremarkable);
        assert!(!c.penalises(now, h, e));
        let before = c;
        assert_eq!(c.reject(now, h, 5, &p), (5, false));
        assert_eq!(c, before);
        // Escalation off for the class: a penalty it earned is not served either.
        assert!(!c.penalises(now, S, &policy(false).escalation));
        // Once the script's record is idle, the browser's rejection is remembered as its own.
        let idle = c.idle_at_ns() + NS_PER_S;
        assert!(c.is_idle(idle));
        assert_eq!(c.reject(idle, h, 5, &p), (5, false));
        assert_eq!((c.class, c.ignored, c.level), (Some(h), 0, 0));
        assert_eq!(c.visit(idle + NS_PER_S, h, e), Visit::Ignored);
    }
}
