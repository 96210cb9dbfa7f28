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
use crate::host::{Callout, Host};
use crate::limits::bucket::{BucketState, Rate};
use crate::store::{SharedData, StateKey, StoreError};
use crate::worker::Worker;
use crawlguard_contract::fleet::{self as wire, KeyUse, SyncRequest, SyncResponse};
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
pub fn replica_id(store: &dyn SharedData, candidate: &str) -> Option<String> {
    match store.get(REPLICA_KEY) {
        Ok(Some((bytes, _))) => {
            if let Ok(s) = std::str::from_utf8(&bytes) {
                if wire::is_valid_replica(s) {
                    return Some(s.to_string());
                }
            }
        }
        Ok(None) => {}
        Err(_) => return None,
    }
    match store.set(REPLICA_KEY, candidate.as_bytes(), 0) {
        Ok(()) | Err(StoreError::CasMismatch) => Some(candidate.to_string()),
        Err(StoreError::Host(_)) => None,
    }
}

/// Why a sync failed (logged; each counts `fleet.sync_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncError {
    /// Envoy refused to dispatch the callout (unknown cluster?).
    Dispatch,
    /// No response (timeout, connection refused, reset).
    NoResponse,
    /// A status other than 200.
    Status,
    /// A body that is not a [`SyncResponse`] for the batch.
    Malformed,
    /// Shared data failed (the replica id could not be read).
    Store,
}

impl SyncError {
    fn as_str(self) -> &'static str {
        match self {
            SyncError::Dispatch => "dispatch refused",
            SyncError::NoResponse => "no response",
            SyncError::Status => "non-200 status",
            SyncError::Malformed => "malformed answer",
            SyncError::Store => "shared data error",
        }
    }
}

/// A sync on its way.
#[derive(Debug)]
struct InFlight {
    token: u32,
    batch: Vec<Use>,
    sent_ns: u64,
}

/// One worker's sync state (root side).
#[derive(Debug, Default)]
pub struct SyncState {
    in_flight: Option<InFlight>,
    last_sent_ns: Option<u64>,
    /// Degraded since (first failure of the current run of failures).
    degraded_since_ns: Option<u64>,
    /// Degraded time counted up to here.
    degraded_counted_ns: u64,
    /// Last failure warning logged.
    last_warning_ns: Option<u64>,
}

impl SyncState {
    /// True when callout `token` is this worker's sync in flight.
    pub fn is_in_flight(&self, token: u32) -> bool {
        self.in_flight.as_ref().is_some_and(|f| f.token == token)
    }
}

/// Minimum gap between two "still failing" warnings, ns.
const WARN_EVERY_NS: u64 = 60_000_000_000;

/// Root tick: counts degraded time, gives up on a sync Envoy never answered, and sends the
/// next one when due (every `sync_interval_ms`, even with nothing to report: it is also the
/// replica's heartbeat).
pub fn tick(w: &Worker, host: &mut dyn Host, now_ns: u64, tick_ns: u64) {
    let f = &w.cfg.fleet;
    let Ok(mut st) = w.fleet_sync.try_borrow_mut() else {
        return;
    };
    if let Some(since) = st.degraded_since_ns {
        let from = st.degraded_counted_ns.max(since);
        let ms = now_ns.saturating_sub(from) / 1_000_000;
        if ms > 0 {
            st.degraded_counted_ns = from + ms * 1_000_000;
            w.metrics
                .fleet
                .degraded_ms
                .inspect(|&id| host.add_to_counter(id, ms));
        }
    }
    let dropped = w
        .limiter
        .try_borrow_mut()
        .ok()
        .and_then(|mut l| l.fleet_mut().map(|fb| fb.ledger.take_dropped()))
        .unwrap_or(0);
    if dropped > 0 {
        w.metrics
            .fleet
            .keys_dropped
            .inspect(|&id| host.add_to_counter(id, dropped));
    }
    let timeout_ns = u64::from(f.timeout_ms) * 1_000_000;
    if let Some(fl) = &st.in_flight {
        // Envoy answers every callout by its timeout; this is the safety net if it did not.
        if now_ns.saturating_sub(fl.sent_ns) > timeout_ns + tick_ns {
            if let Some(fl) = st.in_flight.take() {
                failed(w, host, &mut st, fl.batch, SyncError::NoResponse, now_ns);
            }
        } else {
            return;
        }
    }
    let interval_ns = u64::from(f.sync_interval_ms) * 1_000_000;
    // Half a tick of slack: timers fire a little early or late.
    let due = st
        .last_sent_ns
        .is_none_or(|t| now_ns.saturating_add(tick_ns / 2) >= t.saturating_add(interval_ns));
    if due {
        send(w, host, &mut st, now_ns);
    }
}

