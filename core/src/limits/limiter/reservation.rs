//! A cost-based limit's reservations: a client address's places in flight, and settling a
//! reservation when its response (or its stream's end) reports the cost ([`crate::limits::cost`]).

use super::{Charged, KeyState, Place, Taken};
use super::{Limiter, StoreEvents};
use crate::config::Config;
use crate::limits::bucket;
use crate::limits::escalation::Visit;
use crate::store::{SharedData, StateKey};

/// A cost-based reservation of a forwarded request, settled when its response arrives
/// ([`Limiter::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// Index of the limit in [`Config::limits`].
    pub limit: usize,
    /// Tokens reserved.
    pub reserved: u32,
    pub(crate) key: StateKey,
    pub(crate) at: super::Placed,
    /// The client's place in flight: on the limit's first reservation, `None` on the others.
    pub(crate) flight: Option<Place>,
}

impl Limiter {
    /// Takes one of a client's `max_in_flight` places under a cost-based limit (`key`: the
    /// client's [`crate::limits::bucket_key::KeyPart::FlightsOf`] key), held by this worker
    /// until [`Limiter::release_place`]: `Err(())` when all are taken; `Ok(None)` in a shared
    /// group or overflow value, which keeps no places (it always has room).
    pub(crate) fn take_flight(
        &mut self,
        store: &dyn SharedData,
        key: StateKey,
        now_ns: u64,
        max_in_flight: u8,
        events: &mut StoreEvents,
    ) -> Result<Option<Place>, ()> {
        // The result type of a charge, so that both share the store code.
        let Some(((taken, _), at)) = self.update(store, key, now_ns, events, &mut |s| {
            let mut st = s.unwrap_or_default();
            if !st.places.has_room(now_ns, u16::from(max_in_flight)) {
                let full = Charged::Limited {
                    retry_after_s: 0,
                    escalated: false,
                    in_flight: true,
                };
                return ((full, Visit::Unremarkable), None);
            }
            let place = Some(Taken::of(&mut st.places, now_ns));
            let taken = Charged::Allowed { tokens: 0, place };
            ((taken, Visit::Unremarkable), Some(st))
        }) else {
            // Unreachable (the fallback never fails): no place to hold, room as in a group.
            return Ok(None);
        };
        match taken {
            Charged::Allowed {
                place: Some(taken), ..
            } => Ok(self.hold_place(key, at, taken, u16::from(max_in_flight))),
            Charged::Allowed { place: None, .. } => Ok(None),
            Charged::Limited { .. } => Err(()),
        }
    }

    /// Settles a cost reservation at the `actual` cost the origin reported (`None`: missing
    /// or invalid, settles at the reservation): gives back what was reserved too much, or
    /// charges the extra (the bucket may go into debt), and ends the reservation's flight,
    /// remembering a reported cost for the key's next reservation ([`crate::limits::cost`]).
    pub fn settle(
        &mut self,
        cfg: &Config,
        store: &dyn SharedData,
        r: &Reservation,
        actual: Option<u32>,
        now_ns: u64,
    ) {
        let Some(b) = cfg.limits.get(r.limit).and_then(|l| l.bucket) else {
            return;
        };
        let charge = actual.unwrap_or(r.reserved);
        if let Some(f) = self.fleet.as_mut() {
            if charge > r.reserved {
                f.ledger
                    .record(r.key, r.limit, u64::from(charge - r.reserved));
            } else if charge < r.reserved {
                f.ledger.unrecord(r.key.fp, u64::from(r.reserved - charge));
            }
        }
        let rate = self.local_rate(b.rate);
        self.end_flight(store, r, rate, charge, actual, now_ns);
    }

    /// Changes the reservation `r` to `charge` tokens and ends its flight, learning
    /// `learned` (a rejected request gives everything back and teaches nothing).
    pub(crate) fn end_flight(
        &mut self,
        store: &dyn SharedData,
        r: &Reservation,
        rate: bucket::Rate,
        charge: u32,
        learned: Option<u32>,
        now_ns: u64,
    ) {
        // Cost-based limits are never leased: `r.at` is never a lease.
        self.change_at(store, r.key, r.at, &mut |s| {
            let bucket = if charge >= r.reserved {
                bucket::charge_debt(s.bucket, now_ns, rate, charge - r.reserved)
            } else {
                bucket::refund_n(s.bucket, rate, r.reserved - charge)
            };
            let mut cost = s.cost;
            if let Some(a) = learned {
                cost.last_cost = a;
            }
            KeyState { bucket, cost, ..s }
        });
        if let Some(f) = r.flight {
            self.release_place(store, f, now_ns);
        }
    }
}
