//! The origin's health as every worker of one Envoy sees it: per route, the upstream time
//! (request forwarded -> response headers) and the share of 5xx responses over the last
//! `shedding.window_s` seconds.
//!
//! Each worker counts its responses in VM memory ([`Tally`], no host call per request) and,
//! on the root tick, adds them to the route's window in shared data ([`merge`]): a ring of
//! one-second slices, each a request count, a 5xx count and a fixed-bucket latency histogram
//! ([`LATENCY_BOUNDS_MS`]), so p95/p99 are read as the bucket holding that rank (an upper
//! bound, exact to the bucket), and the [`TOP_CLIENTS`] client prefixes with the most slow
//! or failed responses ([`crate::protection::top_clients`]). One slice is at most [`MAX_SLICE_LEN`]
//! bytes, a window at most [`MAX_WINDOW_S`] slices (16,141 bytes per route).

use crate::protection::top_clients::{sum_rows, ClientRow, TopClients, TOP_CLIENTS};
use crate::store::{read_modify_write, Rewrite, SharedData, StoreError};
use std::net::{IpAddr, Ipv6Addr};

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
const VERSION: u8 = 2;

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
        self.record_in(bucket_of(latency_ms), error);
    }

    /// Counts one response in latency bucket `b`.
    fn record_in(&mut self, b: usize, error: bool) {
        self.requests = self.requests.saturating_add(1);
        if error {
            self.errors = self.errors.saturating_add(1);
        }
        if let Some(n) = self.latency.get_mut(b) {
            *n = n.saturating_add(1);
        }
    }

    /// Responses in a bucket that reads above `threshold_ms` (see [`reads_above`]).
    pub fn slow_over(&self, threshold_ms: u32) -> u32 {
        self.latency
            .iter()
            .enumerate()
            .filter(|(b, _)| bucket_reads_ms(*b) > threshold_ms)
            .fold(0u32, |acc, (_, n)| acc.saturating_add(*n))
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

/// The histogram bucket of a response that took `latency_ms`.
fn bucket_of(latency_ms: u64) -> usize {
    LATENCY_BOUNDS_MS
        .iter()
        .position(|bound| latency_ms <= u64::from(*bound))
        .unwrap_or(BUCKETS - 1)
}

/// What bucket `b` reads as in a percentile, ms: its upper bound; the last bucket (above
/// 10 s) reads as its lower bound.
fn bucket_reads_ms(b: usize) -> u32 {
    LATENCY_BOUNDS_MS
        .get(b)
        .or(LATENCY_BOUNDS_MS.last())
        .copied()
        .unwrap_or(u32::MAX)
}

/// True when a response that took `latency_ms` lands in a bucket that reads above
/// `threshold_ms`: a slow response, in the sense that enough of them put the p95 above the
/// threshold.
pub fn reads_above(latency_ms: u64, threshold_ms: u32) -> bool {
    bucket_reads_ms(bucket_of(latency_ms)) > threshold_ms
}

/// One interval's responses of a route: the totals and the heaviest clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Every response.
    pub tally: Tally,
    /// The client prefixes with the most slow or failed responses.
    pub clients: TopClients,
}

impl Counts {
    /// Counts one response of client prefix `prefix` that took `latency_ms` (5xx when
    /// `error`); slow means above the route's `threshold_ms` (see [`reads_above`]).
    pub fn record(&mut self, latency_ms: u64, error: bool, prefix: IpAddr, threshold_ms: u32) {
        let b = bucket_of(latency_ms);
        self.tally.record_in(b, error);
        self.clients
            .record(prefix, bucket_reads_ms(b) > threshold_ms, error);
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &Counts) {
        self.tally.add(&other.tally);
        self.clients.add(&other.clients);
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.tally.is_empty()
    }
}

/// A route's window summed: every response, and the slow and failed responses per client
/// prefix (one row per prefix, at most [`TOP_CLIENTS`] per second of the window).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// Every response of the window.
    pub tally: Tally,
    /// The heaviest prefixes' slow and failed responses.
    pub clients: Vec<ClientRow>,
}

/// Bytes of one slice without its client rows: second (8) + requests (4) + errors (4) +
/// histogram (4 x 15) + row count (1).
const SLICE_HEAD_LEN: usize = 8 + 4 + 4 + 4 * BUCKETS + 1;
/// Bytes of one client row: the prefix as IPv6 (16; IPv4 mapped) + slow (4) + errors (4).
const ROW_LEN: usize = 16 + 4 + 4;
/// Longest slice, bytes.
pub const MAX_SLICE_LEN: usize = SLICE_HEAD_LEN + TOP_CLIENTS * ROW_LEN;

