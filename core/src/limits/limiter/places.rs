//! The places in flight this worker's live requests hold ([`HeldPlaces`]): a place of a
//! concurrency limit's key (`limits[].max_in_flight`), held from admission to the stream's
//! end, and a client's place under a cost-based limit (`limits[].cost.max_in_flight`), held
//! until its response settles it. The counts themselves are in the keys' slots
//! ([`crate::limits::in_flight::InFlight`]); here the worker remembers which of them are its
//! own, to give each back once ([`Limiter::release_place`]) and to renew them while their
//! requests live ([`Limiter::renew_places`], on the root tick), so that a count nobody gives
//! back (this worker gone) is forgotten within [`crate::limits::in_flight::EPOCH_S`] to twice
//! that.

use super::{KeyState, Limiter, Placed};
use crate::limits::in_flight::needs_renewal;
use crate::store::local_store::LocalPlace;
use crate::store::{SharedData, StateKey};
use std::collections::HashMap;

/// A place in flight a request holds, to give back with [`Limiter::release_place`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    fp: u64,
}

/// The places this worker holds of one key, by the epoch each counts in.
#[derive(Debug)]
struct Held {
    key: StateKey,
    at: Placed,
    /// `(epoch_s, places)`, oldest first: after each renewal one entry (every place in the
    /// key's current epoch), and a second for places taken since the epoch turned.
    epochs: Vec<(u32, u16)>,
}

impl Held {
    /// Counts `n` more places in epoch `epoch_s`, keeping the entries oldest first.
    fn add(&mut self, epoch_s: u32, n: u16) {
        match self.epochs.iter().position(|(e, _)| *e >= epoch_s) {
            Some(i) if self.epochs.get(i).is_some_and(|(e, _)| *e == epoch_s) => {
                if let Some((_, m)) = self.epochs.get_mut(i) {
                    *m = m.saturating_add(n);
                }
            }
            Some(i) => self.epochs.insert(i, (epoch_s, n)),
            None => self.epochs.push((epoch_s, n)),
        }
    }
}

/// Every key of which this worker holds places (one entry per key, removed when its last
/// place is given back): at most one per live request and limit.
#[derive(Debug, Default)]
pub(crate) struct HeldPlaces {
    keys: HashMap<u64, Held>,
}

impl Limiter {
    /// Remembers a place of `key` taken at `at` in epoch `epoch_s` as this worker's, and
    /// returns it to hand back later. `None` for a place in a per-worker address group or
    /// overflow value, which keeps no places ([`crate::limits::in_flight::InFlight::shared`]).
    pub(crate) fn hold_place(&mut self, key: StateKey, at: Placed, epoch_s: u32) -> Option<Place> {
        if matches!(
            at,
            Placed::Local(LocalPlace::Group | LocalPlace::Overflow) | Placed::Lease
        ) {
            return None;
        }
        let held = self.places.keys.entry(key.fp).or_insert(Held {
            key,
            at,
            epochs: Vec::new(),
        });
        held.at = at;
        held.add(epoch_s, 1);
        Some(Place { fp: key.fp })
    }

    /// Gives back a place a request held (its stream ended, or its response settled it):
    /// one write to the key's slot (best effort: a place the slot has forgotten, or a lost
    /// write, is forgotten with its epoch).
    pub fn release_place(&mut self, store: &dyn SharedData, place: Place, now_ns: u64) {
        let Some(held) = self.places.keys.get_mut(&place.fp) else {
            return;
        };
        let (key, at) = (held.key, held.at);
        // The oldest: the one nearest to being renewed.
        let Some((epoch_s, n)) = held.epochs.iter_mut().find(|(_, n)| *n > 0) else {
            self.places.keys.remove(&place.fp);
            return;
        };
        let epoch_s = *epoch_s;
        *n -= 1;
        held.epochs.retain(|(_, n)| *n > 0);
        if held.epochs.is_empty() {
            self.places.keys.remove(&place.fp);
        }
        self.give_back_place(store, key, at, epoch_s, now_ns);
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

    /// Renews every place this worker holds whose epoch has ended, so that the places of
    /// live requests keep counting (on the root tick): one write per such key, where its
    /// places were taken, which moves them into the key's current epoch
    /// ([`crate::limits::in_flight::InFlight::renew`]; places the slot already forgot are
    /// counted again). A renewal that fails (a store error, or a slot no longer the key's)
    /// is tried again on the next tick.
    pub fn renew_places(&mut self, store: &dyn SharedData, now_ns: u64) {
        let due: Vec<u64> = self
            .places
            .keys
            .iter()
            .filter(|(_, h)| h.epochs.iter().any(|(e, _)| needs_renewal(*e, now_ns)))
            .map(|(fp, _)| *fp)
            .collect();
        for fp in due {
            let Some(held) = self.places.keys.get(&fp) else {
                continue;
            };
            let (key, at) = (held.key, held.at);
            let old: Vec<(u32, u16)> = held
                .epochs
                .iter()
                .copied()
                .filter(|(e, _)| needs_renewal(*e, now_ns))
                .collect();
            let mut to = 0;
            let renewed = self.change_at(store, key, at, &mut |s| {
                let mut places = s.places;
                for &(e, n) in &old {
                    to = places.renew(now_ns, e, n);
                }
                KeyState { places, ..s }
            });
            if let (true, Some(held)) = (renewed, self.places.keys.get_mut(&fp)) {
                held.epochs.retain(|(e, _)| !needs_renewal(*e, now_ns));
                for (_, n) in old {
                    held.add(to, n);
                }
            }
        }
    }

    /// Places this worker holds, in all.
    pub fn places_held(&self) -> u64 {
        self.places
            .keys
            .values()
            .flat_map(|h| h.epochs.iter())
            .map(|(_, n)| u64::from(*n))
            .sum()
    }
}
