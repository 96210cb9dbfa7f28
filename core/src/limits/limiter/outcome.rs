//! What the limit decision answers for one request ([`LimitResult`]): its [`Decision`], how
//! a request over a limit is answered ([`OverLimit`]), and the shared-store trouble met
//! ([`StoreEvents`]).

use super::{Place, Reservation};
use crate::limits::escalation::Visit;
use crate::store::StoreFault;

/// How a request over a limit is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverLimit {
    /// Index of the limit in [`Config::limits`].
    pub limit: usize,
    /// Status to answer with (class `reject_status`).
    pub status: u16,
    /// Retry-After, seconds (jitter included).
    pub retry_after_s: u32,
    /// The cap of requests in flight that refused it (the limit's `max_in_flight`, or a
    /// cost-based limit's `cost.max_in_flight`); `None`: its token bucket did.
    pub in_flight: Option<u16>,
}

/// What happens to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Passed every matching limit (or none matched).
    Allowed,
    /// Over a limit, answer locally with a rejection.
    Limited(OverLimit),
    /// Over a limit in shadow mode: counted, sent upstream anyway.
    ShadowLimited(OverLimit),
    /// A `header:<name>` key of limit `limit` (index in [`Config::limits`]) named more than
    /// [`crate::limits::bucket_key::MAX_KEY_VALUES`] distinct values: answered with a 400, no token taken.
    Malformed {
        /// Index of the limit in [`Config::limits`].
        limit: usize,
    },
    /// The same in shadow mode: counted, sent upstream anyway.
    ShadowMalformed {
        /// Index of the limit in [`Config::limits`].
        limit: usize,
    },
}

/// Shared-store trouble met while deciding, by kind (each is counted; none fails the
/// request: the per-worker fallback decided those buckets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreEvents {
    /// Host call errors.
    pub errors: u32,
    /// CAS retries exhausted.
    pub cas_exhausted: u32,
    /// Slot collisions with active buckets.
    pub collisions: u32,
    /// Slots that did not decode.
    pub corrupt: u32,
}

impl StoreEvents {
    /// True when any bucket was decided by the per-worker fallback (the request "failed
    /// open" onto it).
    pub fn fell_back(&self) -> bool {
        self.errors + self.cas_exhausted + self.collisions + self.corrupt > 0
    }

    pub(crate) fn count(&mut self, fault: StoreFault) {
        match fault {
            StoreFault::Store => self.errors += 1,
            StoreFault::CasExhausted => self.cas_exhausted += 1,
            StoreFault::Collision => self.collisions += 1,
            StoreFault::Corrupt => self.corrupt += 1,
        }
    }
}

/// The result of checking one request against the limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitResult {
    /// Route index (see [`Config::route_name`]).
    pub route: usize,
    /// The decision.
    pub decision: Decision,
    /// Store trouble met.
    pub store: StoreEvents,
    /// How the request relates to a Retry-After one of its keys was given: `Ignored` if any
    /// key was told to wait longer, else `Honoured` if one came back after its wait.
    pub visit: Visit,
    /// The rejection was made longer by escalation (the key serves a penalty).
    pub escalated: bool,
    /// Cost-based reservations to settle on the response (only when forwarded).
    pub reservations: Vec<Reservation>,
    /// Places in flight of concurrency limits the request holds until its stream ends (only
    /// when forwarded).
    pub places: Vec<Place>,
}
