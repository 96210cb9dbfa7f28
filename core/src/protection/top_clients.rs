//! Who the origin's slow and failed responses went to: per route, the client prefixes with
//! the most of them, so that shedding can judge the origin without letting a few clients
//! carry the evidence (`shedding.min_clients`).
//!
//! A worker counts in a [`TopClients`] table of at most [`TOP_CLIENTS`] rows (Space-Saving:
//! a new prefix takes over the lightest row when the table is full, so any prefix with more
//! than 1/[`TOP_CLIENTS`] of the interval's slow or failed responses holds a row, and a row
//! never counts fewer than its prefix had while it held it). Only a slow or failed response
//! touches the table: a fast 2xx costs nothing here. Each second's tables are added up in the
//! shared window (`crate::protection::origin_health`), again keeping the [`TOP_CLIENTS`] heaviest.

use std::net::{IpAddr, Ipv6Addr};

/// Rows of a table: per worker interval, and per second of the shared window.
pub const TOP_CLIENTS: usize = 8;

/// The prefix a response counts for when the request had no parsable client address (all
/// such responses are one client, as the limiter keys them).
pub const UNKNOWN_CLIENT: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

/// One client prefix's slow and failed responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRow {
    /// The client prefix (the client address masked per `client_ip`).
    pub prefix: IpAddr,
    /// Responses in a latency bucket above the route's `latency_ms`.
    pub slow: u32,
    /// 5xx responses.
    pub errors: u32,
}

impl ClientRow {
    /// Slow plus failed responses: the row's weight.
    pub fn weight(&self) -> u64 {
        u64::from(self.slow) + u64::from(self.errors)
    }
}

/// At most [`TOP_CLIENTS`] rows, the heaviest prefixes of an interval.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopClients {
    rows: Vec<ClientRow>,
}

impl TopClients {
    /// The table of `rows`; `None` when there are more than [`TOP_CLIENTS`] (a malformed
    /// window).
    pub fn from_rows(rows: Vec<ClientRow>) -> Option<TopClients> {
        (rows.len() <= TOP_CLIENTS).then_some(TopClients { rows })
    }

    /// The rows, in no particular order.
    pub fn rows(&self) -> &[ClientRow] {
        &self.rows
    }

    /// Counts one response of `prefix` (nothing when it was neither slow nor failed).
    pub fn record(&mut self, prefix: IpAddr, slow: bool, error: bool) {
        if !slow && !error {
            return;
        }
        let (s, e) = (u32::from(slow), u32::from(error));
        let row = if let Some(r) = self.rows.iter_mut().find(|r| r.prefix == prefix) {
            r
        } else if self.rows.len() < TOP_CLIENTS {
            self.rows.push(ClientRow {
                prefix,
                slow: 0,
                errors: 0,
            });
            match self.rows.last_mut() {
                Some(r) => r,
                None => return,
            }
        } else {
            // Space-Saving: the newcomer inherits the lightest row's counts (an over-count
            // of the newcomer, never an under-count of a prefix that holds a row).
            match self.rows.iter_mut().min_by_key(|r| r.weight()) {
                Some(r) => {
                    r.prefix = prefix;
                    r
                }
                None => return,
            }
        };
        row.slow = row.slow.saturating_add(s);
        row.errors = row.errors.saturating_add(e);
    }

    /// Adds `other` row by row (same prefix, same row), then keeps the [`TOP_CLIENTS`]
    /// heaviest.
    pub fn add(&mut self, other: &TopClients) {
        sum_rows(&mut self.rows, &other.rows);
        // No sort: a few rows over, and sorting code is large in the wasm module.
        while self.rows.len() > TOP_CLIENTS {
            let lightest = self
                .rows
                .iter()
                .enumerate()
                .min_by_key(|(_, r)| (r.weight(), r.slow))
                .map(|(i, _)| i);
            match lightest {
                Some(i) => {
                    self.rows.swap_remove(i);
                }
                None => break,
            }
        }
    }

