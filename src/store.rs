//! Where bucket state lives: proxy-wasm shared data (seen by every Envoy worker), with a
//! bounded in-VM fallback when the shared store fails.
//!
//! Shared data has no delete and no TTL, so keys are hashed into `slots` fixed slots
//! (`cg:b:<n>`); memory is bounded by configuration whatever the traffic. A slot records the
//! 64-bit fingerprint of the key that owns it, so a collision is detected, not merged. Each key
//! has two candidate slots (two-choice hashing); a slot whose bucket is full again (idle
//! owner) can be taken over, since a full bucket carries no information.

use crate::bucket::{self, BucketState, Rate, Take};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Error from the shared-data host calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreError {
    /// `proxy_set_shared_data` refused the write: the value changed since it was read.
    CasMismatch,
    /// Any other host status (raw proxy-wasm `Status` value).
    Host(u32),
}

/// The seam to proxy-wasm shared data (`proxy_get_shared_data` / `proxy_set_shared_data`).
///
/// Semantics follow Envoy: `get` returns the value and its CAS token (`None` if the key is
/// absent); `set` with `cas != 0` fails with [`StoreError::CasMismatch`] if the key changed
/// since that CAS was read; `cas == 0` writes unconditionally.
pub trait SharedData {
    /// Reads `key`: `Ok(None)` if absent, else the value bytes and CAS token.
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError>;
    /// Writes `key` if its CAS still equals `cas` (0 = unconditionally).
    fn set(&self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError>;
}

/// Slot encoding version byte.
const SLOT_VERSION: u8 = 1;
/// Encoded slot length: version (1) + fingerprint (8) + tat_ns (8) + last_ns (8), little-endian.
pub const SLOT_LEN: usize = 25;
/// Fingerprint of an unowned slot (written when slots are pre-created).
const NO_OWNER: u64 = 0;

/// Decoded content of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Fingerprint of the owning key (never 0 for an owned slot).
    pub owner: u64,
    /// The owner's bucket.
    pub state: BucketState,
}

/// Encodes a slot as exactly [`SLOT_LEN`] bytes.
pub fn encode_slot(slot: &Slot) -> [u8; SLOT_LEN] {
    let mut out = [0u8; SLOT_LEN];
    let (v, rest) = out.split_at_mut(1);
    let (fp, rest) = rest.split_at_mut(8);
    let (tat, last) = rest.split_at_mut(8);
    v.copy_from_slice(&[SLOT_VERSION]);
    fp.copy_from_slice(&slot.owner.to_le_bytes());
    tat.copy_from_slice(&slot.state.tat_ns.to_le_bytes());
    last.copy_from_slice(&slot.state.last_ns.to_le_bytes());
    out
}

/// Decodes a slot; `None` for any other length or version (a corrupt slot is overwritten).
pub fn decode_slot(bytes: &[u8]) -> Option<Slot> {
    let arr: &[u8; SLOT_LEN] = bytes.try_into().ok()?;
    let (v, rest) = arr.split_first()?;
    if *v != SLOT_VERSION {
        return None;
    }
    let u = |b: &[u8]| -> Option<u64> { Some(u64::from_le_bytes(b.try_into().ok()?)) };
    Some(Slot {
        owner: u(rest.get(0..8)?)?,
        state: BucketState {
            tat_ns: u(rest.get(8..16)?)?,
            last_ns: u(rest.get(16..24)?)?,
        },
    })
}

/// Shape of the slot table: how many slots and their precomputed key strings.
#[derive(Debug, Clone)]
pub struct SlotTable {
    keys: Vec<String>,
    cas_retries: u32,
}

