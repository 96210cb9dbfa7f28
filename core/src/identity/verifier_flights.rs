//! Verifier callouts of one worker and the requests paused on them (VM memory; each Envoy
//! worker has its own).
//!
//! A claim being verified is a [`Flight`]: queued until the root context dispatches its
//! callout, then dispatched until the answer (or failure) comes. Every request that makes
//! the same claim meanwhile joins the flight and is resumed with its verdict, so a crawler
//! opening many connections at once costs one callout per worker, and none of its requests
//! falls into the unverified bucket while the verdict is on its way.
//!
//! The table is bounded: at most [`MAX_FLIGHTS`] claims at once per worker; a claim beyond
//! that is handled as a verifier error by the caller.

use crate::host::ContextId;
use crate::identity::class::Class;
use std::collections::HashMap;
use std::net::IpAddr;

/// Most claims being verified at once on one worker.
pub const MAX_FLIGHTS: usize = 1024;
/// Most requests paused on one claim (a request past it is handled as a verifier error).
pub const MAX_WAITERS: usize = 4096;

/// One claim to verify: "this client address is bot `bot_id`".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Fingerprint of (full client address, bot id): the verdict cache key.
    pub fp: u64,
    /// Fingerprint of the client's prefix (the bucket key grouping).
    pub prefix_fp: u64,
    /// The full client address.
    pub ip: IpAddr,
    /// The catalog bot id claimed.
    pub bot_id: String,
    /// The class a verified claim gets.
    pub bot_class: Class,
}

/// A request paused on a flight.
#[derive(Debug, Clone)]
pub struct Waiter<W> {
    /// Its context, to switch to when resuming it.
    pub context: ContextId,
    /// Handle to its request state (weak: the request may be gone).
    pub handle: W,
    /// It must be resumed by then, ns since the Unix epoch (joined + `timeout_ms`).
    pub deadline_ns: u64,
}

/// Where a flight is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlightState {
    /// Waiting for the root context to dispatch its callout.
    Queued,
    /// Callout sent; the answer will come with this token.
    Dispatched(u32),
}

/// A claim being verified and its paused requests.
#[derive(Debug, Clone)]
pub struct Flight<W> {
    /// The claim.
    pub claim: Claim,
    /// Queued or dispatched.
    pub state: FlightState,
    /// Paused requests, in arrival order.
    pub waiters: Vec<Waiter<W>>,
    /// Order of arrival among flights (callouts are dispatched first come, first served).
    seq: u64,
}

impl<W> Flight<W> {
    /// The earliest deadline of its waiters (`None` without waiters).
    pub fn deadline_ns(&self) -> Option<u64> {
        self.waiters.iter().map(|w| w.deadline_ns).min()
    }
}

/// What [`Flights::join`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// Joined a flight already queued or dispatched.
    Existing,
    /// Started a new, queued flight: the root context must be woken to dispatch it.
    New,
    /// The table (or the flight's waiter list) is full: not paused.
    Full,
}

/// Every flight of one worker.
#[derive(Debug)]
pub struct Flights<W> {
    by_claim: HashMap<u64, Flight<W>>,
    by_token: HashMap<u32, u64>,
    next_seq: u64,
}

impl<W> Default for Flights<W> {
    fn default() -> Self {
        Flights {
            by_claim: HashMap::new(),
            by_token: HashMap::new(),
            next_seq: 0,
        }
    }
}

impl<W: Clone> Flights<W> {
    /// Number of claims in flight.
    pub fn len(&self) -> usize {
        self.by_claim.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.by_claim.is_empty()
    }

    /// Pauses `waiter` on `claim`: joins its flight, or starts a queued one.
    pub fn join(&mut self, claim: &Claim, waiter: Waiter<W>) -> Joined {
        if let Some(f) = self.by_claim.get_mut(&claim.fp) {
            if f.waiters.len() >= MAX_WAITERS {
                return Joined::Full;
            }
            f.waiters.push(waiter);
            return Joined::Existing;
        }
        if self.by_claim.len() >= MAX_FLIGHTS {
            return Joined::Full;
        }
        self.by_claim.insert(
            claim.fp,
            Flight {
                claim: claim.clone(),
                state: FlightState::Queued,
                waiters: vec![waiter],
                seq: self.next_seq,
            },
        );
        self.next_seq += 1;
        Joined::New
    }

    /// Claims of the queued flights, first come first.
    pub fn queued(&self) -> Vec<Claim> {
        let mut q: Vec<(u64, &Claim)> = self
            .by_claim
            .values()
            .filter(|f| f.state == FlightState::Queued)
            .map(|f| (f.seq, &f.claim))
            .collect();
        q.sort_by_key(|(seq, _)| *seq);
        q.into_iter().map(|(_, c)| c.clone()).collect()
    }

