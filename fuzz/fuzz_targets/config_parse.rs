//! Configuration validation on arbitrary bytes: never panics; an error always names a field
//! and a reason; an accepted document respects the documented bounds of its limits (rate,
//! burst, refill time within one year, requests in flight).
#![no_main]

use crawlguard_core::limits::bucket::Rate;
use crawlguard_core::config::{parse, MAX_REFILL_S};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(c) => {
            for l in &c.limits {
                // A token bucket, a cap of requests in flight, or both.
                assert!(l.bucket.is_some() || l.max_in_flight.is_some(), "{l:?}");
                assert!(l.max_in_flight.is_none_or(|m| (1..=10_000).contains(&m)), "{l:?}");
                if let Some(b) = l.bucket {
                    assert!(b.rate_per_s > 0.0 && b.rate_per_s <= 1e6, "{l:?}");
                    assert!((1..=1_000_000).contains(&b.burst), "{l:?}");
                    assert!(f64::from(b.burst) / b.rate_per_s <= MAX_REFILL_S, "{l:?}");
                    assert_eq!(b.rate, Rate::new(b.rate_per_s, b.burst));
                }
            }
            assert!((1..=1_048_576).contains(&c.store.slots));
        }
        Err(e) => {
            assert!(!e.path.is_empty(), "empty path: {e:?}");
            assert!(!e.reason.is_empty(), "empty reason: {e:?}");
        }
    }
});
