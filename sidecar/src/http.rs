//! The HTTP API: `GET /v1/verify` (`200` with an answer, `400` for a bad query, `503` when
//! DNS gave no definite answer: [`crate::verify::VerifyError`]), `GET /v1/ranges` (the
//! ranges in use, `crawlguard_contract::ranges`), `GET /healthz`, `GET /metrics`, and fleet mode's
//! `POST /v1/fleet/sync` ([`crate::fleet`], merged in by [`router_with_fleet`]).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use crate::fleet::Fleet;
use crate::resolver::Resolve;
use crate::verify::Verifier;
use crawlguard_contract::bot_id::is_valid_bot_id;
use crawlguard_contract::ranges::{generation_text, PATH as RANGES_PATH};
use crawlguard_contract::verify::PATH as VERIFY_PATH;

/// Query parameters of `/v1/verify`. Both optional here so a missing one gets our own JSON
/// error instead of the framework's plain-text rejection.
#[derive(Debug, Deserialize)]
pub struct VerifyParams {
    ip: Option<String>,
    bot: Option<String>,
}

fn bad_request(message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

async fn verify<R: Resolve>(
    State(verifier): State<Arc<Verifier<R>>>,
    params: Result<Query<VerifyParams>, QueryRejection>,
) -> Response {
    let Query(params) = match params {
        Ok(p) => p,
        Err(e) => return bad_request(format!("invalid query string: {}", e.body_text())),
    };
    let Some(ip_text) = params.ip.filter(|s| !s.is_empty()) else {
        return bad_request("missing query parameter: ip");
    };
    let Some(bot_text) = params.bot.filter(|s| !s.is_empty()) else {
        return bad_request("missing query parameter: bot");
    };
    let Ok(ip) = ip_text.parse::<IpAddr>() else {
        return bad_request(format!(
            "invalid ip: {:?} is not an IPv4 or IPv6 address",
            truncate(&ip_text)
        ));
    };
    // Bot ids are case-insensitive on the wire; the catalog is lower case.
    let bot = bot_text.to_ascii_lowercase();
    if !is_valid_bot_id(&bot) {
        return bad_request(format!(
            "invalid bot: {:?} is not 1-64 characters of [a-z0-9._-]",
            truncate(&bot_text)
        ));
    }
    match verifier.verify(ip, &bot).await {
        Ok(answer) => Json(answer).into_response(),
        // Not a verdict: the filter counts it as a verifier error (stale-if-error).
        Err(e) => {
            let body = serde_json::json!({ "error": e.to_string() });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

/// Query parameters of `/v1/ranges`.
#[derive(Debug, Deserialize)]
pub struct RangesParams {
    since: Option<String>,
}

/// `GET /v1/ranges[?since=<generation>]`: `304` when `since` (or `if-none-match`) names the
/// current generation, else `200` with the document and its `etag`. A bad query string is
/// read as no `since` (the full document is always a correct answer).
async fn ranges<R: Resolve>(
    State(verifier): State<Arc<Verifier<R>>>,
    params: Result<Query<RangesParams>, QueryRejection>,
    headers: axum::http::HeaderMap,
) -> Response {
    let (generation, body) = verifier.published_ranges();
    let current = generation_text(generation);
    let etag = format!("\"{current}\"");
    let since = params.ok().and_then(|Query(p)| p.since);
    let if_none_match = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    if since.as_deref() == Some(current.as_str()) || if_none_match == Some(etag.as_str()) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    (
        [
            (
                header::CONTENT_TYPE,
                "text/plain; charset=utf-8".to_string(),
            ),
            (header::ETAG, etag),
        ],
        body,
    )
        .into_response()
}

/// Keeps error messages short whatever the client sent.
fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics<R: Resolve>(State(verifier): State<Arc<Verifier<R>>>) -> Response {
    let m = verifier.metrics();
    m.cache_entries
        .set(i64::try_from(verifier.cached_entries()).unwrap_or(i64::MAX));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
        .into_response()
}

async fn not_found() -> Response {
    let body = serde_json::json!({ "error": "not found" });
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// The service's routes.
pub fn router<R: Resolve>(verifier: Arc<Verifier<R>>) -> Router {
    Router::new()
        .route(VERIFY_PATH, get(verify::<R>))
        .route(RANGES_PATH, get(ranges::<R>))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::<R>))
        .fallback(not_found)
        .with_state(verifier)
}

/// [`router`] plus the fleet sync route (`POST /v1/fleet/sync`, 503 while fleet mode is off).
pub fn router_with_fleet<R: Resolve>(verifier: Arc<Verifier<R>>, fleet: Fleet) -> Router {
    router(verifier).merge(crate::fleet::router(fleet))
}