/// Sends one batch.
fn send(w: &Worker, host: &mut dyn Host, st: &mut SyncState, now_ns: u64) {
    let f = &w.cfg.fleet;
    st.last_sent_ns = Some(now_ns);
    let batch = match w.limiter.try_borrow_mut() {
        Ok(mut l) => l
            .fleet_mut()
            .map(|fb| fb.ledger.take_batch(f.max_keys_per_sync as usize))
            .unwrap_or_default(),
        Err(_) => return,
    };
    // The clock too: replicas must differ even if a host's randomness fails (returns 0).
    let random = u64::from(host.random_u32()) << 32 | u64::from(host.random_u32());
    let candidate = format!("envoy-{:016x}", random ^ now_ns);
    let Some(replica) = replica_id(host.shared_data(), &candidate) else {
        failed(w, host, st, batch, SyncError::Store, now_ns);
        return;
    };
    let body = request_body(&w.cfg, &replica, &batch);
    let dispatched = host.dispatch_callout(&Callout {
        method: "POST",
        cluster: &f.cluster,
        authority: &f.authority,
        path: wire::PATH,
        timeout_ms: u64::from(f.timeout_ms),
        body: &body,
    });
    match dispatched {
        Ok(token) => {
            st.in_flight = Some(InFlight {
                token,
                batch,
                sent_ns: now_ns,
            })
        }
        Err(_) => failed(w, host, st, batch, SyncError::Dispatch, now_ns),
    }
}

/// The JSON [`SyncRequest`] for `batch` (the contract's type, so the wire format has one
/// source).
pub fn request_body(cfg: &Config, replica: &str, batch: &[Use]) -> Vec<u8> {
    let keys = batch
        .iter()
        .filter_map(|u| {
            let limit = cfg.limits.get(u.limit)?;
            Some(KeyUse {
                key: format!("{:016x}", u.key.fp),
                rate_per_s: limit.rate_per_s,
                burst: limit.burst,
                used: u32::try_from(u.used).unwrap_or(u32::MAX),
            })
        })
        .collect();
    let req = SyncRequest {
        replica: replica.to_string(),
        interval_ms: cfg.fleet.sync_interval_ms,
        keys,
    };
    serde_json::to_vec(&req).unwrap_or_default()
}

/// Root: the answer to callout `token` arrived. Returns false if it is not a sync (the
/// caller hands it to verification).
pub fn on_response(
    w: &Worker,
    host: &mut dyn Host,
    token: u32,
    status: Option<&[u8]>,
    body: &[u8],
    now_ns: u64,
) -> bool {
    let Ok(mut st) = w.fleet_sync.try_borrow_mut() else {
        return false;
    };
    let Some(fl) = st.in_flight.take_if(|fl| fl.token == token) else {
        return false;
    };
    let answer = match status {
        None => Err(SyncError::NoResponse),
        Some(b"200") => parse_answer(body, fl.batch.len()),
        Some(_) => Err(SyncError::Status),
    };
    match answer {
        Ok(a) => synced(w, host, &mut st, &fl.batch, &a, now_ns),
        Err(e) => failed(w, host, &mut st, fl.batch, e, now_ns),
    }
    true
}

/// Parses an answer for a batch of `n` keys: one state per key, at least one replica.
pub fn parse_answer(body: &[u8], n: usize) -> Result<SyncResponse, SyncError> {
    let a: SyncResponse = serde_json::from_slice(body).map_err(|_| SyncError::Malformed)?;
    if a.keys.len() != n || a.replicas == 0 {
        return Err(SyncError::Malformed);
    }
    Ok(a)
}

