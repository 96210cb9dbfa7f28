//! Load shedding by class when the origin slows down: the shed *level* of a route is how
//! many classes of `shedding.order` (lowest priority first) get 503 + Retry-After instead of
//! reaching the origin.
//!
//! The level lives in shared data (`cg:shed:<route>`), so every worker treats a request the
//! same; workers cache it in VM memory on each root tick, so the request path reads no
//! shared data. On each tick a worker judges the route's window ([`crate::protection::origin_health`]):
//! unhealthy (p95 above `latency_ms` or a 5xx share above `error_ratio`, with at least
//! `min_requests` responses, no client prefix counting for more slow or failed responses
//! than the `min_clients`-th heaviest: [`judge`]) raises the level one class, healthy
//! lowers it one class, each at most once every `step_s` (hysteresis: no flapping). The
//! compare-and-swap makes one worker's step count for all.

use crate::config::ShedThresholds;
#[cfg(doc)]
use crate::protection::origin_health::Tally;
use crate::protection::origin_health::Window;
use crate::protection::top_clients;
use crate::store::{read_modify_write, Rewrite, SharedData, StoreError};

/// Shared-data key prefix of a route's level (`cg:shed:<route>`).
pub const LEVEL_PREFIX: &str = "cg:shed:";
const VERSION: u8 = 1;

/// A route's shed level and when it last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShedLevel {
    /// Classes shed: the first `level` of `shedding.order`.
    pub level: u8,
    /// When it last changed, s since the Unix epoch.
    pub changed_at_s: u64,
}

impl ShedLevel {
    fn encode(&self) -> [u8; 10] {
        let mut out = [0u8; 10];
        let (head, at) = out.split_at_mut(2);
        head.copy_from_slice(&[VERSION, self.level]);
        at.copy_from_slice(&self.changed_at_s.to_le_bytes());
        out
    }

    fn decode(b: &[u8]) -> Option<ShedLevel> {
        let arr: &[u8; 10] = b.try_into().ok()?;
        let (head, at) = arr.split_at(2);
        if head.first() != Some(&VERSION) {
            return None;
        }
        Some(ShedLevel {
            level: *head.get(1)?,
            changed_at_s: u64::from_le_bytes(at.try_into().ok()?),
        })
    }
}

/// The window as shedding judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Judgement {
    /// Unhealthy once each client prefix counts for at most as many slow (and, apart, failed)
    /// responses as the `min_clients`-th heaviest: what moves the level.
    pub unhealthy: bool,
    /// Unhealthy counting every response as it is (what `min_clients` 1 would judge).
    pub unhealthy_as_a_whole: bool,
    /// Slow responses over the cap, left out.
    pub slow_set_aside: u64,
    /// 5xx responses over the cap, left out.
    pub errors_set_aside: u64,
}

/// More than 5% of `requests` slow: the p95 reads above the threshold (nearest rank, as
/// [`Tally::percentile_ms`]).
fn slow_share_exceeds(requests: u64, slow: u64) -> bool {
    let rank = (requests * 95).div_ceil(100).max(1);
    requests.saturating_sub(slow) < rank
}

/// Judges a route's window for these thresholds: unhealthy when, with at least
/// `min_requests` responses in all, its p95 is above `latency_ms` or its 5xx share above
/// `error_ratio`, each client prefix counting for at most as many slow responses, and
/// apart as many 5xx, as the `min_clients`-th heaviest prefix (the responses over that cap
/// are left out of the shares), so fewer than `min_clients` clients cannot make an origin that
/// serves everyone else well look unhealthy.
pub fn judge(view: &Window, t: &ShedThresholds, min_requests: u32, min_clients: u32) -> Judgement {
    let n = u64::from(view.tally.requests);
    let slow = u64::from(view.tally.slow_over(t.latency_ms));
    let errors = u64::from(view.tally.errors);
    let min = u64::from(min_requests.max(1));
    let slow_out =
        top_clients::excess_over_cap(view.clients.iter().map(|r| r.slow), min_clients).min(slow);
    let errors_out =
        top_clients::excess_over_cap(view.clients.iter().map(|r| r.errors), min_clients)
            .min(errors);
    // `min_requests` counts every response: enough data is judged on the whole window (the
    // cap is a share of the evidence; at a few responses per client it takes many, and a
    // level would fall for want of data while the origin is slow for all).
    let enough = n >= min;
    let is_slow = |n: u64, slow: u64| enough && n > 0 && slow_share_exceeds(n, slow);
    // Per mille rounded down, as the gauge shows it.
    let is_failing = |n: u64, e: u64| enough && n > 0 && e * 1000 / n > u64::from(t.error_permille);
    Judgement {
        unhealthy: is_slow(n.saturating_sub(slow_out), slow - slow_out)
            || is_failing(n.saturating_sub(errors_out), errors - errors_out),
        unhealthy_as_a_whole: is_slow(n, slow) || is_failing(n, errors),
        slow_set_aside: slow_out,
        errors_set_aside: errors_out,
    }
}

