//! Where state lives. [`SharedData`] is the seam to proxy-wasm shared data (seen by every
//! Envoy worker); [`StateStore`] is governor's `measure_and_replace` seam over it: the store
//! owns the read / compare-and-swap / retry loop, the caller passes the math. Two stores
//! implement it: the shared slot table ([`crate::store::slot_table`]) and the per-worker fallback
//! ([`crate::store::local_store`]). Fleet mode is not a third store: it changes the share of
//! each local bucket and folds the fleet's state into them (`crate::fleet`), so no request
//! waits on the network.
//!
//! Every other shared value (origin health, shed levels, the store's shape, the hash seed,
//! the fleet replica id) changes through one [`read_modify_write`] with one retry policy
//! (`store.cas_retries`). Also here: the record of the store settings in force
//! ([`record_shape`]), and an in-memory [`SharedData`] with fault injection for host tests
//! (`mem`, compiled only for tests and crawlguard-testkit).

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

/// Why a [`StateStore`] could not serve a key (each is counted; none fails a request: the
/// caller decides elsewhere, e.g. with the per-worker fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFault {
    /// A host call failed.
    Store,
    /// Every CAS attempt lost a race.
    CasExhausted,
    /// Both candidate slots hold other keys' values that rank as high as ours.
    Collision,
    /// A slot held bytes that do not decode; it was reset to unowned for the next request.
    Corrupt,
}

/// The key of a value: its 64-bit fingerprint, and the keys it shares when a bounded store
/// has no room for it (the per-worker fallback's group value, then its overflow value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateKey {
    /// Fingerprint of the key (seeded hash).
    pub fp: u64,
    /// Fingerprint of the key's group (seeded hash: a client address's /24 or /48 under its
    /// limit, [`crate::identity::client_ip::group`]), whose value the key shares when it cannot have
    /// its own; `None` for a key that is not a client address (one global key, or a header
    /// value: it has no wider group than its limit).
    pub group_fp: Option<u64>,
    /// Fingerprint of the overflow value this key shares when neither it nor its group can
    /// have its own (one per limit).
    pub overflow_fp: u64,
}

/// governor's `StateStore`: keyed values of type `V`, each changed by one
/// `measure_and_replace` (read, compute, compare-and-swap, retry).
pub trait StateStore<V> {
    /// Where a value was put, for [`StateStore::replace_at`].
    type Place: Copy;

    /// Reads `key`'s value (`None` for a key without one), lets `f` compute `(result, new
    /// value)`, and stores the new value atomically, calling `f` again on a lost race. `f`
    /// returning no new value leaves the store untouched.
    fn measure_and_replace<T>(
        &mut self,
        key: StateKey,
        now_ns: u64,
        f: impl FnMut(Option<V>) -> (T, Option<V>),
    ) -> Result<(T, Self::Place), StoreFault>;

    /// Changes `key`'s value where an earlier [`StateStore::measure_and_replace`] put it
    /// (e.g. a refund), only if it is still `key`'s.
    fn replace_at(
        &mut self,
        key: StateKey,
        at: Self::Place,
        f: impl FnMut(V) -> V,
    ) -> Result<(), StoreFault>;
}

/// Shared-data key recording the [`StoreShape`] in force, so that a new configuration can
/// tell that it moves every bucket.
pub const META_KEY: &str = "cg:store:meta";

/// Shared-data key of the hash seed an Envoy drew for itself (8 bytes, little-endian).
pub const SEED_KEY: &str = "cg:store:seed";

/// The seed published in this source: the hash seed of offline tools (`crawlguard replay`)
/// and of a filter that could not keep a drawn one. Never secret (see
/// [`resolve_hash_seed`]).
pub const PUBLISHED_HASH_SEED: u64 = 0x6372_6177_6c67_7561;

/// What a read-modify-write ([`read_modify_write`]) makes of the value it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite<T> {
    /// Leave the value as it is; the result is `T`.
    Keep(T),
    /// Write these bytes over it; the result is `T` once they are written.
    Write(Vec<u8>, T),
}