fn synced(
    w: &Worker,
    host: &mut dyn Host,
    st: &mut SyncState,
    batch: &[Use],
    a: &SyncResponse,
    now_ns: u64,
) {
    if let Some(since) = st.degraded_since_ns.take() {
        log::warn!(
            "fleet sync resumed after {} s: limits are fleet-wide again (replicas: {})",
            now_ns.saturating_sub(since) / 1_000_000_000,
            a.replicas
        );
    }
    st.last_warning_ns = None;
    // A limit is split over at most `max_replicas`: made-up replica ids posted to the
    // sidecar, or a broken one, cannot shrink every share to nothing.
    let replicas = a.replicas.min(w.cfg.fleet.max_replicas);
    if let Ok(mut l) = w.limiter.try_borrow_mut() {
        l.fold_fleet(&w.cfg, host.shared_data(), batch, &a.keys, replicas, now_ns);
    }
    let m = &w.metrics.fleet;
    m.syncs.inspect(|&id| host.increment(id));
    let keys = u64::try_from(batch.len()).unwrap_or(u64::MAX);
    m.keys_synced.inspect(|&id| host.add_to_counter(id, keys));
    m.replicas
        .inspect(|&id| host.set_gauge(id, u64::from(replicas)));
    m.degraded.inspect(|&id| host.set_gauge(id, 0));
}

fn failed(
    w: &Worker,
    host: &mut dyn Host,
    st: &mut SyncState,
    batch: Vec<Use>,
    e: SyncError,
    now_ns: u64,
) {
    let cfg = &w.cfg;
    let mut replicas = 1;
    if let Ok(mut l) = w.limiter.try_borrow_mut() {
        if let Some(fb) = l.fleet_mut() {
            // At most once: a batch that left may have reached Redis although no good answer
            // came back (a stalled Redis runs the queued scripts when it resumes, after the
            // sidecar gave up on them). Sending it again would count that use twice or more
            // and throttle clients that stayed under their limit, so only a batch that never
            // left is put back; the rest is counted `fleet.keys_dropped`.
            if matches!(e, SyncError::Dispatch | SyncError::Store) {
                fb.ledger.put_back(batch, |i| {
                    cfg.limits.get(i).map_or(0, |l| u64::from(l.burst))
                });
            } else {
                fb.ledger.count_dropped(batch.len());
            }
            fb.view.degraded = true;
            replicas = fb.view.replicas;
        }
    }
    let first = st.degraded_since_ns.is_none();
    if first {
        st.degraded_since_ns = Some(now_ns);
        st.degraded_counted_ns = now_ns;
    }
    let due = st
        .last_warning_ns
        .is_none_or(|t| now_ns.saturating_sub(t) >= WARN_EVERY_NS);
    if due {
        st.last_warning_ns = Some(now_ns);
        let share = match cfg.fleet.degraded_share {
            DegradedShare::Split => format!("its 1/{replicas} share of each limit"),
            DegradedShare::Full => "the whole of each limit".to_string(),
        };
        log::warn!(
            "fleet sync {} ({}, cluster {}): this Envoy decides alone with {share} until a \
             sync succeeds",
            if first { "failed" } else { "still failing" },
            e.as_str(),
            cfg.fleet.cluster
        );
    }
    let m = &w.metrics.fleet;
    m.sync_error.inspect(|&id| host.increment(id));
    m.degraded.inspect(|&id| host.set_gauge(id, 1));
}

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
    fn answers_must_match_the_batch() {
        let ok = br#"{"keys":[{"available":3,"full_in_ns":5}],"replicas":2}"#;
        assert_eq!(parse_answer(ok, 1).map(|a| a.replicas), Ok(2));
        assert_eq!(parse_answer(ok, 2), Err(SyncError::Malformed));
        assert_eq!(
            parse_answer(br#"{"keys":[],"replicas":0}"#, 0),
            Err(SyncError::Malformed)
        );
        for bad in [
            &br#"{"keys":[{"available":-1,"full_in_ns":5}],"replicas":2}"#[..],
            br#"{"keys":[{"available":3,"full_in_ns":5,"x":1}],"replicas":2}"#,
            b"",
            b"null",
            br#"{"keys":[{"available":3,"full_in_ns":1e30}],"replicas":2}"#,
            br#"{"keys":[{"available":3}],"replicas":2}"#,
        ] {
            assert_eq!(
                parse_answer(bad, 1),
                Err(SyncError::Malformed),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_replica_id_is_created_once_and_shared() {
        let store = crate::store::mem::MemStore::default();
        assert_eq!(replica_id(&store, "envoy-a").as_deref(), Some("envoy-a"));
        // Another worker's candidate loses to the id already there.
        assert_eq!(replica_id(&store, "envoy-b").as_deref(), Some("envoy-a"));
        store.set(REPLICA_KEY, b"not valid!", 0).expect("set");
        assert_eq!(replica_id(&store, "envoy-c").as_deref(), Some("envoy-c"));
        store.fault.set(crate::store::mem::Fault::Error);
        assert_eq!(replica_id(&store, "envoy-d"), None);
    }
}
