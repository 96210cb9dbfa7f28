//! Fleet mode (config `fleet`): one limit across every Envoy replica, kept in Redis by the
//! sidecar, with no network hop per request.
//!
//! Requests are decided exactly as without it, against this Envoy's shared-data buckets.
//! What changes:
//! - Each local bucket holds this replica's share of the burst, `burst / replicas` tokens
//!   (at least 1), refilled at the limit's rate ([`FleetView::local_rate`]), so a key never
//!   seen before does not get a whole burst on every replica.
//! - Each worker records the tokens it took per bucket key ([`Ledger`], VM memory, bounded
//!   by `fleet.max_keys_per_sync` x [`LEDGER_BATCHES`] keys; past that a key's use stays
//!   local and is counted `fleet.keys_dropped`).
//! - Every `fleet.sync_interval_ms`, the worker's root context sends what it recorded to
//!   the sidecar (`POST /v1/fleet/sync`, [`crawlguard_contract::fleet`]); the sidecar
//!   applies the batch to the fleet's buckets in Redis and answers with each bucket's
//!   fleet-wide state and the live replica count. The worker sets each local bucket to this
//!   replica's share of that state, plus what it took since the request left
//!   ([`folded_tat`]). A bucket in debt fleet-wide is in the same debt locally, so
//!   replicas stop admitting until the fleet has paid it back.
//! - A failed sync (no answer within `fleet.timeout_ms`, a refused dispatch, a non-200, a
//!   malformed answer) leaves the worker *degraded*: it keeps deciding with its local
//!   buckets, at its share of each limit (rate and burst divided by the last known replica
//!   count, `degraded_share: split`) or at the whole limit (`full`), and tries again every
//!   interval. Nothing waits on a sync. A batch is sent at most once: one that left but got
//!   no good answer may still have reached Redis (a stalled Redis runs queued scripts when
//!   it resumes), so its use is given up rather than counted twice; only a batch that never
//!   left (dispatch refused) is put back, at most a burst per key. The fleet bucket may so
//!   miss the use of an outage, which each replica limited locally meanwhile.
//!
//! Overshoot: a key's fleet-wide admissions over any window of t seconds stay within
//! `burst + rate x t` plus [`crawlguard_contract::fleet::overshoot_bound`]; the README
//! states it, the host tests check it over every window of simulated fleets, and the
//! integration tests measure it with real Envoys and Redis.

use crate::config::{Config, DegradedShare};
use crate::limits::bucket::{BucketState, Rate};
use crate::store::{read_modify_write, Rewrite, SharedData, StateKey, StoreError};
use crawlguard_contract::fleet as wire;
use std::collections::HashMap;

/// The ledger holds at most this many batches' worth of keys (`max_keys_per_sync` each).
pub const LEDGER_BATCHES: usize = 4;

/// A fleet answer never puts a key further in debt than this many refills of its bucket
/// (a sidecar bug or a corrupted value cannot block a key for long).
pub const MAX_DEBT_CAPACITIES: u128 = 16;

/// Largest sync answer read, bytes: room for [`wire::MAX_KEYS`] key states.
pub const MAX_SYNC_BODY: usize = 64 + 64 * wire::MAX_KEYS;

/// Shared-data key holding this Envoy's replica id (the same for all its workers).
pub const REPLICA_KEY: &str = "cg:fleet:replica";

/// Tokens one worker took from one bucket since it last sent that bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Use {
    /// The bucket.
    pub key: StateKey,
    /// Index of its limit in [`Config::limits`].
    pub limit: usize,
    /// Tokens taken (net of refunds).
    pub used: u64,
}

/// One worker's unsent consumption, per bucket key, in first-use order; bounded.
#[derive(Debug)]
pub struct Ledger {
    uses: Vec<Use>,
    index: HashMap<u64, usize, ahash::RandomState>,
    cap: usize,
    dropped: u64,
}

