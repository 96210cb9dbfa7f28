//! A bounded table of proxy-wasm shared-data slots, with governor's `measure_and_replace`
//! seam: the table owns the read / compare-and-swap / retry loop, the caller passes the math.
//!
//! Shared data has no delete and no TTL, so keys are hashed into a fixed number of slots
//! (`<prefix><n>`); memory is bounded by configuration whatever the traffic. A slot records
//! the 64-bit fingerprint of the key that owns it, so a collision is detected, never merged.
//! Each key has [`CANDIDATES`] candidate slots (d-choice hashing; measured in
//! bench/results.md: with 1M new clients per ~90 s, 2 choices in 16,384 slots left 22% of
//! decisions to the per-worker fallback). A key's slot is found by reading its candidates
//! in order until one is its own, so a key that has one is usually found in one read; a key
//! without one reads every candidate (it must not own another one before it takes a slot). A slot owned by another key may be
//! taken when its value ranks lower than the value about to be written (see
//! [`SlotValue::rank`]): a bucket that is full again, or an expired verdict, ranks 0 and
//! carries no information.
//!
//! Slot bytes: version (1) + owner fingerprint (8, little-endian) + the value's own encoding.

use crate::store::{SharedData, StateKey, StateStore, StoreError, StoreFault};
use std::marker::PhantomData;

/// A fixed-size value kept in a slot.
pub trait SlotValue: Copy {
    /// Encoded length in bytes (at most [`MAX_VALUE_LEN`]).
    const LEN: usize;
    /// Slot layout version; a slot with another version is treated as corrupt.
    const VERSION: u8;
    /// Writes exactly [`Self::LEN`] bytes into `out` (which is that long).
    fn encode(&self, out: &mut [u8]);
    /// Decodes [`Self::LEN`] bytes; `None` if they are not a valid value.
    fn decode(bytes: &[u8]) -> Option<Self>;
    /// How much this value is worth keeping at `now_ns`: 0 means it carries no information
    /// (its slot is free for any key); a key may take another key's slot when its new value
    /// ranks strictly higher than the occupant.
    fn rank(&self, now_ns: u64) -> u8;
    /// From when on this value ranks 0 if nothing changes it, ns since the Unix epoch (the
    /// per-worker fallback's eviction order; `u64::MAX` when it never expires by itself).
    fn free_at_ns(&self) -> u64;
    /// What this value keeps when many keys share it (the per-worker fallback's address
    /// groups and overflow, [`crate::store::local_store`]): what is about one client must not reach
    /// the others. The value itself by default.
    fn shared(&self) -> Self {
        *self
    }
}

/// Largest [`SlotValue::LEN`] supported.
pub const MAX_VALUE_LEN: usize = 56;
/// Bytes before the value: version + owner fingerprint.
const HEADER_LEN: usize = 9;
/// Fingerprint of an unowned slot (pre-created slots).
const NO_OWNER: u64 = 0;

/// Candidate slots per key.
pub const CANDIDATES: usize = 4;

/// Longest key prefix kept (a longer one is cut; every prefix in use is a short constant).
const MAX_PREFIX_LEN: usize = 32;

/// Where a key's value lives: its candidate number (0..[`CANDIDATES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRef(u8);

impl SlotRef {
    /// A key's first candidate.
    pub const fn first() -> SlotRef {
        SlotRef(0)
    }
}

/// A table of `slots` shared-data keys `<prefix><n>` holding values of type `V`. Slot names
/// are formatted on the stack when needed: the table itself is a few bytes per worker,
/// whatever its slot count.
#[derive(Debug, Clone)]
pub struct SlotTable<V> {
    prefix: [u8; MAX_PREFIX_LEN],
    prefix_len: usize,
    slots: u32,
    cas_retries: u32,
    _value: PhantomData<fn() -> V>,
}

/// One slot's shared-data key, `<prefix><n>`, in a stack buffer (no allocation).
pub(crate) struct SlotKey {
    buf: [u8; MAX_PREFIX_LEN + 10],
    len: usize,
}

impl SlotKey {
    /// The key.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.buf.get(..self.len).unwrap_or_default()).unwrap_or_default()
    }
}

/// What one candidate slot holds, from the point of view of one key.
enum View<V> {
    /// The key owns it.
    Ours(V),
    /// Unowned, or another key's value of this rank.
    Other(u8),
}

