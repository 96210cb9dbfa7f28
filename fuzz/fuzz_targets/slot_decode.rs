//! Shared-data slots on arbitrary bytes, read and updated through the slot table
//! (`slot_table`) as bucket slots and as verdict slots, and the proxy-wasm header-map format
//! (`header_map`). Never panics; whatever decodes re-encodes to the same bytes.
#![no_main]

use crawlguard_core::store::slot_table::{SlotTable, SlotValue};
use crawlguard_testkit::MemStore;
use crawlguard_core::limits::limiter::KeyState;
use crawlguard_core::identity::verdict_cache::ClaimEntry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let buckets: SlotTable<KeyState> = SlotTable::new("b:", 1, 1);
    let store = MemStore::default();
    store.poke("b:0", data);
    if let Ok(Some(s)) = buckets.get(&store, 7, 0) {
        let mut b = [0u8; KeyState::LEN];
        s.encode(&mut b);
        assert_eq!(data.get(9..), Some(&b[..]));
    }
    let _ = buckets.measure_and_replace(&store, 7, 0, |s| ((), s.or(Some(KeyState::default()))));
    let table: SlotTable<ClaimEntry> = SlotTable::new("f:", 1, 1);
    let store = MemStore::default();
    store.poke("f:0", data);
    if let Ok(Some(e)) = table.get(&store, 7, 0) {
        let mut b = [0u8; ClaimEntry::LEN];
        e.encode(&mut b);
        assert_eq!(data.get(9..), Some(&b[..]));
    }
    let _ = table.measure_and_replace(&store, 7, 0, |e| ((), e.or(Some(ClaimEntry::default()))));
    let _ = crawlguard::header_map::deserialize(data);
});