    /// True when no row was counted.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// Adds `rows` into `into`, one row per prefix (no cap: a window's sum of its seconds).
pub fn sum_rows(into: &mut Vec<ClientRow>, rows: &[ClientRow]) {
    for r in rows {
        match into.iter_mut().find(|x| x.prefix == r.prefix) {
            Some(x) => {
                x.slow = x.slow.saturating_add(r.slow);
                x.errors = x.errors.saturating_add(r.errors);
            }
            None => into.push(*r),
        }
    }
}

/// How many of the counts are over the cap: each client counts for at most as many as the
/// `min_clients`-th heaviest (0 when fewer clients have any), so the `min_clients - 1`
/// heaviest cannot stand out. 0 for `min_clients` 0 or 1.
/// `min_clients` above [`TOP_CLIENTS`] counts as [`TOP_CLIENTS`] (the configuration refuses
/// it).
pub fn excess_over_cap(counts: impl Iterator<Item = u32>, min_clients: u32) -> u64 {
    let keep = usize::try_from(min_clients)
        .unwrap_or(TOP_CLIENTS)
        .min(TOP_CLIENTS);
    if keep <= 1 {
        return 0;
    }
    // The `keep` largest counts, largest first (insertion: no sort, no allocation).
    let mut top = [0u32; TOP_CLIENTS];
    for n in counts {
        let mut v = n;
        for slot in top.iter_mut().take(keep) {
            if v > *slot {
                std::mem::swap(slot, &mut v);
            }
        }
    }
    let cap = top.get(keep - 1).copied().unwrap_or(0);
    top.iter()
        .take(keep - 1)
        .map(|n| u64::from(n.saturating_sub(cap)))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
    }

    fn row(last: u8, slow: u32, errors: u32) -> ClientRow {
        ClientRow {
            prefix: ip(last),
            slow,
            errors,
        }
    }

    #[test]
    fn only_slow_or_failed_responses_get_a_row_and_one_prefix_one_row() {
        let mut t = TopClients::default();
        t.record(ip(1), false, false);
        assert!(t.is_empty());
        t.record(ip(1), true, false);
        t.record(ip(1), true, true);
        t.record(ip(2), false, true);
        t.record(ip(1), false, false);
        assert_eq!(t.rows(), &[row(1, 2, 1), row(2, 0, 1)]);
    }

    #[test]
    fn a_full_table_keeps_the_heavy_prefix_whatever_the_churn() {
        let mut t = TopClients::default();
        // The heavy client: one slow response in three; 200 others one each in between.
        for i in 0..600u32 {
            if i % 3 == 0 {
                t.record(ip(250), true, false);
            } else {
                let other = IpAddr::V4(Ipv4Addr::from(0x0A00_0000 + i));
                t.record(other, true, false);
            }
        }
        assert_eq!(t.rows().len(), TOP_CLIENTS);
        let heavy = t.rows().iter().find(|r| r.prefix == ip(250)).copied();
        // Never fewer than its own 200 (Space-Saving may over-count it a little).
        assert!(heavy.is_some_and(|r| r.slow >= 200), "{heavy:?}");
        // Every row together is every slow response: nothing is lost, only reassigned.
        assert_eq!(t.rows().iter().map(|r| r.slow).sum::<u32>(), 600);
    }

    #[test]
    fn adding_tables_sums_by_prefix_and_keeps_the_heaviest() {
        let mut a = TopClients::from_rows(vec![row(1, 5, 0), row(2, 1, 0)]).unwrap_or_default();
        let b = TopClients::from_rows((3..=10).map(|i| row(i, 0, u32::from(i))).collect())
            .unwrap_or_default();
        a.add(&b);
        assert_eq!(a.rows().len(), TOP_CLIENTS);
        assert!(a.rows().contains(&row(10, 0, 10)));
        assert!(a.rows().contains(&row(1, 5, 0)));
        // The lightest two of the ten (2 with 1, 3 with 3) dropped out.
        let kept: Vec<IpAddr> = a.rows().iter().map(|r| r.prefix).collect();
        assert!(!kept.contains(&ip(2)) && !kept.contains(&ip(3)), "{kept:?}");
        // Added again: the same prefix, one row.
        let again = a.clone();
        a.add(&again);
        assert!(a.rows().contains(&row(1, 10, 0)));
        assert_eq!(a.rows().len(), TOP_CLIENTS);
        assert_eq!(
            TopClients::from_rows(vec![row(1, 1, 1); TOP_CLIENTS + 1]),
            None
        );
    }

    #[test]
    fn the_heaviest_count_no_more_than_the_min_clients_th() {
        let counts = [40u32, 0, 3, 10, 2];
        // min_clients 1: nothing capped.
        assert_eq!(excess_over_cap(counts.into_iter(), 1), 0);
        assert_eq!(excess_over_cap(counts.into_iter(), 0), 0);
        // 2: the heaviest (40) counts as the second (10).
        assert_eq!(excess_over_cap(counts.into_iter(), 2), 30);
        // 3: 40 and 10 count as the third (3).
        assert_eq!(excess_over_cap(counts.into_iter(), 3), 37 + 7);
        // More than the clients with any: the cap is 0, theirs all set aside.
        assert_eq!(excess_over_cap(counts.into_iter(), 5), 55);
        assert_eq!(excess_over_cap([7u32].into_iter(), 3), 7);
        assert_eq!(excess_over_cap(std::iter::empty(), 3), 0);
        // Alike clients: nothing to set aside.
        assert_eq!(excess_over_cap([9u32, 9, 9, 9].into_iter(), 3), 0);
    }
}