impl<V: SlotValue> SlotTable<V> {
    /// `slots` (at least 1) keys named `<prefix><n>`; `cas_retries` extra attempts per update.
    pub fn new(prefix: &str, slots: u32, cas_retries: u32) -> SlotTable<V> {
        // Cut on a char boundary so the key stays valid UTF-8.
        let mut cut = prefix.len().min(MAX_PREFIX_LEN);
        while !prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut buf = [0u8; MAX_PREFIX_LEN];
        if let (Some(dst), Some(src)) = (buf.get_mut(..cut), prefix.as_bytes().get(..cut)) {
            dst.copy_from_slice(src);
        }
        SlotTable {
            prefix: buf,
            prefix_len: cut,
            slots: slots.max(1),
            cas_retries,
            _value: PhantomData,
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.slots as usize
    }

    /// Always false (there is at least one slot).
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }

    /// Bytes of one encoded slot.
    pub const fn slot_len() -> usize {
        HEADER_LEN + V::LEN
    }

    /// Creates every missing slot as unowned, so that the first writes of a key are
    /// CAS-checked (Envoy ignores the CAS of a write to an absent key, which would lose
    /// updates when two workers race on a new key). Existing slots are left alone.
    /// Returns how many slots were created.
    pub fn precreate(&self, store: &dyn SharedData) -> Result<usize, StoreError> {
        let empty = unowned::<V>();
        let empty = empty.get(..Self::slot_len()).unwrap_or_default();
        let mut created = 0;
        for idx in 0..self.len() {
            let key = self.key(idx);
            if store.get(key.as_str())?.is_none() {
                store.set(key.as_str(), empty, 0)?;
                created += 1;
            }
        }
        Ok(created)
    }

    /// The candidate slot indexes of key fingerprint `fp`, in the order a new key tries
    /// them: where its value may live.
    pub fn key_candidates(&self, fp: u64) -> [usize; CANDIDATES] {
        self.candidates(key_fp(fp))
    }

    /// The candidate slot indexes of a fingerprint, each from its own mix of it (some may
    /// be equal, always so when the table has one slot).
    fn candidates(&self, fp: u64) -> [usize; CANDIDATES] {
        let n = u64::from(self.slots.max(1));
        let mut out = [0usize; CANDIDATES];
        for (i, c) in out.iter_mut().enumerate() {
            // splitmix64's finaliser over fp + i x golden ratio: independent-looking indexes.
            let mut x = fp.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^= x >> 31;
            *c = (x % n) as usize;
        }
        out
    }

    /// Slot `idx`'s shared-data key, formatted on the stack (also for tables that probe
    /// their slots their own way, [`crate::identity::nonce_store`]).
    pub(crate) fn key(&self, idx: usize) -> SlotKey {
        let mut k = SlotKey {
            buf: [0u8; MAX_PREFIX_LEN + 10],
            len: 0,
        };
        if let (Some(dst), Some(src)) = (
            k.buf.get_mut(..self.prefix_len),
            self.prefix.get(..self.prefix_len),
        ) {
            dst.copy_from_slice(src);
        }
        // Decimal digits of idx (< 2^32: at most 10), most significant first.
        let mut digits = [0u8; 10];
        let mut n = idx;
        let mut count = 0;
        loop {
            if let Some(d) = digits.get_mut(count) {
                *d = b'0' + (n % 10) as u8;
            }
            count += 1;
            n /= 10;
            if n == 0 || count == digits.len() {
                break;
            }
        }
        let mut len = self.prefix_len;
        for d in digits.iter().take(count).rev() {
            if let Some(b) = k.buf.get_mut(len) {
                *b = *d;
                len += 1;
            }
        }
        k.len = len;
        k
    }