/// The one read-modify-write of a single shared-data key (the slot tables have their own,
/// [`StateStore::measure_and_replace`], over a key's candidate slots): reads `key`, hands
/// its bytes (`None`: absent) to `change`, and writes what it asks with the read's CAS. When
/// another worker wrote in between (CAS mismatch) it reads and asks again, at most `retries`
/// more times (`store.cas_retries`, the one retry policy for shared data); `change` may so
/// run several times. Errors: a host error at once; [`StoreError::CasMismatch`] when every
/// attempt lost. An absent key is written with CAS 0, which Envoy does not check: two
/// first writes may both succeed, so a caller that must agree reads back.
pub fn read_modify_write<T>(
    store: &dyn SharedData,
    key: &str,
    retries: u32,
    change: &mut dyn FnMut(Option<&[u8]>) -> Rewrite<T>,
) -> Result<T, StoreError> {
    for _ in 0..=retries {
        let (bytes, cas) = match store.get(key)? {
            Some((bytes, cas)) => (Some(bytes), cas),
            None => (None, 0),
        };
        match change(bytes.as_deref()) {
            Rewrite::Keep(t) => return Ok(t),
            Rewrite::Write(new, t) => match store.set(key, &new, cas) {
                Ok(()) => return Ok(t),
                Err(StoreError::CasMismatch) => continue,
                Err(e) => return Err(e),
            },
        }
    }
    Err(StoreError::CasMismatch)
}

/// The hash seed in force, and whether it is secret: `configured` when set; else the seed
/// this Envoy drew at its first load and kept in shared data ([`SEED_KEY`], which outlives
/// configurations while the `vm_id` stays the same, so every worker and every reload hashes
/// alike); else `draw()`, stored for the others and read back (two first loads that both
/// write take whatever was stored last when they read; Envoy runs the main thread's load
/// before the workers', which then find the seed). Only when
/// shared data fails, or `draw` does, is it [`PUBLISHED_HASH_SEED`] (`false`: the caller
/// warns), never a per-worker seed, which would split every bucket by worker.
pub fn resolve_hash_seed(
    store: &dyn SharedData,
    configured: Option<u64>,
    draw: &mut dyn FnMut() -> Option<u64>,
    retries: u32,
) -> (u64, bool) {
    if let Some(s) = configured {
        return (s, s != PUBLISHED_HASH_SEED);
    }
    enum Seed {
        Kept(u64),
        Written,
        NoDraw,
    }
    let kept = |bytes: Option<&[u8]>| bytes.and_then(|b| <[u8; 8]>::try_from(b).ok());
    let resolved = read_modify_write(store, SEED_KEY, retries, &mut |bytes| match kept(bytes) {
        Some(b) => Rewrite::Keep(Seed::Kept(u64::from_le_bytes(b))),
        // Unreadable or absent: a new draw.
        None => match draw() {
            Some(seed) => Rewrite::Write(seed.to_le_bytes().to_vec(), Seed::Written),
            None => Rewrite::Keep(Seed::NoDraw),
        },
    });
    match resolved {
        Ok(Seed::Kept(s)) => (s, true),
        // Read back, not assumed: a first write (CAS 0) overwrites unconditionally, so two
        // workers' first loads may both write; each takes what is stored.
        Ok(Seed::Written) => match store.get(SEED_KEY) {
            Ok(Some((b, _))) => kept(Some(&b)).map_or((PUBLISHED_HASH_SEED, false), |b| {
                (u64::from_le_bytes(b), true)
            }),
            _ => (PUBLISHED_HASH_SEED, false),
        },
        Ok(Seed::NoDraw) | Err(_) => (PUBLISHED_HASH_SEED, false),
    }
}
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
pub fn record_shape(store: &dyn SharedData, shape: StoreShape, retries: u32) -> Option<String> {
    read_modify_write(store, META_KEY, retries, &mut |bytes| {
        let old = bytes.and_then(StoreShape::decode);
        if old == Some(shape) {
            return Rewrite::Keep(None);
        }
        Rewrite::Write(
            shape.encode().to_vec(),
            old.and_then(|o| shape.change_from(&o)),
        )
    })
    .ok()
    .flatten()
}

pub mod local_store;
#[cfg(any(test, feature = "mem-store"))]
pub mod mem;
pub mod slot_table;

#[cfg(test)]
mod tests {
    use super::*;
    use mem::{Fault, MemStore};
    use std::cell::Cell;

