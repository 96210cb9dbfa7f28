//! The per-worker fallback: the second implementation of the [`StateStore`] seam, in VM
//! memory, used when the shared slot table cannot serve a key (store error, lost CAS races,
//! collision, corrupt slot). It decides with the same math and the same limits.
//!
//! Bounded, so a store outage under a flood of distinct clients cannot grow memory, and it
//! evicts only what carries no information: a value of rank 0 ([`SlotValue::rank`], e.g. a
//! bucket that is full again). Any other value is kept, so an exhausted client stays
//! exhausted whatever other clients send. When the map is full and nothing can go, a new key
//! gets no value of its own: it shares the key's *overflow* value (one per limit), which is
//! strict: every such key draws from it.
//!
//! Finding evictable values never scans the map: a min-heap holds one entry per key,
//! `(free_at_ns when pushed, key)` ([`SlotValue::free_at_ns`]), and only entries whose time
//! has come are looked at. An entry can be early (the value changed since; it is pushed
//! again with its current time) or late (the value was relaxed, e.g. a refund; it is then
//! evicted later than it could be, the strict side).

use crate::slot_table::SlotValue;
use crate::store::{StateKey, StateStore, StoreFault};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Where a [`LocalStore`] put a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalPlace {
    /// The key's own entry.
    Own,
    /// The shared overflow entry of the key's `overflow_fp`.
    Overflow,
}

/// The per-worker fallback store: at most `cap` keys, plus one overflow value per
/// overflow key (one per limit).
#[derive(Debug)]
pub struct LocalStore<V> {
    map: HashMap<u64, V>,
    /// One entry per key of `map`: the earliest time its value may rank 0.
    free_at: BinaryHeap<Reverse<(u64, u64)>>,
    overflow: HashMap<u64, V>,
    cap: usize,
    /// Heap entries looked at while evicting (tests check a full map is not rescanned).
    examined: u64,
}

impl<V: SlotValue> LocalStore<V> {
    /// A store holding at most `cap` (at least 1) keys.
    pub fn new(cap: usize) -> LocalStore<V> {
        LocalStore {
            map: HashMap::new(),
            free_at: BinaryHeap::new(),
            overflow: HashMap::new(),
            cap: cap.max(1),
            examined: 0,
        }
    }

    /// Keys held (overflow values not included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Heap entries looked at while evicting, so far.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// The value of key `fp`, if it has its own.
    pub fn get(&self, fp: u64) -> Option<V> {
        self.map.get(&fp).copied()
    }

    /// Drops every value of rank 0 at `now_ns`, looking only at heap entries whose time has
    /// come. An entry whose value changed since it was pushed goes back with its current
    /// time; the loop is bounded by the heap's size.
    fn evict_free(&mut self, now_ns: u64) {
        for _ in 0..self.free_at.len() {
            match self.free_at.peek() {
                Some(Reverse((due, _))) if *due <= now_ns => {}
                _ => return,
            }
            let Some(Reverse((_, fp))) = self.free_at.pop() else {
                return;
            };
            self.examined += 1;
            match self.map.get(&fp) {
                Some(v) if v.rank(now_ns) > 0 => {
                    // Not free yet: back with its current time, strictly later than now
                    // (else it would be free), so this loop ends.
                    self.free_at
                        .push(Reverse((v.free_at_ns().max(now_ns + 1), fp)));
                }
                Some(_) => {
                    self.map.remove(&fp);
                }
                None => {}
            }
        }
    }
}

impl<V: SlotValue> StateStore<V> for LocalStore<V> {
    type Place = LocalPlace;

    /// Never fails: a key without room uses its overflow value.
    fn measure_and_replace<T>(
        &mut self,
        key: StateKey,
        now_ns: u64,
        mut f: impl FnMut(Option<V>) -> (T, Option<V>),
    ) -> Result<(T, LocalPlace), StoreFault> {
        if let Some(v) = self.map.get_mut(&key.fp) {
            let (out, new) = f(Some(*v));
            if let Some(new) = new {
                *v = new;
            }
            return Ok((out, LocalPlace::Own));
        }
        if self.map.len() >= self.cap {
            self.evict_free(now_ns);
        }
        if self.map.len() < self.cap {
            let (out, new) = f(None);
            if let Some(new) = new {
                self.map.insert(key.fp, new);
                self.free_at.push(Reverse((new.free_at_ns(), key.fp)));
            }
            return Ok((out, LocalPlace::Own));
        }
        let current = self.overflow.get(&key.overflow_fp).copied();
        let (out, new) = f(current);
        if let Some(new) = new {
            self.overflow.insert(key.overflow_fp, new);
        }
        Ok((out, LocalPlace::Overflow))
    }