impl Ledger {
    /// An empty ledger holding at most `cap` keys.
    pub fn new(cap: usize) -> Ledger {
        Ledger {
            uses: Vec::new(),
            index: HashMap::with_hasher(ahash::RandomState::with_seeds(1, 2, 3, 4)),
            cap,
            dropped: 0,
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.uses.len()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.uses.is_empty()
    }

    /// Adds `n` tokens taken from `key` (of limit `limit`). A new key when the ledger is
    /// full is not recorded (its use stays local) and counted in [`Ledger::take_dropped`].
    pub fn record(&mut self, key: StateKey, limit: usize, n: u64) {
        if let Some(u) = self.index.get(&key.fp).and_then(|&i| self.uses.get_mut(i)) {
            u.used = u.used.saturating_add(n);
            return;
        }
        if self.uses.len() >= self.cap {
            self.dropped = self.dropped.saturating_add(1);
            return;
        }
        self.index.insert(key.fp, self.uses.len());
        self.uses.push(Use {
            key,
            limit,
            used: n,
        });
    }

    /// Takes back `n` tokens of `key` not sent yet (a cost settled below its reservation);
    /// tokens already sent stay spent fleet-wide (the strict side).
    pub fn unrecord(&mut self, fp: u64, n: u64) {
        if let Some(u) = self.index.get(&fp).and_then(|&i| self.uses.get_mut(i)) {
            u.used = u.used.saturating_sub(n);
        }
    }

    /// Unsent tokens of `fp`.
    pub fn used(&self, fp: u64) -> u64 {
        self.index
            .get(&fp)
            .and_then(|&i| self.uses.get(i))
            .map_or(0, |u| u.used)
    }

    /// Removes and returns up to `max` keys, oldest first (keys whose use was all given back
    /// are dropped on the way).
    pub fn take_batch(&mut self, max: usize) -> Vec<Use> {
        let n = max.min(self.uses.len());
        let batch: Vec<Use> = self.uses.drain(..n).filter(|u| u.used > 0).collect();
        self.reindex();
        batch
    }

    /// Puts a batch that could not be sent back in front, each key's use capped at its
    /// limit's burst (`burst_of`; use older than a full refill no longer matters) and merged
    /// with what was recorded meanwhile; keys past the cap are dropped and counted.
    pub fn put_back(&mut self, batch: Vec<Use>, burst_of: impl Fn(usize) -> u64) {
        let newer = std::mem::take(&mut self.uses);
        self.index.clear();
        for u in batch.into_iter().chain(newer) {
            let cap = burst_of(u.limit);
            if let Some(e) = self
                .index
                .get(&u.key.fp)
                .and_then(|&i| self.uses.get_mut(i))
            {
                e.used = e.used.saturating_add(u.used).min(cap);
            } else if self.uses.len() < self.cap {
                self.index.insert(u.key.fp, self.uses.len());
                self.uses.push(Use {
                    used: u.used.min(cap),
                    ..u
                });
            } else {
                self.dropped = self.dropped.saturating_add(1);
            }
        }
    }

    /// Counts `n` keys whose use is given up (sent in a sync that failed after it left).
    pub fn count_dropped(&mut self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.dropped = self.dropped.saturating_add(n);
    }

    /// Keys not recorded because the ledger was full, or given up with a failed sync, since
    /// the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    fn reindex(&mut self) {
        self.index.clear();
        for (i, u) in self.uses.iter().enumerate() {
            self.index.insert(u.key.fp, i);
        }
    }
}

/// What a worker knows of the fleet: the live replica count (from the last answer) and
/// whether its syncs are failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetView {
    /// Live replicas, as of the last answer (1 until one arrives).
    pub replicas: u32,
    /// The last sync failed.
    pub degraded: bool,
    /// How to limit while degraded.
    pub degraded_share: DegradedShare,
}

impl FleetView {
    /// The local bucket of a limit with fleet-wide `rate`: this replica's share of the burst
    /// (`burst / replicas`, at least 1) at the full rate; while degraded with `split`, the
    /// rate is divided too; while degraded with `full`, the whole limit.
    pub fn local_rate(&self, rate: Rate) -> Rate {
        let n = self.replicas.max(1);
        let share = (rate.burst / n).max(1);
        match (self.degraded, self.degraded_share) {
            (false, _) => Rate {
                emission_ns: rate.emission_ns,
                burst: share,
            },
            (true, DegradedShare::Split) => Rate {
                emission_ns: rate.emission_ns.saturating_mul(u64::from(n)),
                burst: share,
            },
            (true, DegradedShare::Full) => rate,
        }
    }
}

