//! A worker's clock: the host's clock (`get_current_time_nanoseconds`, one host call) is read
//! only when a request touches shared state or needs exact time; a request decided by what
//! the worker holds in memory (a leased token, a per-worker copy of a verified verdict) goes
//! by the worker's last reading ([`WorkerClock::coarse_ns`]).
//!
//! The last reading is the root tick's (every [`crate::host::TICK_MS`], or the fleet sync
//! interval if shorter) or a later request's, so it is behind the wall clock by at most one
//! tick period while Envoy runs the worker's ticks on time (a late tick, on a busy worker,
//! by that much more). What that bounds: a leased token is spent until the worker's next
//! tick gives the lease back ([`crate::limits::lease`]), and a per-worker verdict copy is
//! used at most one tick past its TTL or its refresh
//! ([`crate::identity::local_verdicts`]).

use crate::host::Host;
use crate::store::SharedData;
use std::cell::Cell;

/// The worker's last reading of the host's clock.
#[derive(Debug, Default)]
pub struct WorkerClock {
    last_ns: Cell<u64>,
}

impl WorkerClock {
    /// Reads the host's clock (one host call) and keeps the reading; `None` if the host
    /// fails.
    pub fn exact_ns(&self, host: &mut dyn Host) -> Option<u64> {
        let now = host.now_ns()?;
        self.observe(now);
        Some(now)
    }

    /// Keeps a reading taken elsewhere (the root tick's); never goes back.
    pub fn observe(&self, now_ns: u64) {
        if now_ns > self.last_ns.get() {
            self.last_ns.set(now_ns);
        }
    }

    /// The last reading, ns since the Unix epoch (`None` before the first): behind the wall
    /// clock by up to one tick period.
    pub fn coarse_ns(&self) -> Option<u64> {
        Some(self.last_ns.get()).filter(|t| *t > 0)
    }
}

/// Where a limit decision ([`crate::limits::decision::decide_in`]) reads shared data and
/// time: the exact time only when it touches shared state, the worker's last reading when a
/// leased token decides.
pub trait DecisionEnv {
    /// Shared data.
    fn store(&self) -> &dyn SharedData;
    /// The exact time, ns (read from the host at most once per decision).
    fn exact_ns(&mut self) -> u64;
    /// Time good enough for a lease's age: the exact time if it was read, else the
    /// worker's last reading.
    fn coarse_ns(&self) -> u64;
}

/// A decision at a known time (tests, the command's replay, exempt paths).
pub struct At<'a> {
    /// Shared data.
    pub store: &'a dyn SharedData,
    /// The time, ns.
    pub now_ns: u64,
}

impl DecisionEnv for At<'_> {
    fn store(&self) -> &dyn SharedData {
        self.store
    }

    fn exact_ns(&mut self) -> u64 {
        self.now_ns
    }

    fn coarse_ns(&self) -> u64 {
        self.now_ns
    }
}

/// A request's decision over the host: the host's clock read on first need.
pub struct OnHost<'a> {
    /// The proxy.
    pub host: &'a mut dyn Host,
    /// The worker's clock.
    pub clock: &'a WorkerClock,
    /// The exact time once read.
    pub exact: Option<u64>,
}

impl OnHost<'_> {
    /// The time the decision went by: exact if it was read, else the worker's last reading
    /// (0 if none).
    pub fn time_ns(&self) -> u64 {
        self.coarse_ns()
    }
}

impl DecisionEnv for OnHost<'_> {
    fn store(&self) -> &dyn SharedData {
        self.host.shared_data()
    }

    fn exact_ns(&mut self) -> u64 {
        if let Some(t) = self.exact {
            return t;
        }
        // A host whose clock fails: the last reading stands in.
        let t = self
            .clock
            .exact_ns(self.host)
            .or(self.clock.coarse_ns())
            .unwrap_or(0);
        self.exact = Some(t);
        t
    }

    fn coarse_ns(&self) -> u64 {
        self.exact.or(self.clock.coarse_ns()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_reading_never_goes_back() {
        let c = WorkerClock::default();
        assert_eq!(c.coarse_ns(), None);
        c.observe(10);
        c.observe(5);
        assert_eq!(c.coarse_ns(), Some(10));
        c.observe(11);
        assert_eq!(c.coarse_ns(), Some(11));
    }
}