impl SlotTable {
    /// `slots` shared-data keys named `<prefix><n>`; `cas_retries` extra attempts per update.
    pub fn new(prefix: &str, slots: u32, cas_retries: u32) -> SlotTable {
        SlotTable {
            keys: (0..slots.max(1)).map(|n| format!("{prefix}{n}")).collect(),
            cas_retries,
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

    /// The two candidate slot keys of a fingerprint.
    fn candidates(&self, fp: u64) -> [&str; 2] {
        let n = self.keys.len() as u64;
        let a = fp % n;
        let b = (fp.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15) % n;
        let key = |i: u64| {
            self.keys
                .get(i as usize)
                .map(String::as_str)
                .unwrap_or("cg:b:0")
        };
        [key(a), key(b)]
    }

    /// Candidate slot `idx` (0 or 1) of a fingerprint.
    fn key(&self, fp: u64, idx: usize) -> &str {
        let [a, b] = self.candidates(fp);
        if idx == 0 {
            a
        } else {
            b
        }
    }

    /// Creates every missing slot as unowned so that the first writes of a key are CAS-checked
    /// (Envoy ignores the CAS of a write to an absent key, which would lose updates when two
    /// workers race on a new key). Existing slots are left alone. Returns slots created.
    pub fn precreate(&self, store: &dyn SharedData) -> Result<usize, StoreError> {
        let empty = encode_slot(&Slot {
            owner: NO_OWNER,
            state: BucketState::default(),
        });
        precreate_keys(store, &self.keys, &empty)
    }
}

/// Writes `empty` to every key of `keys` that is absent; existing keys are left alone.
/// Returns how many were created. Pre-created keys make every later write CAS-checked.
pub fn precreate_keys(
    store: &dyn SharedData,
    keys: &[String],
    empty: &[u8],
) -> Result<usize, StoreError> {
    let mut created = 0;
    for key in keys {
        if store.get(key)?.is_none() {
            store.set(key, empty, 0)?;
            created += 1;
        }
    }
    Ok(created)
}

/// Shared-data key recording the [`StoreShape`] in force, so that a new configuration can
/// tell that it moves every bucket.
pub const META_KEY: &str = "cg:store:meta";
/// Meta encoding version byte.
const META_VERSION: u8 = 1;

/// The store settings that decide where a key's bucket is: change either and every key has
/// a new fingerprint and slot, so every bucket starts full again (keys are hashed, so state
/// cannot be carried over).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreShape {
    /// `store.slots`.
    pub slots: u32,
    /// `store.hash_seed`.
    pub hash_seed: u64,
}

impl StoreShape {
    /// Version (1) + slots (4) + hash_seed (8), little-endian.
    fn encode(&self) -> [u8; 13] {
        let mut out = [0u8; 13];
        let (v, rest) = out.split_at_mut(1);
        let (slots, seed) = rest.split_at_mut(4);
        v.copy_from_slice(&[META_VERSION]);
        slots.copy_from_slice(&self.slots.to_le_bytes());
        seed.copy_from_slice(&self.hash_seed.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<StoreShape> {
        let arr: &[u8; 13] = bytes.try_into().ok()?;
        let (v, rest) = arr.split_first()?;
        if *v != META_VERSION {
            return None;
        }
        Some(StoreShape {
            slots: u32::from_le_bytes(rest.get(0..4)?.try_into().ok()?),
            hash_seed: u64::from_le_bytes(rest.get(4..12)?.try_into().ok()?),
        })
    }

    /// What changed from `old` to `self`, as one log line; `None` if nothing did. The seed's
    /// values are not printed: it is meant to stay secret so collisions cannot be planned.
    pub fn change_from(&self, old: &StoreShape) -> Option<String> {
        let slots = (old.slots != self.slots)
            .then(|| format!("store.slots changed {} -> {}", old.slots, self.slots));
        let seed = (old.hash_seed != self.hash_seed).then_some("store.hash_seed changed");
        let what = match (slots, seed) {
            (Some(a), Some(b)) => format!("{a} and {b}"),
            (Some(a), None) => a,
            (None, Some(b)) => b.to_string(),
            (None, None) => return None,
        };
        Some(format!("{what}: every rate-limit bucket starts full again"))
    }
}

/// Records `shape` in shared data as the one in force (at `on_configure`) and returns what
/// changed since the shape the previous configuration recorded (shared data outlives
/// configurations while the `vm_id` stays the same). `None` on a first start, when nothing
/// changed, or when another VM of the same configuration recorded it first (CAS), so each
/// change is reported once; also `None` on a store error (best effort, never fatal) or an
/// unreadable record (it is overwritten).
pub fn record_shape(store: &dyn SharedData, shape: StoreShape) -> Option<String> {
    for _ in 0..8 {
        let (old, cas) = match store.get(META_KEY) {
            Ok(Some((bytes, cas))) => (StoreShape::decode(&bytes), cas),
            Ok(None) => (None, 0),
            Err(_) => return None,
        };
        if old == Some(shape) {
            return None;
        }
        match store.set(META_KEY, &shape.encode(), cas) {
            Ok(()) => return old.and_then(|o| shape.change_from(&o)),
            Err(StoreError::CasMismatch) => continue,
            Err(StoreError::Host(_)) => return None,
        }
    }
    None
}

/// Why a charge did not use the shared store (each is counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// A host call failed.
    StoreError,
    /// Every CAS attempt lost a race.
    CasExhausted,
    /// Both candidate slots are owned by other keys with active buckets.
    Collision,
    /// A slot held bytes that do not decode; it is reset to unowned for the next request.
    CorruptSlot,
}

/// Result of charging one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// The token-bucket outcome.
    pub take: Take,
    /// Set when the local in-VM bucket decided instead of the shared store.
    pub fallback: Option<Fallback>,
    /// Where the token was taken, for a refund.
    pub(crate) place: Place,
}

/// Where a charged token lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Shared(usize),
    /// The key's own bucket in [`LocalBuckets`].
    Local,
    /// The overflow bucket of [`LocalBuckets`] for this rate.
    Overflow,
    Nowhere,
}

