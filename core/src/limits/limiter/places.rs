//! The places in flight this worker's live requests hold ([`HeldPlaces`]): a place of a
//! concurrency limit's key (`limits[].max_in_flight`), held from admission to the stream's
//! end, and a client's place under a cost-based limit (`limits[].cost.max_in_flight`), held
//! until its response settles it. The counts themselves are in the keys' slots
//! ([`crate::limits::in_flight::InFlight`]); here the worker remembers which of them are its
//! own, to give each back once ([`Limiter::release_place`]) and to renew them while their
//! requests live ([`Limiter::tend_places`], on the root tick), so that a count nobody gives
//! back (this worker gone) is forgotten within [`crate::limits::in_flight::EPOCH_S`] to twice
//! that.
//!
//! Give-backs held back: while a key is far from its cap (this worker's last admission of
//! it saw at most half of `max_in_flight` in flight), a worker writes up to
//! [`held_back_max`] of its give-backs together on its next root tick instead of one write
//! each. They count until then (at most one tick, `host::TICK_MS`): the strict side, so never
//! more than `max_in_flight` are in flight, and a key far from its cap costs one shared-data
//! round trip per request (its admission) instead of two. What it costs: other workers may
//! see up to that many places per worker still taken, for at most one tick. A cap under 16
//! never holds a give-back back: a small cap (`max_in_flight: 1` for a client that sends
//! one request after the other) gets each place back when its stream ends.

use super::{KeyState, Limiter, Placed, Taken};
use crate::limits::in_flight::needs_renewal;
use crate::store::local_store::LocalPlace;
use crate::store::{SharedData, StateKey};
use std::collections::HashMap;

/// A place in flight a request holds, to give back with [`Limiter::release_place`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    fp: u64,
}

/// Most give-backs of one key a worker holds back under a cap of `max` places:
/// `min(max / 16, 64)` (0 below 16: every give-back is written at once).
pub fn held_back_max(max: u16) -> u16 {
    (max / 16).min(64)
}

/// `(epoch_s, places)` entries, oldest first.
type Epochs = Vec<(u32, u16)>;

/// Counts `n` more places in epoch `epoch_s`, keeping the entries oldest first.
fn add(epochs: &mut Epochs, epoch_s: u32, n: u16) {
    match epochs.iter().position(|(e, _)| *e >= epoch_s) {
        Some(i) if epochs.get(i).is_some_and(|(e, _)| *e == epoch_s) => {
            if let Some((_, m)) = epochs.get_mut(i) {
                *m = m.saturating_add(n);
            }
        }
        Some(i) => epochs.insert(i, (epoch_s, n)),
        None => epochs.push((epoch_s, n)),
    }
}

/// The places this worker holds of one key, by the epoch each counts in.
#[derive(Debug)]
struct Held {
    key: StateKey,
    at: Placed,
    /// The cap its places count against.
    max: u16,
    /// Places in flight of the key when this worker last took one.
    seen: u32,
    /// Places of live requests: after each renewal one entry (every place in the key's
    /// current epoch), and a second for places taken since the epoch turned.
    live: Epochs,
    /// Places whose requests ended, given back on the next tick (still counted in the slot).
    owed: Epochs,
}

impl Held {
    fn owed_places(&self) -> u16 {
        self.owed
            .iter()
            .fold(0u16, |sum, (_, n)| sum.saturating_add(*n))
    }
}

/// Every key of which this worker holds places (one entry per key, removed when its last
/// place is given back): at most one per live request and limit.
#[derive(Debug, Default)]
pub(crate) struct HeldPlaces {
    keys: HashMap<u64, Held>,
}

impl Limiter {
    /// Remembers a place of `key` taken at `at` (`taken`: its epoch, and the key's places in
    /// flight with it) under a cap of `max`, as this worker's, and returns it to hand back
    /// later. `None` for a place in a per-worker address group or overflow value, which
    /// keeps no places ([`crate::limits::in_flight::InFlight::shared`]).
    pub(crate) fn hold_place(
        &mut self,
        key: StateKey,
        at: Placed,
        taken: Taken,
        max: u16,
    ) -> Option<Place> {
        if matches!(
            at,
            Placed::Local(LocalPlace::Group | LocalPlace::Overflow) | Placed::Lease
        ) {
            return None;
        }
        let held = self.places.keys.entry(key.fp).or_insert(Held {
            key,
            at,
            max,
            seen: 0,
            live: Vec::new(),
            owed: Vec::new(),
        });
        held.at = at;
        held.max = max;
        held.seen = taken.in_flight;
        add(&mut held.live, taken.epoch_s, 1);
        Some(Place { fp: key.fp })
    }