/// The fleet state of a limiter: the worker's ledger and view.
#[derive(Debug)]
pub struct FleetBuckets {
    /// Unsent consumption.
    pub ledger: Ledger,
    /// What the worker knows of the fleet.
    pub view: FleetView,
}

impl FleetBuckets {
    /// Fleet state for `cfg` (`None` when fleet mode is off).
    pub fn new(cfg: &Config) -> Option<FleetBuckets> {
        let f = &cfg.fleet;
        f.enabled.then(|| FleetBuckets {
            ledger: Ledger::new((f.max_keys_per_sync as usize).saturating_mul(LEDGER_BATCHES)),
            view: FleetView {
                replicas: 1,
                degraded: false,
                degraded_share: f.degraded_share,
            },
        })
    }
}

/// The local bucket's theoretical arrival time after a sync answer, ns: this replica's
/// share of the fleet bucket's free tokens, plus `unsent` tokens taken since the sync left.
///
/// `fleet` is the limit, `local` this replica's bucket ([`FleetView::local_rate`]),
/// `full_in_ns` the fleet bucket's time to full (its `tat - now`, beyond `fleet`'s
/// capacity when in debt; capped at [`MAX_DEBT_CAPACITIES`] capacities). Free fleet
/// tokens are split evenly over `replicas`; a fleet debt is carried over whole, so no
/// replica admits before the fleet could.
pub fn folded_tat(
    now_ns: u64,
    fleet: Rate,
    local: Rate,
    full_in_ns: u64,
    replicas: u32,
    unsent: u64,
) -> u64 {
    let cap = fleet.capacity_ns();
    let cap_local = local.capacity_ns();
    let full_in = u128::from(full_in_ns).min(cap.saturating_mul(MAX_DEBT_CAPACITIES));
    let used_local = if full_in <= cap {
        let share_free = (cap - full_in) / u128::from(replicas.max(1));
        cap_local.saturating_sub(share_free)
    } else {
        cap_local + (full_in - cap)
    };
    let tat = u128::from(now_ns)
        + used_local
        + u128::from(local.emission_ns).saturating_mul(u128::from(unsent));
    u64::try_from(tat).unwrap_or(u64::MAX)
}

/// A local bucket state after a sync answer (see [`folded_tat`]).
pub fn folded(now_ns: u64, tat_ns: u64) -> BucketState {
    BucketState {
        tat_ns,
        last_ns: now_ns,
    }
}

/// This Envoy's replica id: read from shared data (every worker of the Envoy uses the
/// same), created as `candidate` on first use. Read on every sync, so workers that raced to
/// create it agree from the next sync on. `None` if shared data fails.
pub fn replica_id(store: &dyn SharedData, candidate: &str, retries: u32) -> Option<String> {
    let id = read_modify_write(store, REPLICA_KEY, retries, &mut |bytes| match bytes
        .and_then(|b| std::str::from_utf8(b).ok())
    {
        Some(s) if wire::is_valid_replica(s) => Rewrite::Keep(s.to_string()),
        _ => Rewrite::Write(candidate.as_bytes().to_vec(), candidate.to_string()),
    });
    match id {
        Ok(id) => Some(id),
        // Lost every race: the next sync reads the winner's.
        Err(StoreError::CasMismatch) => Some(candidate.to_string()),
        Err(StoreError::Host(_)) => None,
    }
}

