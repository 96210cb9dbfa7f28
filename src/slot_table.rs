//! A bounded table of proxy-wasm shared-data slots, with governor's `measure_and_replace`
//! seam: the table owns the read / compare-and-swap / retry loop, the caller passes the math.
//!
//! Shared data has no delete and no TTL, so keys are hashed into a fixed number of slots
//! (`<prefix><n>`); memory is bounded by configuration whatever the traffic. A slot records
//! the 64-bit fingerprint of the key that owns it, so a collision is detected, never merged.
//! Each key has two candidate slots (two-choice hashing). A slot owned by another key may be
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
}

/// Largest [`SlotValue::LEN`] supported.
pub const MAX_VALUE_LEN: usize = 48;
/// Bytes before the value: version + owner fingerprint.
const HEADER_LEN: usize = 9;
/// Fingerprint of an unowned slot (pre-created slots).
const NO_OWNER: u64 = 0;

/// Where a key's value lives: candidate 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRef(u8);

/// A table of `slots` shared-data keys `<prefix><n>` holding values of type `V`.
#[derive(Debug, Clone)]
pub struct SlotTable<V> {
    keys: Vec<String>,
    cas_retries: u32,
    _value: PhantomData<fn() -> V>,
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
        SlotTable {
            keys: (0..slots.max(1)).map(|n| format!("{prefix}{n}")).collect(),
            cas_retries,
            _value: PhantomData,
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always false (there is at least one slot).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
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
        for key in &self.keys {
            if store.get(key)?.is_none() {
                store.set(key, empty, 0)?;
                created += 1;
            }
        }
        Ok(created)
    }

    /// The two candidate slot indexes of a fingerprint (equal when the table has one slot).
    fn candidates(&self, fp: u64) -> [usize; 2] {
        let n = self.keys.len().max(1) as u64;
        let a = fp % n;
        let b = (fp.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15) % n;
        [a as usize, b as usize]
    }

    fn key(&self, idx: usize) -> &str {
        self.keys.get(idx).map(String::as_str).unwrap_or_default()
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
        let key = self.key(idx);
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

    /// Finds key `fp`'s slot: `(slot, its value if fp owns one, CAS)`, or the best slot a new
    /// value could take with the rank of the occupant. The second candidate is read only
    /// when the first is not ours, and a free first slot is taken only after checking that
    /// `fp` does not already own the second (that would fork its value).
    fn find(&self, store: &dyn SharedData, fp: u64, now_ns: u64) -> Result<Found<V>, StoreFault> {
        let [a, b] = self.candidates(fp);
        let (va, cas_a) = self.view(store, a, fp, now_ns)?;
        let rank_a = match va {
            View::Ours(v) => return Ok(Found::Ours(a, v, cas_a)),
            View::Other(r) => r,
        };
        if a == b {
            return Ok(Found::Vacant(a, rank_a, cas_a));
        }
        match self.view(store, b, fp, now_ns)? {
            (View::Ours(v), cas_b) => Ok(Found::Ours(b, v, cas_b)),
            (View::Other(rank_b), cas_b) if rank_b < rank_a => Ok(Found::Vacant(b, rank_b, cas_b)),
            _ => Ok(Found::Vacant(a, rank_a, cas_a)),
        }
    }

    /// Key `fp`'s value at `now_ns` (`None`: it has none), without writing.
    pub fn get(
        &self,
        store: &dyn SharedData,
        fp: u64,
        now_ns: u64,
    ) -> Result<Option<V>, StoreFault> {
        match self.find(store, key_fp(fp), now_ns)? {
            Found::Ours(_, v, _) => Ok(Some(v)),
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
            let (idx, current, cas, occupant_rank) = match self.find(store, fp, now_ns)? {
                Found::Ours(idx, v, cas) => (idx, Some(v), cas, None),
                Found::Vacant(idx, rank, cas) => (idx, None, cas, Some(rank)),
            };
            let (out, new) = f(current);
            let Some(new) = new else {
                return Ok((out, self.slot_ref(fp, idx)));
            };
            if occupant_rank.is_some_and(|r| r > 0 && new.rank(now_ns) <= r) {
                return Err(StoreFault::Collision);
            }
            let bytes = encode_slot(fp, &new);
            match store.set(
                self.key(idx),
                bytes.get(..Self::slot_len()).unwrap_or_default(),
                cas,
            ) {
                Ok(()) => return Ok((out, self.slot_ref(fp, idx))),
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
        let idx = self.candidates(fp)[usize::from(at.0 & 1)];
        for _ in 0..=self.cas_retries {
            let (bytes, cas) = store
                .get(self.key(idx))
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
                self.key(idx),
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

    fn slot_ref(&self, fp: u64, idx: usize) -> SlotRef {
        let [a, _] = self.candidates(fp);
        SlotRef(u8::from(idx != a))
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
    /// The key owns slot `.0` with value `.1`; CAS `.2`.
    Ours(usize, V, u32),
    /// The key has no value; slot `.0` is the best candidate, its occupant ranks `.1`.
    Vacant(usize, u8, u32),
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
    fn fingerprint_zero_is_a_key_like_any_other() {
        let (t, s) = table(8);
        assert_eq!(add(&t, &s, 0, 2), Ok(2));
        assert_eq!(t.get(&s, 0, 0), Ok(Some(Count(2))));
    }
}