    /// Reads one slot as seen by key `fp`, with its CAS. A slot that does not decode is not
    /// trusted (it may be a live value seen through a faulty store): it is reset to unowned,
    /// so a one-off corruption heals, and this request gets [`StoreFault::Corrupt`].
    fn view(
        &self,
        store: &dyn SharedData,
        idx: usize,
        fp: u64,
        now_ns: u64,
    ) -> Result<(View<V>, u32), StoreFault> {
        let slot_key = self.key(idx);
        let key = slot_key.as_str();
        // Absent (not pre-created): free; a CAS-0 write creates it.
        let (bytes, cas) = store
            .get(key)
            .map_err(|_| StoreFault::Store)?
            .unwrap_or_default();
        if bytes.is_empty() {
            return Ok((View::Other(0), cas));
        }
        match decode_slot::<V>(&bytes) {
            Some((owner, Some(v))) if owner == fp => Ok((View::Ours(v), cas)),
            Some((NO_OWNER, _)) => Ok((View::Other(0), cas)),
            Some((_, Some(v))) => Ok((View::Other(v.rank(now_ns)), cas)),
            _ => {
                let empty = unowned::<V>();
                let _ = store.set(key, empty.get(..Self::slot_len()).unwrap_or_default(), cas);
                Err(StoreFault::Corrupt)
            }
        }
    }

    /// Finds key `fp`'s slot: `(candidate, its value if fp owns one, CAS)`, or the best
    /// candidate a new value could take (the lowest-ranked occupant, the earliest on a tie)
    /// with the rank of the occupant. Candidates are read in order and the search stops at
    /// the key's own slot; a free slot is taken only after checking that `fp` owns none of
    /// the others (that would fork its value).
    fn find(&self, store: &dyn SharedData, fp: u64, now_ns: u64) -> Result<Found<V>, StoreFault> {
        let cands = self.candidates(fp);
        // (candidate number, slot index, occupant rank, CAS)
        let mut best: Option<(u8, usize, u8, u32)> = None;
        for (pos, &idx) in cands.iter().enumerate() {
            if cands.get(..pos).is_some_and(|seen| seen.contains(&idx)) {
                continue;
            }
            let pos = pos as u8;
            match self.view(store, idx, fp, now_ns)? {
                (View::Ours(v), cas) => return Ok(Found::Ours(SlotRef(pos), idx, v, cas)),
                (View::Other(rank), cas) => {
                    if best.is_none_or(|(_, _, r, _)| rank < r) {
                        best = Some((pos, idx, rank, cas));
                    }
                }
            }
        }
        // Candidate 0 is never skipped, so `best` is set; slot 0 is a harmless default.
        let (pos, idx, rank, cas) = best.unwrap_or((0, 0, 0, 0));
        Ok(Found::Vacant(SlotRef(pos), idx, rank, cas))
    }

    /// Key `fp`'s value at `now_ns` (`None`: it has none), without writing.
    pub fn get(
        &self,
        store: &dyn SharedData,
        fp: u64,
        now_ns: u64,
    ) -> Result<Option<V>, StoreFault> {
        match self.find(store, key_fp(fp), now_ns)? {
            Found::Ours(_, _, v, _) => Ok(Some(v)),
            Found::Vacant(..) => Ok(None),
        }
    }

    /// governor's seam: reads key `fp`'s value (`None` for a key without one), lets `f`
    /// compute `(result, new value)`, and writes the new value with compare-and-swap,
    /// retrying from the read on a lost race (up to `cas_retries` times; `f` may run again).
    /// `f` returning no new value leaves the store untouched.
    ///
    /// Errors: [`StoreFault`]; then nothing was written and the caller decides elsewhere
    /// (the per-worker fallback, or a cache miss).
    pub fn measure_and_replace<T>(
        &self,
        store: &dyn SharedData,
        fp: u64,
        now_ns: u64,
        mut f: impl FnMut(Option<V>) -> (T, Option<V>),
    ) -> Result<(T, SlotRef), StoreFault> {
        let fp = key_fp(fp);
        for _ in 0..=self.cas_retries {
            let (at, idx, current, cas, occupant_rank) = match self.find(store, fp, now_ns)? {
                Found::Ours(at, idx, v, cas) => (at, idx, Some(v), cas, None),
                Found::Vacant(at, idx, rank, cas) => (at, idx, None, cas, Some(rank)),
            };
            let (out, new) = f(current);
            let Some(new) = new else {
                return Ok((out, at));
            };
            if occupant_rank.is_some_and(|r| r > 0 && new.rank(now_ns) <= r) {
                return Err(StoreFault::Collision);
            }
            let bytes = encode_slot(fp, &new);
            match store.set(
                self.key(idx).as_str(),
                bytes.get(..Self::slot_len()).unwrap_or_default(),
                cas,
            ) {
                Ok(()) => return Ok((out, at)),
                Err(StoreError::CasMismatch) => continue,
                Err(StoreError::Host(_)) => return Err(StoreFault::Store),
            }
        }
        Err(StoreFault::CasExhausted)
    }