pub mod sync;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::bucket::NS_PER_S;

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    fn key(fp: u64) -> StateKey {
        StateKey {
            fp,
            group_fp: None,
            overflow_fp: 0,
        }
    }

    #[test]
    fn ledger_adds_per_key_caps_keys_and_batches_oldest_first() {
        let mut l = Ledger::new(3);
        l.record(key(1), 0, 1);
        l.record(key(2), 0, 2);
        l.record(key(1), 0, 4);
        l.record(key(3), 1, 1);
        l.record(key(4), 1, 1);
        assert_eq!((l.len(), l.used(1), l.used(2), l.used(4)), (3, 5, 2, 0));
        assert_eq!(l.take_dropped(), 1);
        assert_eq!(l.take_dropped(), 0);
        l.unrecord(2, 5);
        let b = l.take_batch(2);
        // Key 2 was given back entirely: not sent.
        assert_eq!(
            b.iter().map(|u| (u.key.fp, u.used)).collect::<Vec<_>>(),
            [(1, 5)]
        );
        assert_eq!((l.len(), l.used(3)), (1, 1));
        l.record(key(1), 0, 1);
        l.put_back(b, |_| 3);
        // Put back in front, merged with the new use and capped at the burst.
        let all: Vec<_> = l
            .take_batch(10)
            .iter()
            .map(|u| (u.key.fp, u.used))
            .collect();
        assert_eq!(all, [(1, 3), (3, 1)]);
        assert!(l.is_empty());
    }

    #[test]
    fn the_local_bucket_is_a_share_of_the_burst() {
        let rate = Rate::new(5.0, 10);
        let v = |replicas, degraded, degraded_share| FleetView {
            replicas,
            degraded,
            degraded_share,
        };
        let r = v(3, false, DegradedShare::Split).local_rate(rate);
        assert_eq!((r.emission_ns, r.burst), (200_000_000, 3));
        let r = v(3, true, DegradedShare::Split).local_rate(rate);
        assert_eq!((r.emission_ns, r.burst), (600_000_000, 3));
        assert_eq!(v(3, true, DegradedShare::Full).local_rate(rate), rate);
        // More replicas than tokens: still one each.
        assert_eq!(v(40, false, DegradedShare::Split).local_rate(rate).burst, 1);
        assert_eq!(v(1, false, DegradedShare::Split).local_rate(rate), rate);
    }

    #[test]
    fn folding_splits_free_tokens_and_carries_debt_whole() {
        let fleet = Rate::new(5.0, 10); // 200 ms per token, 2 s capacity
        let local = FleetView {
            replicas: 2,
            degraded: false,
            degraded_share: DegradedShare::Split,
        }
        .local_rate(fleet); // 5 tokens, 1 s
        let tokens = |tat| crate::limits::bucket::tokens(Some(folded(T0, tat)), T0, local);
        // Fleet full: each replica gets half the burst.
        assert_eq!(tokens(folded_tat(T0, fleet, local, 0, 2, 0)), 5);
        // 6 of 10 free: 3 each; minus 1 taken since the sync left.
        let six_free = 4 * 200_000_000;
        assert_eq!(tokens(folded_tat(T0, fleet, local, six_free, 2, 0)), 3);
        assert_eq!(tokens(folded_tat(T0, fleet, local, six_free, 2, 1)), 2);
        // Empty: nothing; in debt by 3 tokens: the next token is 3 + 1 tokens away.
        assert_eq!(tokens(folded_tat(T0, fleet, local, 2 * NS_PER_S, 2, 0)), 0);
        let tat = folded_tat(T0, fleet, local, 2 * NS_PER_S + 600_000_000, 2, 0);
        assert_eq!(tat - T0, NS_PER_S + 600_000_000);
        match crate::limits::bucket::take(Some(folded(T0, tat)), T0, local) {
            crate::limits::bucket::Take::Limited { wait_ns } => assert_eq!(wait_ns, 800_000_000),
            other => panic!("expected limited, got {other:?}"),
        }
        // A huge debt is capped at 16 capacities; u64::MAX never overflows.
        let tat = folded_tat(T0, fleet, local, u64::MAX, 2, u64::MAX);
        assert_eq!(tat, u64::MAX);
        let tat = folded_tat(T0, fleet, local, u64::MAX, 2, 0);
        assert_eq!(tat - T0, NS_PER_S + 15 * 2 * NS_PER_S);
    }

    #[test]
    fn the_replica_id_is_created_once_and_shared() {
        let store = crate::store::mem::MemStore::default();
        assert_eq!(replica_id(&store, "envoy-a", 8).as_deref(), Some("envoy-a"));
        // Another worker's candidate loses to the id already there.
        assert_eq!(replica_id(&store, "envoy-b", 8).as_deref(), Some("envoy-a"));
        store.set(REPLICA_KEY, b"not valid!", 0).expect("set");
        assert_eq!(replica_id(&store, "envoy-c", 8).as_deref(), Some("envoy-c"));
        store.fault.set(crate::store::mem::Fault::Error);
        assert_eq!(replica_id(&store, "envoy-d", 8), None);
    }
}
