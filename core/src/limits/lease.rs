//! Per-worker token leases: while a shared bucket is far from empty, the worker that charges
//! it takes a few tokens more in the same compare-and-swap and spends them on the key's next
//! requests without a shared-data round trip. Near empty there are no leases, so every
//! admission is decided on the shared bucket, exactly as without them.
//!
//! Why this keeps the limit: a leased token is taken from the shared bucket before it is
//! spent, so no request is ever admitted without a token of the shared bucket (from the
//! bucket's start, never more than `burst + rate x t`). What a lease can cost is the other
//! way round: tokens a
//! worker holds but does not spend are missing from the shared bucket until the worker gives
//! them back on its next root tick (every `host::TICK_MS`), and a lease is spent
//! only within that time of being taken. The one thing a lease loosens: leased tokens are
//! counted as taken when leased, so a time window that starts while a worker holds a lease
//! can admit that lease (at most `burst / 64`, 16 tokens) per worker more than
//! `burst + rate x t` (bench/results.md; limits of `burst` < 64 never lease, so the
//! exactness check's +-1 is unaffected). A lease is only taken
//! when at least half the bucket stays after it, and is at most `burst / 64` tokens (16 at
//! most), so leases outstanding cannot empty a bucket unless more than 32 workers hold one.
//!
//! Leases are only for enforced limits that charge one token (not cost-based ones), outside
//! fleet mode, and for keys whose Retry-After compliance remembers nothing (a spent leased
//! token skips the compliance visit, which would have been a no-op).

use crate::limits::bucket::Rate;
use crate::store::slot_table::SlotRef;
use crate::store::StateKey;

/// Most tokens one lease holds.
pub const MAX_LEASE: u32 = 16;

/// How long a lease may be spent after it was taken, ns (one root tick,
/// `host::TICK_MS`; the tick gives it back anyway). Its age is judged by the worker's last
/// clock reading ([`crate::clock`]: a request spending a leased token reads no clock), which
/// lags the wall clock by up to one tick period, so in wall time a lease is spent until the
/// worker's next root tick gives it back: at most `TICK_MS` after it was taken while Envoy
/// runs the tick on time, as long as the tick is late otherwise.
pub const LEASE_TTL_NS: u64 = crate::host::TICK_MS as u64 * 1_000_000;

/// Most leases one worker holds at once (one per hot key and limit); a new lease beyond
/// that replaces the oldest, which is given back.
pub const MAX_LEASES: usize = 64;

/// The size of a lease to take with one token from a bucket of capacity `burst` that has
/// `remaining` whole tokens after that token: `min(burst / 64, 16)`, and only if at least
/// `burst / 2` tokens stay in the bucket after it (0: no lease).
pub fn lease_size(burst: u32, remaining: u32) -> u32 {
    let size = (burst / 64).min(MAX_LEASE);
    if size == 0 || remaining < burst / 2 + size {
        return 0;
    }
    size
}

/// Tokens a worker holds for one key of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The bucket's key.
    pub key: StateKey,
    /// The limit (index in `Config::limits`).
    pub limit: usize,
    /// The slot the tokens were taken from (given back there).
    pub at: SlotRef,
    /// Tokens left to spend.
    pub tokens: u32,
    /// The bucket's rate (to give the tokens back).
    pub rate: Rate,
    /// When it was taken, ns.
    pub taken_ns: u64,
}

/// The leases of one worker (bounded: [`MAX_LEASES`]).
#[derive(Debug, Default)]
pub struct Leases {
    held: Vec<Lease>,
}

impl Leases {
    /// Spends one leased token of `key` under `limit` at `now_ns`: true if there was one
    /// taken less than [`LEASE_TTL_NS`] ago.
    pub fn spend(&mut self, key: StateKey, limit: usize, now_ns: u64) -> bool {
        match self.held.iter_mut().find(|l| {
            l.key == key
                && l.limit == limit
                && l.tokens > 0
                && now_ns.saturating_sub(l.taken_ns) < LEASE_TTL_NS
        }) {
            Some(l) => {
                l.tokens -= 1;
                true
            }
            None => false,
        }
    }

