//! The plot's time series: per class, requests, crawlguard's own rejections (rate limit and
//! shed) and the 429s/5xx that crawlguard did not answer (the origin's, Envoy's), in bins
//! of log time.
//!
//! Bins start at one second and coarsen as the log's span grows (widths in [`LADDER_S`],
//! each a multiple of the one before, then doubling), so at most [`MAX_STORED_BINS`] are
//! kept whatever the span: memory is bounded, and records may arrive in any order. The
//! plot then picks, from the same ladder, the finest width that gives at most
//! [`MAX_PLOT_BINS`] bins over the span: 1 s bins for a one-minute log, 1 h for three days.

use crate::logfmt::LogRecord;
use crate::report::Origin;
use crawlguard_core::identity::classify::Class;
use std::collections::BTreeMap;

/// Bin widths, seconds: 1 s .. 1 week; each divides the next, so bins merge exactly.
pub const LADDER_S: [i64; 14] = [
    1, 5, 10, 30, 60, 300, 900, 1800, 3600, 10_800, 21_600, 43_200, 86_400, 604_800,
];

/// Most bins stored (each 128 bytes plus the map's overhead).
pub const MAX_STORED_BINS: i64 = 1500;

/// Most bins drawn: enough for the shape of an incident, few enough to read each bin.
pub const MAX_PLOT_BINS: i64 = 150;

/// The bin width after `w` seconds: the ladder's next, doubling past its end.
pub fn coarser(w: i64) -> i64 {
    LADDER_S
        .iter()
        .copied()
        .find(|l| *l > w)
        .unwrap_or(w.saturating_mul(2))
}

/// Counts of one bin, per class ([`Class::index`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bin {
    /// Requests.
    pub requests: [u32; Class::COUNT],
    /// crawlguard's rate-limit rejections (`crawlguard_rate_limited`, 429 or 503).
    pub limited: [u32; Class::COUNT],
    /// crawlguard's shed 503s (`crawlguard_shed`).
    pub shed: [u32; Class::COUNT],
    /// 429s and 5xx that crawlguard did not answer: the origin's, Envoy's, or of unknown
    /// origin (a plain Apache log's 5xx are its origin's).
    pub errors: [u32; Class::COUNT],
}

impl Bin {
    fn merge(&mut self, o: &Bin) {
        for (a, b) in [
            (&mut self.requests, &o.requests),
            (&mut self.limited, &o.limited),
            (&mut self.shed, &o.shed),
            (&mut self.errors, &o.errors),
        ] {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.saturating_add(*y);
            }
        }
    }
}

/// What one record adds to its bin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Answered otherwise (2xx, 3xx, 4xx other than 429).
    Served,
    /// crawlguard's rate limit rejected it.
    Limited,
    /// crawlguard shed it.
    Shed,
    /// A 429 or 5xx that crawlguard did not answer.
    Error,
}

impl Kind {
    /// Of one record: by status and [`Origin::of`].
    pub fn of(r: &LogRecord<'_>) -> Kind {
        let crawlguards = matches!(r.status, 429 | 503);
        match r.status {
            429 | 500..=599 => match Origin::of(r) {
                Origin::Crawlguard if crawlguards => Kind::Limited,
                Origin::Shed if crawlguards => Kind::Shed,
                _ => Kind::Error,
            },
            _ => Kind::Served,
        }
    }
}

/// Bins of log time, coarsening to stay within [`MAX_STORED_BINS`].
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Bin width, seconds.
    width_s: i64,
    /// Bin index (start second / `width_s`, floored) -> counts.
    bins: BTreeMap<i64, Bin>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            width_s: 1,
            bins: BTreeMap::new(),
        }
    }
}

impl Timeline {
    /// Counts one record of `class` at `ts_ms` (ms since the epoch).
    pub fn add(&mut self, ts_ms: i64, class: Class, kind: Kind) {
        let sec = ts_ms.div_euclid(1000);
        let mut k = sec.div_euclid(self.width_s);
        if let (Some(a), Some(b)) = (self.first(), self.last()) {
            let (lo, hi) = (a.min(k), b.max(k));
            if hi.saturating_sub(lo) >= MAX_STORED_BINS {
                self.coarsen(lo, hi);
                k = sec.div_euclid(self.width_s);
            }
        }
        let bin = self.bins.entry(k).or_default();
        let i = class.index();
        let bump = |v: &mut [u32; Class::COUNT]| {
            if let Some(c) = v.get_mut(i) {
                *c = c.saturating_add(1);
            }
        };
        bump(&mut bin.requests);
        match kind {
            Kind::Served => {}
            Kind::Limited => bump(&mut bin.limited),
            Kind::Shed => bump(&mut bin.shed),
            Kind::Error => bump(&mut bin.errors),
        }
    }