/// Bounded per-VM map of buckets used when the shared store fails.
///
/// Bounded so that a store outage under a flood of distinct clients cannot grow memory, and
/// evicting only what carries no information: a bucket that is full again. Any other bucket
/// is kept, so an exhausted client stays exhausted whatever other clients send. When the map
/// is full and no bucket is full again, a new key gets no bucket of its own: it is charged
/// against a strict overflow bucket shared by every such key of the same rate (one per
/// limit, with that limit's rate and burst).
///
/// Finding the buckets that are full again never scans the map: a min-heap holds one entry
/// per bucket, `(tat_ns when pushed, key)`, and only entries whose time has come are looked
/// at. An entry can be early (the bucket took tokens since; it is pushed again with its
/// current time) or late (a refund; the bucket is then evicted later than it could be, the
/// strict side), so each eviction costs O(log n) and each re-push follows a token taken.
#[derive(Debug, Default)]
pub struct LocalBuckets {
    map: HashMap<u64, BucketState>,
    /// One entry per key of `map`: the earliest time its bucket may be full again.
    full_at: BinaryHeap<Reverse<(u64, u64)>>,
    /// The overflow bucket of each rate seen while the map was full (at most one per limit).
    overflow: Vec<(Rate, BucketState)>,
    cap: usize,
    /// Heap entries looked at while evicting (tests check that a full map is not rescanned).
    examined: u64,
}

impl LocalBuckets {
    /// A map holding at most `cap` buckets (plus one overflow bucket per limit).
    pub fn new(cap: usize) -> LocalBuckets {
        LocalBuckets {
            cap: cap.max(1),
            ..LocalBuckets::default()
        }
    }

    /// Number of buckets held (overflow buckets not included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Takes a token for key `fp`: from its own bucket, else from a new one if there is room
    /// (after dropping the buckets that are full again), else from the overflow bucket of
    /// `rate`. Returns where the token was taken (`Nowhere` when limited).
    fn take(&mut self, fp: u64, now_ns: u64, rate: Rate) -> (Take, Place) {
        let placed = |t: Take, place: Place| match t {
            Take::Allowed { .. } => (t, place),
            Take::Limited { .. } => (t, Place::Nowhere),
        };
        if let Some(state) = self.map.get_mut(&fp) {
            let t = bucket::take(Some(*state), now_ns, rate);
            if let Take::Allowed { state: next, .. } = t {
                *state = next;
            }
            return placed(t, Place::Local);
        }
        if self.map.len() >= self.cap {
            self.evict_full(now_ns);
        }
        if self.map.len() < self.cap {
            let t = bucket::take(None, now_ns, rate);
            if let Take::Allowed { state, .. } = t {
                self.map.insert(fp, state);
                self.full_at.push(Reverse((state.tat_ns, fp)));
            }
            return placed(t, Place::Local);
        }
        let i = match self.overflow.iter().position(|(r, _)| *r == rate) {
            Some(i) => i,
            None => {
                self.overflow.push((rate, BucketState::default()));
                self.overflow.len() - 1
            }
        };
        let Some((_, state)) = self.overflow.get_mut(i) else {
            return (
                Take::Limited {
                    wait_ns: rate.emission_ns.max(1),
                },
                Place::Nowhere,
            );
        };
        let t = bucket::take(Some(*state), now_ns, rate);
        if let Take::Allowed { state: next, .. } = t {
            *state = next;
        }
        placed(t, Place::Overflow)
    }