    fn replace_at(
        &mut self,
        key: StateKey,
        at: LocalPlace,
        mut f: impl FnMut(V) -> V,
    ) -> Result<(), StoreFault> {
        let slot = match at {
            LocalPlace::Own => self.map.get_mut(&key.fp),
            LocalPlace::Overflow => self.overflow.get_mut(&key.overflow_fp),
        };
        if let Some(v) = slot {
            *v = f(*v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::{self, Rate, Take, NS_PER_S};
    use crate::limiter::KeyState;

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    fn key(fp: u64) -> StateKey {
        StateKey { fp, overflow_fp: 0 }
    }

    /// Takes a token for `fp` (overflow key: the rate's emission interval, one per limit).
    fn take(local: &mut LocalStore<KeyState>, fp: u64, now: u64, rate: Rate) -> (bool, LocalPlace) {
        let k = StateKey {
            fp,
            overflow_fp: rate.emission_ns,
        };
        let (t, at) = local
            .measure_and_replace(k, now, |s| {
                match bucket::take(s.map(|k| k.bucket), now, rate) {
                    t @ Take::Allowed { state, .. } => (
                        t,
                        Some(KeyState {
                            bucket: state,
                            ..KeyState::default()
                        }),
                    ),
                    t => (t, None),
                }
            })
            .unwrap_or((Take::Limited { wait_ns: 1 }, LocalPlace::Own));
        (matches!(t, Take::Allowed { .. }), at)
    }

    fn allowed(local: &mut LocalStore<KeyState>, fp: u64, now: u64, rate: Rate) -> bool {
        take(local, fp, now, rate).0
    }

    #[test]
    fn churn_past_capacity_cannot_reset_an_exhausted_key() {
        let mut local = LocalStore::new(4);
        let rate = Rate::new(0.001, 2);
        let victim: Vec<bool> = (0..3).map(|_| allowed(&mut local, 1, T0, rate)).collect();
        assert_eq!(victim, [true, true, false]);
        // 2,000 other keys, one request each: 3 fill the map, 2 pass through the overflow
        // bucket (burst 2), the other 1,995 are limited; nothing is evicted.
        let churn = (100..2_100u64)
            .filter(|fp| allowed(&mut local, *fp, T0 + fp, rate))
            .count();
        assert_eq!(churn, 5);
        assert_eq!(local.len(), 4);
        assert_eq!(local.free_at.len(), 4);
        assert!(!allowed(&mut local, 1, T0 + 3_000, rate));
        // The map was full of active buckets the whole time: never looked at once.
        assert_eq!(local.examined(), 0);
    }

    #[test]
    fn values_free_again_make_room_and_others_stay() {
        let mut local = LocalStore::new(3);
        let fast = Rate::new(1.0, 1); // full again 1 s after one token
        let slow = Rate::new(0.001, 1); // full again after 1000 s
        assert!(allowed(&mut local, 1, T0, fast));
        assert!(allowed(&mut local, 2, T0, fast));
        assert!(allowed(&mut local, 3, T0, slow));
        // Full, nothing free: key 4 takes the overflow bucket of its limit (burst 1).
        assert_eq!(take(&mut local, 4, T0, fast), (true, LocalPlace::Overflow));
        assert!(!allowed(&mut local, 5, T0, fast));
        // Another limit has its own overflow bucket.
        assert_eq!(take(&mut local, 6, T0, slow), (true, LocalPlace::Overflow));
        // One second later keys 1 and 2 are full again and go; key 3 stays exhausted.
        assert_eq!(
            take(&mut local, 4, T0 + NS_PER_S, fast),
            (true, LocalPlace::Own)
        );
        assert_eq!(local.len(), 2);
        assert_eq!(local.examined(), 2);
        assert!(allowed(&mut local, 5, T0 + NS_PER_S, fast));
        assert!(!allowed(&mut local, 3, T0 + NS_PER_S, slow));
        // Full again, nothing due: the next new key examines nothing more.
        assert_eq!(
            take(&mut local, 7, T0 + NS_PER_S, fast),
            (true, LocalPlace::Overflow)
        );
        assert_eq!(local.examined(), 2);
    }

    #[test]
    fn an_active_value_is_pushed_back_not_evicted_and_each_entry_is_looked_at_once() {
        let mut local = LocalStore::new(2);
        let rate = Rate::new(1.0, 5);
        // Key 1 takes a token at T0 (heap: full again at T0 + 1 s), then 4 more 0.9 s
        // later: its bucket is now full again only at T0 + 5 s.
        assert!(allowed(&mut local, 1, T0, rate));
        for _ in 0..4 {
            assert!(allowed(&mut local, 1, T0 + 900_000_000, rate));
        }
        assert!(allowed(&mut local, 2, T0 + 900_000_000, rate));
        // At T0 + 2 s key 1's entry is due but its bucket is active: pushed back; key 2
        // (full again at T0 + 1.9 s) goes.
        assert_eq!(
            take(&mut local, 3, T0 + 2 * NS_PER_S, rate),
            (true, LocalPlace::Own)
        );
        assert_eq!(local.examined(), 2);
        assert_eq!(local.len(), 2);
        assert_eq!(local.free_at.len(), 2);
        // Thousands of new keys before T0 + 3 s: none is free, none is examined again.
        for fp in 10..5_000u64 {
            let _ = take(&mut local, fp, T0 + 2 * NS_PER_S + fp, rate);
        }
        assert_eq!(local.examined(), 2);
        // Key 1 kept its bucket: 5 tokens taken, 2 refilled by T0 + 2 s.
        assert_eq!(
            bucket::tokens(local.get(1).map(|k| k.bucket), T0 + 2 * NS_PER_S, rate),
            2
        );
    }

    #[test]
    fn replace_at_reaches_the_own_or_the_overflow_value() {
        let mut local = LocalStore::new(1);
        let rate = Rate::new(0.001, 1);
        assert!(allowed(&mut local, 1, T0, rate));
        assert_eq!(take(&mut local, 2, T0, rate), (true, LocalPlace::Overflow));
        assert!(!allowed(&mut local, 3, T0, rate));
        let k = StateKey {
            fp: 2,
            overflow_fp: rate.emission_ns,
        };
        assert_eq!(
            local.replace_at(k, LocalPlace::Overflow, |s| KeyState {
                bucket: bucket::refund(s.bucket, rate),
                ..s
            }),
            Ok(())
        );
        assert!(allowed(&mut local, 3, T0, rate));
        assert!(!allowed(&mut local, 2, T0, rate));
        assert_eq!(
            local.replace_at(key(1), LocalPlace::Own, |s| KeyState {
                bucket: bucket::refund(s.bucket, rate),
                ..s
            }),
            Ok(())
        );
        assert!(allowed(&mut local, 1, T0, rate));
    }
}
