//! The fleet-sync contract (filter <-> sidecar): how each Envoy worker hands the bucket
//! consumption it saw since its last sync to its sidecar, and learns the fleet-wide state of
//! those buckets.
//!
//! `POST /v1/fleet/sync` with a JSON [`SyncRequest`] -> `200` with a JSON [`SyncResponse`].
//! Anything else (another status, a malformed body, a timeout) is a sync error: the filter
//! keeps deciding with its local buckets and does not send a batch that left again (at most
//! once: it may have reached the store although no good answer came back); only a batch
//! that never left (dispatch refused) is sent with the next one.
//!
//! The sidecar applies a whole batch atomically to the fleet's store (Redis: one Lua script
//! per batch, Redis server time as the clock). Each bucket is a GCRA theoretical arrival
//! time, like the filter's own: `used` tokens move it forward by `used x 1e9 / rate_per_s`
//! ns from `max(tat, now)`, with no upper bound (a fleet bucket may go into debt, which
//! delays later admissions everywhere); a key expires when its bucket is full again. The
//! answer says how many whole tokens each bucket has now (`available`, 0 in debt) and how
//! many replicas are alive (sent a sync within the last three of their own sync intervals,
//! at most [`MAX_ALIVE_MS`]), so each Envoy can take its share.

use serde::{Deserialize, Serialize};

/// The path of the sync endpoint.
pub const PATH: &str = "/v1/fleet/sync";

/// The fleet's bound on a bucket's time to full and on an emission interval, ns (about 104
/// days, below 2^53): the sidecar's script does its arithmetic on Lua's doubles, exact below
/// it. A fleet-mode limit must refill within it (the filter refuses one that does not).
pub const MAX_AHEAD_NS: u64 = 9_000_000_000_000_000;

/// The GCRA emission interval of a rate, ns: `round(1e9 / rate_per_s)`, at least 1; a rate
/// that is not finite and positive, or one slower than a token per `u64::MAX` ns, gives
/// `u64::MAX`. Both ends of the fleet contract must round alike: the filter's buckets
/// (`crawlguard_core::limits::bucket::Rate`) and the sidecar's Redis buckets.
pub fn emission_ns(rate_per_s: f64) -> u64 {
    if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
        return u64::MAX;
    }
    // `as` saturates for floats out of range (an infinite quotient is u64::MAX).
    ((1e9 / rate_per_s).round() as u64).max(1)
}

/// Most keys in one batch (the filter's `fleet.max_keys_per_sync` is bounded by it).
pub const MAX_KEYS: usize = 10_000;

/// The shortest sync interval a replica may announce, ms (the filter's
/// `fleet.sync_interval_ms` is checked against it).
pub const MIN_INTERVAL_MS: u32 = 100;

/// The longest sync interval a replica may announce, ms (the filter's
/// `fleet.sync_interval_ms` is checked against it).
pub const MAX_INTERVAL_MS: u32 = 60_000;

/// A replica counts as alive for this many of its own sync intervals after each sync.
pub const ALIVE_INTERVALS: u32 = 3;

/// The longest a replica counts as alive after one sync, ms: [`ALIVE_INTERVALS`] of the
/// longest interval (3 min). The store drops any member alive for longer, so a made-up
/// replica lasts at most this long after the last post that named it.
pub const MAX_ALIVE_MS: u32 = ALIVE_INTERVALS * MAX_INTERVAL_MS;

/// How long a replica syncing every `interval_ms` counts as alive after a sync, ms:
/// [`ALIVE_INTERVALS`] × `interval_ms`, at most [`MAX_ALIVE_MS`].
pub fn alive_ms(interval_ms: u32) -> u32 {
    interval_ms
        .saturating_mul(ALIVE_INTERVALS)
        .min(MAX_ALIVE_MS)
}

