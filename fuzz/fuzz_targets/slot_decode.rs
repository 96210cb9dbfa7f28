//! Shared-data slot decoding (bucket slots and verdict slots) on arbitrary bytes: never panics,
//! `None` for any other length, and whatever decodes re-encodes to the same bytes.
#![no_main]

use crawlguard::store::{decode_slot, encode_slot, SLOT_LEN};
use crawlguard::verify::{decode_verdict_slot, encode_verdict_slot, VERDICT_SLOT_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode_slot(data) {
        Some(slot) => assert_eq!(encode_slot(&slot).as_slice(), data),
        None => assert!(data.len() != SLOT_LEN || data.first() != Some(&1)),
    }
    match decode_verdict_slot(data) {
        Some((fp, st, exp)) => assert_eq!(encode_verdict_slot(fp, st, exp).as_slice(), data),
        None => assert!(data.len() != VERDICT_SLOT_LEN || data.first() != Some(&1)),
    }
});