    /// Puts back one token spent with [`Leases::spend`] (the request was rejected by a later
    /// limit). False if the lease is gone (the caller gives it back to the bucket).
    pub fn unspend(&mut self, key: StateKey, limit: usize) -> bool {
        match self
            .held
            .iter_mut()
            .find(|l| l.key == key && l.limit == limit)
        {
            Some(l) => {
                l.tokens = l.tokens.saturating_add(1);
                true
            }
            None => false,
        }
    }

    /// Holds `lease`. Returns a lease to give back now: the one it replaces (same key and
    /// limit: spent or expired, else no new one would have been taken), or the oldest when
    /// [`MAX_LEASES`] are held.
    pub fn hold(&mut self, lease: Lease) -> Option<Lease> {
        if let Some(l) = self
            .held
            .iter_mut()
            .find(|l| l.key == lease.key && l.limit == lease.limit)
        {
            let old = std::mem::replace(l, lease);
            return (old.tokens > 0).then_some(old);
        }
        let evicted = (self.held.len() >= MAX_LEASES).then(|| self.held.remove(0));
        self.held.push(lease);
        evicted
    }

    /// Every lease with tokens left, emptied (to give back on the root tick).
    pub fn take_all(&mut self) -> Vec<Lease> {
        let mut out = std::mem::take(&mut self.held);
        out.retain(|l| l.tokens > 0);
        out
    }

    /// Tokens held in all.
    pub fn tokens(&self) -> u64 {
        self.held.iter().map(|l| u64::from(l.tokens)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fp: u64) -> StateKey {
        StateKey {
            fp,
            group_fp: None,
            overflow_fp: 0,
        }
    }

    #[test]
    fn a_lease_only_while_half_the_bucket_stays_and_never_for_small_buckets() {
        // burst 50 (the bench's exactness bucket): never a lease.
        assert_eq!(lease_size(50, 49), 0);
        assert_eq!(lease_size(640, 639), 10);
        assert_eq!(lease_size(640, 330), 10);
        assert_eq!(lease_size(640, 329), 0);
        assert_eq!(lease_size(1_000_000, 999_999), MAX_LEASE);
        assert_eq!(lease_size(1_000_000, 500_015), 0);
    }

    #[test]
    fn leased_tokens_are_spent_put_back_and_returned() {
        let mut l = Leases::default();
        let slot = crate::store::slot_table::SlotRef::first();
        assert!(!l.spend(key(1), 0, 0));
        assert_eq!(
            l.hold(Lease {
                key: key(1),
                limit: 0,
                at: slot,
                tokens: 2,
                rate: Rate::new(1.0, 1),
                taken_ns: 0,
            }),
            None
        );
        assert!(l.spend(key(1), 0, 0));
        assert!(!l.spend(key(1), 1, 0), "another limit's key is not leased");
        assert!(!l.spend(key(1), 0, LEASE_TTL_NS), "expired after one tick");
        assert!(l.spend(key(1), 0, LEASE_TTL_NS - 1));
        assert!(!l.spend(key(1), 0, 0), "two tokens, two spends");
        assert!(l.unspend(key(1), 0));
        assert_eq!(l.tokens(), 1);
        let back = l.take_all();
        assert_eq!(back.len(), 1);
        assert_eq!(back.first().map(|b| b.tokens), Some(1));
        assert_eq!(l.tokens(), 0);
        assert!(!l.unspend(key(1), 0));
    }

    #[test]
    fn at_most_max_leases_the_oldest_is_given_back() {
        let mut l = Leases::default();
        let slot = crate::store::slot_table::SlotRef::first();
        for fp in 0..MAX_LEASES as u64 {
            let lease = Lease {
                key: key(fp),
                limit: 0,
                at: slot,
                tokens: 1,
                rate: Rate::new(1.0, 1),
                taken_ns: 0,
            };
            assert_eq!(l.hold(lease), None);
        }
        let back = l.hold(Lease {
            key: key(999),
            limit: 0,
            at: slot,
            tokens: 1,
            rate: Rate::new(1.0, 1),
            taken_ns: 0,
        });
        assert_eq!(back.map(|b| b.key), Some(key(0)));
        assert_eq!(l.tokens(), MAX_LEASES as u64);
    }
}
