//! Requests in flight of one key ([`InFlight`]): the count a concurrency limit
//! (`limits[].max_in_flight`) bounds, and the count of a client's cost reservations in
//! flight under a cost-based limit (`limits[].cost.max_in_flight`). Pure; the limiter keeps
//! it in the key's slot next to the bucket, and each worker remembers the places its own
//! live requests hold (`limiter/places.rs`).
//!
//! Why epochs: a place is taken when a request is admitted and given back when its stream
//! ends, but a give-back can be lost (a worker or its VM gone, an end-of-stream callback that
//! never comes, a write lost to a store error). So each place counts in the epoch of
//! [`EPOCH_S`] it was taken or last renewed in, and in the next one; then it is forgotten. A
//! worker renews the places of its live requests on its tick once their epoch has ended
//! (one write per key, [`InFlight::renew`]), so a live request is counted however long it
//! lives, and a place nobody renews stops counting [`EPOCH_S`] to 2 x [`EPOCH_S`] after it
//! was taken or last renewed: the bound on a count stuck by a lost give-back.

use crate::limits::bucket::NS_PER_S;

/// Length of one in-flight epoch, seconds: a place nobody gives back or renews is forgotten
/// 10 to 20 s after it was taken or last renewed. Short enough that a client whose places
/// were lost (a reload, a worker gone) is not refused for long; long enough that a worker
/// whose root tick (250 ms) is late by seconds still renews in time.
pub const EPOCH_S: u32 = 10;

/// Most places a count holds (each of its two epochs saturates here).
pub const MAX_COUNT: u16 = u16::MAX;

/// Places in flight of one key, by epoch: `current` those taken (or renewed) in the epoch
/// starting at `epoch_s`, `previous` those of the epoch before. 8 bytes in the key's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InFlight {
    /// Places taken or renewed in the current epoch and not given back.
    pub current: u16,
    /// Places taken or renewed in the previous epoch and not given back.
    pub previous: u16,
    /// Start of the current epoch, seconds since the Unix epoch (0: none yet).
    pub epoch_s: u32,
}

fn secs(now_ns: u64) -> u32 {
    u32::try_from(now_ns / NS_PER_S).unwrap_or(u32::MAX)
}

/// True when places counted in epoch `epoch_s` must be renewed at `now_ns` to keep counting
/// (their epoch is over: they are the key's previous epoch, or forgotten).
pub fn needs_renewal(epoch_s: u32, now_ns: u64) -> bool {
    secs(now_ns) >= epoch_s.saturating_add(EPOCH_S)
}

impl InFlight {
    /// The counts moved to the epoch holding `now_ns`: one epoch on, the current count
    /// becomes the previous one; two or more, both are forgotten.
    fn rolled(&self, now_ns: u64) -> InFlight {
        let now = secs(now_ns);
        let age = now.saturating_sub(self.epoch_s);
        if self.epoch_s == 0 || age >= 2 * EPOCH_S {
            InFlight {
                current: 0,
                previous: 0,
                epoch_s: now,
            }
        } else if age >= EPOCH_S {
            InFlight {
                current: 0,
                previous: self.current,
                epoch_s: self.epoch_s.saturating_add(EPOCH_S),
            }
        } else {
            *self
        }
    }

    /// Places in flight at `now_ns` (those of the current and the previous epoch).
    pub fn count_at(&self, now_ns: u64) -> u32 {
        let r = self.rolled(now_ns);
        u32::from(r.current) + u32::from(r.previous)
    }

    /// True when another place may be taken at `now_ns` under `max` places.
    pub fn has_room(&self, now_ns: u64, max: u16) -> bool {
        self.count_at(now_ns) < u32::from(max)
    }

    /// True when no place counts at `now_ns`.
    pub fn is_idle(&self, now_ns: u64) -> bool {
        self.count_at(now_ns) == 0
    }

    /// When every place is forgotten if nothing changes, ns since the Unix epoch (0 when
    /// none counts).
    pub fn idle_at_ns(&self) -> u64 {
        let until_s = if self.current > 0 {
            self.epoch_s.saturating_add(2 * EPOCH_S)
        } else if self.previous > 0 {
            self.epoch_s.saturating_add(EPOCH_S)
        } else {
            return 0;
        };
        u64::from(until_s).saturating_mul(NS_PER_S)
    }

    /// Takes a place at `now_ns`; returns the epoch it counts in (what its give-back and
    /// renewal name).
    pub fn take(&mut self, now_ns: u64) -> u32 {
        *self = self.rolled(now_ns);
        self.current = self.current.saturating_add(1);
        self.epoch_s
    }

    /// Gives back `n` places counted in epoch `epoch_s` at `now_ns`. Places already
    /// forgotten (their epoch is gone) leave the counts alone.
    pub fn release(&mut self, now_ns: u64, epoch_s: u32, n: u16) {
        *self = self.rolled(now_ns);
        if epoch_s == 0 {
            return;
        }
        if epoch_s == self.epoch_s {
            self.current = self.current.saturating_sub(n);
        } else if epoch_s.saturating_add(EPOCH_S) == self.epoch_s {
            self.previous = self.previous.saturating_sub(n);
        }
    }

