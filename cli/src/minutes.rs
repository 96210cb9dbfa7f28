//! The report's per-minute rows (for the top 5 minutes by 429s and the busiest 5), in
//! bounded memory: at most [`MAX_MINUTE_ROWS`] rows are held; past that the earliest row is
//! retired, and retired rows are kept only while they rank in a top [`TOP_MINUTES`] of
//! their own. The tops stay exact for a log read in time order (any log of up to
//! [`MAX_MINUTE_ROWS`] minutes, about 69 days, in any order); a record for a minute already
//! retired starts that minute anew, and [`Minutes::exact`] turns false.

use crawlguard_core::identity::classify::Class;
use std::collections::BTreeMap;

/// Minute rows held, at most (each about 100 bytes plus the map's overhead: ~14 MB).
pub const MAX_MINUTE_ROWS: usize = 100_000;

/// Minutes reported per top list.
pub const TOP_MINUTES: usize = 5;

/// One minute of log time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Minute {
    /// Requests per class ([`crawlguard_core::identity::classify::Class::index`]).
    pub requests: [u32; Class::COUNT],
    /// Rejections (429 + 503) per class.
    pub rejected: [u32; Class::COUNT],
    /// 429s per class.
    pub s429: [u32; Class::COUNT],
}

impl Minute {
    /// 429s, all classes.
    pub fn total_429(&self) -> u64 {
        self.s429.iter().map(|v| u64::from(*v)).sum()
    }

    /// Adds `o`'s counts to this row's (saturating).
    fn merge(&mut self, o: &Minute) {
        for (a, b) in [
            (&mut self.requests, &o.requests),
            (&mut self.rejected, &o.rejected),
            (&mut self.s429, &o.s429),
        ] {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.saturating_add(*y);
            }
        }
    }

    /// Requests, all classes.
    pub fn total_requests(&self) -> u64 {
        self.requests.iter().map(|v| u64::from(*v)).sum()
    }
}

/// Per-minute rows, bounded (see the module documentation).
#[derive(Debug, Clone, Default)]
pub struct Minutes {
    /// Live rows: minutes since the epoch -> counts.
    live: BTreeMap<i64, Minute>,
    /// Retired rows still in a top list of the retired ones.
    retired: BTreeMap<i64, Minute>,
    /// The latest minute retired.
    watermark: Option<i64>,
    /// False once a record came for a minute at or before the watermark.
    split: bool,
}

impl Minutes {
    /// The row of `minute` (minutes since the epoch), created when new.
    pub fn entry(&mut self, minute: i64) -> &mut Minute {
        if self.watermark.is_some_and(|w| minute <= w) {
            self.split = true;
        }
        if !self.live.contains_key(&minute) && self.live.len() >= MAX_MINUTE_ROWS {
            self.retire();
        }
        self.live.entry(minute).or_default()
    }

    /// Retires the earliest live row.
    fn retire(&mut self) {
        let Some((k, m)) = self.live.pop_first() else {
            return;
        };
        self.watermark = Some(self.watermark.map_or(k, |w| w.max(k)));
        // A minute split by a late record: its parts add up in the retired row.
        self.retired.entry(k).or_default().merge(&m);
        let keep: Vec<i64> = top(&self.retired, TOP_MINUTES, Minute::total_429)
            .into_iter()
            .chain(top(&self.retired, TOP_MINUTES, Minute::total_requests))
            .map(|(k, _)| k)
            .collect();
        self.retired.retain(|k, _| keep.contains(k));
    }

    /// Whether the tops are exact (no record came for a retired minute).
    pub fn exact(&self) -> bool {
        !self.split
    }

    /// Rows held now (live and retired).
    pub fn rows(&self) -> usize {
        self.live.len() + self.retired.len()
    }

    /// The top `n` (at most [`TOP_MINUTES`]) minutes by `key`, highest first, earliest
    /// first among equals; minutes where `key` is 0 are left out.
    pub fn top(&self, n: usize, key: fn(&Minute) -> u64) -> Vec<(i64, Minute)> {
        let mut all = self.live.clone();
        for (k, m) in &self.retired {
            // Only when split: the live part of a retired minute adds to it.
            all.entry(*k).or_default().merge(m);
        }
        top(&all, n.min(TOP_MINUTES), key)
    }
}

fn top(rows: &BTreeMap<i64, Minute>, n: usize, key: fn(&Minute) -> u64) -> Vec<(i64, Minute)> {
    let mut v: Vec<(i64, Minute)> = rows
        .iter()
        .filter(|(_, m)| key(m) > 0)
        .map(|(k, m)| (*k, *m))
        .collect();
    v.sort_by(|a, b| key(&b.1).cmp(&key(&a.1)).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tops_exact_in_time_order_past_the_bound() {
        let mut m = Minutes::default();
        // 300,000 minutes, one request each, minute 7 and 250,000 busier.
        for k in 0..300_000i64 {
            let n = match k {
                7 => 5,
                250_000 => 9,
                _ => 1,
            };
            for _ in 0..n {
                m.entry(k).requests[0] += 1;
            }
        }
        assert!(m.rows() <= MAX_MINUTE_ROWS + 2 * TOP_MINUTES);
        let t: Vec<(i64, u64)> = m
            .top(5, Minute::total_requests)
            .into_iter()
            .map(|(k, r)| (k, r.total_requests()))
            .collect();
        assert_eq!(t, [(250_000, 9), (7, 5), (0, 1), (1, 1), (2, 1)]);
        assert!(m.exact());
        m.entry(3).requests[0] += 1;
        assert!(!m.exact());
    }
}
