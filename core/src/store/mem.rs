//! In-memory [`SharedData`] with Envoy's semantics, plus fault injection; for host tests.
//! Compiled only for tests and the `mem-store` feature (which `crawlguard-testkit`
//! turns on), never into the wasm module.

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
