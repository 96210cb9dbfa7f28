//! The replay's shared data: an in-memory [`Store`] with the semantics of Envoy's (and of
//! the filter's test `MemStore`: values with a CAS token from one global counter), with a
//! faster hash and in-place updates.

use crawlguard_core::store::{SharedData, StoreError};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The FNV-1a offset basis: the hash of no bytes.
pub(crate) const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of `bytes`, continuing from hash `h` ([`FNV_OFFSET_BASIS`] to start).
pub(crate) fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// FNV-1a over the key bytes: shared-data keys are short (`cg:b:<slot>`), so a simple
/// multiplicative hash beats SipHash here; the keys are the filter's, not an attacker's.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let h = if self.0 == 0 {
            FNV_OFFSET_BASIS
        } else {
            self.0
        };
        self.0 = fnv1a(h, bytes);
    }
}

/// Shared-data keys to (value, CAS token).
type Slots = HashMap<Box<str>, (Vec<u8>, u32), BuildHasherDefault<Fnv>>;

/// In-memory shared data with Envoy's semantics: `get` returns the value and its CAS
/// token, `set` with a non-zero CAS fails if the key changed since, tokens come from one
/// counter.
#[derive(Default)]
pub struct Store {
    map: RefCell<Slots>,
    next_cas: Cell<u32>,
}

impl SharedData for Store {
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        Ok(self.map.borrow().get(key).cloned())
    }

    fn set(&self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        let mut map = self.map.borrow_mut();
        let next = self.next_cas.get().wrapping_add(1).max(1);
        match map.get_mut(key) {
            Some((v, cur)) => {
                if cas != 0 && cas != *cur {
                    return Err(StoreError::CasMismatch);
                }
                v.clear();
                v.extend_from_slice(value);
                *cur = next;
            }
            None => {
                map.insert(key.into(), (value.to_vec(), next));
            }
        }
        self.next_cas.set(next);
        Ok(())
    }
}