    /// Gives back a place a request held (its stream ended, or its response settled it):
    /// one write to the key's slot, or, while the key is far from its cap, none until the
    /// next tick (see the module docs). Best effort: a place the slot has forgotten, or a
    /// lost write, is forgotten with its epoch.
    pub fn release_place(&mut self, store: &dyn SharedData, place: Place, now_ns: u64) {
        let Some(held) = self.places.keys.get_mut(&place.fp) else {
            return;
        };
        // The oldest: the one nearest to being renewed.
        let Some((epoch_s, n)) = held.live.first_mut() else {
            return;
        };
        let epoch_s = *epoch_s;
        *n = n.saturating_sub(1);
        held.live.retain(|(_, n)| *n > 0);
        add(&mut held.owed, epoch_s, 1);
        let far = held.seen <= u32::from(held.max / 2);
        if far && held.owed_places() <= held_back_max(held.max) {
            return;
        }
        self.give_back_owed(store, place.fp, now_ns);
    }

    /// Writes the give-backs this worker owes key `fp` (one write) and forgets the key when
    /// none of its places is left.
    fn give_back_owed(&mut self, store: &dyn SharedData, fp: u64, now_ns: u64) {
        let Some(held) = self.places.keys.get_mut(&fp) else {
            return;
        };
        let (key, at) = (held.key, held.at);
        let owed = std::mem::take(&mut held.owed);
        if held.live.is_empty() {
            self.places.keys.remove(&fp);
        }
        self.change_at(store, key, at, &mut |s| {
            let mut places = s.places;
            for &(e, n) in &owed {
                places.release(now_ns, e, n);
            }
            KeyState { places, ..s }
        });
    }

    /// Gives back a place of `key` taken at `at` in epoch `epoch_s` that no request holds
    /// (the request was rejected by a later limit).
    pub(crate) fn give_back_place(
        &mut self,
        store: &dyn SharedData,
        key: StateKey,
        at: Placed,
        epoch_s: u32,
        now_ns: u64,
    ) {
        self.change_at(store, key, at, &mut |s| {
            let mut places = s.places;
            places.release(now_ns, epoch_s, 1);
            KeyState { places, ..s }
        });
    }

    /// On the root tick: writes every give-back held back, and renews every live place
    /// whose epoch has ended, so that the places of live requests keep counting; one write
    /// per such key, where its places were taken (renewing moves them into the key's
    /// current epoch, [`crate::limits::in_flight::InFlight::renew`]; places the slot already
    /// forgot are counted again). A write that fails (a store error, or a slot no longer the
    /// key's) is tried again on the next tick.
    pub fn tend_places(&mut self, store: &dyn SharedData, now_ns: u64) {
        let due: Vec<u64> = self
            .places
            .keys
            .iter()
            .filter(|(_, h)| {
                !h.owed.is_empty() || h.live.iter().any(|(e, _)| needs_renewal(*e, now_ns))
            })
            .map(|(fp, _)| *fp)
            .collect();
        for fp in due {
            let Some(held) = self.places.keys.get(&fp) else {
                continue;
            };
            let (key, at) = (held.key, held.at);
            let owed = held.owed.clone();
            let old: Epochs = held
                .live
                .iter()
                .copied()
                .filter(|(e, _)| needs_renewal(*e, now_ns))
                .collect();
            let mut to = 0;
            let written = self.change_at(store, key, at, &mut |s| {
                let mut places = s.places;
                for &(e, n) in &owed {
                    places.release(now_ns, e, n);
                }
                for &(e, n) in &old {
                    to = places.renew(now_ns, e, n);
                }
                KeyState { places, ..s }
            });
            let Some(held) = self.places.keys.get_mut(&fp) else {
                continue;
            };
            if !written {
                continue;
            }
            held.owed.clear();
            held.live.retain(|(e, _)| !needs_renewal(*e, now_ns));
            for (_, n) in old {
                add(&mut held.live, to, n);
            }
            if held.live.is_empty() {
                self.places.keys.remove(&fp);
            }
        }
    }

    /// Places this worker holds for live requests, in all.
    pub fn places_held(&self) -> u64 {
        self.places
            .keys
            .values()
            .flat_map(|h| h.live.iter())
            .map(|(_, n)| u64::from(*n))
            .sum()
    }

    /// Give-backs this worker holds back until its next tick, in all.
    pub fn places_owed(&self) -> u64 {
        self.places
            .keys
            .values()
            .map(|h| u64::from(h.owed_places()))
            .sum()
    }
}
