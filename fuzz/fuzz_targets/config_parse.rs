//! Configuration validation on arbitrary bytes: never panics; an error always names a field
//! and a reason; an accepted document respects the documented bounds of its limits (rate,
//! burst, refill time within one year).
#![no_main]

use crawlguard_core::limits::bucket::Rate;
use crawlguard_core::config::{parse, MAX_REFILL_S};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(c) => {
            for l in &c.limits {
                assert!(l.rate_per_s > 0.0 && l.rate_per_s <= 1e6, "{l:?}");
                assert!((1..=1_000_000).contains(&l.burst), "{l:?}");
                assert!(f64::from(l.burst) / l.rate_per_s <= MAX_REFILL_S, "{l:?}");
                assert_eq!(l.rate, Rate::new(l.rate_per_s, l.burst));
            }
            assert!((1..=1_048_576).contains(&c.store.slots));
        }
        Err(e) => {
            assert!(!e.path.is_empty(), "empty path: {e:?}");
            assert!(!e.reason.is_empty(), "empty reason: {e:?}");
        }
    }
});
