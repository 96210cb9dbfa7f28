//! The origin's health as every worker of one Envoy sees it: per route, the upstream time
//! (request forwarded -> response headers) and the share of 5xx responses over the last
//! `shedding.window_s` seconds.
//!
//! Each worker counts its responses in VM memory ([`Tally`], no host call per request) and,
//! on the root tick, adds them to the route's window in shared data ([`merge`]): a ring of
//! one-second slices, each a request count, a 5xx count and a fixed-bucket latency histogram
//! ([`LATENCY_BOUNDS_MS`]), so p95/p99 are read as the bucket holding that rank (an upper
//! bound, exact to the bucket).

use crate::store::{SharedData, StoreError};

/// Upper bounds of the latency histogram buckets, ms (the last bucket is everything above).
pub const LATENCY_BOUNDS_MS: [u32; 14] = [
    1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 1_000, 2_000, 5_000, 10_000,
];
/// Buckets (one past the bounds).
const BUCKETS: usize = LATENCY_BOUNDS_MS.len() + 1;
/// Longest window, s (one slice per second).
pub const MAX_WINDOW_S: usize = 60;
/// Shared-data key prefix of a route's window (`cg:h:<route>`).
pub const HEALTH_PREFIX: &str = "cg:h:";
const VERSION: u8 = 1;

/// Counts of one interval: responses, 5xx, latency histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Responses counted.
    pub requests: u32,
    /// Of which 5xx (including Envoy's own 503/504 for resets and timeouts).
    pub errors: u32,
    /// Responses per latency bucket.
    pub latency: [u32; BUCKETS],
}

impl Tally {
    /// Counts one response that took `latency_ms` (5xx when `error`).
    pub fn record(&mut self, latency_ms: u64, error: bool) {
        self.requests = self.requests.saturating_add(1);
        if error {
            self.errors = self.errors.saturating_add(1);
        }
        let b = LATENCY_BOUNDS_MS
            .iter()
            .position(|bound| latency_ms <= u64::from(*bound))
            .unwrap_or(BUCKETS - 1);
        if let Some(n) = self.latency.get_mut(b) {
            *n = n.saturating_add(1);
        }
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &Tally) {
        self.requests = self.requests.saturating_add(other.requests);
        self.errors = self.errors.saturating_add(other.errors);
        for (a, b) in self.latency.iter_mut().zip(other.latency) {
            *a = a.saturating_add(b);
        }
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.requests == 0
    }

    /// The latency at percentile `p` (0..=100), ms: the upper bound of the bucket holding
    /// that rank (nearest rank); `None` without requests. The last bucket reads as its
    /// lower bound (10 s and more).
    pub fn percentile_ms(&self, p: u32) -> Option<u32> {
        if self.requests == 0 {
            return None;
        }
        let total: u64 = self.latency.iter().map(|n| u64::from(*n)).sum();
        let rank = (total * u64::from(p.min(100))).div_ceil(100).max(1);
        let mut seen = 0u64;
        for (i, n) in self.latency.iter().enumerate() {
            seen += u64::from(*n);
            if seen >= rank {
                return Some(
                    LATENCY_BOUNDS_MS
                        .get(i)
                        .or(LATENCY_BOUNDS_MS.last())
                        .copied()
                        .unwrap_or(u32::MAX),
                );
            }
        }
        LATENCY_BOUNDS_MS.last().copied()
    }

    /// 5xx responses per thousand (0 without requests).
    pub fn error_permille(&self) -> u32 {
        if self.requests == 0 {
            return 0;
        }
        u32::try_from(u64::from(self.errors) * 1000 / u64::from(self.requests)).unwrap_or(1000)
    }
}

/// Bytes of one slice: second (8) + requests (4) + errors (4) + histogram (4 x 15).
const SLICE_LEN: usize = 8 + 4 + 4 + 4 * BUCKETS;