fn encode(slices: &[(u64, Counts)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + slices.len() * MAX_SLICE_LEN);
    out.push(VERSION);
    for (second, c) in slices {
        let t = &c.tally;
        out.extend_from_slice(&second.to_le_bytes());
        out.extend_from_slice(&t.requests.to_le_bytes());
        out.extend_from_slice(&t.errors.to_le_bytes());
        for n in t.latency {
            out.extend_from_slice(&n.to_le_bytes());
        }
        let rows = c.clients.rows();
        out.push(u8::try_from(rows.len()).unwrap_or(u8::MAX));
        for r in rows {
            let v6 = match r.prefix {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            out.extend_from_slice(&v6.octets());
            out.extend_from_slice(&r.slow.to_le_bytes());
            out.extend_from_slice(&r.errors.to_le_bytes());
        }
    }
    out
}

/// Splits `n` bytes off the front of `b`.
fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = (b.get(..n)?, b.get(n..)?);
    *b = rest;
    Some(head)
}

fn take_u32(b: &mut &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?))
}

/// Decodes one slice off the front of `b`.
fn decode_slice(b: &mut &[u8]) -> Option<(u64, Counts)> {
    let second = u64::from_le_bytes(take(b, 8)?.try_into().ok()?);
    let mut t = Tally {
        requests: take_u32(b)?,
        errors: take_u32(b)?,
        ..Tally::default()
    };
    for n in t.latency.iter_mut() {
        *n = take_u32(b)?;
    }
    let count = usize::from(*take(b, 1)?.first()?);
    let mut rows = Vec::with_capacity(count.min(TOP_CLIENTS));
    for _ in 0..count {
        let octets: [u8; 16] = take(b, 16)?.try_into().ok()?;
        rows.push(ClientRow {
            // IPv4 comes back as IPv4 (client prefixes are canonical already).
            prefix: IpAddr::V6(Ipv6Addr::from(octets)).to_canonical(),
            slow: take_u32(b)?,
            errors: take_u32(b)?,
        });
    }
    let clients = TopClients::from_rows(rows)?;
    Some((second, Counts { tally: t, clients }))
}

/// Decodes a window; `None` for anything malformed (it is then started afresh).
fn decode(bytes: &[u8]) -> Option<Vec<(u64, Counts)>> {
    let (v, mut rest) = bytes.split_first()?;
    if *v != VERSION {
        return None;
    }
    let mut slices = Vec::new();
    while !rest.is_empty() {
        if slices.len() >= MAX_WINDOW_S {
            return None;
        }
        slices.push(decode_slice(&mut rest)?);
    }
    Some(slices)
}

/// The key of `route`'s window.
pub fn key(route: &str) -> String {
    format!("{HEALTH_PREFIX}{route}")
}