    fn first(&self) -> Option<i64> {
        self.bins.keys().next().copied()
    }

    fn last(&self) -> Option<i64> {
        self.bins.keys().next_back().copied()
    }

    /// Widens the bins until indexes `lo..=hi` (at the current width) fit.
    fn coarsen(&mut self, lo: i64, hi: i64) {
        let (lo_s, hi_s) = (
            lo.saturating_mul(self.width_s),
            hi.saturating_mul(self.width_s),
        );
        let mut w = self.width_s;
        while hi_s.div_euclid(w) - lo_s.div_euclid(w) >= MAX_STORED_BINS {
            w = coarser(w);
        }
        self.bins = self.rebin(w);
        self.width_s = w;
    }

    /// The bins at width `w` (a multiple of the stored width), by bin index at `w`.
    fn rebin(&self, w: i64) -> BTreeMap<i64, Bin> {
        let mut out: BTreeMap<i64, Bin> = BTreeMap::new();
        for (k, b) in &self.bins {
            let start = k.saturating_mul(self.width_s);
            out.entry(start.div_euclid(w)).or_default().merge(b);
        }
        out
    }

    /// Stored bin width, seconds.
    pub fn stored_width_s(&self) -> i64 {
        self.width_s
    }

    /// The series to draw: the finest ladder width (at least the stored one) giving at most
    /// [`MAX_PLOT_BINS`] bins from the first record's bin to the last's, and every bin in
    /// between (empty ones as zeros).
    pub fn plot_bins(&self) -> PlotBins {
        let (Some(a), Some(b)) = (self.first(), self.last()) else {
            return PlotBins {
                width_s: self.width_s,
                start_s: 0,
                bins: Vec::new(),
            };
        };
        let (a_s, b_s) = (a * self.width_s, b * self.width_s);
        let mut w = self.width_s;
        while b_s.div_euclid(w) - a_s.div_euclid(w) >= MAX_PLOT_BINS {
            w = coarser(w);
        }
        let map = self.rebin(w);
        let (first, last) = (a_s.div_euclid(w), b_s.div_euclid(w));
        PlotBins {
            width_s: w,
            start_s: first * w,
            bins: (first..=last)
                .map(|k| map.get(&k).copied().unwrap_or_default())
                .collect(),
        }
    }
}

/// Bins as drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotBins {
    /// Bin width, seconds (a [`LADDER_S`] value, or a doubling past it).
    pub width_s: i64,
    /// Start of the first bin, seconds since the epoch (a multiple of `width_s`).
    pub start_s: i64,
    /// Consecutive bins from `start_s`.
    pub bins: Vec<Bin>,
}

/// A bin width in words: `1 s`, `5 min`, `1 h`, `1 day`, `2 weeks`.
pub fn width_words(w: i64) -> String {
    let (n, unit) = match w {
        w if w % 604_800 == 0 => (w / 604_800, "week"),
        w if w % 86_400 == 0 => (w / 86_400, "day"),
        w if w % 3600 == 0 => (w / 3600, "h"),
        w if w % 60 == 0 => (w / 60, "min"),
        w => (w, "s"),
    };
    match unit {
        "week" | "day" if n != 1 => format!("{n} {unit}s"),
        _ => format!("{n} {unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_coarsen_and_stay_bounded_in_any_order() {
        let mut t = Timeline::default();
        // Two days of one request a minute, last day first.
        for m in (0..2 * 1440).rev() {
            t.add(m * 60_000, Class::Human, Kind::Served);
        }
        assert!(t.bins.len() as i64 <= MAX_STORED_BINS);
        assert_eq!(t.stored_width_s(), 300);
        let p = t.plot_bins();
        assert_eq!((p.width_s, p.bins.len()), (1800, 96));
        let total: u32 = p
            .bins
            .iter()
            .map(|b| b.requests[Class::Human.index()])
            .sum();
        assert_eq!(total, 2 * 1440);
        assert_eq!(p.bins[0].requests[Class::Human.index()], 30);
    }

    #[test]
    fn words() {
        assert_eq!(width_words(1), "1 s");
        assert_eq!(width_words(300), "5 min");
        assert_eq!(width_words(3600), "1 h");
        assert_eq!(width_words(86_400), "1 day");
        assert_eq!(width_words(1_209_600), "2 weeks");
    }
}