/// One bucket's consumption since the last sync.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyUse {
    /// The bucket key: the filter's 64-bit key fingerprint in lowercase hex (at most 16
    /// hex digits). Opaque to the sidecar; the same key on every replica of a fleet that
    /// shares `store.hash_seed`.
    pub key: String,
    /// The limit's refill rate, tokens per second (> 0, finite).
    pub rate_per_s: f64,
    /// The limit's capacity, tokens (>= 1).
    pub burst: u32,
    /// Tokens consumed since the last sync (0 is allowed: "tell me the state").
    pub used: u32,
}

/// A batch of consumption from one Envoy worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncRequest {
    /// Identifies the Envoy (replica) the worker belongs to: random per Envoy process, the
    /// same for all its workers, 1..=64 chars of `[A-Za-z0-9._-]`.
    pub replica: String,
    /// The sync interval the filter uses, ms, [`MIN_INTERVAL_MS`]..=[`MAX_INTERVAL_MS`]
    /// (the replica counts as alive for [`alive_ms`] of it).
    pub interval_ms: u32,
    /// The buckets, at most [`MAX_KEYS`].
    pub keys: Vec<KeyUse>,
}

/// One bucket's fleet-wide state after the batch was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetKeyState {
    /// Whole tokens available now, fleet-wide (0 when empty or in debt).
    pub available: u32,
    /// Nanoseconds until the bucket is full again (0: full).
    pub full_in_ns: u64,
}

/// The sidecar's answer to a [`SyncRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncResponse {
    /// One state per key of the request, in the same order.
    pub keys: Vec<FleetKeyState>,
    /// Replicas alive now (at least 1: the one asking).
    pub replicas: u32,
}

/// [`overshoot_bound`] as the READMEs write it (a test keeps them equal).
pub const OVERSHOOT_FORMULA: &str = "(replicas − 1) × (1 + 2 × rate_per_s × sync_interval_s) + \
     sqrt((replicas − 1) × rate_per_s × burst × sync_interval_s)";

/// The most a key's fleet-wide admissions over any window of `t` seconds exceed the limit's
/// own `burst + rate_per_s x t`, in tokens, for `replicas` live replicas syncing every
/// `interval_ms`:
///
/// `(replicas - 1) x (1 + 2 x rate_per_s x interval_s) + sqrt((replicas - 1) x rate_per_s x
/// burst x interval_s)`.
///
/// The first term is the steady state: a replica hears what the others took within two
/// intervals (one for them to send it, one for it to ask), and after a shared wait every
/// replica may admit one token at once. The second is spending a full burst: until a
/// replica hears that the fleet's share is below its own, it refills at the full rate.
/// The filter's host tests check it over every window of simulated fleets; the README
/// states it; the integration tests measure it with real Envoys and Redis. 0 for one
/// replica.
pub fn overshoot_bound(replicas: u32, rate_per_s: f64, burst: u32, interval_ms: u32) -> f64 {
    let others = f64::from(replicas.saturating_sub(1));
    let interval_s = f64::from(interval_ms) / 1000.0;
    others * (1.0 + 2.0 * rate_per_s * interval_s)
        + (others * rate_per_s * f64::from(burst) * interval_s).sqrt()
}