    /// Moves `n` live places counted in epoch `epoch_s` into the epoch holding `now_ns`, so
    /// they count for two more epochs; returns that epoch. Places already forgotten (their
    /// worker renewed them too late) are counted again: their requests still live.
    pub fn renew(&mut self, now_ns: u64, epoch_s: u32, n: u16) -> u32 {
        *self = self.rolled(now_ns);
        if epoch_s == self.epoch_s {
            return self.epoch_s;
        }
        if epoch_s.saturating_add(EPOCH_S) == self.epoch_s {
            self.previous = self.previous.saturating_sub(n);
        }
        self.current = self.current.saturating_add(n);
        self.epoch_s
    }

    /// What a value shared by many keys keeps (a per-worker address group or overflow,
    /// [`crate::store::local_store`]): no places, so that one key's stalled requests cannot
    /// hold its neighbours at a cap.
    pub fn shared(&self) -> InFlight {
        InFlight::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000 * NS_PER_S;
    const EPOCH_NS: u64 = EPOCH_S as u64 * NS_PER_S;

    #[test]
    fn places_count_up_to_the_cap_and_down_when_given_back() {
        let mut f = InFlight::default();
        assert!(f.is_idle(T0));
        let epochs: Vec<u32> = (0..3)
            .map(|_| {
                assert!(f.has_room(T0, 3));
                f.take(T0)
            })
            .collect();
        assert_eq!(epochs, [1_700_000_000; 3]);
        assert_eq!(f.count_at(T0), 3);
        assert!(!f.has_room(T0, 3));
        f.release(T0, epochs[0], 1);
        assert!(f.has_room(T0, 3));
        f.release(T0, epochs[1], 5);
        assert_eq!(f.count_at(T0), 0, "never below zero");
        assert_eq!(f.idle_at_ns(), 0);
    }

    #[test]
    fn a_place_nobody_renews_is_forgotten_one_to_two_epochs_later() {
        let mut f = InFlight::default();
        // A new key's epoch starts with its first place.
        assert_eq!(f.take(T0), 1_700_000_000);
        f.release(T0, 1_700_000_000, 1);
        let lost = f.take(T0 + EPOCH_NS - 1);
        assert_eq!(lost, 1_700_000_000);
        assert_eq!(f.idle_at_ns(), T0 + 2 * EPOCH_NS);
        // Taken at the very end of its epoch: counted only until the next one ends.
        assert_eq!(f.count_at(T0 + 2 * EPOCH_NS - 1), 1);
        assert_eq!(f.count_at(T0 + 2 * EPOCH_NS), 0);
        // Giving a forgotten place back leaves the new counts alone.
        let e = f.take(T0 + 2 * EPOCH_NS);
        f.release(T0 + 2 * EPOCH_NS, lost, 1);
        assert_eq!(f.count_at(T0 + 2 * EPOCH_NS), 1);
        f.release(T0 + 2 * EPOCH_NS, e, 1);
        assert!(f.is_idle(T0 + 2 * EPOCH_NS));
    }

    #[test]
    fn a_renewed_place_counts_as_long_as_its_request_lives() {
        let mut f = InFlight::default();
        let mut e = f.take(T0);
        let other = f.take(T0);
        // Renewed on the first tick (250 ms) after its epoch ends: never forgotten.
        let mut t = T0;
        for _ in 0..50 {
            t = u64::from(e) * NS_PER_S + EPOCH_NS + NS_PER_S / 4;
            assert!(needs_renewal(e, t));
            assert_eq!(f.count_at(t), if t < T0 + 2 * EPOCH_NS { 2 } else { 1 });
            e = f.renew(t, e, 1);
            assert!(!needs_renewal(e, t));
        }
        assert_eq!(f.count_at(t), 1, "the other place was never renewed");
        f.release(t, other, 1);
        assert_eq!(f.count_at(t), 1);
        f.release(t, e, 1);
        assert!(f.is_idle(t));
    }

    #[test]
    fn places_renewed_too_late_are_counted_again() {
        let mut f = InFlight::default();
        let e = f.take(T0);
        let late = T0 + 3 * EPOCH_NS;
        assert_eq!(f.count_at(late), 0);
        let e2 = f.renew(late, e, 1);
        assert_eq!(f.count_at(late), 1);
        // Renewing within the current epoch changes nothing.
        assert_eq!(f.renew(late, e2, 1), e2);
        assert_eq!(f.count_at(late), 1);
    }

    #[test]
    fn counts_saturate_and_shared_values_keep_no_places() {
        let mut f = InFlight {
            current: MAX_COUNT,
            previous: 0,
            epoch_s: 1_700_000_000,
        };
        f.take(T0);
        assert_eq!(f.current, MAX_COUNT);
        assert!(!f.has_room(T0, MAX_COUNT));
        assert_eq!(f.shared(), InFlight::default());
    }
}
