//! Fleet mode's sync endpoint: `POST /v1/fleet/sync` (contract: `crawlguard_contract::fleet`).
//!
//! Each Envoy worker posts the bucket consumption it saw since its last sync; the whole batch
//! is applied to Redis atomically by one Lua script ([`SYNC_SCRIPT`], run with EVALSHA by
//! [`RedisStore::sync`]) with the Redis server's clock, and the answer carries each bucket's
//! fleet-wide state and the number of live replicas.
//!
//! | situation | answer |
//! |---|---|
//! | applied | `200` [`SyncResponse`] |
//! | body not JSON of the contract's shape, or [`validate`] fails | `400 {"error":".."}` |
//! | body over [`MAX_BODY_BYTES`] | `413 {"error":".."}` |
//! | no Redis configured (fleet mode off) | `503 {"error":".."}` |
//! | Redis error or timeout (`redis.timeout_ms`) | `503 {"error":"redis unavailable: <kind>"}` |
//!
//! The filter treats anything but a 200 as a sync error and keeps deciding locally.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use crate::metrics::Metrics;
use crate::redis_store::RedisStore;
use crawlguard_contract::fleet::{
    validate, FleetKeyState, KeyUse, SyncRequest, SyncResponse, PATH,
};

/// The Lua script that applies one batch (see the file for its keys, arguments and reply).
pub const SYNC_SCRIPT: &str = include_str!("fleet_sync.lua");

/// Largest accepted request body: 10,000 keys of about 100 bytes of JSON each, with room.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

pub use crawlguard_contract::fleet::MAX_AHEAD_NS;

/// The GCRA emission interval of a rate as the script takes it: the contract's
/// ([`crawlguard_contract::fleet::emission_ns`], which the filter's buckets use too), at
/// most [`MAX_AHEAD_NS`] (the filter refuses a fleet-mode limit slower than that; a posted
/// key may still be).
pub fn emission_ns(rate_per_s: f64) -> u64 {
    crawlguard_contract::fleet::emission_ns(rate_per_s).min(MAX_AHEAD_NS)
}

/// The Redis key of a bucket: `<prefix>bucket:<key as 16 lowercase hex digits>`, so `"ff"`,
/// `"00FF"` and `"00000000000000ff"` (one 64-bit fingerprint) are one bucket.
pub fn bucket_key(prefix: &str, key: &str) -> String {
    match u64::from_str_radix(key, 16) {
        Ok(v) => format!("{prefix}bucket:{v:016x}"),
        // Not reached for validated requests; still one stable name.
        Err(_) => format!("{prefix}bucket:{}", key.to_ascii_lowercase()),
    }
}

/// The Redis key of the replicas' heartbeat set: `<prefix>replicas`.
pub fn replicas_key(prefix: &str) -> String {
    format!("{prefix}replicas")
}

/// Turns the script's reply (`{replicas, now_ms, available_1, full_in_ns_1, ...}`) into the
/// answer for `keys` and Redis's clock (ms since the Unix epoch), checking its length and
/// clamping every figure into its contract range. `{-1, now_ms}` (past the deadline) is an
/// error.
pub fn decode_reply(reply: &[i64], keys: &[KeyUse]) -> Result<(SyncResponse, i64), String> {
    if let [-1, _] = reply {
        return Err("the script ran past its deadline and changed nothing".into());
    }
    let expected = 2 + 2 * keys.len();
    if reply.len() != expected {
        return Err(format!(
            "script reply has {} integers, expected {expected}",
            reply.len()
        ));
    }
    let replicas = u32::try_from(reply[0].max(1)).unwrap_or(u32::MAX);
    let now_ms = reply[1];
    let keys = keys
        .iter()
        .zip(reply[2..].chunks_exact(2))
        .map(|(k, pair)| FleetKeyState {
            available: u32::try_from(pair[0].clamp(0, i64::from(k.burst))).unwrap_or(0),
            full_in_ns: u64::try_from(pair[1]).unwrap_or(0),
        })
        .collect();
    Ok((SyncResponse { keys, replicas }, now_ms))
}

/// What the sync route needs: the store (absent when fleet mode is off) and the metrics.
#[derive(Clone)]
pub struct Fleet {
    store: Option<Arc<RedisStore>>,
    metrics: Arc<Metrics>,
}

impl Fleet {
    /// Fleet mode with `store`, or off (`None`: every sync answers 503).
    pub fn new(store: Option<Arc<RedisStore>>, metrics: Arc<Metrics>) -> Fleet {
        Fleet { store, metrics }
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, Json(body)).into_response()
}

