//! Shared-data slots on arbitrary bytes: bucket slots (`store`), verdict slots read through
//! the generic slot table (`slot_table` + `verdict_cache`), and the proxy-wasm header-map
//! format (`header_map`). Never panics; whatever decodes re-encodes to the same bytes.
#![no_main]

use crawlguard::slot_table::{SlotTable, SlotValue};
use crawlguard::store::mem::MemStore;
use crawlguard::store::{decode_slot, encode_slot, SLOT_LEN};
use crawlguard::verdict_cache::ClaimEntry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode_slot(data) {
        Some(slot) => assert_eq!(encode_slot(&slot).as_slice(), data),
        None => assert!(data.len() != SLOT_LEN || data.first() != Some(&1)),
    }
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
