//! What a key of a cost-based limit (`limits[].cost`) remembers between its requests: how
//! many of its reservations are in flight, and what its last settled request cost. Pure; the
//! limiter keeps it in the key's slot next to the bucket.
//!
//! Why: a reservation is taken when the request arrives and settled when the origin reports
//! the real cost, so requests in flight together can each pass on a small reservation and
//! then all settle high (60 concurrent listings of 1,000 items, reserve 20, burst 1,000: 50
//! admitted, 50,000 items spent). Two rules bound that overspend:
//! - at most `cost.max_in_flight` reservations of a key are in flight at once;
//! - a key reserves what its last settled request cost (at least `cost.reserve`, at most
//!   `burst`), so once one response has settled, requests in flight together each hold
//!   about their real cost.
//!
//! A key therefore overspends its bucket by at most `max_in_flight` x (cost - reservation),
//! and a key in debt admits nothing until the debt is repaid (the bucket's own rule).

use crate::bucket::NS_PER_S;

/// How long an in-flight count lasts without a new reservation, seconds: a count whose
/// requests never settle (a reload or a worker gone while they were in flight) is forgotten
/// after this, instead of holding the key at its cap for ever. Longer than any response
/// Envoy's default timeouts let through.
pub const IN_FLIGHT_FORGET_S: u32 = 300;

/// A cost-based key's in-flight reservations and learned cost (9 bytes in its slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CostState {
    /// Reservations taken and not settled yet.
    pub in_flight: u8,
    /// Seconds since the Unix epoch after which `in_flight` is forgotten.
    pub in_flight_until_s: u32,
    /// Tokens the key's last settled request cost (0: none settled with a reported cost).
    pub last_cost: u32,
}

fn secs(now_ns: u64) -> u32 {
    u32::try_from(now_ns / NS_PER_S).unwrap_or(u32::MAX)
}

impl CostState {
    /// Reservations in flight at `now_ns` (0 once forgotten).
    pub fn in_flight_at(&self, now_ns: u64) -> u8 {
        if secs(now_ns) < self.in_flight_until_s {
            self.in_flight
        } else {
            0
        }
    }

    /// True when nothing is remembered that matters at `now_ns` (no request in flight; the
    /// learned cost alone does not keep a slot).
    pub fn is_idle(&self, now_ns: u64) -> bool {
        self.in_flight_at(now_ns) == 0
    }

    /// When the in-flight count is forgotten, ns since the Unix epoch (0 when none).
    pub fn idle_at_ns(&self) -> u64 {
        if self.in_flight == 0 {
            0
        } else {
            u64::from(self.in_flight_until_s).saturating_mul(NS_PER_S)
        }
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

    /// A reservation was taken at `now_ns`.
    pub fn take(&mut self, now_ns: u64) {
        self.in_flight = self.in_flight_at(now_ns).saturating_add(1);
        self.in_flight_until_s = secs(now_ns).saturating_add(IN_FLIGHT_FORGET_S);
    }

    /// A reservation was settled (or given back) at `now_ns`; `actual` is the cost the
    /// origin reported, remembered for the next reservation (`None`: not reported, nothing
    /// learned).
    pub fn settle(&mut self, now_ns: u64, actual: Option<u32>) {
        self.in_flight = self.in_flight_at(now_ns).saturating_sub(1);
        if let Some(a) = actual {
            self.last_cost = a;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    #[test]
    fn in_flight_counts_up_to_the_cap_and_down_on_settling() {
        let mut c = CostState::default();
        assert!(c.is_idle(T0));
        for _ in 0..4 {
            assert!(c.has_room(T0, 4));
            c.take(T0);
        }
        assert_eq!(c.in_flight_at(T0), 4);
        assert!(!c.has_room(T0, 4));
        assert!(!c.is_idle(T0));
        c.settle(T0, None);
        assert!(c.has_room(T0, 4));
        assert_eq!(c.last_cost, 0, "an unreported cost teaches nothing");
        for _ in 0..10 {
            c.settle(T0, Some(7));
        }
        assert_eq!(c.in_flight_at(T0), 0, "never below zero");
        assert_eq!(c.last_cost, 7);
        assert_eq!(c.in_flight, 0);
        assert_eq!(c.idle_at_ns(), 0);
    }

    #[test]
    fn a_count_nobody_settles_is_forgotten_after_its_time() {
        let mut c = CostState::default();
        c.take(T0);
        c.take(T0);
        let forget = T0 + u64::from(IN_FLIGHT_FORGET_S) * NS_PER_S;
        assert_eq!(c.idle_at_ns(), forget);
        assert_eq!(c.in_flight_at(forget - 1), 2);
        assert_eq!(c.in_flight_at(forget), 0);
        assert!(c.is_idle(forget));
        // A new reservation after that starts from zero.
        c.take(forget);
        assert_eq!(c.in_flight_at(forget), 1);
    }

    #[test]
    fn the_reservation_is_the_last_cost_between_reserve_and_burst() {
        let mut c = CostState::default();
        assert_eq!(c.reservation(20, 1000), 20);
        c.settle(T0, Some(1000));
        assert_eq!(c.reservation(20, 1000), 1000);
        c.settle(T0, Some(5000));
        assert_eq!(c.reservation(20, 1000), 1000, "never more than the burst");
        c.settle(T0, Some(3));
        assert_eq!(c.reservation(20, 1000), 20, "never less than reserve");
        assert_eq!(CostState::default().reservation(0, 0), 1);
    }
}
