//! Load shedding by class when the origin slows down: the shed *level* of a route is how
//! many classes of `shedding.order` (lowest priority first) get 503 + Retry-After instead of
//! reaching the origin.
//!
//! The level lives in shared data (`cg:shed:<route>`), so every worker treats a request the
//! same; workers cache it in VM memory on each root tick, so the request path reads no
//! shared data. On each tick a worker judges the route's window ([`crate::origin_health`]):
//! unhealthy (p95 above `latency_ms` or a 5xx share above `error_ratio`, with at least
//! `min_requests` responses) raises the level one class, healthy lowers it one class, each
//! at most once every `step_s` (hysteresis: no flapping). The compare-and-swap makes one
//! worker's step count for all.

use crate::config::ShedThresholds;
use crate::origin_health::Tally;
use crate::store::{SharedData, StoreError};

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

/// True when the window says the origin is unhealthy for these thresholds.
pub fn unhealthy(view: &Tally, t: &ShedThresholds, min_requests: u32) -> bool {
    if view.requests < min_requests.max(1) {
        return false;
    }
    let slow = view.percentile_ms(95).is_some_and(|p95| p95 > t.latency_ms);
    let failing = view.error_permille() > t.error_permille;
    slow || failing
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
) -> Result<(ShedLevel, Option<u8>), StoreError> {
    let (bytes, cas) = store.get(key)?.unwrap_or_default();
    let cur = ShedLevel::decode(&bytes).unwrap_or_default();
    let Some(next) = next_level(cur, unhealthy, max, now_s, step_s) else {
        return Ok((cur, None));
    };
    match store.set(key, &next.encode(), cas) {
        Ok(()) => Ok((next, Some(cur.level))),
        // Another worker moved it first: theirs is in force.
        Err(StoreError::CasMismatch) => {
            let (bytes, _) = store.get(key)?.unwrap_or_default();
            Ok((ShedLevel::decode(&bytes).unwrap_or(next), None))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    fn thresholds() -> ShedThresholds {
        ShedThresholds {
            latency_ms: 100,
            error_permille: 100,
        }
    }

    fn view(n: u32, ms: u64, errors: u32) -> Tally {
        let mut t = Tally::default();
        for i in 0..n {
            t.record(ms, i < errors);
        }
        t
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
            step(&store, &k, true, 3, 100, 10),
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
            step(&store, &k, true, 3, 100, 10),
            Ok((
                ShedLevel {
                    level: 1,
                    changed_at_s: 100
                },
                None
            ))
        );
        assert_eq!(
            step(&store, &k, true, 3, 110, 10).map(|(l, _)| l.level),
            Ok(2)
        );
        assert_eq!(
            step(&store, &k, false, 3, 120, 10).map(|(l, _)| l.level),
            Ok(1)
        );
        store.poke(&k, b"garbage");
        assert_eq!(
            step(&store, &k, false, 3, 130, 10),
            Ok((ShedLevel::default(), None))
        );
    }
}
