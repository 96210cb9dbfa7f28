//! What a key of a cost-based limit (`limits[].cost`) remembers between its requests: what
//! its last settled request cost. Pure; the limiter keeps it in the key's slot next to the
//! bucket.
//!
//! Why: a reservation is taken when the request arrives and settled when the origin reports
//! the real cost, so requests in flight together can each pass on a small reservation and
//! then all settle high (60 concurrent listings of 1,000 items, reserve 20, burst 1,000: 50
//! admitted, 50,000 items spent). Two rules bound that overspend:
//! - at most `cost.max_in_flight` reservations of one client (its address, an IPv6 client's
//!   /48: [`crate::identity::client_ip::concurrency_prefix`]) are in flight at once under a limit,
//!   whatever the limit's key, counted in the client's places in flight under the limit
//!   ([`crate::limits::limiter::Limiter::take_flight`], the counting of
//!   [`crate::limits::in_flight`]), so no client's stalled requests hold a shared key
//!   (`global`, the "missing" key) or a named one at its cap;
//! - a key reserves what its last settled request cost (at least `cost.reserve`, at most
//!   `burst`), so once one response has settled, requests in flight together each hold
//!   about their real cost.
//!
//! One client therefore overspends a key by at most `max_in_flight` x (cost - reservation)
//! per Envoy; a key in debt admits nothing until the debt is repaid (the bucket's own rule).
//! A limit key's state uses `last_cost`; a client's flight state only its places in flight.

/// A cost-based key's learned cost (4 bytes in its slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CostState {
    /// Tokens the key's last settled request cost (0: none settled with a reported cost).
    pub last_cost: u32,
}

impl CostState {
    /// Tokens the next request of this key reserves: its last settled cost, at least
    /// `reserve` and at most `burst` (a larger reservation would never be admitted).
    pub fn reservation(&self, reserve: u32, burst: u32) -> u32 {
        reserve.max(self.last_cost).min(burst.max(1)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reservation_is_the_last_cost_between_reserve_and_burst() {
        let mut c = CostState::default();
        assert_eq!(c.reservation(20, 1000), 20);
        c.last_cost = 1000;
        assert_eq!(c.reservation(20, 1000), 1000);
        c.last_cost = 5000;
        assert_eq!(c.reservation(20, 1000), 1000, "never more than the burst");
        c.last_cost = 3;
        assert_eq!(c.reservation(20, 1000), 20, "never less than reserve");
        assert_eq!(CostState::default().reservation(0, 0), 1);
    }
}
