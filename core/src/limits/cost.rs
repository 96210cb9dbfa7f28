//! What a key of a cost-based limit (`limits[].cost`) remembers between its requests: how
//! many of its reservations are in flight, and what its last settled request cost. Pure; the
//! limiter keeps it in the key's slot next to the bucket.
//!
//! Why: a reservation is taken when the request arrives and settled when the origin reports
//! the real cost, so requests in flight together can each pass on a small reservation and
//! then all settle high (60 concurrent listings of 1,000 items, reserve 20, burst 1,000: 50
//! admitted, 50,000 items spent). Two rules bound that overspend:
//! - at most `cost.max_in_flight` reservations of one client (its address, an IPv6 client's
//!   /48: [`crate::identity::client_ip::concurrency_prefix`]) are in flight at once under a limit,
//!   whatever the limit's key, counted in the client's flight state under the limit
//!   ([`crate::limits::limiter::Limiter::take_flight`]), so no client's stalled requests hold a shared
//!   key (`global`, the "missing" key) or a named one at its cap;
//! - a key reserves what its last settled request cost (at least `cost.reserve`, at most
//!   `burst`), so once one response has settled, requests in flight together each hold
//!   about their real cost.
//!
//! One client therefore overspends a key by at most `max_in_flight` x (cost - reservation)
//! per Envoy; a key in debt admits nothing until the debt is repaid (the bucket's own rule).
//! A limit key's state uses only `last_cost`; a client's flight state only the counts.

use crate::limits::bucket::NS_PER_S;

/// Length of one flight epoch, seconds. A reservation counts in the epoch it was taken in
/// and in the next one, then it is forgotten whether or not it settled: a count whose
/// requests never settle (a reload, a worker gone, a lost write) frees the key 300 to 600 s
/// after its last such reservation, however busy the key stays. Longer than any response
/// Envoy's default route timeout (15 s) lets through; a request that lives longer (a body
/// trickled for minutes) stops counting and the overspend bound no longer covers it, so an
/// operator bounds request lifetime with Envoy's `request_timeout` (README, cost quotas).
pub const IN_FLIGHT_EPOCH_S: u32 = 300;

/// A cost-based key's in-flight reservations and learned cost (10 bytes in its slot).
///
/// Reservations are counted per epoch of [`IN_FLIGHT_EPOCH_S`]: `in_flight` those taken in
/// the epoch starting at `epoch_s`, `in_flight_prev` those of the epoch before. Each
/// reservation remembers its epoch ([`CostState::take`]'s answer) and is settled in the count
/// it went into, so a lost settlement is forgotten two epochs later instead of holding the
/// key at its cap for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CostState {
    /// Reservations taken in the current epoch and not settled yet.
    pub in_flight: u8,
    /// Reservations taken in the previous epoch and not settled yet.
    pub in_flight_prev: u8,
    /// Start of the current epoch, seconds since the Unix epoch (0: none yet).
    pub epoch_s: u32,
    /// Tokens the key's last settled request cost (0: none settled with a reported cost).
    pub last_cost: u32,
}

fn secs(now_ns: u64) -> u32 {
    u32::try_from(now_ns / NS_PER_S).unwrap_or(u32::MAX)
}

impl CostState {
    /// The counts moved to the epoch holding `now_ns`: one epoch on, the current count
    /// becomes the previous one; two or more, both are forgotten.
    fn rolled(&self, now_ns: u64) -> CostState {
        let now = secs(now_ns);
        let age = now.saturating_sub(self.epoch_s);
        if self.epoch_s == 0 || age >= 2 * IN_FLIGHT_EPOCH_S {
            CostState {
                in_flight: 0,
                in_flight_prev: 0,
                epoch_s: now,
                ..*self
            }
        } else if age >= IN_FLIGHT_EPOCH_S {
            CostState {
                in_flight: 0,
                in_flight_prev: self.in_flight,
                epoch_s: self.epoch_s.saturating_add(IN_FLIGHT_EPOCH_S),
                ..*self
            }
        } else {
            *self
        }
    }

    /// Reservations in flight at `now_ns` (those of the current and the previous epoch).
    pub fn in_flight_at(&self, now_ns: u64) -> u8 {
        let r = self.rolled(now_ns);
        r.in_flight.saturating_add(r.in_flight_prev)
    }

    /// True when nothing is remembered that matters at `now_ns` (no request in flight; the
    /// learned cost alone does not keep a slot).
    pub fn is_idle(&self, now_ns: u64) -> bool {
        self.in_flight_at(now_ns) == 0
    }

    /// When every count is forgotten, ns since the Unix epoch (0 when none).
    pub fn idle_at_ns(&self) -> u64 {
        let until_s = if self.in_flight > 0 {
            self.epoch_s.saturating_add(2 * IN_FLIGHT_EPOCH_S)
        } else if self.in_flight_prev > 0 {
            self.epoch_s.saturating_add(IN_FLIGHT_EPOCH_S)
        } else {
            return 0;
        };
        u64::from(until_s).saturating_mul(NS_PER_S)
    }

    /// Tokens the next request of this key reserves: its last settled cost, at least
    /// `reserve` and at most `burst` (a larger reservation would never be admitted).
    pub fn reservation(&self, reserve: u32, burst: u32) -> u32 {
        reserve.max(self.last_cost).min(burst.max(1)).max(1)
    }

    /// True when another reservation may be taken at `now_ns` under `max_in_flight`.
    pub fn has_room(&self, now_ns: u64, max_in_flight: u8) -> bool {
        self.in_flight_at(now_ns) < max_in_flight
    }

