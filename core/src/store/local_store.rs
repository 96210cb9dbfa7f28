//! The per-worker fallback: the second implementation of the [`StateStore`] seam, in VM
//! memory, used when the shared slot table cannot serve a key (store error, lost CAS races,
//! collision, corrupt slot). It decides with the same math and the same limits.
//!
//! Bounded, so a store outage under a flood of distinct clients cannot grow memory, and it
//! evicts only what carries no information: a value of rank 0 ([`SlotValue::rank`], e.g. a
//! bucket that is full again). Any other value is kept, so an exhausted client stays
//! exhausted whatever other clients send. A key that finds no room (the key map is full of
//! active values) shares the value of its *group* ([`StateKey::group_fp`]: for a client
//! address, its /24 or /48 under the limit), kept in a second map bounded the same way; a key
//! without a group, or whose group finds no room either, shares the key's *overflow* value
//! (one per limit). Every shared value is strict: each key that shares it draws from it, and
//! a key's group never changes, so churning addresses inside a group cannot make fresh
//! buckets, while a client from another group is not charged for it. A shared value keeps
//! only its bucket and learned cost ([`SlotValue::shared`]): no Retry-After compliance or
//! penalty, no flights, so no client's conduct lands on the neighbours it shares with.
//!
//! Finding evictable values never scans a map: a min-heap holds one entry per key,
//! `(free_at_ns when pushed, key)` ([`SlotValue::free_at_ns`]), and only entries whose time
//! has come are looked at. An entry can be early (the value changed since; it is pushed
//! again with its current time) or late (the value was relaxed, e.g. a refund; it is then
//! evicted later than it could be, the strict side).

use crate::store::slot_table::SlotValue;
use crate::store::{StateKey, StateStore, StoreFault};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Where a [`LocalStore`] put a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalPlace {
    /// The key's own entry.
    Own,
    /// The shared entry of the key's group (`group_fp`).
    Group,
    /// The shared overflow entry of the key's `overflow_fp`.
    Overflow,
}

/// At most `cap` values by fingerprint, evicting only values of rank 0.
#[derive(Debug)]
struct Bounded<V> {
    map: HashMap<u64, V>,
    /// One entry per key of `map`: the earliest time its value may rank 0.
    free_at: BinaryHeap<Reverse<(u64, u64)>>,
    cap: usize,
    /// Heap entries looked at while evicting (tests check a full map is not rescanned).
    examined: u64,
    /// Its values are shared by many keys: each is kept as [`SlotValue::shared`].
    shared: bool,
}

impl<V: SlotValue> Bounded<V> {
    fn new(cap: usize, shared: bool) -> Bounded<V> {
        Bounded {
            map: HashMap::new(),
            free_at: BinaryHeap::new(),
            cap: cap.max(1),
            examined: 0,
            shared,
        }
    }

