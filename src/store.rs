//! Where bucket state lives: proxy-wasm shared data (seen by every Envoy worker), with a
//! bounded in-VM fallback when the shared store fails.
//!
//! Shared data has no delete and no TTL, so keys are hashed into `slots` fixed slots
//! (`cg:b:<n>`); memory is bounded by configuration whatever the traffic. A slot records the
//! 64-bit fingerprint of the key that owns it, so a collision is detected, not merged. Each key
//! has two candidate slots (two-choice hashing); a slot whose bucket is full again (idle
//! owner) can be taken over, since a full bucket carries no information.

use crate::bucket::{self, BucketState, Rate, Take};
use std::collections::HashMap;

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
    Local,
    Nowhere,
}

/// Bounded per-VM map of buckets used when the shared store fails. Bounded so a store outage
/// under a flood of distinct clients cannot grow memory: when full, full (idle) buckets are
/// dropped first, then everything.
#[derive(Debug, Default)]
pub struct LocalBuckets {
    map: HashMap<u64, BucketState>,
    cap: usize,
}

impl LocalBuckets {
    /// A map holding at most `cap` buckets.
    pub fn new(cap: usize) -> LocalBuckets {
        LocalBuckets {
            map: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// Number of buckets held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn take(&mut self, fp: u64, now_ns: u64, rate: Rate) -> Take {
        let t = bucket::take(self.map.get(&fp).copied(), now_ns, rate);
        if let Take::Allowed { state, .. } = t {
            if self.map.len() >= self.cap && !self.map.contains_key(&fp) {
                self.map.retain(|_, s| !bucket::is_full(*s, now_ns));
                if self.map.len() >= self.cap {
                    self.map.clear();
                }
            }
            self.map.insert(fp, state);
        }
        t
    }

    fn refund(&mut self, fp: u64, rate: Rate) {
        if let Some(s) = self.map.get_mut(&fp) {
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
    let t = local.take(fp, now_ns, rate);
    let place = match t {
        Take::Allowed { .. } => Place::Local,
        Take::Limited { .. } => Place::Nowhere,
    };
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
