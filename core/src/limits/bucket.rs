//! Token-bucket math: a pure function of (stored state, now, limit).
//!
//! The bucket is kept as a GCRA "theoretical arrival time" (`tat_ns`), which is exactly a
//! token bucket with capacity `burst` and continuous refill at `rate_per_s`, in integer
//! nanoseconds (no float drift, so counts are exact). `last_ns` remembers the last time seen
//! so that a wall clock that steps backwards neither refills nor drains the bucket.
//! The split follows governor: the math here knows nothing about where state lives.

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// A token-bucket limit in integer form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Nanoseconds to refill one token (`1e9 / rate_per_s`, rounded, at least 1).
    pub emission_ns: u64,
    /// Capacity in tokens (`burst`), at least 1.
    pub burst: u32,
}

impl Rate {
    /// Builds a rate from `rate_per_s` (> 0, finite) and `burst` (>= 1). Out-of-range inputs
    /// are clamped (config validation rejects them before they get here).
    pub fn new(rate_per_s: f64, burst: u32) -> Rate {
        Rate {
            // The fleet contract's rounding: the sidecar's buckets must agree with ours.
            emission_ns: crawlguard_contract::fleet::emission_ns(rate_per_s),
            burst: burst.max(1),
        }
    }

    /// Time to refill a full bucket from empty, in nanoseconds: `emission_ns x burst`,
    /// exact (it does not always fit in a u64).
    pub fn capacity_ns(&self) -> u128 {
        u128::from(self.emission_ns) * u128::from(self.burst)
    }

    /// `emission_ns` as a divisor: never 0, even for a hand-built `Rate`.
    fn emission_u128(&self) -> u128 {
        u128::from(self.emission_ns.max(1))
    }
}

/// Stored state of one bucket. A key that has no state starts full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BucketState {
    /// Theoretical arrival time, ns since the Unix epoch: the bucket is full when
    /// `tat_ns <= now`, and holds `(capacity_ns - (tat_ns - now)) / emission_ns` tokens.
    pub tat_ns: u64,
    /// Latest `now` this state was computed at, ns since the Unix epoch.
    pub last_ns: u64,
}

/// Outcome of taking one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// A token was taken; `remaining` whole tokens are left.
    Allowed {
        /// Whole tokens left after this one.
        remaining: u32,
        /// New state to store.
        state: BucketState,
    },
    /// The bucket is empty; nothing was taken.
    Limited {
        /// Nanoseconds until one token is available (>= 1).
        wait_ns: u64,
    },
}

/// Rebases `state` on `now_ns`: if the clock went backwards, shift the state back by the same
/// amount so the token count is unchanged.
fn rebase(state: BucketState, now_ns: u64) -> BucketState {
    if now_ns < state.last_ns {
        let back = state.last_ns - now_ns;
        BucketState {
            tat_ns: state.tat_ns.saturating_sub(back),
            last_ns: now_ns,
        }
    } else {
        BucketState {
            tat_ns: state.tat_ns,
            last_ns: now_ns,
        }
    }
}

/// Takes one token from the bucket in `state` (`None` = new key, full) at `now_ns`.
///
/// The times are compared in u128, where `now + capacity` and `tat + emission` cannot
/// overflow (each term is below 2^64, the capacity below 2^96), so the comparison is exact
/// for every input. (Saturating u64 sums once made both sides `u64::MAX` for a tiny rate,
/// and `MAX > MAX` is false: the bucket allowed everything.) A new state that does not fit
/// the stored u64 is refused as `Limited`, never allowed; config validation keeps every
/// valid limit far from that (see `config::MAX_REFILL_S`).
pub fn take(state: Option<BucketState>, now_ns: u64, rate: Rate) -> Take {
    take_n(state, now_ns, rate, 1)
}

/// Takes `n` tokens at once (a cost-based reservation; `n` >= 1, at most `burst` or it is
/// never admitted), all or nothing; the same exact u128 comparison as [`take`].
pub fn take_n(state: Option<BucketState>, now_ns: u64, rate: Rate, n: u32) -> Take {
    let s = rebase(state.unwrap_or_default(), now_ns);
    let new_tat =
        u128::from(s.tat_ns.max(now_ns)) + u128::from(rate.emission_ns) * u128::from(n.max(1));
    let horizon = u128::from(now_ns) + rate.capacity_ns();
    if new_tat > horizon {
        return Take::Limited {
            wait_ns: u64::try_from(new_tat - horizon).unwrap_or(u64::MAX).max(1),
        };
    }
    let Ok(tat_ns) = u64::try_from(new_tat) else {
        return Take::Limited {
            wait_ns: rate.emission_ns.max(1),
        };
    };
    let remaining = u32::try_from((horizon - new_tat) / rate.emission_u128()).unwrap_or(u32::MAX);
    Take::Allowed {
        remaining,
        state: BucketState {
            tat_ns,
            last_ns: now_ns,
        },
    }
}