    /// Drops every bucket that is full again at `now_ns`, looking only at heap entries whose
    /// time has come. An entry whose bucket took tokens since it was pushed goes back with
    /// the bucket's current `tat_ns`, which is after `now_ns` (a bucket is full when
    /// `tat_ns <= now_ns`), so the loop ends; it is bounded by the heap's size anyway.
    fn evict_full(&mut self, now_ns: u64) {
        for _ in 0..self.full_at.len() {
            match self.full_at.peek() {
                Some(Reverse((due, _))) if *due <= now_ns => {}
                _ => return,
            }
            let Some(Reverse((_, fp))) = self.full_at.pop() else {
                return;
            };
            self.examined += 1;
            match self.map.get(&fp) {
                Some(s) if !bucket::is_full(*s, now_ns) => {
                    self.full_at.push(Reverse((s.tat_ns, fp)));
                }
                Some(_) => {
                    self.map.remove(&fp);
                }
                None => {}
            }
        }
    }

    fn refund(&mut self, fp: u64, rate: Rate) {
        if let Some(s) = self.map.get_mut(&fp) {
            *s = bucket::refund(*s, rate);
        }
    }

    fn refund_overflow(&mut self, rate: Rate) {
        if let Some((_, s)) = self.overflow.iter_mut().find(|(r, _)| *r == rate) {
            *s = bucket::refund(*s, rate);
        }
    }
}

/// What one candidate slot holds, from the point of view of key `fp`.
enum View {
    /// `fp` owns it: its bucket.
    Ours(BucketState),
    /// Unowned, or its owner's bucket is full again: `fp` may take it over.
    Free,
    /// Another key's active bucket.
    Busy,
}

/// Reads slot `key` for `fp`, with its CAS. A slot that does not decode is not trusted (it
/// may be a live bucket seen through a faulty store): it is reset to unowned, so a one-off
/// corruption heals, and this request is decided locally.
fn view(store: &dyn SharedData, key: &str, fp: u64, now_ns: u64) -> Result<(View, u32), Fallback> {
    // Absent (not pre-created, should not happen) reads as free; a CAS-0 write creates it.
    let (bytes, cas) = store
        .get(key)
        .map_err(|_| Fallback::StoreError)?
        .unwrap_or_default();
    match decode_slot(&bytes) {
        Some(s) if s.owner == fp => Ok((View::Ours(s.state), cas)),
        Some(s) if s.owner != NO_OWNER && !bucket::is_full(s.state, now_ns) => {
            Ok((View::Busy, cas))
        }
        Some(_) => Ok((View::Free, cas)),
        None if bytes.is_empty() => Ok((View::Free, cas)),
        None => {
            let unowned = encode_slot(&Slot {
                owner: NO_OWNER,
                state: BucketState::default(),
            });
            let _ = store.set(key, &unowned, cas);
            Err(Fallback::CorruptSlot)
        }
    }
}

/// The slot `fp` uses: (candidate index, its bucket if it owns one, CAS). The second
/// candidate is read only when the first is not ours, and a free first slot is taken only
/// after checking `fp` does not already own the second (that would reset its bucket).
fn pick(
    table: &SlotTable,
    store: &dyn SharedData,
    fp: u64,
    now_ns: u64,
) -> Result<(usize, Option<BucketState>, u32), Fallback> {
    let [a, b] = table.candidates(fp);
    let (va, cas_a) = view(store, a, fp, now_ns)?;
    if let View::Ours(state) = va {
        return Ok((0, Some(state), cas_a));
    }
    let vb = if a == b {
        None
    } else {
        Some(view(store, b, fp, now_ns)?)
    };
    match (va, vb) {
        (_, Some((View::Ours(state), cas_b))) => Ok((1, Some(state), cas_b)),
        (View::Free, _) => Ok((0, None, cas_a)),
        (_, Some((View::Free, cas_b))) => Ok((1, None, cas_b)),
        _ => Err(Fallback::Collision),
    }
}

/// Charges one token for key fingerprint `fp` (never 0) under `rate`, in the shared store if
/// possible, else in `local`. Never fails: every store problem becomes a [`Fallback`].
pub fn charge(
    table: &SlotTable,
    store: &dyn SharedData,
    local: &mut LocalBuckets,
    fp: u64,
    now_ns: u64,
    rate: Rate,
) -> Charge {
    let fp = fp.max(1); // 0 means "unowned"
    let mut fallback = Fallback::CasExhausted;
    for _ in 0..=table.cas_retries {
        let (idx, state, cas) = match pick(table, store, fp, now_ns) {
            Ok(p) => p,
            Err(f) => {
                fallback = f;
                break;
            }
        };
        let t = bucket::take(state, now_ns, rate);
        let Take::Allowed {
            state: new_state, ..
        } = t
        else {
            return Charge {
                take: t,
                fallback: None,
                place: Place::Nowhere,
            };
        };
        let bytes = encode_slot(&Slot {
            owner: fp,
            state: new_state,
        });
        match store.set(table.key(fp, idx), &bytes, cas) {
            Ok(()) => {
                return Charge {
                    take: t,
                    fallback: None,
                    place: Place::Shared(idx),
                }
            }
            Err(StoreError::CasMismatch) => continue,
            Err(StoreError::Host(_)) => {
                fallback = Fallback::StoreError;
                break;
            }
        }
    }
    let (t, place) = local.take(fp, now_ns, rate);
    Charge {
        take: t,
        fallback: Some(fallback),
        place,
    }
}