    /// Like [`SlotTable::measure_and_replace`], but only on the slot `at` (where an earlier
    /// call put `fp`'s value) and only while `fp` still owns it: for undoing that earlier
    /// change (a refund). `f` gets the current value and returns the new one.
    pub fn replace_at(
        &self,
        store: &dyn SharedData,
        fp: u64,
        at: SlotRef,
        mut f: impl FnMut(V) -> V,
    ) -> Result<(), StoreFault> {
        let fp = key_fp(fp);
        let cands = self.candidates(fp);
        let Some(&idx) = cands.get(usize::from(at.0)) else {
            return Err(StoreFault::Collision);
        };
        for _ in 0..=self.cas_retries {
            let (bytes, cas) = store
                .get(self.key(idx).as_str())
                .map_err(|_| StoreFault::Store)?
                .unwrap_or_default();
            let Some((owner, Some(v))) = decode_slot::<V>(&bytes) else {
                return Err(StoreFault::Corrupt);
            };
            if owner != fp {
                return Err(StoreFault::Collision);
            }
            let new = encode_slot(fp, &f(v));
            match store.set(
                self.key(idx).as_str(),
                new.get(..Self::slot_len()).unwrap_or_default(),
                cas,
            ) {
                Ok(()) => return Ok(()),
                Err(StoreError::CasMismatch) => continue,
                Err(StoreError::Host(_)) => return Err(StoreFault::Store),
            }
        }
        Err(StoreFault::CasExhausted)
    }
}

/// A [`SlotTable`] in a given shared store: the shared implementation of [`StateStore`].
pub struct SharedSlots<'a, V> {
    /// The table.
    pub table: &'a SlotTable<V>,
    /// The shared data it lives in.
    pub store: &'a dyn SharedData,
}

impl<V: SlotValue> StateStore<V> for SharedSlots<'_, V> {
    type Place = SlotRef;

    fn measure_and_replace<T>(
        &mut self,
        key: StateKey,
        now_ns: u64,
        f: impl FnMut(Option<V>) -> (T, Option<V>),
    ) -> Result<(T, SlotRef), StoreFault> {
        self.table
            .measure_and_replace(self.store, key.fp, now_ns, f)
    }

    fn replace_at(
        &mut self,
        key: StateKey,
        at: SlotRef,
        f: impl FnMut(V) -> V,
    ) -> Result<(), StoreFault> {
        self.table.replace_at(self.store, key.fp, at, f)
    }
}

/// Result of [`SlotTable::find`].
enum Found<V> {
    /// The key owns candidate `.0` (slot `.1`) with value `.2`; CAS `.3`.
    Ours(SlotRef, usize, V, u32),
    /// The key has no value; candidate `.0` (slot `.1`) is the best one, its occupant ranks
    /// `.2`; CAS `.3`.
    Vacant(SlotRef, usize, u8, u32),
}

/// Fingerprint 0 means "unowned": a key hashing to 0 uses 1.
fn key_fp(fp: u64) -> u64 {
    fp.max(1)
}

/// An encoded slot in a stack buffer; only the first `HEADER_LEN + V::LEN` bytes are used.
fn encode_slot<V: SlotValue>(owner: u64, v: &V) -> [u8; HEADER_LEN + MAX_VALUE_LEN] {
    let mut out = [0u8; HEADER_LEN + MAX_VALUE_LEN];
    let (head, body) = out.split_at_mut(HEADER_LEN);
    let (version, owner_bytes) = head.split_at_mut(1);
    version.copy_from_slice(&[V::VERSION]);
    owner_bytes.copy_from_slice(&owner.to_le_bytes());
    if let Some(value) = body.get_mut(..V::LEN) {
        v.encode(value);
    }
    out
}

/// An unowned slot (all value bytes zero).
fn unowned<V: SlotValue>() -> [u8; HEADER_LEN + MAX_VALUE_LEN] {
    let mut out = [0u8; HEADER_LEN + MAX_VALUE_LEN];
    if let Some(v) = out.first_mut() {
        *v = V::VERSION;
    }
    out
}