/// Gives back one token taken earlier (used when a later bucket of the same request rejects,
/// so a rejected request consumes nothing).
pub fn refund(state: BucketState, rate: Rate) -> BucketState {
    BucketState {
        tat_ns: state.tat_ns.saturating_sub(rate.emission_ns),
        last_ns: state.last_ns,
    }
}

/// Gives back `n` tokens taken earlier (a cost settled below its reservation).
pub fn refund_n(state: BucketState, rate: Rate, n: u32) -> BucketState {
    let back = u128::from(rate.emission_ns) * u128::from(n);
    BucketState {
        tat_ns: u64::try_from(u128::from(state.tat_ns).saturating_sub(back)).unwrap_or(0),
        last_ns: state.last_ns,
    }
}

/// Charges `n` more tokens unconditionally (a cost settled above its reservation): the
/// bucket may go into debt, past empty, which delays its next admission by the excess. A
/// state past the end of u64 time saturates there (strict: the key stays limited).
pub fn charge_debt(state: BucketState, now_ns: u64, rate: Rate, n: u32) -> BucketState {
    let s = rebase(state, now_ns);
    let tat = u128::from(s.tat_ns.max(now_ns)) + u128::from(rate.emission_ns) * u128::from(n);
    BucketState {
        tat_ns: u64::try_from(tat).unwrap_or(u64::MAX),
        last_ns: now_ns,
    }
}

/// Whole tokens available at `now_ns` (for stats, headers and tests).
pub fn tokens(state: Option<BucketState>, now_ns: u64, rate: Rate) -> u32 {
    let s = rebase(state.unwrap_or_default(), now_ns);
    let used_ns = u128::from(s.tat_ns.saturating_sub(now_ns));
    let free_ns = rate.capacity_ns().saturating_sub(used_ns);
    u32::try_from(free_ns / rate.emission_u128()).unwrap_or(u32::MAX)
}

