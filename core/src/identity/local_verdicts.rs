//! A bounded per-worker copy of warm verified verdicts, so that a verified crawler's request
//! reads no shared data ([`crate::identity::verdict_cache`] is in shared data: one host call
//! per read).
//!
//! Filled from the shared verdict cache when a request finds a fresh `verified` verdict
//! there, and by this worker's own callout answers. An entry is used while it is fresh (the
//! verdict's TTL) and for at most [`REFRESH_NS`] after it was copied: then the next request
//! reads the shared cache again. So a verdict that changes in the shared cache (another
//! worker's callout answered `spoofed`) takes effect on every worker within [`REFRESH_NS`]
//! of the change, plus the worker clock's lag (one root tick, [`crate::clock`]): 1.25 s.
//! This worker's own answers replace or remove its entry at once.
//!
//! Only fresh `verified` verdicts are copied: everything else (a stale verdict standing in
//! for a failed callout, a backoff, `spoofed`, `unknown`, a prefix's spoofed count) is
//! decided on the shared cache as before, and a flight (one callout per claim per worker)
//! starts only after the copy expired and the shared cache has no fresh verdict either.
//! Bounded: [`SLOTS`] entries, direct-mapped by the claim's fingerprint (a collision
//! replaces the older entry, which costs one shared read later).

/// Entries per worker (24 bytes each).
pub const SLOTS: usize = 256;

/// How long a copied verdict is used before the shared cache is read again, ns (1 s).
pub const REFRESH_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// The claim's fingerprint (0: empty).
    claim_fp: u64,
    /// The verdict is fresh until then, ns.
    fresh_until_ns: u64,
    /// Read the shared cache again from then on, ns.
    refresh_at_ns: u64,
}

/// The copies of one worker.
#[derive(Debug)]
pub struct LocalVerdicts {
    slots: Vec<Entry>,
}

impl Default for LocalVerdicts {
    fn default() -> Self {
        LocalVerdicts {
            slots: vec![Entry::default(); SLOTS],
        }
    }
}

impl LocalVerdicts {
    fn slot(&mut self, claim_fp: u64) -> Option<&mut Entry> {
        let i = usize::try_from(claim_fp % SLOTS as u64).ok()?;
        self.slots.get_mut(i)
    }

    /// True if claim `claim_fp` has a copy of a `verified` verdict usable at `now_ns` (fresh,
    /// and copied less than [`REFRESH_NS`] ago).
    pub fn verified(&mut self, claim_fp: u64, now_ns: u64) -> bool {
        self.slot(claim_fp).is_some_and(|e| {
            e.claim_fp == claim_fp
                && claim_fp != 0
                && now_ns < e.fresh_until_ns
                && now_ns < e.refresh_at_ns
        })
    }

    /// Copies a fresh `verified` verdict of `claim_fp`, fresh until `fresh_until_ns`, read at
    /// `now_ns`.
    pub fn put_verified(&mut self, claim_fp: u64, now_ns: u64, fresh_until_ns: u64) {
        if let Some(e) = self.slot(claim_fp) {
            *e = Entry {
                claim_fp,
                fresh_until_ns,
                refresh_at_ns: now_ns.saturating_add(REFRESH_NS),
            };
        }
    }

    /// Forgets the copy of `claim_fp` (a new verdict that is not `verified`).
    pub fn forget(&mut self, claim_fp: u64) {
        if let Some(e) = self.slot(claim_fp) {
            if e.claim_fp == claim_fp {
                *e = Entry::default();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_copy_lasts_until_its_ttl_or_its_refresh() {
        let mut l = LocalVerdicts::default();
        assert!(!l.verified(7, 0));
        l.put_verified(7, 10 * S, 100 * S);
        assert!(l.verified(7, 10 * S));
        assert!(l.verified(7, 11 * S - 1));
        assert!(!l.verified(7, 11 * S), "refresh after 1 s");
        l.put_verified(7, 99 * S + S / 2, 100 * S);
        assert!(l.verified(7, 100 * S - 1));
        assert!(!l.verified(7, 100 * S), "never past the TTL");
        l.put_verified(7, 0, 100 * S);
        l.forget(7);
        assert!(!l.verified(7, 1));
    }

    #[test]
    fn bounded_a_colliding_claim_replaces_the_copy() {
        let mut l = LocalVerdicts::default();
        l.put_verified(1, 0, S);
        l.put_verified(1 + SLOTS as u64, 0, S);
        assert!(!l.verified(1, 0));
        assert!(l.verified(1 + SLOTS as u64, 0));
        // Forgetting another claim in the same slot leaves it alone.
        l.forget(1);
        assert!(l.verified(1 + SLOTS as u64, 0));
        assert_eq!(l.slots.len(), SLOTS);
    }
}