/// Gives back the token taken by `charge` (best effort: bounded CAS retries; a lost refund
/// only errs on the strict side).
pub fn refund(
    table: &SlotTable,
    store: &dyn SharedData,
    local: &mut LocalBuckets,
    fp: u64,
    charge: &Charge,
    rate: Rate,
) {
    let fp = fp.max(1);
    let idx = match charge.place {
        Place::Nowhere => return,
        Place::Local => {
            local.refund(fp, rate);
            return;
        }
        Place::Overflow => {
            local.refund_overflow(rate);
            return;
        }
        Place::Shared(idx) => idx,
    };
    let key = table.key(fp, idx);
    for _ in 0..=table.cas_retries {
        let Ok(Some((bytes, cas))) = store.get(key) else {
            return;
        };
        let Some(slot) = decode_slot(&bytes) else {
            return;
        };
        if slot.owner != fp {
            return;
        }
        let back = encode_slot(&Slot {
            owner: fp,
            state: bucket::refund(slot.state, rate),
        });
        match store.set(key, &back, cas) {
            Err(StoreError::CasMismatch) => continue,
            _ => return,
        }
    }
}

/// In-memory [`SharedData`] with Envoy's semantics, plus fault injection; for host tests.
pub mod mem {
    use super::{SharedData, StoreError};
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