    /// Dispatched flights whose claims come from prefix `prefix_fp`.
    pub fn dispatched_in_prefix(&self, prefix_fp: u64) -> u32 {
        let n = self
            .by_claim
            .values()
            .filter(|f| f.claim.prefix_fp == prefix_fp && f.state != FlightState::Queued)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The earliest waiter deadline of claim `fp`'s flight.
    pub fn deadline_ns(&self, fp: u64) -> Option<u64> {
        self.by_claim.get(&fp).and_then(Flight::deadline_ns)
    }

    /// Records that claim `fp`'s callout was sent with `token`.
    pub fn dispatched(&mut self, fp: u64, token: u32) {
        if let Some(f) = self.by_claim.get_mut(&fp) {
            f.state = FlightState::Dispatched(token);
            self.by_token.insert(token, fp);
        }
    }

    /// Removes and returns the flight whose callout answered with `token`.
    pub fn take_by_token(&mut self, token: u32) -> Option<Flight<W>> {
        let fp = self.by_token.remove(&token)?;
        self.by_claim.remove(&fp)
    }

    /// Removes and returns claim `fp`'s flight (decided without its callout).
    pub fn take(&mut self, fp: u64) -> Option<Flight<W>> {
        let f = self.by_claim.remove(&fp)?;
        if let FlightState::Dispatched(token) = f.state {
            self.by_token.remove(&token);
        }
        Some(f)
    }

    /// Removes and returns the waiters whose deadline has passed at `now_ns`, with their
    /// claims, and how many queued flights this left without waiters and dropped (nobody
    /// needs their verdict now; each ends without a callout). Dispatched flights stay, so
    /// their answer is still cached, and their callout's own outcome is what counts.
    pub fn expire(&mut self, now_ns: u64) -> (Vec<(Claim, Waiter<W>)>, usize) {
        let mut out = Vec::new();
        for f in self.by_claim.values_mut() {
            let (late, keep): (Vec<_>, Vec<_>) =
                f.waiters.drain(..).partition(|w| w.deadline_ns <= now_ns);
            f.waiters = keep;
            out.extend(late.into_iter().map(|w| (f.claim.clone(), w)));
        }
        let before = self.by_claim.len();
        self.by_claim
            .retain(|_, f| !(f.state == FlightState::Queued && f.waiters.is_empty()));
        (out, before - self.by_claim.len())
    }

    /// Removes every flight (the root context is going away) and returns their waiters,
    /// and how many flights ended so (none gets its callout's answer any more).
    pub fn drain(&mut self) -> (Vec<(Claim, Waiter<W>)>, usize) {
        self.by_token.clear();
        let ended = self.by_claim.len();
        let mut out = Vec::new();
        for (_, f) in self.by_claim.drain() {
            out.extend(f.waiters.into_iter().map(|w| (f.claim.clone(), w)));
        }
        (out, ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(fp: u64, prefix_fp: u64) -> Claim {
        Claim {
            fp,
            prefix_fp,
            ip: IpAddr::from([192, 0, 2, 1]),
            bot_id: "googlebot".into(),
            bot_class: Class::SearchCrawler,
        }
    }

    fn waiter(context: ContextId, deadline_ns: u64) -> Waiter<u32> {
        Waiter {
            context,
            handle: context,
            deadline_ns,
        }
    }

    #[test]
    fn one_flight_per_claim_every_request_joins() {
        let mut f = Flights::default();
        let c = claim(1, 10);
        assert_eq!(f.join(&c, waiter(2, 100)), Joined::New);
        for ctx in 3..53 {
            assert_eq!(f.join(&c, waiter(ctx, 200)), Joined::Existing);
        }
        assert_eq!(f.len(), 1);
        assert_eq!(f.queued(), vec![c.clone()]);
        assert_eq!(f.deadline_ns(1), Some(100));
        f.dispatched(1, 77);
        assert!(f.queued().is_empty());
        assert_eq!(f.dispatched_in_prefix(10), 1);
        let done = f.take_by_token(77).expect("flight");
        assert_eq!(done.waiters.len(), 51);
        assert_eq!(done.waiters.first().map(|w| w.context), Some(2));
        assert!(f.is_empty());
        assert!(f.take_by_token(77).is_none());
    }

    #[test]
    fn the_table_is_bounded() {
        let mut f = Flights::default();
        for fp in 0..MAX_FLIGHTS as u64 {
            assert_eq!(f.join(&claim(fp, fp), waiter(1, 1)), Joined::New);
        }
        assert_eq!(f.join(&claim(u64::MAX, 0), waiter(1, 1)), Joined::Full);
        let c = claim(0, 0);
        for _ in 1..MAX_WAITERS {
            assert_eq!(f.join(&c, waiter(1, 1)), Joined::Existing);
        }
        assert_eq!(f.join(&c, waiter(1, 1)), Joined::Full);
    }

    #[test]
    fn late_waiters_expire_and_abandoned_queued_flights_go() {
        let mut f = Flights::default();
        assert_eq!(f.join(&claim(1, 0), waiter(2, 100)), Joined::New);
        assert_eq!(f.join(&claim(1, 0), waiter(3, 300)), Joined::Existing);
        assert_eq!(f.join(&claim(2, 0), waiter(4, 100)), Joined::New);
        f.dispatched(2, 9);
        let (late, dropped) = f.expire(100);
        // Claim 2 is dispatched: it stays. Claim 1 keeps a waiter.
        assert_eq!(dropped, 0);
        let mut ctxs: Vec<u32> = late.iter().map(|(_, w)| w.context).collect();
        ctxs.sort_unstable();
        assert_eq!(ctxs, vec![2, 4]);
        // Claim 1 still has a waiter; claim 2 is dispatched: its answer will still come.
        assert_eq!(f.len(), 2);
        assert_eq!(f.deadline_ns(1), Some(300));
        let (late, dropped) = f.expire(300);
        assert_eq!((late.len(), dropped), (1, 1));
        assert_eq!(f.len(), 1);
        assert!(f.take_by_token(9).is_some_and(|fl| fl.waiters.is_empty()));
    }

    #[test]
    fn queued_flights_come_first_come_first_and_drain_empties() {
        let mut f = Flights::default();
        assert_eq!(f.join(&claim(1, 0), waiter(2, 500)), Joined::New);
        assert_eq!(f.join(&claim(2, 0), waiter(3, 100)), Joined::New);
        assert_eq!(
            f.queued().iter().map(|c| c.fp).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(f.take(1).map(|fl| fl.waiters.len()), Some(1));
        let (waiters, ended) = f.drain();
        assert_eq!((waiters.len(), ended), (1, 1));
        assert!(f.is_empty());
    }
}