    /// `f` on `fp`'s value (its own, or `None` for a new one that found room) and the new
    /// value kept; `None` (nothing called) when `fp` has no value and there is no room.
    fn measure_and_replace<T>(
        &mut self,
        fp: u64,
        now_ns: u64,
        f: &mut impl FnMut(Option<V>) -> (T, Option<V>),
    ) -> Option<T> {
        let shared = self.shared;
        if let Some(v) = self.map.get_mut(&fp) {
            let (out, new) = f(Some(*v));
            if let Some(new) = new {
                *v = if shared { new.shared() } else { new };
            }
            return Some(out);
        }
        if self.map.len() >= self.cap {
            self.evict_free(now_ns);
        }
        if self.map.len() >= self.cap {
            return None;
        }
        let (out, new) = f(None);
        if let Some(new) = new {
            let new = if shared { new.shared() } else { new };
            self.map.insert(fp, new);
            self.free_at.push(Reverse((new.free_at_ns(), fp)));
        }
        Some(out)
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

/// The per-worker fallback store: at most `cap` keys, at most `cap` groups, plus one
/// overflow value per overflow key (one per limit).
#[derive(Debug)]
pub struct LocalStore<V> {
    keys: Bounded<V>,
    groups: Bounded<V>,
    overflow: HashMap<u64, V>,
}

impl<V: SlotValue> LocalStore<V> {
    /// A store holding at most `cap` (at least 1) keys and as many groups.
    pub fn new(cap: usize) -> LocalStore<V> {
        LocalStore {
            keys: Bounded::new(cap, false),
            groups: Bounded::new(cap, true),
            overflow: HashMap::new(),
        }
    }

    /// Keys held (group and overflow values not included).
    pub fn len(&self) -> usize {
        self.keys.map.len()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.map.is_empty()
    }

    /// Groups held.
    pub fn groups_len(&self) -> usize {
        self.groups.map.len()
    }

    /// Heap entries looked at while evicting keys and groups, so far.
    pub fn examined(&self) -> u64 {
        self.keys.examined + self.groups.examined
    }

    /// The value of key `fp`, if it has its own.
    pub fn get(&self, fp: u64) -> Option<V> {
        self.keys.map.get(&fp).copied()
    }
}

impl<V: SlotValue> StateStore<V> for LocalStore<V> {
    type Place = LocalPlace;

    /// Never fails: a key without room uses its group's value, else its overflow value.
    fn measure_and_replace<T>(
        &mut self,
        key: StateKey,
        now_ns: u64,
        mut f: impl FnMut(Option<V>) -> (T, Option<V>),
    ) -> Result<(T, LocalPlace), StoreFault> {
        if let Some(out) = self.keys.measure_and_replace(key.fp, now_ns, &mut f) {
            return Ok((out, LocalPlace::Own));
        }
        if let Some(group) = key.group_fp {
            if let Some(out) = self.groups.measure_and_replace(group, now_ns, &mut f) {
                return Ok((out, LocalPlace::Group));
            }
        }
        let current = self.overflow.get(&key.overflow_fp).copied();
        let (out, new) = f(current);
        if let Some(new) = new {
            self.overflow.insert(key.overflow_fp, new.shared());
        }
        Ok((out, LocalPlace::Overflow))
    }

    fn replace_at(
        &mut self,
        key: StateKey,
        at: LocalPlace,
        mut f: impl FnMut(V) -> V,
    ) -> Result<(), StoreFault> {
        let (slot, shared) = match at {
            LocalPlace::Own => (self.keys.map.get_mut(&key.fp), false),
            LocalPlace::Group => (key.group_fp.and_then(|g| self.groups.map.get_mut(&g)), true),
            LocalPlace::Overflow => (self.overflow.get_mut(&key.overflow_fp), true),
        };
        if let Some(v) = slot {
            let new = f(*v);
            *v = if shared { new.shared() } else { new };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::bucket::{self, Rate, Take, NS_PER_S};
    use crate::limits::limiter::KeyState;

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    fn key(fp: u64) -> StateKey {
        StateKey {
            fp,
            group_fp: None,
            overflow_fp: 0,
        }
    }

    /// Takes a token for `fp` (overflow key: the rate's emission interval, one per limit).
    fn take(local: &mut LocalStore<KeyState>, fp: u64, now: u64, rate: Rate) -> (bool, LocalPlace) {
        let k = StateKey {
            fp,
            group_fp: None,
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

    /// Takes a token for `fp` of group `group` (overflow key 0).
    fn take_in(
        local: &mut LocalStore<KeyState>,
        (fp, group): (u64, u64),
        now: u64,
        rate: Rate,
    ) -> (bool, LocalPlace) {
        let k = StateKey {
            fp,
            group_fp: Some(group),
            overflow_fp: 0,
        };
        let (ok, at) = local
            .measure_and_replace(k, now, |s| {
                match bucket::take(s.map(|k| k.bucket), now, rate) {
                    Take::Allowed { state, .. } => (
                        true,
                        Some(KeyState {
                            bucket: state,
                            ..KeyState::default()
                        }),
                    ),
                    Take::Limited { .. } => (false, None),
                }
            })
            .unwrap_or((false, LocalPlace::Own));
        (ok, at)
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
        assert_eq!(local.keys.free_at.len(), 4);
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
        assert_eq!(local.keys.free_at.len(), 2);
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
            group_fp: None,
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

    #[test]
    fn a_key_without_room_shares_its_group_and_other_groups_are_not_charged_for_it() {
        let mut local = LocalStore::new(2);
        let rate = Rate::new(0.001, 2);
        // Two active keys fill the key map.
        assert_eq!(
            take_in(&mut local, (1, 100), T0, rate),
            (true, LocalPlace::Own)
        );
        assert_eq!(
            take_in(&mut local, (2, 100), T0, rate),
            (true, LocalPlace::Own)
        );
        // 50 more keys of group 200 (an attacker's /24): they share one bucket of burst 2.
        let attacker: Vec<bool> = (10..60u64)
            .map(|fp| take_in(&mut local, (fp, 200), T0, rate).0)
            .collect();
        assert_eq!(attacker.iter().filter(|ok| **ok).count(), 2);
        assert_eq!(attacker.get(..3), Some(&[true, true, false][..]));
        // A key of another group is charged to its own group's bucket, which is full.
        assert_eq!(
            take_in(&mut local, (70, 300), T0, rate),
            (true, LocalPlace::Group)
        );
        // Another address of that group shares it: one token left, then none, for either.
        assert!(take_in(&mut local, (71, 300), T0, rate).0);
        assert!(!take_in(&mut local, (72, 300), T0, rate).0);
        assert!(!take_in(&mut local, (70, 300), T0, rate).0);
        // The keys with their own entries kept them (one token left each).
        assert_eq!(
            take_in(&mut local, (1, 100), T0, rate),
            (true, LocalPlace::Own)
        );
        assert!(!take_in(&mut local, (1, 100), T0, rate).0);
        assert_eq!((local.len(), local.groups_len()), (2, 2));
    }

    #[test]
    fn groups_are_bounded_and_a_group_without_room_shares_the_overflow() {
        let mut local = LocalStore::new(1);
        let rate = Rate::new(0.001, 1);
        assert!(take_in(&mut local, (1, 100), T0, rate).0);
        // The only group entry goes to group 200; group 300 finds no room: overflow.
        assert_eq!(
            take_in(&mut local, (2, 200), T0, rate),
            (true, LocalPlace::Group)
        );
        assert_eq!(
            take_in(&mut local, (3, 300), T0, rate),
            (true, LocalPlace::Overflow)
        );
        assert!(!take_in(&mut local, (4, 400), T0, rate).0);
        assert_eq!(local.groups_len(), 1);
        // 1000 s later every bucket is full again: group 200's entry goes, group 300 takes
        // it (the key map's entry is taken first by key 3).
        let later = T0 + 1_000 * NS_PER_S;
        assert_eq!(
            take_in(&mut local, (3, 300), later, rate),
            (true, LocalPlace::Own)
        );
        assert_eq!(
            take_in(&mut local, (5, 300), later, rate),
            (true, LocalPlace::Group)
        );
        assert!(!take_in(&mut local, (6, 300), later, rate).0);
    }

    #[test]
    fn replace_at_reaches_the_group_value() {
        let mut local = LocalStore::new(1);
        let rate = Rate::new(0.001, 1);
        assert!(take_in(&mut local, (1, 100), T0, rate).0);
        assert_eq!(
            take_in(&mut local, (2, 200), T0, rate),
            (true, LocalPlace::Group)
        );
        assert!(!take_in(&mut local, (3, 200), T0, rate).0);
        let k = StateKey {
            fp: 2,
            group_fp: Some(200),
            overflow_fp: 0,
        };
        assert_eq!(
            local.replace_at(k, LocalPlace::Group, |s| KeyState {
                bucket: bucket::refund(s.bucket, rate),
                ..s
            }),
            Ok(())
        );
        assert!(take_in(&mut local, (3, 200), T0, rate).0);
        assert!(!take_in(&mut local, (2, 200), T0, rate).0);
    }
}