    /// Injected fault.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Fault {
        /// Behave like Envoy.
        None,
        /// Every call fails with a host error.
        Error,
        /// Every CAS-checked write reports a mismatch.
        CasMismatch,
        /// Reads return the stored bytes cut to half their length.
        Truncate,
    }

    /// Shared data in a `HashMap`, with a global CAS counter like Envoy's.
    #[derive(Debug)]
    pub struct MemStore {
        map: RefCell<HashMap<String, (Vec<u8>, u32)>>,
        next_cas: Cell<u32>,
        /// Current fault.
        pub fault: Cell<Fault>,
        /// Number of `get` + `set` calls made.
        pub calls: Cell<u64>,
    }

    impl Default for MemStore {
        fn default() -> Self {
            MemStore {
                map: RefCell::new(HashMap::new()),
                next_cas: Cell::new(1),
                fault: Cell::new(Fault::None),
                calls: Cell::new(0),
            }
        }
    }

    impl MemStore {
        /// Number of keys stored.
        pub fn len(&self) -> usize {
            self.map.borrow().len()
        }

        /// True when nothing is stored.
        pub fn is_empty(&self) -> bool {
            self.map.borrow().is_empty()
        }

        /// Overwrites a key's raw bytes (to plant corrupt data).
        pub fn poke(&self, key: &str, value: &[u8]) {
            let cas = self.next_cas.get();
            self.next_cas.set(cas.wrapping_add(1).max(1));
            self.map
                .borrow_mut()
                .insert(key.to_string(), (value.to_vec(), cas));
        }
    }

    impl SharedData for MemStore {
        fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
            self.calls.set(self.calls.get() + 1);
            if self.fault.get() == Fault::Error {
                return Err(StoreError::Host(2));
            }
            let got = self.map.borrow().get(key).cloned();
            Ok(got.map(|(mut v, cas)| {
                if self.fault.get() == Fault::Truncate {
                    v.truncate(v.len() / 2);
                }
                (v, cas)
            }))
        }

        fn set(&self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
            self.calls.set(self.calls.get() + 1);
            match self.fault.get() {
                Fault::Error => return Err(StoreError::Host(2)),
                Fault::CasMismatch if cas != 0 => return Err(StoreError::CasMismatch),
                _ => {}
            }
            let mut map = self.map.borrow_mut();
            if let Some((_, cur)) = map.get(key) {
                if cas != 0 && cas != *cur {
                    return Err(StoreError::CasMismatch);
                }
            }
            let next = self.next_cas.get();
            self.next_cas.set(next.wrapping_add(1).max(1));
            map.insert(key.to_string(), (value.to_vec(), next));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mem::{Fault, MemStore};
    use super::*;
    use crate::bucket::NS_PER_S;

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    fn setup(slots: u32) -> (SlotTable, MemStore, LocalBuckets) {
        let table = SlotTable::new("cg:b:", slots, 4);
        let store = MemStore::default();
        assert_eq!(table.precreate(&store), Ok(slots as usize));
        (table, store, LocalBuckets::new(16))
    }

    fn allowed(c: &Charge) -> bool {
        matches!(c.take, Take::Allowed { .. })
    }

    #[test]
    fn slot_roundtrip_and_corrupt_bytes() {
        let s = Slot {
            owner: 42,
            state: BucketState {
                tat_ns: 7,
                last_ns: 9,
            },
        };
        let b = encode_slot(&s);
        assert_eq!(b.len(), 25);
        assert_eq!(decode_slot(&b), Some(s));
        assert_eq!(decode_slot(b.get(..24).unwrap_or_default()), None);
        assert_eq!(decode_slot(&[]), None);
        let mut v2 = b;
        v2[0] = 2;
        assert_eq!(decode_slot(&v2), None);
    }

    #[test]
    fn precreate_is_idempotent_and_bounded() {
        let (table, store, _) = setup(64);
        assert_eq!(store.len(), 64);
        assert_eq!(table.precreate(&store), Ok(0));
    }

    #[test]
    fn shared_bucket_allows_exactly_burst() {
        let (table, store, mut local) = setup(64);
        let rate = Rate::new(1.0, 5);
        let n = (0..20)
            .filter(|_| allowed(&charge(&table, &store, &mut local, 77, T0, rate)))
            .count();
        assert_eq!(n, 5);
        assert!(local.is_empty());
    }

    #[test]
    fn memory_is_bounded_by_slots_whatever_the_clients() {
        let (table, store, mut local) = setup(128);
        let rate = Rate::new(1.0, 5);
        for fp in 1..10_000u64 {
            let _ = charge(&table, &store, &mut local, fp, T0 + fp, rate);
        }
        assert_eq!(store.len(), 128);
        assert!(local.len() <= 16);
    }

    #[test]
    fn colliding_keys_are_not_merged() {
        // One slot: both candidates are the same slot.
        let (table, store, mut local) = setup(1);
        let rate = Rate::new(1.0, 2);
        assert!(allowed(&charge(&table, &store, &mut local, 1, T0, rate)));
        // Key 2 cannot share key 1's active bucket: it falls back, counted as a collision,
        // and still gets its own full burst.
        let c = charge(&table, &store, &mut local, 2, T0, rate);
        assert_eq!(c.fallback, Some(Fallback::Collision));
        assert!(allowed(&c));
        assert!(allowed(&charge(&table, &store, &mut local, 2, T0, rate)));
        assert!(!allowed(&charge(&table, &store, &mut local, 2, T0, rate)));
        // Key 1 still has exactly one token left.
        assert!(allowed(&charge(&table, &store, &mut local, 1, T0, rate)));
        assert!(!allowed(&charge(&table, &store, &mut local, 1, T0, rate)));
    }

    #[test]
    fn idle_slot_is_taken_over() {
        let (table, store, mut local) = setup(1);
        let rate = Rate::new(1.0, 2);
        assert!(allowed(&charge(&table, &store, &mut local, 1, T0, rate)));
        // Two seconds later key 1's bucket is full again, so key 2 may own the slot.
        let c = charge(&table, &store, &mut local, 2, T0 + 2 * NS_PER_S, rate);
        assert_eq!(c.fallback, None);
        assert!(allowed(&c));
    }

    #[test]
    fn store_error_falls_back_to_local_bucket_with_same_limit() {
        let (table, store, mut local) = setup(8);
        store.fault.set(Fault::Error);
        let rate = Rate::new(1.0, 3);
        let charges: Vec<_> = (0..5)
            .map(|_| charge(&table, &store, &mut local, 9, T0, rate))
            .collect();
        assert!(charges
            .iter()
            .all(|c| c.fallback == Some(Fallback::StoreError)));
        assert_eq!(charges.iter().filter(|c| allowed(c)).count(), 3);
    }

    #[test]
    fn cas_always_mismatching_falls_back_after_bounded_retries() {
        let (table, store, mut local) = setup(8);
        store.fault.set(Fault::CasMismatch);
        let rate = Rate::new(1.0, 2);
        store.calls.set(0);
        let c = charge(&table, &store, &mut local, 9, T0, rate);
        assert_eq!(c.fallback, Some(Fallback::CasExhausted));
        assert!(allowed(&c));
        // 5 attempts (1 + cas_retries 4), each: get slot a (free), get slot b (to be sure
        // the key does not already own it), one set.
        assert_eq!(store.calls.get(), 15);
        assert!(allowed(&charge(&table, &store, &mut local, 9, T0, rate)));
        assert!(!allowed(&charge(&table, &store, &mut local, 9, T0, rate)));
    }

    #[test]
    fn truncated_slot_bytes_are_overwritten_and_still_limit() {
        let (table, store, mut local) = setup(8);
        store.fault.set(Fault::Truncate);
        let rate = Rate::new(1.0, 2);
        let charges: Vec<_> = (0..5)
            .map(|_| charge(&table, &store, &mut local, 9, T0, rate))
            .collect();
        // Every read is truncated: each charge is decided by the local bucket, which still
        // limits at the same burst.
        assert!(charges
            .iter()
            .all(|c| c.fallback == Some(Fallback::CorruptSlot)));
        assert_eq!(charges.iter().filter(|c| allowed(c)).count(), 2);
        // Once the store is healthy again the reset slot is used normally.
        store.fault.set(Fault::None);
        let c = charge(&table, &store, &mut local, 10, T0, rate);
        assert_eq!(c.fallback, None);
    }

    fn local_allowed(local: &mut LocalBuckets, fp: u64, now: u64, rate: Rate) -> bool {
        matches!(local.take(fp, now, rate).0, Take::Allowed { .. })
    }

    #[test]
    fn churn_past_capacity_cannot_reset_an_exhausted_local_bucket() {
        let mut local = LocalBuckets::new(4);
        let rate = Rate::new(0.001, 2);
        let victim: Vec<bool> = (0..3)
            .map(|_| local_allowed(&mut local, 1, T0, rate))
            .collect();
        assert_eq!(victim, [true, true, false]);
        // 2,000 other keys, one request each: 3 fill the map, 2 pass through the overflow
        // bucket (burst 2), the other 1,995 are limited; nothing is evicted.
        let churn = (100..2_100u64)
            .filter(|fp| local_allowed(&mut local, *fp, T0 + fp, rate))
            .count();
        assert_eq!(churn, 5);
        assert_eq!(local.len(), 4);
        assert_eq!(local.full_at.len(), 4);
        assert!(!local_allowed(&mut local, 1, T0 + 3_000, rate));
        // The map was full of active buckets the whole time: never looked at once.
        assert_eq!(local.examined, 0);
    }

    #[test]
    fn buckets_full_again_make_room_and_others_stay() {
        let mut local = LocalBuckets::new(3);
        let fast = Rate::new(1.0, 1); // full again 1 s after one token
        let slow = Rate::new(0.001, 1); // full again after 1000 s
        assert!(local_allowed(&mut local, 1, T0, fast));
        assert!(local_allowed(&mut local, 2, T0, fast));
        assert!(local_allowed(&mut local, 3, T0, slow));
        // Full, nothing full again: key 4 takes the overflow bucket of its rate (burst 1).
        assert_eq!(local.take(4, T0, fast).1, Place::Overflow);
        assert!(!local_allowed(&mut local, 5, T0, fast));
        // Another rate has its own overflow bucket.
        assert_eq!(local.take(6, T0, slow).1, Place::Overflow);
        // One second later keys 1 and 2 are full again and go; key 3 stays exhausted.
        assert_eq!(local.take(4, T0 + NS_PER_S, fast).1, Place::Local);
        assert_eq!(local.len(), 2);
        assert_eq!(local.examined, 2);
        assert!(local_allowed(&mut local, 5, T0 + NS_PER_S, fast));
        assert!(!local_allowed(&mut local, 3, T0 + NS_PER_S, slow));
        // Full again, nothing due: the next new key examines nothing more.
        assert_eq!(local.take(7, T0 + NS_PER_S, fast).1, Place::Overflow);
        assert_eq!(local.examined, 2);
    }

    #[test]
    fn an_active_bucket_is_pushed_back_not_evicted_and_each_entry_is_looked_at_once() {
        let mut local = LocalBuckets::new(2);
        let rate = Rate::new(1.0, 5);
        // Key 1 takes a token at T0 (heap: full again at T0 + 1 s), then 4 more 0.9 s
        // later: its bucket is now full again only at T0 + 5 s.
        assert!(local_allowed(&mut local, 1, T0, rate));
        for _ in 0..4 {
            assert!(local_allowed(&mut local, 1, T0 + 900_000_000, rate));
        }
        assert!(local_allowed(&mut local, 2, T0 + 900_000_000, rate));
        // At T0 + 2 s key 1's entry is due but its bucket is active: pushed back; key 2
        // (full again at T0 + 1.9 s) goes.
        assert_eq!(local.take(3, T0 + 2 * NS_PER_S, rate).1, Place::Local);
        assert_eq!(local.examined, 2);
        assert_eq!(local.len(), 2);
        assert_eq!(local.full_at.len(), 2);
        assert_eq!(
            local.full_at.iter().map(|e| e.0).min(),
            Some((T0 + 3 * NS_PER_S, 3))
        );
        // Thousands of new keys before T0 + 3 s: no bucket is full again, none is examined.
        for fp in 10..5_000u64 {
            let _ = local.take(fp, T0 + 2 * NS_PER_S + fp, rate);
        }
        assert_eq!(local.examined, 2);
        // Key 1 kept its bucket: 5 tokens taken, 2 refilled by T0 + 2 s.
        assert_eq!(
            bucket::tokens(local.map.get(&1).copied(), T0 + 2 * NS_PER_S, rate),
            2
        );
    }

    #[test]
    fn refund_of_an_overflow_token_goes_back_to_the_overflow_bucket() {
        let (table, store, _) = setup(8);
        let mut local = LocalBuckets::new(1);
        store.fault.set(Fault::Error);
        let rate = Rate::new(0.001, 1);
        assert!(allowed(&charge(&table, &store, &mut local, 1, T0, rate)));
        let c = charge(&table, &store, &mut local, 2, T0, rate);
        assert_eq!(c.place, Place::Overflow);
        assert!(!allowed(&charge(&table, &store, &mut local, 3, T0, rate)));
        refund(&table, &store, &mut local, 2, &c, rate);
        assert!(allowed(&charge(&table, &store, &mut local, 3, T0, rate)));
        assert!(!allowed(&charge(&table, &store, &mut local, 2, T0, rate)));
    }

    #[test]
    fn a_new_store_shape_is_reported_once_with_what_changed() {
        let store = MemStore::default();
        let shape = |slots, hash_seed| StoreShape { slots, hash_seed };
        // First start: recorded, nothing to report; the same again: nothing.
        assert_eq!(record_shape(&store, shape(16_384, 7)), None);
        assert_eq!(record_shape(&store, shape(16_384, 7)), None);
        assert_eq!(
            record_shape(&store, shape(65_536, 7)).as_deref(),
            Some("store.slots changed 16384 -> 65536: every rate-limit bucket starts full again")
        );
        // The other VMs of the same configuration see it recorded: reported once.
        assert_eq!(record_shape(&store, shape(65_536, 7)), None);
        assert_eq!(
            record_shape(&store, shape(65_536, 8)).as_deref(),
            Some("store.hash_seed changed: every rate-limit bucket starts full again")
        );
        assert_eq!(
            record_shape(&store, shape(64, 9)).as_deref(),
            Some(
                "store.slots changed 65536 -> 64 and store.hash_seed changed: every rate-limit \
                 bucket starts full again"
            )
        );
        // An unreadable record is overwritten without a report; a store error is silent.
        store.poke(META_KEY, b"garbage");
        assert_eq!(record_shape(&store, shape(128, 9)), None);
        assert_eq!(
            record_shape(&store, shape(64, 9)).as_deref(),
            Some("store.slots changed 128 -> 64: every rate-limit bucket starts full again")
        );
        store.fault.set(Fault::Error);
        assert_eq!(record_shape(&store, shape(1, 1)), None);
    }

    #[test]
    fn refund_restores_shared_and_local_tokens() {
        let (table, store, mut local) = setup(8);
        let rate = Rate::new(1.0, 1);
        let c = charge(&table, &store, &mut local, 5, T0, rate);
        assert!(allowed(&c));
        assert!(!allowed(&charge(&table, &store, &mut local, 5, T0, rate)));
        refund(&table, &store, &mut local, 5, &c, rate);
        assert!(allowed(&charge(&table, &store, &mut local, 5, T0, rate)));

        store.fault.set(Fault::Error);
        let c = charge(&table, &store, &mut local, 6, T0, rate);
        assert_eq!(c.place, Place::Local);
        refund(&table, &store, &mut local, 6, &c, rate);
        assert!(allowed(&charge(&table, &store, &mut local, 6, T0, rate)));
    }
}
