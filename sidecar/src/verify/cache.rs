//! The verdict cache's key and entries (each with its own lifetime), and the in-flight
//! gauge's guard around a resolution.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::Expiry;

use super::Outcome;
use crate::metrics::Metrics;

/// A claim: the (canonical) client address and the bot id it claims.
pub(super) type Key = (IpAddr, String);

#[derive(Debug)]
pub(super) struct Cached {
    pub(super) outcome: Outcome,
    pub(super) ttl: Duration,
    pub(super) expires_at: Instant,
}

pub(super) struct PerEntryTtl;

impl Expiry<Key, Arc<Cached>> for PerEntryTtl {
    fn expire_after_create(&self, _: &Key, value: &Arc<Cached>, _: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// Decrements the in-flight gauge even when the resolving future is dropped (the HTTP
/// client went away): moka then hands the resolution to another waiter.
pub(super) struct InFlight<'a>(&'a Metrics);

impl<'a> InFlight<'a> {
    pub(super) fn enter(metrics: &'a Metrics) -> Self {
        metrics.in_flight.inc();
        InFlight(metrics)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}