    #[test]
    fn a_new_store_shape_is_reported_once_with_what_changed() {
        let store = MemStore::default();
        let shape = |slots, hash_seed| StoreShape { slots, hash_seed };
        // First start: recorded, nothing to report; the same again: nothing.
        assert_eq!(record_shape(&store, shape(16_384, 7), 8), None);
        assert_eq!(record_shape(&store, shape(16_384, 7), 8), None);
        assert_eq!(
            record_shape(&store, shape(65_536, 7), 8).as_deref(),
            Some("store.slots changed 16384 -> 65536: every rate-limit bucket starts full again")
        );
        // The other VMs of the same configuration see it recorded: reported once.
        assert_eq!(record_shape(&store, shape(65_536, 7), 8), None);
        assert_eq!(
            record_shape(&store, shape(65_536, 8), 8).as_deref(),
            Some("store.hash_seed changed: every rate-limit bucket starts full again")
        );
        assert_eq!(
            record_shape(&store, shape(64, 9), 8).as_deref(),
            Some(
                "store.slots changed 65536 -> 64 and store.hash_seed changed: every rate-limit \
                 bucket starts full again"
            )
        );
        // An unreadable record is overwritten without a report; a store error is silent.
        store.poke(META_KEY, b"garbage");
        assert_eq!(record_shape(&store, shape(128, 9), 8), None);
        assert_eq!(
            record_shape(&store, shape(64, 9), 8).as_deref(),
            Some("store.slots changed 128 -> 64: every rate-limit bucket starts full again")
        );
        store.fault.set(Fault::Error);
        assert_eq!(record_shape(&store, shape(1, 1), 8), None);
    }

    #[test]
    fn a_read_modify_write_retries_lost_races_then_gives_up_and_stops_at_a_host_error() {
        let store = MemStore::default();
        let runs = Cell::new(0u32);
        let mut bump = |b: Option<&[u8]>| {
            runs.set(runs.get() + 1);
            let n = b.map_or(0, |b| b.len());
            Rewrite::Write(vec![0; n + 1], n + 1)
        };
        assert_eq!(read_modify_write(&store, "k", 2, &mut bump), Ok(1));
        assert_eq!(read_modify_write(&store, "k", 2, &mut bump), Ok(2));
        assert_eq!(runs.get(), 2);
        // Every CAS-checked write loses: 1 + 2 retries, then the mismatch.
        store.fault.set(Fault::CasMismatch);
        assert_eq!(
            read_modify_write(&store, "k", 2, &mut bump),
            Err(StoreError::CasMismatch)
        );
        assert_eq!(runs.get(), 5);
        // Keep writes nothing, whatever the store would do.
        assert_eq!(
            read_modify_write(&store, "k", 2, &mut |_| Rewrite::Keep(7)),
            Ok(7)
        );
        store.fault.set(Fault::Error);
        assert!(matches!(
            read_modify_write(&store, "k", 2, &mut bump),
            Err(StoreError::Host(_))
        ));
        assert_eq!(runs.get(), 5);
        store.fault.set(Fault::None);
        assert_eq!(store.get("k").map(|v| v.map(|(b, _)| b.len())), Ok(Some(2)));
    }

    #[test]
    fn an_unset_hash_seed_is_drawn_once_and_kept_for_every_worker_and_reload() {
        let store = MemStore::default();
        let draws = Cell::new(0u64);
        let mut draw = || {
            draws.set(draws.get() + 1);
            Some(0x1234_5678_9abc_def0_u64.wrapping_mul(draws.get()))
        };
        let first = resolve_hash_seed(&store, None, &mut draw, 8);
        assert_eq!(first, (0x1234_5678_9abc_def0, true));
        // Another worker, or the next configuration: the same seed, nothing drawn.
        assert_eq!(resolve_hash_seed(&store, None, &mut draw, 8), first);
        assert_eq!(resolve_hash_seed(&store, None, &mut draw, 8), first);
        assert_eq!(draws.get(), 1);
        // A configured seed wins, and does not replace the kept one.
        assert_eq!(resolve_hash_seed(&store, Some(7), &mut draw, 8), (7, true));
        assert_eq!(resolve_hash_seed(&store, None, &mut draw, 8), first);
        assert_eq!(
            resolve_hash_seed(&store, Some(PUBLISHED_HASH_SEED), &mut draw, 8),
            (PUBLISHED_HASH_SEED, false)
        );
        // An unreadable record is replaced by a new draw.
        store.poke(SEED_KEY, b"short");
        assert_eq!(
            resolve_hash_seed(&store, None, &mut draw, 8),
            (0x1234_5678_9abc_def0_u64.wrapping_mul(2), true)
        );
    }

    #[test]
    fn a_seed_that_cannot_be_kept_is_the_published_one_never_a_per_worker_one() {
        let store = MemStore::default();
        store.fault.set(Fault::Error);
        assert_eq!(
            resolve_hash_seed(&store, None, &mut || Some(42), 8),
            (PUBLISHED_HASH_SEED, false)
        );
        let store = MemStore::default();
        assert_eq!(
            resolve_hash_seed(&store, None, &mut || None, 8),
            (PUBLISHED_HASH_SEED, false)
        );
        assert_eq!(store.get(SEED_KEY), Ok(None));
    }
}
