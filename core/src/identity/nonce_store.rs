//! Replay protection for signed agents: a verified Web Bot Auth signature's nonce is
//! accepted once until its signature stops being valid, across every worker of one Envoy.
//!
//! The store is one table in shared data (`cg:n:<n>`, `signed_agents.nonce_slots` slots)
//! for all agents: per (agent origin, nonce) fingerprint, the time until which the nonce is
//! taken (the answer's `valid_until`: the signature's `expires` plus the sidecar's
//! `agents.max_skew_s`). A nonce past that time frees its slot.
//!
//! **Probing.** A nonce may live in any of its [`PROBES`] candidate slots (random probing:
//! each candidate from its own mix of the fingerprint); a new one takes the first free one,
//! so the table fills to a high load factor before refusing (measured in the tests: 16,384
//! slots hold 14,505 live nonces before the first refusal, 64 slots 62; four candidates held
//! 3,894 and 34). A lookup reads candidates in order and stops at the nonce, or at the
//! first slot that is free and that no live nonce was placed past: at low load one read and
//! one write per new nonce. Slots free up in any order, so a placed nonce leaves on every
//! slot it skipped a mark, `pass_until_ns` = its own `until_ns` (kept when the slot is
//! reused): a lookup does not stop at a free slot while a nonce may live beyond it, so a
//! nonce is found wherever it was stored for as long as it is taken.
//!
//! Bounded whatever the traffic: when all candidates of a new nonce hold nonces still in
//! their windows, the nonce cannot be recorded and [`Accepted::Full`] tells the caller,
//! which never lets such a signature through as verified (it gets `verifier.on_error`,
//! counted `crawlguard.signature.nonce_store_full`): replay protection never gives way to
//! load. Only verified signatures reach the store, but every allowed agent's traffic (and
//! its replays) shares it.
//!
//! Slot bytes: version (2) + owner fingerprint (8) + `until_ns` (8) + `pass_until_ns` (8),
//! little-endian. A slot that does not decode (a faulty store, or an older layout) is reset
//! to free and unmarked; nonces placed past it may then be missed for the rest of their
//! windows, as the one it held is.

use crate::store::slot_table::{read_u64, write_u64, SlotTable, SlotValue};
use crate::store::{SharedData, StoreError};

/// Shared-data key prefix of nonce slots.
pub const NONCE_PREFIX: &str = "cg:n:";

/// Candidate slots per nonce: the table refuses a new nonce only when this many hold live
/// ones (at load factor a, with probability about a^64), at the cost of at most this many
/// reads for that request.
pub const PROBES: usize = 64;

/// Bytes of one slot.
const SLOT_LEN: usize = 1 + 8 + NonceEntry::LEN;

/// A slot's value: a nonce taken until `until_ns`; a nonce placed past this slot is taken
/// until `pass_until_ns` (ns since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct NonceEntry {
    until_ns: u64,
    pass_until_ns: u64,
}

impl SlotValue for NonceEntry {
    const LEN: usize = 16;
    const VERSION: u8 = 2;

    fn encode(&self, out: &mut [u8]) {
        write_u64(out, 0, self.until_ns);
        write_u64(out, 8, self.pass_until_ns);
    }

