//! Rate-limited warnings: a failing dependency must not flood Envoy's log at request rate
//! (the counters still count every event).

use std::cell::Cell;

/// Minimum gap between two warnings of one kind per worker, ns.
const WARN_EVERY_NS: u64 = 10_000_000_000;

/// A warning that is logged at most once every 10 s per worker, so a failing dependency
/// cannot flood Envoy's log at request rate (the counters still count every event).
#[derive(Debug, Default)]
pub struct WarnEvery10s {
    last_ns: Cell<Option<u64>>,
}

impl WarnEvery10s {
    /// True (and remembers `now_ns`) when no warning of this kind was logged in the last 10 s.
    pub fn due(&self, now_ns: u64) -> bool {
        let due = self
            .last_ns
            .get()
            .is_none_or(|last| now_ns.saturating_sub(last) >= WARN_EVERY_NS);
        if due {
            self.last_ns.set(Some(now_ns));
        }
        due
    }
}