/// Keeps error messages short whatever the client sent.
fn truncate(s: &str) -> String {
    s.chars().take(200).collect()
}

async fn sync(State(fleet): State<Fleet>, body: Result<Bytes, BytesRejection>) -> Response {
    let m = &fleet.metrics.fleet;
    let Some(store) = &fleet.store else {
        m.sync_batch("off");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "fleet mode is off: this sidecar has no Redis (--redis)",
        );
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            m.sync_batch("invalid");
            let status = e.status();
            let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("body too large: at most {MAX_BODY_BYTES} bytes")
            } else {
                format!("unreadable body: {}", truncate(&e.body_text()))
            };
            return error(status, message);
        }
    };
    let req: SyncRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            m.sync_batch("invalid");
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid sync request: {}", truncate(&e.to_string())),
            );
        }
    };
    if let Err(e) = validate(&req) {
        m.sync_batch("invalid");
        return error(StatusCode::BAD_REQUEST, e);
    }
    match store.sync(&req).await {
        Ok(answer) => {
            m.sync_batch("ok");
            m.sync_batch_keys.observe(req.keys.len() as f64);
            m.replicas.set(i64::from(answer.replicas));
            Json(answer).into_response()
        }
        Err(e) => {
            m.sync_batch("unavailable");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("redis unavailable: {}", e.kind()),
            )
        }
    }
}

/// The sync route (`POST /v1/fleet/sync`, body at most [`MAX_BODY_BYTES`]).
pub fn router(fleet: Fleet) -> Router {
    Router::new()
        .route(PATH, post(sync))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(fleet)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(burst: u32) -> KeyUse {
        KeyUse {
            key: "ab".into(),
            rate_per_s: 1.0,
            burst,
            used: 0,
        }
    }

    #[test]
    fn emission_is_rounded_and_clamped() {
        assert_eq!(emission_ns(1.0), 1_000_000_000);
        assert_eq!(emission_ns(3.0), 333_333_333);
        assert_eq!(emission_ns(1.5), 666_666_667);
        assert_eq!(emission_ns(0.5), 2_000_000_000);
        assert_eq!(emission_ns(1e9), 1);
        assert_eq!(emission_ns(4e9), 1);
        assert_eq!(emission_ns(f64::MAX), 1);
        assert_eq!(emission_ns(1e-300), MAX_AHEAD_NS);
        assert_eq!(emission_ns(f64::MIN_POSITIVE), MAX_AHEAD_NS);
    }

    #[test]
    fn bucket_keys_are_one_name_per_fingerprint() {
        assert_eq!(bucket_key("cg:", "ff"), "cg:bucket:00000000000000ff");
        assert_eq!(bucket_key("cg:", "00FF"), "cg:bucket:00000000000000ff");
        assert_eq!(
            bucket_key("crawlguard:", "FFFFFFFFFFFFFFFF"),
            "crawlguard:bucket:ffffffffffffffff"
        );
        assert_eq!(replicas_key("crawlguard:"), "crawlguard:replicas");
    }

    #[test]
    fn replies_are_checked_and_clamped() {
        let keys = [key(10), key(3)];
        assert_eq!(
            decode_reply(&[2, 1_700_000_000_000, 7, 3_000_000_000, 0, 9_000], &keys),
            Ok((
                SyncResponse {
                    keys: vec![
                        FleetKeyState {
                            available: 7,
                            full_in_ns: 3_000_000_000
                        },
                        FleetKeyState {
                            available: 0,
                            full_in_ns: 9_000
                        },
                    ],
                    replicas: 2,
                },
                1_700_000_000_000
            ))
        );
        // Out-of-range figures are clamped into the contract's ranges.
        assert_eq!(
            decode_reply(&[0, 5, 99, -5, -1, 0], &keys),
            Ok((
                SyncResponse {
                    keys: vec![
                        FleetKeyState {
                            available: 10,
                            full_in_ns: 0
                        },
                        FleetKeyState {
                            available: 0,
                            full_in_ns: 0
                        },
                    ],
                    replicas: 1,
                },
                5
            ))
        );
        assert_eq!(
            decode_reply(&[1, 5, 7], &keys),
            Err("script reply has 3 integers, expected 6".into())
        );
        assert_eq!(
            decode_reply(&[], &[]),
            Err("script reply has 0 integers, expected 2".into())
        );
        assert_eq!(
            decode_reply(&[i64::MAX, 0], &[]).map(|r| r.0.replicas),
            Ok(u32::MAX)
        );
        assert_eq!(
            decode_reply(&[-1, 5], &keys),
            Err("the script ran past its deadline and changed nothing".into())
        );
    }
}
