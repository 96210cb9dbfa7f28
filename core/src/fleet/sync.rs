//! The fleet sync, on the root context: every `fleet.sync_interval_ms` a worker sends
//! what its [`super::Ledger`] recorded to the sidecar (`POST /v1/fleet/sync`,
//! [`crawlguard_contract::fleet`]), folds the answer into its buckets
//! ([`Limiter::fold_fleet`]), and on a failure decides alone, degraded (the module doc of
//! [`crate::fleet`] states the rules).

use super::{replica_id, Use};
use crate::config::{Config, DegradedShare};
use crate::host::{Callout, Host};
use crate::limits::limiter::Limiter;
use crate::metrics::Metrics;
use crawlguard_contract::fleet::{self as wire, KeyUse, SyncRequest, SyncResponse};
use std::cell::RefCell;

/// What a sync reads and changes of its worker (the worker composes these; the sync sees
/// nothing else of it).
#[derive(Clone, Copy)]
pub struct SyncParts<'a> {
    /// The configuration (`fleet` section; `limits` for each key's rate and burst).
    pub cfg: &'a Config,
    /// The fleet counters and gauges.
    pub metrics: &'a Metrics,
    /// The buckets a sync answer is folded into, and the ledger of use to send.
    pub limiter: &'a RefCell<Limiter>,
    /// The sync in flight, degraded time, warnings.
    pub fleet_sync: &'a RefCell<SyncState>,
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
pub fn tick(w: SyncParts<'_>, host: &mut dyn Host, now_ns: u64, tick_ns: u64) {
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
fn send(w: SyncParts<'_>, host: &mut dyn Host, st: &mut SyncState, now_ns: u64) {
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
    let Some(replica) = replica_id(host.shared_data(), &candidate, w.cfg.store.cas_retries) else {
        failed(w, host, st, batch, SyncError::Store, now_ns);
        return;
    };
    let body = request_body(w.cfg, &replica, &batch);
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
            // Only limits with a bucket are recorded (places in flight are per Envoy).
            let b = cfg.limits.get(u.limit)?.bucket?;
            Some(KeyUse {
                key: format!("{:016x}", u.key.fp),
                rate_per_s: b.rate_per_s,
                burst: b.burst,
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
    w: SyncParts<'_>,
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
    w: SyncParts<'_>,
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
        l.fold_fleet(w.cfg, host.shared_data(), batch, &a.keys, replicas, now_ns);
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
    w: SyncParts<'_>,
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
                    cfg.limits
                        .get(i)
                        .and_then(|l| l.bucket)
                        .map_or(0, |b| u64::from(b.burst))
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
}
