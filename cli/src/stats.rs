//! Bounded aggregates: exact nearest-rank percentiles over millisecond times, and heavy
//! hitters (top talkers) in bounded memory.

use std::collections::HashMap;
use std::hash::Hash;

/// Values below this many ms are counted in a dense array; larger ones in a map.
const DENSE_MS: usize = 2048;

/// Exact nearest-rank percentiles of millisecond values.
///
/// Every supported log format records times in whole milliseconds (Envoy `%DURATION%` and
/// `x-envoy-upstream-service-time`; nginx's seconds with three decimals), so one counter per
/// distinct millisecond value gives exact results: memory is bounded by the number of
/// distinct values (at most the largest time seen, in ms), not by the number of lines.
/// JSON logs with fractional milliseconds are rounded to the nearest ms first (error at most
/// 0.5 ms).
#[derive(Debug, Clone)]
pub struct MsHist {
    dense: Vec<u64>,
    sparse: HashMap<u32, u64>,
    n: u64,
}

impl Default for MsHist {
    fn default() -> Self {
        MsHist {
            dense: vec![0; DENSE_MS],
            sparse: HashMap::new(),
            n: 0,
        }
    }
}

impl MsHist {
    /// Counts one value.
    pub fn add(&mut self, ms: u32) {
        self.n += 1;
        match self.dense.get_mut(ms as usize) {
            Some(c) => *c += 1,
            None => *self.sparse.entry(ms).or_insert(0) += 1,
        }
    }

    /// Number of values.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True when no value was counted.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Nearest-rank percentile `p` (0 < p <= 100): the smallest value with at least
    /// `ceil(p/100 * n)` values at or below it. `None` when empty.
    pub fn percentile(&self, p: f64) -> Option<u32> {
        if self.n == 0 {
            return None;
        }
        let rank = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
        let mut acc = 0u64;
        for (v, c) in self.dense.iter().enumerate() {
            acc += c;
            if acc >= rank {
                return Some(v as u32);
            }
        }
        let mut big: Vec<(&u32, &u64)> = self.sparse.iter().collect();
        big.sort_unstable();
        for (v, c) in big {
            acc += c;
            if acc >= rank {
                return Some(*v);
            }
        }
        None
    }
}

/// Heavy hitters in bounded memory (Misra-Gries with batched decrements).
///
/// Tracks at most `2 * capacity` keys. When full, every count is lowered by the median
/// count and keys at zero are dropped; the total lowered per key (`error`) bounds how much
/// any reported count may be under its true value: `error <= n / (capacity + 1)`, and every
/// key with more than that many events is still tracked. With fewer distinct keys than
/// `2 * capacity` nothing is ever dropped and the counts are exact (`error` 0).
#[derive(Debug, Clone)]
pub struct Heavy<K: Hash + Eq + Clone, V: Default> {
    map: HashMap<K, (u64, V)>,
    capacity: usize,
    error: u64,
}

impl<K: Hash + Eq + Clone, V: Default> Heavy<K, V> {
    /// Tracks about `capacity` keys (at most twice that).
    pub fn new(capacity: usize) -> Self {
        Heavy {
            map: HashMap::new(),
            capacity: capacity.max(1),
            error: 0,
        }
    }

    /// Counts one event for `key`; `update` amends the key's payload.
    pub fn add(&mut self, key: &K, update: impl FnOnce(&mut V)) {
        if let Some(e) = self.map.get_mut(key) {
            e.0 += 1;
            update(&mut e.1);
            return;
        }
        if self.map.len() >= 2 * self.capacity {
            self.prune();
        }
        let mut v = V::default();
        update(&mut v);
        self.map.insert(key.clone(), (1, v));
    }

    fn prune(&mut self) {
        let mut counts: Vec<u64> = self.map.values().map(|e| e.0).collect();
        let mid = counts.len() / 2;
        let (_, med, _) = counts.select_nth_unstable(mid);
        let cut = (*med).max(1);
        self.error += cut;
        self.map.retain(|_, e| {
            e.0 = e.0.saturating_sub(cut);
            e.0 > 0
        });
    }

    /// The most an exact count may exceed a reported one (0: counts are exact).
    pub fn error(&self) -> u64 {
        self.error
    }

    /// The `n` keys with the highest counts, highest first (ties by `tie` order).
    pub fn top(&self, n: usize) -> Vec<(&K, u64, &V)>
    where
        K: Ord,
    {
        let mut v: Vec<(&K, u64, &V)> = self.map.iter().map(|(k, (c, p))| (k, *c, p)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_on_known_values() {
        let mut h = MsHist::default();
        for v in 1..=100 {
            h.add(v);
        }
        assert_eq!(h.percentile(50.0), Some(50));
        assert_eq!(h.percentile(95.0), Some(95));
        assert_eq!(h.percentile(99.0), Some(99));
        assert_eq!(h.percentile(100.0), Some(100));
        let mut h = MsHist::default();
        for v in [5000, 10, 3000] {
            h.add(v);
        }
        assert_eq!(h.percentile(50.0), Some(3000));
        assert_eq!(h.percentile(1.0), Some(10));
        assert_eq!(h.percentile(99.0), Some(5000));
        assert_eq!(MsHist::default().percentile(50.0), None);
    }

    #[test]
    fn heavy_hitters_exact_when_small_and_bounded_when_not() {
        let mut h: Heavy<u32, ()> = Heavy::new(10);
        for i in 0..15u32 {
            for _ in 0..=i {
                h.add(&i, |_| {});
            }
        }
        assert_eq!(h.error(), 0);
        let top: Vec<(u32, u64)> = h.top(2).into_iter().map(|(k, c, _)| (*k, c)).collect();
        assert_eq!(top, vec![(14, 15), (13, 14)]);
        // One heavy key among 10,000 singletons: still found, undercount <= error bound.
        let mut h: Heavy<u32, ()> = Heavy::new(50);
        let mut n = 0u64;
        for i in 0..10_000u32 {
            h.add(&(i + 1000), |_| {});
            n += 1;
            if i % 10 == 0 {
                h.add(&7, |_| {});
                n += 1;
            }
        }
        let (k, c, _) = h.top(1)[0];
        assert_eq!(*k, 7);
        assert!(c + h.error() >= 1000 && c <= 1000, "{c} {}", h.error());
        assert!(h.error() <= n / 51);
        assert!(h.map.len() <= 100);
    }
}