    /// A reservation was taken at `now_ns`; returns the epoch it counts in, to hand back
    /// to [`CostState::settle`].
    pub fn take(&mut self, now_ns: u64) -> u32 {
        *self = self.rolled(now_ns);
        self.in_flight = self.in_flight.saturating_add(1);
        self.epoch_s
    }

    /// A reservation taken in epoch `taken_epoch_s` (0: it was never counted) was settled
    /// (or given back) at `now_ns`; `actual` is the cost the origin reported, remembered for
    /// the next reservation (`None`: not reported, nothing learned). A reservation already
    /// forgotten leaves the counts alone.
    pub fn settle(&mut self, now_ns: u64, taken_epoch_s: u32, actual: Option<u32>) {
        *self = self.rolled(now_ns);
        if taken_epoch_s != 0 {
            if taken_epoch_s == self.epoch_s {
                self.in_flight = self.in_flight.saturating_sub(1);
            } else if taken_epoch_s.saturating_add(IN_FLIGHT_EPOCH_S) == self.epoch_s {
                self.in_flight_prev = self.in_flight_prev.saturating_sub(1);
            }
        }
        if let Some(a) = actual {
            self.last_cost = a;
        }
    }

    /// What a value shared by many keys keeps (a per-worker address group or overflow,
    /// [`crate::store::local_store`]): the learned cost, no flights, so that one key's stalled
    /// requests cannot hold its neighbours at the cap.
    pub fn shared(&self) -> CostState {
        CostState {
            last_cost: self.last_cost,
            ..CostState::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000 * NS_PER_S;
    const EPOCH_NS: u64 = IN_FLIGHT_EPOCH_S as u64 * NS_PER_S;

    #[test]
    fn in_flight_counts_up_to_the_cap_and_down_on_settling() {
        let mut c = CostState::default();
        assert!(c.is_idle(T0));
        let mut epochs = Vec::new();
        for _ in 0..4 {
            assert!(c.has_room(T0, 4));
            epochs.push(c.take(T0));
        }
        assert_eq!(epochs, [1_700_000_000; 4]);
        assert_eq!(c.in_flight_at(T0), 4);
        assert!(!c.has_room(T0, 4));
        assert!(!c.is_idle(T0));
        c.settle(T0, epochs[0], None);
        assert!(c.has_room(T0, 4));
        assert_eq!(c.last_cost, 0, "an unreported cost teaches nothing");
        for _ in 0..10 {
            c.settle(T0, epochs[1], Some(7));
        }
        assert_eq!(c.in_flight_at(T0), 0, "never below zero");
        assert_eq!(c.last_cost, 7);
        assert_eq!(c.idle_at_ns(), 0);
    }

    #[test]
    fn a_count_nobody_settles_is_forgotten_two_epochs_later_even_on_a_busy_key() {
        let mut c = CostState::default();
        let lost = c.take(T0);
        c.take(T0);
        assert_eq!(c.idle_at_ns(), T0 + 2 * EPOCH_NS);
        // The key stays busy: a reservation taken and settled every 10 s.
        let mut t = T0;
        while t < T0 + 2 * EPOCH_NS {
            let e = c.take(t);
            assert_eq!(c.in_flight_at(t), 3, "at {} s", (t - T0) / NS_PER_S);
            c.settle(t, e, Some(5));
            t += 10 * NS_PER_S;
        }
        assert_eq!(c.in_flight_at(T0 + 2 * EPOCH_NS - 1), 2);
        assert_eq!(c.in_flight_at(T0 + 2 * EPOCH_NS), 0);
        // Settling a forgotten reservation leaves the new counts alone.
        let e = c.take(T0 + 2 * EPOCH_NS);
        c.settle(T0 + 2 * EPOCH_NS, lost, None);
        assert_eq!(c.in_flight_at(T0 + 2 * EPOCH_NS), 1);
        c.settle(T0 + 2 * EPOCH_NS, e, None);
        assert!(c.is_idle(T0 + 2 * EPOCH_NS));
    }

    #[test]
    fn a_reservation_settles_in_the_epoch_it_was_taken_in() {
        let mut c = CostState::default();
        let old = c.take(T0);
        let later = T0 + EPOCH_NS + NS_PER_S;
        let new = c.take(later);
        assert_eq!(new, old + IN_FLIGHT_EPOCH_S);
        assert_eq!((c.in_flight, c.in_flight_prev), (1, 1));
        assert_eq!(
            c.idle_at_ns(),
            u64::from(new + 2 * IN_FLIGHT_EPOCH_S) * NS_PER_S
        );
        c.settle(later, old, None);
        assert_eq!((c.in_flight, c.in_flight_prev), (1, 0));
        c.settle(later, new, None);
        assert!(c.is_idle(later));
    }

    #[test]
    fn a_shared_value_keeps_the_learned_cost_and_no_flights() {
        let mut c = CostState::default();
        c.take(T0);
        c.settle(T0, 0, Some(900));
        assert_eq!(
            c.in_flight_at(T0),
            1,
            "a never-counted reservation settles nothing"
        );
        assert_eq!(
            c.shared(),
            CostState {
                last_cost: 900,
                ..CostState::default()
            }
        );
    }

    #[test]
    fn the_reservation_is_the_last_cost_between_reserve_and_burst() {
        let mut c = CostState::default();
        assert_eq!(c.reservation(20, 1000), 20);
        c.settle(T0, 0, Some(1000));
        assert_eq!(c.reservation(20, 1000), 1000);
        c.settle(T0, 0, Some(5000));
        assert_eq!(c.reservation(20, 1000), 1000, "never more than the burst");
        c.settle(T0, 0, Some(3));
        assert_eq!(c.reservation(20, 1000), 20, "never less than reserve");
        assert_eq!(CostState::default().reservation(0, 0), 1);
    }
}