/// Decodes a slot into (owner, value). `None`: wrong length or version (corrupt). The value
/// is `None` for an unowned slot (whatever its bytes) or bytes that do not decode.
fn decode_slot<V: SlotValue>(bytes: &[u8]) -> Option<(u64, Option<V>)> {
    if bytes.len() != HEADER_LEN + V::LEN {
        return None;
    }
    let (head, body) = bytes.split_at(HEADER_LEN);
    let (version, owner) = head.split_first()?;
    if *version != V::VERSION {
        return None;
    }
    let owner = u64::from_le_bytes(owner.try_into().ok()?);
    if owner == NO_OWNER {
        return Some((NO_OWNER, None));
    }
    let v = V::decode(body);
    // An owned slot whose value does not decode is corrupt.
    v.map(|v| (owner, Some(v)))
}

/// Little-endian u64 at `at` of `b` (for [`SlotValue::decode`] implementations).
pub fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Writes `v` little-endian at `at` of `b` (ignored if it does not fit).
pub fn write_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(dst) = b.get_mut(at..at + 8) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::{Fault, MemStore};

    /// A counter that is worth keeping while it is above zero.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Count(u64);

    impl SlotValue for Count {
        const LEN: usize = 8;
        const VERSION: u8 = 7;
        fn encode(&self, out: &mut [u8]) {
            write_u64(out, 0, self.0);
        }
        fn decode(b: &[u8]) -> Option<Self> {
            read_u64(b, 0).map(Count)
        }
        fn rank(&self, _now: u64) -> u8 {
            u8::try_from(self.0).unwrap_or(u8::MAX)
        }
        fn free_at_ns(&self) -> u64 {
            u64::MAX
        }
    }

    fn table(slots: u32) -> (SlotTable<Count>, MemStore) {
        let t = SlotTable::new("t:", slots, 4);
        let s = MemStore::default();
        assert_eq!(t.precreate(&s), Ok(slots as usize));
        (t, s)
    }

    fn add(t: &SlotTable<Count>, s: &MemStore, fp: u64, n: u64) -> Result<u64, StoreFault> {
        t.measure_and_replace(s, fp, 0, |c| {
            let v = c.map_or(0, |c| c.0) + n;
            (v, Some(Count(v)))
        })
        .map(|(v, _)| v)
    }

    #[test]
    fn precreate_is_idempotent_and_bounded() {
        let (t, s) = table(16);
        assert_eq!(s.len(), 16);
        assert_eq!(t.precreate(&s), Ok(0));
        for fp in 1..1000 {
            let _ = add(&t, &s, fp, 1);
        }
        assert_eq!(s.len(), 16);
    }

    #[test]
    fn values_accumulate_per_key() {
        let (t, s) = table(64);
        assert_eq!(add(&t, &s, 5, 2), Ok(2));
        assert_eq!(add(&t, &s, 5, 3), Ok(5));
        assert_eq!(add(&t, &s, 6, 1), Ok(1));
        assert_eq!(t.get(&s, 5, 0), Ok(Some(Count(5))));
        assert_eq!(t.get(&s, 7, 0), Ok(None));
    }

    #[test]
    fn an_occupant_of_equal_or_higher_rank_is_a_collision_not_a_merge() {
        let (t, s) = table(1);
        assert_eq!(add(&t, &s, 1, 5), Ok(5));
        // Key 2 (rank 3) may not take key 1's slot (rank 5).
        assert_eq!(add(&t, &s, 2, 3), Err(StoreFault::Collision));
        assert_eq!(t.get(&s, 1, 0), Ok(Some(Count(5))));
        // Rank 9 > 5: key 2 takes the slot; key 1's value is gone, not merged.
        assert_eq!(add(&t, &s, 2, 9), Ok(9));
        assert_eq!(t.get(&s, 1, 0), Ok(None));
    }

    #[test]
    fn a_rank_zero_occupant_is_free() {
        let (t, s) = table(1);
        assert_eq!(add(&t, &s, 1, 0), Ok(0));
        assert_eq!(add(&t, &s, 2, 1), Ok(1));
    }

    #[test]
    fn read_only_outcomes_write_nothing() {
        let (t, s) = table(8);
        s.calls.set(0);
        let r = t.measure_and_replace(&s, 3, 0, |c| (c.is_none(), None));
        assert!(matches!(r, Ok((true, _))));
        assert_eq!(t.get(&s, 3, 0), Ok(None));
    }

    #[test]
    fn store_faults_are_errors_and_corruption_heals() {
        let (t, s) = table(8);
        assert_eq!(add(&t, &s, 3, 1), Ok(1));
        s.fault.set(Fault::Error);
        assert_eq!(add(&t, &s, 3, 1), Err(StoreFault::Store));
        s.fault.set(Fault::CasMismatch);
        assert_eq!(add(&t, &s, 3, 1), Err(StoreFault::CasExhausted));
        s.fault.set(Fault::Truncate);
        assert_eq!(add(&t, &s, 3, 1), Err(StoreFault::Corrupt));
        s.fault.set(Fault::None);
        // The truncated read reset the slot: the key starts over, and the table works.
        assert_eq!(add(&t, &s, 3, 1), Ok(1));
    }

    #[test]
    fn replace_at_undoes_on_the_same_slot_only_while_owned() {
        let (t, s) = table(1);
        let (_, at) = t
            .measure_and_replace(&s, 1, 0, |_| ((), Some(Count(4))))
            .expect("written");
        assert_eq!(t.replace_at(&s, 1, at, |c| Count(c.0 - 1)), Ok(()));
        assert_eq!(t.get(&s, 1, 0), Ok(Some(Count(3))));
        assert_eq!(add(&t, &s, 2, 200), Ok(200));
        assert_eq!(
            t.replace_at(&s, 1, at, |c| Count(c.0 - 1)),
            Err(StoreFault::Collision)
        );
    }

    #[test]
    fn a_new_key_takes_any_free_candidate_and_collides_only_when_all_are_taken() {
        // 64 slots, keys that stay active (rank > 0): with four candidates each, keys keep
        // finding room until the table is nearly full (two candidates fill about 3/4).
        let (t, s) = table(64);
        let mut placed = 0;
        for fp in 1..=64u64 {
            if add(&t, &s, fp.wrapping_mul(0x1234_5678_9abc_def1), 1).is_ok() {
                placed += 1;
            }
        }
        assert!(placed >= 56, "only {placed} of 64 keys found a slot");
        // Each placed key is found again (wherever among its candidates it went), and its
        // value is its own.
        for fp in 1..=64u64 {
            let key = fp.wrapping_mul(0x1234_5678_9abc_def1);
            if let Ok(Some(Count(v))) = t.get(&s, key, 0) {
                assert_eq!(v, 1);
                assert_eq!(add(&t, &s, key, 1), Ok(2));
            }
        }
    }

    #[test]
    fn an_existing_key_is_found_without_reading_later_candidates() {
        let (t, s) = table(1 << 16);
        assert_eq!(add(&t, &s, 42, 1), Ok(1));
        s.calls.set(0);
        // The key took its first candidate (all were free): one read + one write.
        assert_eq!(add(&t, &s, 42, 1), Ok(2));
        assert_eq!(s.calls.get(), 2);
        // A new key reads all four candidates, then writes one.
        s.calls.set(0);
        assert_eq!(add(&t, &s, 43, 1), Ok(1));
        assert_eq!(s.calls.get(), CANDIDATES as u64 + 1);
    }

    #[test]
    fn slot_keys_are_prefix_and_decimal_index() {
        let t: SlotTable<Count> = SlotTable::new("cg:b:", 1 << 20, 0);
        for (idx, want) in [
            (0, "cg:b:0"),
            (7, "cg:b:7"),
            (10, "cg:b:10"),
            (1_048_575, "cg:b:1048575"),
        ] {
            assert_eq!(t.key(idx).as_str(), want);
        }
        let t: SlotTable<Count> = SlotTable::new(&"p".repeat(40), 4, 0);
        assert_eq!(
            t.key(3).as_str(),
            format!("{}3", "p".repeat(MAX_PREFIX_LEN))
        );
        assert_eq!(t.key(usize::MAX).as_str().len(), MAX_PREFIX_LEN + 10);
    }

    #[test]
    fn fingerprint_zero_is_a_key_like_any_other() {
        let (t, s) = table(8);
        assert_eq!(add(&t, &s, 0, 2), Ok(2));
        assert_eq!(t.get(&s, 0, 0), Ok(Some(Count(2))));
    }
}