/// The next level from `cur`: one step toward `max` when unhealthy, toward 0 when healthy,
/// at most once every `step_s`; `None` when it stays.
pub fn next_level(
    cur: ShedLevel,
    unhealthy: bool,
    max: u8,
    now_s: u64,
    step_s: u32,
) -> Option<ShedLevel> {
    if now_s < cur.changed_at_s.saturating_add(u64::from(step_s)) {
        return None;
    }
    let level = match (unhealthy, cur.level) {
        (true, l) if l < max => l + 1,
        (false, l) if l > 0 => l - 1,
        _ => return None,
    };
    Some(ShedLevel {
        level,
        changed_at_s: now_s,
    })
}

/// The key of `route`'s level.
pub fn key(route: &str) -> String {
    format!("{LEVEL_PREFIX}{route}")
}

/// Reads the route's shared level as it is now (no step): what a worker applies on every
/// root tick between its once-a-second judgements, so that every worker sheds within one
/// tick of the level changing. A missing or unreadable entry is level 0.
pub fn read(store: &dyn SharedData, key: &str) -> Result<ShedLevel, StoreError> {
    let (bytes, _) = store.get(key)?.unwrap_or_default();
    Ok(ShedLevel::decode(&bytes).unwrap_or_default())
}

/// Reads the route's shared level and moves it one step if due (compare-and-swap: when
/// several workers judge the same second, one step counts). Returns the level in force and,
/// when this worker moved it, the level before.
pub fn step(
    store: &dyn SharedData,
    key: &str,
    unhealthy: bool,
    max: u8,
    now_s: u64,
    step_s: u32,
    cas_retries: u32,
) -> Result<(ShedLevel, Option<u8>), StoreError> {
    // Another worker that moved it first leaves a level changed this second, which
    // `next_level` keeps (`step_s` >= 1): theirs is in force.
    read_modify_write(store, key, cas_retries, &mut |bytes| {
        let cur = ShedLevel::decode(bytes.unwrap_or_default()).unwrap_or_default();
        match next_level(cur, unhealthy, max, now_s, step_s) {
            None => Rewrite::Keep((cur, None)),
            Some(next) => Rewrite::Write(next.encode().to_vec(), (next, Some(cur.level))),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::origin_health::Counts;
    use crate::store::mem::MemStore;
    use std::net::IpAddr;

    fn thresholds() -> ShedThresholds {
        ShedThresholds {
            latency_ms: 100,
            error_permille: 100,
        }
    }

    /// `n` responses of one client (192.0.2.`client`) taking `ms`, the first `errors` 5xx.
    fn client(w: &mut Window, client: u8, n: u32, ms: u64, errors: u32) {
        let mut c = Counts::default();
        for i in 0..n {
            c.record(ms, i < errors, IpAddr::from([192, 0, 2, client]), 100);
        }
        w.tally.add(&c.tally);
        crate::protection::top_clients::sum_rows(&mut w.clients, c.clients.rows());
    }

    fn view(n: u32, ms: u64, errors: u32) -> Window {
        let mut w = Window::default();
        client(&mut w, 1, n, ms, errors);
        w
    }

    fn unhealthy(w: &Window, t: &ShedThresholds, min_requests: u32) -> bool {
        judge(w, t, min_requests, 1).unhealthy
    }

    #[test]
    fn slow_or_failing_windows_with_enough_requests_are_unhealthy() {
        let t = thresholds();
        assert!(!unhealthy(&view(20, 50, 0), &t, 10));
        assert!(unhealthy(&view(20, 300, 0), &t, 10));
        assert!(unhealthy(&view(20, 50, 3), &t, 10));
        assert!(!unhealthy(&view(20, 50, 2), &t, 10));
        // Too few requests to judge.
        assert!(!unhealthy(&view(5, 300, 5), &t, 10));
    }

    /// Nine clients with fast 2xx (180 responses) and one more: its slow URLs (20 of the
    /// 210 responses, p95 above 100 ms) or its 500s (40 of 220, 18% > 10%).
    #[test]
    fn one_clients_slow_or_failed_responses_do_not_make_the_window_unhealthy() {
        let t = thresholds();
        let mut slow = Window::default();
        let mut failing = Window::default();
        for c in 2..=10 {
            client(&mut slow, c, 20, 5, 0);
            client(&mut failing, c, 20, 5, 0);
        }
        client(&mut slow, 1, 10, 5, 0);
        client(&mut slow, 1, 20, 400, 0);
        client(&mut failing, 1, 40, 5, 40);
        for (w, what) in [(&slow, "slow"), (&failing, "failing")] {
            let whole = judge(w, &t, 20, 1);
            assert!(whole.unhealthy && whole.unhealthy_as_a_whole, "{what}");
            let j = judge(w, &t, 20, 3);
            assert_eq!(
                (j.unhealthy, j.unhealthy_as_a_whole),
                (false, true),
                "{what}"
            );
            let set_aside = if what == "slow" { (20, 0) } else { (0, 40) };
            assert_eq!((j.slow_set_aside, j.errors_set_aside), set_aside, "{what}");
        }
        // A second slow client is not enough either (both count as the third: none).
        client(&mut slow, 2, 10, 400, 0);
        let j = judge(&slow, &t, 20, 3);
        assert_eq!((j.unhealthy, j.slow_set_aside), (false, 30));
        // A third: the heaviest counts as the third's 10, so 30 slow of 220 are judged.
        client(&mut slow, 3, 10, 400, 0);
        let j = judge(&slow, &t, 20, 3);
        assert_eq!((j.unhealthy, j.slow_set_aside), (true, 10));
        client(&mut slow, 1, 20, 400, 0);
        let j = judge(&slow, &t, 20, 3);
        assert_eq!((j.unhealthy, j.slow_set_aside), (true, 30));
    }

    #[test]
    fn an_origin_slow_or_failing_for_everyone_is_unhealthy_whatever_min_clients() {
        let t = thresholds();
        // A few responses each, unevenly (3, 3, 1, 1): half over the cap, yet what is left
        // is all slow, and `min_requests` counts all 8 (the level must not fall for want
        // of data: seen in the real-Envoy suite).
        let mut few = Window::default();
        for (c, n) in [(1, 3), (2, 3), (3, 1), (4, 1)] {
            client(&mut few, c, n, 400, 0);
        }
        let j = judge(&few, &t, 5, 3);
        assert_eq!((j.unhealthy, j.slow_set_aside), (true, 4));
        let mut w = Window::default();
        for c in 1..=4 {
            client(&mut w, c, 10, 300, 5);
        }
        for k in 1..=8 {
            let j = judge(&w, &t, 20, k);
            assert_eq!(
                (j.unhealthy, j.slow_set_aside, j.errors_set_aside),
                (
                    k <= 4,
                    if k <= 4 { 0 } else { 40 },
                    if k <= 4 { 0 } else { 20 }
                ),
                "min_clients {k}"
            );
        }
    }

    #[test]
    fn the_level_moves_one_step_per_step_s_both_ways() {
        let mut cur = ShedLevel::default();
        let mut timeline = Vec::new();
        let seconds = [
            (100, true),
            (100, true),
            (105, true),
            (110, true),
            (112, true),
            (120, true),
            (130, true),
            (131, false),
            (140, false),
            (150, false),
            (160, false),
        ];
        for (now, sick) in seconds {
            if let Some(n) = next_level(cur, sick, 2, now, 10) {
                cur = n;
            }
            timeline.push(cur.level);
        }
        assert_eq!(timeline, [1, 1, 1, 2, 2, 2, 2, 1, 1, 0, 0]);
    }

    #[test]
    fn workers_share_one_level_and_a_step_counts_once() {
        let store = MemStore::default();
        let k = key("default");
        assert_eq!(
            step(&store, &k, true, 3, 100, 10, 8),
            Ok((
                ShedLevel {
                    level: 1,
                    changed_at_s: 100
                },
                Some(0)
            ))
        );
        // A second worker in the same second: no second step.
        assert_eq!(
            step(&store, &k, true, 3, 100, 10, 8),
            Ok((
                ShedLevel {
                    level: 1,
                    changed_at_s: 100
                },
                None
            ))
        );
        assert_eq!(
            step(&store, &k, true, 3, 110, 10, 8).map(|(l, _)| l.level),
            Ok(2)
        );
        assert_eq!(
            step(&store, &k, false, 3, 120, 10, 8).map(|(l, _)| l.level),
            Ok(1)
        );
        store.poke(&k, b"garbage");
        assert_eq!(
            step(&store, &k, false, 3, 130, 10, 8),
            Ok((ShedLevel::default(), None))
        );
    }
}
