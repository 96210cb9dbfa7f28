//! Replay protection for signed agents: a verified Web Bot Auth signature's nonce is
//! accepted once until its signature stops being valid, across every worker of one Envoy.
//!
//! The store is a [`SlotTable`] in shared data (`cg:n:<n>`, `signed_agents.nonce_slots`
//! slots): per (agent origin, nonce) fingerprint, the time until which the nonce is taken.
//! A nonce past that time frees its slot (rank 0). Bounded whatever the traffic: when all
//! four candidate slots of a new nonce hold nonces still in their windows, the nonce cannot
//! be recorded and [`Accepted::Full`] tells the caller, which never lets such a signature
//! through as verified (it gets `verifier.on_error`, counted
//! `crawlguard.signature.nonce_store_full`): replay protection never gives way to load.
//! Only verified signatures reach the store, so only the agent's own traffic (or its
//! replays) fills it.

use crate::store::slot_table::{read_u64, write_u64, SlotTable, SlotValue};
use crate::store::{SharedData, StoreError, StoreFault};

/// Shared-data key prefix of nonce slots.
pub const NONCE_PREFIX: &str = "cg:n:";

/// A nonce taken until `until_ns` (ns since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NonceEntry {
    until_ns: u64,
}

impl SlotValue for NonceEntry {
    const LEN: usize = 8;
    const VERSION: u8 = 1;

    fn encode(&self, out: &mut [u8]) {
        write_u64(out, 0, self.until_ns);
    }

    fn decode(b: &[u8]) -> Option<Self> {
        Some(NonceEntry {
            until_ns: read_u64(b, 0)?,
        })
    }

    /// A nonce in its window is worth keeping (1); after it, its slot is free.
    fn rank(&self, now_ns: u64) -> u8 {
        u8::from(now_ns < self.until_ns)
    }

    fn free_at_ns(&self) -> u64 {
        self.until_ns
    }
}

/// What [`NonceStore::accept`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// First use: recorded.
    Fresh,
    /// Already taken within its window: a replay.
    Replayed,
    /// Not recorded: no free slot among its candidates, or shared data failed.
    Full,
}

/// The nonces of one Envoy.
#[derive(Debug, Clone)]
pub struct NonceStore {
    table: SlotTable<NonceEntry>,
    /// Keyed by the store's hash seed, so slot collisions cannot be planned.
    hasher: ahash::RandomState,
}

impl NonceStore {
    /// `slots` nonce slots; `cas_retries` extra attempts per update; `seed` keys the
    /// fingerprints (`store.hash_seed`, the same on every worker of an Envoy).
    pub fn new(slots: u32, cas_retries: u32, seed: u64) -> NonceStore {
        NonceStore {
            table: SlotTable::new(NONCE_PREFIX, slots, cas_retries),
            hasher: ahash::RandomState::with_seeds(
                seed,
                seed ^ 0x6e6f_6e63_6500_0001,
                seed.rotate_left(17),
                seed ^ 0x7369_676e_6564_0002,
            ),
        }
    }

    /// The fingerprint of `nonce` of agent `origin`.
    pub fn fingerprint(&self, origin: &str, nonce: &str) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = self.hasher.build_hasher();
        "nonce".hash(&mut h);
        origin.hash(&mut h);
        nonce.hash(&mut h);
        h.finish()
    }

    /// Creates every missing slot; returns slots created.
    pub fn precreate(&self, store: &dyn SharedData) -> Result<usize, StoreError> {
        self.table.precreate(store)
    }

    /// Takes nonce `fp` (a seeded fingerprint of agent origin and nonce) until `until_ns`,
    /// unless it is already taken at `now_ns`.
    pub fn accept(&self, store: &dyn SharedData, fp: u64, now_ns: u64, until_ns: u64) -> Accepted {
        let r = self
            .table
            .measure_and_replace(store, fp, now_ns, |e| match e {
                Some(e) if now_ns < e.until_ns => (Accepted::Replayed, None),
                _ => (Accepted::Fresh, Some(NonceEntry { until_ns })),
            });
        match r {
            Ok((a, _)) => a,
            Err(
                StoreFault::Collision
                | StoreFault::Store
                | StoreFault::CasExhausted
                | StoreFault::Corrupt,
            ) => Accepted::Full,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::{Fault, MemStore};

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_nonce_is_accepted_once_within_its_window_then_free_again() {
        let n = NonceStore::new(64, 4, 1);
        assert_ne!(
            n.fingerprint("https://a", "n"),
            n.fingerprint("https://b", "n")
        );
        let s = MemStore::default();
        assert!(n.precreate(&s).is_ok());
        assert_eq!(n.accept(&s, 7, 0, 60 * S), Accepted::Fresh);
        assert_eq!(n.accept(&s, 7, 30 * S, 90 * S), Accepted::Replayed);
        assert_eq!(n.accept(&s, 8, 30 * S, 90 * S), Accepted::Fresh);
        // Its window over, the same nonce is a new one (its signature has expired anyway).
        assert_eq!(n.accept(&s, 7, 60 * S, 120 * S), Accepted::Fresh);
    }

    #[test]
    fn a_full_store_refuses_new_nonces_and_never_forgets_one_in_its_window() {
        // One slot: the second nonce in the window finds no room.
        let n = NonceStore::new(1, 4, 1);
        let s = MemStore::default();
        assert!(n.precreate(&s).is_ok());
        assert_eq!(n.accept(&s, 1, 0, 60 * S), Accepted::Fresh);
        assert_eq!(n.accept(&s, 2, S, 60 * S), Accepted::Full);
        assert_eq!(n.accept(&s, 1, 2 * S, 60 * S), Accepted::Replayed);
        // Once the first window ends its slot is free.
        assert_eq!(n.accept(&s, 2, 60 * S, 120 * S), Accepted::Fresh);
        s.fault.set(Fault::Error);
        assert_eq!(n.accept(&s, 3, 61 * S, 120 * S), Accepted::Full);
    }
}