/// True if `s` is a valid replica id.
pub fn is_valid_replica(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Checks a request against the contract: a valid replica id, an interval the filter's
/// configuration allows ([`MIN_INTERVAL_MS`]..=[`MAX_INTERVAL_MS`]), at most [`MAX_KEYS`]
/// keys, each with a 1..=16 hex digit key, a positive finite rate and a burst >= 1. The
/// error names the first offending field.
pub fn validate(req: &SyncRequest) -> Result<(), String> {
    if !is_valid_replica(&req.replica) {
        return Err("replica: must be 1..=64 chars of [A-Za-z0-9._-]".into());
    }
    if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&req.interval_ms) {
        return Err(format!(
            "interval_ms: must be {MIN_INTERVAL_MS}..={MAX_INTERVAL_MS}"
        ));
    }
    if req.keys.len() > MAX_KEYS {
        return Err(format!("keys: at most {MAX_KEYS}"));
    }
    for (i, k) in req.keys.iter().enumerate() {
        if k.key.is_empty() || k.key.len() > 16 || !k.key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("keys[{i}].key: must be 1..=16 hex digits"));
        }
        if !(k.rate_per_s.is_finite() && k.rate_per_s > 0.0) {
            return Err(format!("keys[{i}].rate_per_s: must be > 0"));
        }
        if k.burst == 0 {
            return Err(format!("keys[{i}].burst: must be >= 1"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_emission_interval_is_rounded_at_least_1_ns_and_saturates() {
        assert_eq!(emission_ns(1.0), 1_000_000_000);
        assert_eq!(emission_ns(3.0), 333_333_333);
        assert_eq!(emission_ns(1.5), 666_666_667);
        assert_eq!(emission_ns(4e9), 1);
        assert_eq!(emission_ns(1e-300), u64::MAX);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(emission_ns(bad), u64::MAX, "{bad}");
        }
    }

    use super::*;

    fn req() -> SyncRequest {
        SyncRequest {
            replica: "envoy-a.1".into(),
            interval_ms: 1000,
            keys: vec![KeyUse {
                key: "00ff17".into(),
                rate_per_s: 0.5,
                burst: 10,
                used: 3,
            }],
        }
    }

    #[test]
    fn the_wire_format_is_plain_json() {
        let r = req();
        let json = serde_json::to_string(&r).expect("serialises");
        assert_eq!(
            json,
            r#"{"replica":"envoy-a.1","interval_ms":1000,"keys":[{"key":"00ff17","rate_per_s":0.5,"burst":10,"used":3}]}"#
        );
        assert_eq!(serde_json::from_str::<SyncRequest>(&json).ok(), Some(r));
        let a = SyncResponse {
            keys: vec![FleetKeyState {
                available: 7,
                full_in_ns: 6_000_000_000,
            }],
            replicas: 3,
        };
        let json = serde_json::to_string(&a).expect("serialises");
        assert_eq!(
            json,
            r#"{"keys":[{"available":7,"full_in_ns":6000000000}],"replicas":3}"#
        );
    }

    #[test]
    fn a_replica_is_alive_for_three_intervals_at_most_three_minutes() {
        assert_eq!(alive_ms(100), 300);
        assert_eq!(alive_ms(500), 1_500);
        assert_eq!(alive_ms(60_000), 180_000);
        assert_eq!(alive_ms(60_001), 180_000);
        assert_eq!(alive_ms(u32::MAX), 180_000);
        assert_eq!(MAX_ALIVE_MS, 180_000);
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(validate(&req()), Ok(()));
        let mut r = req();
        r.replica = "a b".into();
        assert_eq!(
            validate(&r),
            Err("replica: must be 1..=64 chars of [A-Za-z0-9._-]".into())
        );
        let mut r = req();
        r.keys[0].key = "xyz".into();
        assert_eq!(
            validate(&r),
            Err("keys[0].key: must be 1..=16 hex digits".into())
        );
        let mut r = req();
        r.keys[0].rate_per_s = f64::NAN;
        assert_eq!(validate(&r), Err("keys[0].rate_per_s: must be > 0".into()));
        let mut r = req();
        r.keys[0].burst = 0;
        assert_eq!(validate(&r), Err("keys[0].burst: must be >= 1".into()));
        for (interval_ms, ok) in [
            (99, false),
            (100, true),
            (60_000, true),
            (60_001, false),
            (u32::MAX, false),
        ] {
            let mut r = req();
            r.interval_ms = interval_ms;
            let want = match ok {
                true => Ok(()),
                false => Err("interval_ms: must be 100..=60000".to_string()),
            };
            assert_eq!(validate(&r), want, "{interval_ms}");
        }
        assert!(serde_json::from_str::<SyncRequest>(
            r#"{"replica":"a","interval_ms":1,"keys":[],"x":1}"#
        )
        .is_err());
    }
}