/// True when the bucket is full at `now_ns`, i.e. its state carries no information and its
/// slot may be given to another key.
pub fn is_full(state: BucketState, now_ns: u64) -> bool {
    rebase(state, now_ns).tat_ns <= now_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    fn drain(mut state: Option<BucketState>, now: u64, rate: Rate) -> (u32, Option<BucketState>) {
        let mut n = 0;
        while let Take::Allowed { state: s, .. } = take(state, now, rate) {
            state = Some(s);
            n += 1;
        }
        (n, state)
    }

    #[test]
    fn new_key_starts_full_with_exactly_burst_tokens() {
        let rate = Rate::new(1.0, 5);
        assert_eq!(tokens(None, T0, rate), 5);
        let (n, _) = drain(None, T0, rate);
        assert_eq!(n, 5);
    }

    #[test]
    fn remaining_counts_down_exactly() {
        let rate = Rate::new(2.0, 3);
        let mut st = None;
        for want in [2, 1, 0] {
            match take(st, T0, rate) {
                Take::Allowed { remaining, state } => {
                    assert_eq!(remaining, want);
                    st = Some(state);
                }
                Take::Limited { .. } => panic!("limited too early"),
            }
        }
        assert_eq!(
            take(st, T0, rate),
            Take::Limited {
                wait_ns: 500_000_000
            }
        );
    }

    #[test]
    fn refill_is_continuous() {
        let rate = Rate::new(10.0, 10); // one token per 100 ms
        let (_, st) = drain(None, T0, rate);
        assert_eq!(tokens(st, T0 + 99_999_999, rate), 0);
        assert_eq!(tokens(st, T0 + 100_000_000, rate), 1);
        assert_eq!(tokens(st, T0 + 350_000_000, rate), 3);
        // Never above capacity.
        assert_eq!(tokens(st, T0 + 3_600 * NS_PER_S, rate), 10);
        let (n, _) = drain(st, T0 + 350_000_000, rate);
        assert_eq!(n, 3);
    }

    #[test]
    fn wait_is_time_until_next_token() {
        let rate = Rate::new(0.5, 1); // one token per 2 s
        let st = match take(None, T0, rate) {
            Take::Allowed { state, .. } => state,
            Take::Limited { .. } => panic!("new key must be full"),
        };
        assert_eq!(
            take(Some(st), T0 + 500_000_000, rate),
            Take::Limited {
                wait_ns: 1_500_000_000
            }
        );
    }

    #[test]
    fn clock_going_backwards_neither_refills_nor_drains() {
        let rate = Rate::new(1.0, 4);
        let mut st = None;
        for _ in 0..2 {
            if let Take::Allowed { state, .. } = take(st, T0, rate) {
                st = Some(state);
            }
        }
        assert_eq!(tokens(st, T0, rate), 2);
        // Clock steps back 10 s: still 2 tokens, not 0 (drained) and not 4 (refilled).
        let back = T0 - 10 * NS_PER_S;
        assert_eq!(tokens(st, back, rate), 2);
        let (n, st2) = drain(st, back, rate);
        assert_eq!(n, 2);
        // Refill resumes from the new (earlier) time.
        assert_eq!(tokens(st2, back + NS_PER_S, rate), 1);
    }

    #[test]
    fn refund_gives_back_exactly_one_token() {
        let rate = Rate::new(1.0, 3);
        let st = match take(None, T0, rate) {
            Take::Allowed { state, .. } => state,
            Take::Limited { .. } => panic!("new key must be full"),
        };
        assert_eq!(tokens(Some(st), T0, rate), 2);
        assert_eq!(tokens(Some(refund(st, rate)), T0, rate), 3);
    }

    #[test]
    fn extreme_rates_do_not_overflow() {
        let slow = Rate::new(1e-9, u32::MAX);
        assert_eq!(
            slow.capacity_ns(),
            1_000_000_000_000_000_000 * u128::from(u32::MAX)
        );
        // A token taken at the end of u64 time cannot be stored: refused, not allowed.
        assert_eq!(
            take(None, u64::MAX, slow),
            Take::Limited {
                wait_ns: 1_000_000_000_000_000_000
            }
        );
        let fast = Rate::new(1e12, 1);
        assert_eq!(fast.emission_ns, 1);
        let bad = Rate::new(f64::NAN, 0);
        assert_eq!(bad.burst, 1);
        let _ = take(
            Some(BucketState {
                tat_ns: u64::MAX,
                last_ns: u64::MAX,
            }),
            0,
            bad,
        );
    }

    #[test]
    fn a_rate_too_small_to_represent_limits_instead_of_allowing() {
        // 1e-10/s: one token per 1e19 ns; burst 5 needs 5e19 ns, past u64. Saturating
        // arithmetic used to allow every request (50 of 50). Now only the states that fit in
        // u64 are allowed: here one (T0 + 1e19 < 2^64, T0 + 2e19 is not).
        let rate = Rate::new(1e-10, 5);
        assert_eq!(rate.emission_ns, 10_000_000_000_000_000_000);
        let (n, st) = drain(None, T0, rate);
        assert_eq!(n, 1);
        assert_eq!(
            take(st, T0, rate),
            Take::Limited {
                wait_ns: 10_000_000_000_000_000_000
            }
        );
        // 1e-9/s, burst 20 (60 of 60 before): a token per 1e18 ns, and T0 + 16e18 is the
        // last state below 2^64.
        let (n, _) = drain(None, T0, Rate::new(1e-9, 20));
        assert_eq!(n, 16);
        // Near the end of u64 time (year 2554) even a fast limit refuses what it cannot
        // store, with tokens left or not.
        let rate = Rate::new(1.0, 3);
        let (n, _) = drain(None, u64::MAX - 1_500_000_000, rate);
        assert_eq!(n, 1);
        let end = BucketState {
            tat_ns: u64::MAX,
            last_ns: u64::MAX - 1,
        };
        assert_eq!(tokens(Some(end), u64::MAX - 1, rate), 2);
        assert!(matches!(
            take(Some(end), u64::MAX - 1, rate),
            Take::Limited { .. }
        ));
    }

    #[test]
    fn full_bucket_is_reclaimable() {
        let rate = Rate::new(1.0, 2);
        let st = match take(None, T0, rate) {
            Take::Allowed { state, .. } => state,
            Take::Limited { .. } => panic!("new key must be full"),
        };
        assert!(!is_full(st, T0));
        assert!(is_full(st, T0 + NS_PER_S));
    }

    #[test]
    fn take_n_is_all_or_nothing_and_debt_delays_the_next_admission() {
        let rate = Rate::new(10.0, 100); // 100 items, 10 per second (one per 100 ms)
        let st = match take_n(None, T0, rate, 20) {
            Take::Allowed { remaining, state } => {
                assert_eq!(remaining, 80);
                state
            }
            Take::Limited { .. } => panic!("a full bucket holds 20"),
        };
        // 81 do not fit in 80: nothing is taken.
        assert_eq!(
            take_n(Some(st), T0, rate, 81),
            Take::Limited {
                wait_ns: 100_000_000
            }
        );
        assert_eq!(tokens(Some(st), T0, rate), 80);
        // Settled at 100 instead of the 20 reserved: 80 more, the bucket is empty...
        let st = charge_debt(st, T0, rate, 80);
        assert_eq!(tokens(Some(st), T0, rate), 0);
        // ... and 30 more put it 30 items into debt: 3 s before one token is back.
        let st = charge_debt(st, T0, rate, 30);
        assert_eq!(tokens(Some(st), T0 + 3 * NS_PER_S, rate), 0);
        assert_eq!(tokens(Some(st), T0 + 3_100_000_000, rate), 1);
        // A refund gives tokens back, never more than full.
        assert_eq!(tokens(Some(refund_n(st, rate, 1_000)), T0, rate), 100);
        assert_eq!(
            take_n(None, T0, rate, 101),
            Take::Limited {
                wait_ns: 100_000_000
            }
        );
    }
}