fn encode(slices: &[(u64, Tally)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + slices.len() * SLICE_LEN);
    out.push(VERSION);
    for (second, t) in slices {
        out.extend_from_slice(&second.to_le_bytes());
        out.extend_from_slice(&t.requests.to_le_bytes());
        out.extend_from_slice(&t.errors.to_le_bytes());
        for n in t.latency {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    out
}

/// Decodes a window; `None` for anything malformed (it is then started afresh).
fn decode(bytes: &[u8]) -> Option<Vec<(u64, Tally)>> {
    let (v, rest) = bytes.split_first()?;
    if *v != VERSION || rest.len() % SLICE_LEN != 0 || rest.len() / SLICE_LEN > MAX_WINDOW_S {
        return None;
    }
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    rest.chunks_exact(SLICE_LEN)
        .map(|c| {
            let second = u64::from_le_bytes(c.get(0..8)?.try_into().ok()?);
            let mut t = Tally {
                requests: u32_at(c, 8)?,
                errors: u32_at(c, 12)?,
                ..Tally::default()
            };
            for (i, n) in t.latency.iter_mut().enumerate() {
                *n = u32_at(c, 16 + 4 * i)?;
            }
            Some((second, t))
        })
        .collect()
}

/// The key of `route`'s window.
pub fn key(route: &str) -> String {
    format!("{HEALTH_PREFIX}{route}")
}

/// Adds `tally` (counted up to `now_s`) to the route's shared window at `key`, drops slices
/// older than `window_s`, and returns the whole window summed. Compare-and-swap with up to
/// `cas_retries` retries; on failure the tally is lost (the view errs on "healthier", never
/// on a 5xx for anyone) and the error is returned.
pub fn merge(
    store: &dyn SharedData,
    key: &str,
    tally: &Tally,
    now_s: u64,
    window_s: u32,
    cas_retries: u32,
) -> Result<Tally, StoreError> {
    let window = u64::from(window_s.clamp(1, MAX_WINDOW_S as u32));
    let mut last_err = StoreError::CasMismatch;
    for _ in 0..=cas_retries {
        let (bytes, cas) = store.get(key)?.unwrap_or_default();
        let mut slices = decode(&bytes).unwrap_or_default();
        slices.retain(|(s, _)| *s + window > now_s && *s <= now_s);
        if !tally.is_empty() {
            match slices.iter_mut().find(|(s, _)| *s == now_s) {
                Some((_, t)) => t.add(tally),
                None => slices.push((now_s, *tally)),
            }
        }
        let mut sum = Tally::default();
        for (_, t) in &slices {
            sum.add(t);
        }
        if tally.is_empty() && bytes.len() == 1 + slices.len() * SLICE_LEN {
            // Nothing to add and nothing expired: no write.
            return Ok(sum);
        }
        match store.set(key, &encode(&slices), cas) {
            Ok(()) => return Ok(sum),
            Err(StoreError::CasMismatch) => last_err = StoreError::CasMismatch,
            Err(e) => return Err(e),
        }
    }
    Err(last_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::{Fault, MemStore};

    fn tally(samples: &[(u64, bool)]) -> Tally {
        let mut t = Tally::default();
        for (ms, err) in samples {
            t.record(*ms, *err);
        }
        t
    }

    #[test]
    fn percentiles_are_the_bucket_holding_the_rank() {
        // 100 responses: 94 at 3 ms, 5 at 150 ms, 1 at 700 ms.
        let mut s: Vec<(u64, bool)> = vec![(3, false); 94];
        s.extend(vec![(150, false); 5]);
        s.push((700, true));
        let t = tally(&s);
        assert_eq!(t.percentile_ms(50), Some(5));
        assert_eq!(t.percentile_ms(94), Some(5));
        assert_eq!(t.percentile_ms(95), Some(200));
        assert_eq!(t.percentile_ms(99), Some(200));
        assert_eq!(t.percentile_ms(100), Some(1000));
        assert_eq!(t.error_permille(), 10);
        assert_eq!(Tally::default().percentile_ms(95), None);
        assert_eq!(tally(&[(60_000, false)]).percentile_ms(50), Some(10_000));
    }

    #[test]
    fn workers_add_up_in_one_window_and_old_seconds_drop_out() {
        let store = MemStore::default();
        let k = key("default");
        let a = tally(&[(3, false), (3, true)]);
        let b = tally(&[(400, false)]);
        assert_eq!(merge(&store, &k, &a, 100, 5, 4).map(|t| t.requests), Ok(2));
        // Another worker, same second.
        assert_eq!(merge(&store, &k, &b, 100, 5, 4).map(|t| t.requests), Ok(3));
        let later = merge(&store, &k, &a, 103, 5, 4).expect("merged");
        assert_eq!((later.requests, later.errors), (5, 2));
        assert_eq!(later.percentile_ms(100), Some(500));
        // Second 100 is out of a 5 s window at 105.
        let end = merge(&store, &k, &Tally::default(), 105, 5, 4).expect("read");
        assert_eq!((end.requests, end.errors), (2, 1));
        assert_eq!(
            merge(&store, &k, &Tally::default(), 200, 5, 4).map(|t| t.requests),
            Ok(0)
        );
    }

    #[test]
    fn a_broken_store_or_garbage_never_fails_hard() {
        let store = MemStore::default();
        let k = key("api");
        store.poke(&k, b"\x01garbage");
        let t = tally(&[(3, false)]);
        assert_eq!(merge(&store, &k, &t, 10, 5, 4).map(|t| t.requests), Ok(1));
        store.fault.set(Fault::Error);
        assert!(merge(&store, &k, &t, 10, 5, 4).is_err());
        store.fault.set(Fault::CasMismatch);
        assert_eq!(
            merge(&store, &k, &t, 11, 5, 2),
            Err(StoreError::CasMismatch)
        );
    }
}