/// Adds `counts` (counted up to `now_s`) to the route's shared window at `key`, drops slices
/// older than `window_s`, and returns the whole window summed. Compare-and-swap with up to
/// `cas_retries` retries; on failure the counts are lost (the view errs on "healthier",
/// never on a 5xx for anyone) and the error is returned.
pub fn merge(
    store: &dyn SharedData,
    key: &str,
    counts: &Counts,
    now_s: u64,
    window_s: u32,
    cas_retries: u32,
) -> Result<Window, StoreError> {
    let window = u64::from(window_s.clamp(1, MAX_WINDOW_S as u32));
    read_modify_write(store, key, cas_retries, &mut |bytes| {
        let decoded = decode(bytes.unwrap_or_default());
        let valid = decoded.is_some();
        let mut slices = decoded.unwrap_or_default();
        let before = slices.len();
        slices.retain(|(s, _)| *s + window > now_s && *s <= now_s);
        if !counts.is_empty() {
            match slices.iter_mut().find(|(s, _)| *s == now_s) {
                Some((_, c)) => c.add(counts),
                None => slices.push((now_s, counts.clone())),
            }
        }
        let mut sum = Window::default();
        for (_, c) in &slices {
            sum.tally.add(&c.tally);
            sum_rows(&mut sum.clients, c.clients.rows());
        }
        if counts.is_empty() && valid && slices.len() == before {
            // Nothing to add and nothing expired: no write.
            return Rewrite::Keep(sum);
        }
        Rewrite::Write(encode(&slices), sum)
    })
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

    /// Responses of client 192.0.2.`last`, slow above 100 ms.
    fn counts(samples: &[(u64, bool)], last: u8) -> Counts {
        let mut c = Counts::default();
        for (ms, err) in samples {
            c.record(*ms, *err, IpAddr::from([192, 0, 2, last]), 100);
        }
        c
    }

    fn row(last: u8, slow: u32, errors: u32) -> ClientRow {
        ClientRow {
            prefix: IpAddr::from([192, 0, 2, last]),
            slow,
            errors,
        }
    }

    #[test]
    fn a_slow_response_is_one_in_a_bucket_that_reads_above_the_threshold() {
        // 150 ms reads as 200 (its bucket's bound): slow for 150, not for 200.
        assert!(reads_above(150, 150));
        assert!(!reads_above(150, 200));
        assert!(!reads_above(100, 100));
        assert!(reads_above(101, 100));
        // Above 10 s reads as 10 s.
        assert!(!reads_above(60_000, 10_000));
        assert!(reads_above(60_000, 9_999));
        // p95 above the threshold exactly when more than 5% of the responses are slow.
        for threshold in [1, 5, 100, 150, 999, 2_000, 10_000] {
            for slow_n in 0..12u64 {
                let mut s: Vec<(u64, bool)> = vec![(3, false); 100 - slow_n as usize];
                s.extend((0..slow_n).map(|i| (120 + 700 * i, false)));
                let t = tally(&s);
                let slow = t.slow_over(threshold);
                let by_count = 100 - slow < 95;
                let by_p95 = t.percentile_ms(95).is_some_and(|p| p > threshold);
                assert_eq!(by_count, by_p95, "threshold {threshold}, slow {slow_n}");
            }
        }
    }

    #[test]
    fn a_window_with_client_rows_reads_back_as_written() {
        let store = MemStore::default();
        let k = key("default");
        let mut c = counts(&[(3, false), (300, false), (300, true), (5, true)], 9);
        c.record(5, true, "2001:db8::".parse().unwrap_or(UNKNOWN), 100);
        c.record(5, true, crate::protection::top_clients::UNKNOWN_CLIENT, 100);
        let w = merge(&store, &k, &c, 100, 5, 4).expect("merged");
        let again = merge(&store, &k, &Counts::default(), 100, 5, 4).expect("read");
        assert_eq!(w, again);
        assert_eq!((w.tally.requests, w.tally.errors), (6, 4));
        assert_eq!(w.clients.first(), Some(&row(9, 2, 2)));
        assert_eq!(w.clients.len(), 3);
        // The stored bytes: one slice of three rows.
        let (bytes, _) = store.get(&k).ok().flatten().unwrap_or_default();
        assert_eq!(bytes.len(), 1 + SLICE_HEAD_LEN + 3 * ROW_LEN);
        assert_eq!(MAX_SLICE_LEN, 269);
        // A cut-off row, a row count above TOP_CLIENTS, a trailing byte: malformed.
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(decode(&long), None);
        let mut many = bytes[..1 + SLICE_HEAD_LEN].to_vec();
        if let Some(n) = many.last_mut() {
            *n = 9;
        }
        many.extend(std::iter::repeat_n(0u8, 9 * ROW_LEN));
        assert_eq!(decode(&many), None);
    }

    const UNKNOWN: IpAddr = crate::protection::top_clients::UNKNOWN_CLIENT;

    #[test]
    fn workers_add_up_in_one_window_and_old_seconds_drop_out() {
        let store = MemStore::default();
        let k = key("default");
        let a = counts(&[(3, false), (3, true)], 1);
        let b = counts(&[(400, false)], 2);
        let requests = |w: Result<Window, StoreError>| w.map(|w| w.tally.requests);
        assert_eq!(requests(merge(&store, &k, &a, 100, 5, 4)), Ok(2));
        // Another worker, same second.
        let both = merge(&store, &k, &b, 100, 5, 4).expect("merged");
        assert_eq!(both.tally.requests, 3);
        assert_eq!(both.clients, vec![row(1, 0, 1), row(2, 1, 0)]);
        let later = merge(&store, &k, &a, 103, 5, 4).expect("merged");
        assert_eq!((later.tally.requests, later.tally.errors), (5, 2));
        assert_eq!(later.tally.percentile_ms(100), Some(500));
        // One row per prefix over the window's seconds.
        assert_eq!(later.clients, vec![row(1, 0, 2), row(2, 1, 0)]);
        // Second 100 is out of a 5 s window at 105.
        let end = merge(&store, &k, &Counts::default(), 105, 5, 4).expect("read");
        assert_eq!((end.tally.requests, end.tally.errors), (2, 1));
        assert_eq!(end.clients, vec![row(1, 0, 1)]);
        assert_eq!(
            requests(merge(&store, &k, &Counts::default(), 200, 5, 4)),
            Ok(0)
        );
    }

    #[test]
    fn a_broken_store_or_garbage_never_fails_hard() {
        let store = MemStore::default();
        let k = key("api");
        store.poke(&k, b"\x01garbage");
        let t = counts(&[(3, false)], 1);
        assert_eq!(
            merge(&store, &k, &t, 10, 5, 4).map(|w| w.tally.requests),
            Ok(1)
        );
        store.fault.set(Fault::Error);
        assert!(merge(&store, &k, &t, 10, 5, 4).is_err());
        store.fault.set(Fault::CasMismatch);
        assert_eq!(
            merge(&store, &k, &t, 11, 5, 2),
            Err(StoreError::CasMismatch)
        );
    }
}