    fn decode(b: &[u8]) -> Option<Self> {
        Some(NonceEntry {
            until_ns: read_u64(b, 0)?,
            pass_until_ns: read_u64(b, 8)?,
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
    /// Slot names and pre-creation (the probing is this module's own).
    table: SlotTable<NonceEntry>,
    cas_retries: u32,
    /// Keyed by the store's hash seed, so slot collisions cannot be planned.
    hasher: ahash::RandomState,
}

/// One slot read: its index, CAS, owner and value.
#[derive(Debug, Clone, Copy, Default)]
struct Read {
    idx: usize,
    cas: u32,
    owner: u64,
    entry: NonceEntry,
}

/// Why one attempt did not finish.
enum Stop {
    /// A write lost a race: read again.
    Race,
    /// No room, or shared data failed.
    Full,
}

impl NonceStore {
    /// `slots` nonce slots; `cas_retries` extra attempts per update; `seed` keys the
    /// fingerprints (`store.hash_seed`, the same on every worker of an Envoy).
    pub fn new(slots: u32, cas_retries: u32, seed: u64) -> NonceStore {
        NonceStore {
            table: SlotTable::new(NONCE_PREFIX, slots, cas_retries),
            cas_retries,
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
    /// unless it is already taken at `now_ns`. A write that loses a race to another worker
    /// starts over (up to `cas_retries` times), so two workers accepting the same nonce at
    /// once see one `Fresh` when their candidate slots do not change in between.
    pub fn accept(&self, store: &dyn SharedData, fp: u64, now_ns: u64, until_ns: u64) -> Accepted {
        // Fingerprint 0 marks a never-used slot.
        let fp = fp.max(1);
        for _ in 0..=self.cas_retries {
            match self.try_accept(store, fp, now_ns, until_ns) {
                Ok(a) => return a,
                Err(Stop::Race) => continue,
                Err(Stop::Full) => return Accepted::Full,
            }
        }
        Accepted::Full
    }

    /// One read-then-write attempt of [`NonceStore::accept`].
    fn try_accept(
        &self,
        store: &dyn SharedData,
        fp: u64,
        now_ns: u64,
        until_ns: u64,
    ) -> Result<Accepted, Stop> {
        let slots = self.table.len() as u64;
        // Live slots before the first free one whose mark must cover this nonce, then that
        // free one.
        let mut passed = [Read::default(); PROBES];
        let mut n_passed = 0;
        let mut target: Option<Read> = None;
        let mut seen = [usize::MAX; PROBES];
        for (probe, seen_at) in (0..PROBES as u64).zip(0..PROBES) {
            let idx = (mix(fp.wrapping_add(probe.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                % slots.max(1)) as usize;
            // A small table repeats indexes: each slot is read once.
            if seen.contains(&idx) {
                continue;
            }
            if let Some(s) = seen.get_mut(seen_at) {
                *s = idx;
            }
            let r = self.read(store, idx)?;
            let live = now_ns < r.entry.until_ns;
            if live && r.owner == fp {
                return Ok(Accepted::Replayed);
            }
            if !live && target.is_none() {
                target = Some(r);
            } else if live
                && target.is_none()
                && r.entry.pass_until_ns.max(r.entry.until_ns) < until_ns
            {
                if let Some(p) = passed.get_mut(n_passed) {
                    *p = r;
                    n_passed += 1;
                }
            }
            if !live && r.entry.pass_until_ns <= now_ns {
                // Nothing live was placed past this slot: the nonce is not further on.
                break;
            }
        }
        let Some(target) = target else {
            return Err(Stop::Full);
        };
        // Marks first: a lookup between the writes still finds its way to the nonce.
        for p in passed.iter().take(n_passed) {
            let mark = NonceEntry {
                pass_until_ns: until_ns,
                ..p.entry
            };
            self.write(store, p, p.owner, mark)?;
        }
        let taken = NonceEntry {
            until_ns,
            pass_until_ns: target.entry.pass_until_ns,
        };
        self.write(store, &target, fp, taken)?;
        Ok(Accepted::Fresh)
    }

    /// Reads slot `idx`. One that does not decode is reset to free (so a one-off corruption
    /// heals) and this request is refused.
    fn read(&self, store: &dyn SharedData, idx: usize) -> Result<Read, Stop> {
        let key = self.table.key(idx);
        let (bytes, cas) = store
            .get(key.as_str())
            .map_err(|_| Stop::Full)?
            .unwrap_or_default();
        if bytes.is_empty() {
            // Not pre-created: free, unmarked; a CAS-0 write creates it.
            return Ok(Read {
                idx,
                cas,
                ..Read::default()
            });
        }
        match decode(&bytes) {
            Some((owner, entry)) => Ok(Read {
                idx,
                cas,
                owner,
                entry,
            }),
            None => {
                let _ = store.set(key.as_str(), &encode(0, NonceEntry::default()), cas);
                Err(Stop::Full)
            }
        }
    }

    /// Writes `entry` owned by `owner` into the slot `r` read, if unchanged since.
    fn write(
        &self,
        store: &dyn SharedData,
        r: &Read,
        owner: u64,
        entry: NonceEntry,
    ) -> Result<(), Stop> {
        match store.set(self.table.key(r.idx).as_str(), &encode(owner, entry), r.cas) {
            Ok(()) => Ok(()),
            Err(StoreError::CasMismatch) => Err(Stop::Race),
            Err(StoreError::Host(_)) => Err(Stop::Full),
        }
    }
}

/// splitmix64's finaliser: the probe sequence's independent-looking indexes (the same mix
/// as [`SlotTable`]'s candidates).
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn encode(owner: u64, e: NonceEntry) -> [u8; SLOT_LEN] {
    let mut out = [0u8; SLOT_LEN];
    if let Some(v) = out.first_mut() {
        *v = NonceEntry::VERSION;
    }
    write_u64(&mut out, 1, owner);
    if let Some(body) = out.get_mut(9..) {
        e.encode(body);
    }
    out
}

/// `(owner, entry)`; `None` for a wrong length or version.
fn decode(b: &[u8]) -> Option<(u64, NonceEntry)> {
    if b.len() != SLOT_LEN || b.first() != Some(&NonceEntry::VERSION) {
        return None;
    }
    Some((read_u64(b, 1)?, NonceEntry::decode(b.get(9..)?)?))
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

    /// Test fingerprints: murmur3's finaliser over 1, 2, ... (unrelated to the probe mix).
    fn fp(i: u64) -> u64 {
        let mut x = i;
        x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }

    /// Takes nonces that never expire until the first refusal: `(nonces taken, host calls
    /// for the first tenth of the table's worth)`.
    fn fill(slots: u32) -> (usize, u64) {
        let n = NonceStore::new(slots, 4, 1);
        let s = MemStore::default();
        assert!(n.precreate(&s).is_ok());
        let mut taken = 0;
        let mut calls_first_tenth = 0;
        for i in 1..=u64::from(slots) + 1 {
            s.calls.set(0);
            let a = n.accept(&s, fp(i), 0, u64::MAX);
            if i <= u64::from(slots / 10) {
                calls_first_tenth += s.calls.get();
            }
            if a != Accepted::Fresh {
                assert_eq!(a, Accepted::Full);
                break;
            }
            taken += 1;
        }
        (taken, calls_first_tenth)
    }

    /// The capacity the README states (paragraph **Replay.**), measured with the real
    /// probing: with four candidates per nonce the first refusal came at 3,894 of 16,384
    /// (24% full) and 34 of 64; every new nonce cost 4 reads + 1 write.
    #[test]
    fn the_table_fills_to_a_high_load_factor_before_the_first_refusal() {
        let (default_taken, default_calls) = fill(16_384);
        let (small_taken, _) = fill(64);
        assert_eq!((default_taken, small_taken), (14_505, 62));
        // At low load (the first 10%), a new nonce costs about one read and one write.
        assert_eq!(default_calls, 3_347);
        let readme = include_str!("../../../README.md")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for fact in ["16,384 slots hold 14,505 live nonces", "64 slots hold 62"] {
            assert!(readme.contains(fact), "README does not say {fact:?}");
        }
    }

    /// Slots free in any order (windows of different lengths), yet a nonce is found for as
    /// long as it is taken: every answer matches a model that remembers every nonce.
    #[test]
    fn a_nonce_is_found_wherever_it_was_stored_while_slots_free_in_any_order() {
        let n = NonceStore::new(64, 4, 1);
        let s = MemStore::default();
        assert!(n.precreate(&s).is_ok());
        let mut model: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        let (mut fresh, mut replayed, mut full) = (0, 0, 0);
        for step in 1..=20_000u64 {
            let now = step * S;
            let r = fp(step ^ 0x55);
            // A new nonce, or one of the last 200 again; windows of 1..=110 s.
            let id = if r.is_multiple_of(3) {
                step.saturating_sub(r % 200)
            } else {
                step
            };
            let until = now + (1 + fp(id) % 110) * S;
            let want_replay = model.get(&id).is_some_and(|&u| now < u);
            match n.accept(&s, fp(id), now, until) {
                Accepted::Replayed => {
                    assert!(want_replay, "step {step}: nonce {id} is not taken");
                    replayed += 1;
                }
                Accepted::Fresh => {
                    assert!(
                        !want_replay,
                        "step {step}: nonce {id} taken yet accepted again"
                    );
                    model.insert(id, until);
                    fresh += 1;
                }
                Accepted::Full => {
                    assert!(
                        !want_replay,
                        "step {step}: a replay of {id} refused as full"
                    );
                    full += 1;
                }
            }
        }
        // About 55 nonces live in 64 slots: the store is busy, and still exact.
        assert_eq!((fresh, replayed, full), (18_425, 1_572, 3));
    }
}
