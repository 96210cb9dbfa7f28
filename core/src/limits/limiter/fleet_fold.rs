//! The limiter in fleet mode: this Envoy's share of each bucket, and a sync answer folded
//! into the local buckets ([`crate::fleet`]).

use super::{Limiter, StoreEvents};
use crate::config::Config;
use crate::fleet::{self, FleetBuckets};
use crate::limits::bucket;
use crate::store::SharedData;

impl Limiter {
    /// Fleet state (`None` when fleet mode is off).
    pub fn fleet(&self) -> Option<&FleetBuckets> {
        self.fleet.as_ref()
    }

    /// Fleet state, to change (`None` when fleet mode is off).
    pub fn fleet_mut(&mut self) -> Option<&mut FleetBuckets> {
        self.fleet.as_mut()
    }

    /// The bucket this Envoy keeps for a limit of `rate`: the limit itself, or in fleet
    /// mode this replica's share of it ([`fleet::FleetView::local_rate`]).
    pub fn local_rate(&self, rate: bucket::Rate) -> bucket::Rate {
        match &self.fleet {
            Some(f) => f.view.local_rate(rate),
            None => rate,
        }
    }

    /// Folds a fleet sync answer into the local buckets: `states[i]` is the fleet-wide state
    /// of `batch[i]`'s bucket, `replicas` the live replica count. A bucket with fewer tokens
    /// in this replica's share of the fleet's ([`fleet::folded_tat`], plus what this
    /// worker took since the sync left) than locally is set to that share; one with more
    /// keeps its local state (it refills by itself).
    pub fn fold_fleet(
        &mut self,
        cfg: &Config,
        store: &dyn SharedData,
        batch: &[fleet::Use],
        states: &[crawlguard_contract::fleet::FleetKeyState],
        replicas: u32,
        now_ns: u64,
    ) {
        let Some(f) = self.fleet.as_mut() else {
            return;
        };
        f.view.replicas = replicas.max(1);
        f.view.degraded = false;
        let view = f.view;
        let mut events = StoreEvents::default();
        for (u, s) in batch.iter().zip(states) {
            let Some(b) = cfg.limits.get(u.limit).and_then(|l| l.bucket) else {
                continue;
            };
            let unsent = self.fleet.as_ref().map_or(0, |f| f.ledger.used(u.key.fp));
            let local = view.local_rate(b.rate);
            let tat = fleet::folded_tat(now_ns, b.rate, local, s.full_in_ns, view.replicas, unsent);
            // Only ever stricter: the fleet's view is an interval old (the other replicas'
            // newer use is missing from it), the local bucket already counts this Envoy's.
            let _ = self.update(store, u.key, now_ns, &mut events, &mut |old| {
                let local_tat = old.map_or(0, |s| s.bucket.tat_ns);
                if tat <= local_tat.max(now_ns) {
                    return ((), None);
                }
                let mut st = old.unwrap_or_default();
                st.bucket = fleet::folded(now_ns, tat);
                ((), Some(st))
            });
        }
    }
}
