//! The simulator's HTTP routes: the catalog (models, endpoints, ZDR), the key and credits,
//! `/generation`, and its own control and inspection routes; chat is `chat/`'s.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::sim::auth::authorize;
use crate::sim::billing::Outcome;
use crate::sim::errors::error_response;
use crate::sim::state::*;

pub(crate) fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/api/v1/models", get(models))
        .route("/api/v1/models/{author}/{slug}/endpoints", get(endpoints))
        .route("/api/v1/endpoints/zdr", get(zdr_endpoints))
        .route("/api/v1/chat/completions", post(super::chat::chat))
        .route("/api/v1/key", get(key))
        .route("/api/v1/auth/key", get(key))
        .route("/api/v1/credits", get(credits))
        .route("/api/v1/generation", get(generation))
        .route("/sim/state", get(sim_state))
        .route("/sim/control", post(sim_control))
        .route("/sim/requests", get(sim_requests))
        .route("/sim/billing", get(sim_billing))
        .with_state(state)
}

pub(crate) async fn models(State(state): State<Arc<SimState>>) -> Response {
    axum::Json(
        json!({"data": [state.cfg.table.model.clone()], "total_count": 1, "links": {"next": null}}),
    )
    .into_response()
}

pub(crate) async fn endpoints(
    State(state): State<Arc<SimState>>,
    UrlPath((author, slug)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let id = format!("{author}/{slug}");
    let table = &state.cfg.table;
    if !table.serves(&id) {
        return error_response(404, &format!("No endpoints found for {id}."), None);
    }
    // Without a key the API leaves the 30-minute latency and throughput figures out.
    let authed = authorize(&state, &headers).is_ok();
    let live = state.live();
    let list: Vec<Value> = table
        .endpoints
        .iter()
        .zip(&live.behaviours)
        .filter(|(_, b)| !b.down)
        .map(|(e, _)| {
            let mut w = e.wire.clone();
            if !authed {
                w["latency_last_30m"] = Value::Null;
                w["throughput_last_30m"] = Value::Null;
            }
            w
        })
        .collect();
    let m = &table.model;
    axum::Json(json!({"data": {
        "id": table.model_id,
        "name": m.get("name"),
        "created": m.get("created"),
        "description": m.get("description"),
        "architecture": m.get("architecture"),
        "endpoints": list,
    }}))
    .into_response()
}

/// `GET /api/v1/endpoints/zdr`: the endpoints with a Zero Data Retention policy, as
/// `PublicEndpoint` objects ("Preview the impact of ZDR on the available endpoints", the API
/// reference; the ZDR guide points to it).
pub(crate) async fn zdr_endpoints(State(state): State<Arc<SimState>>) -> Response {
    let table = &state.cfg.table;
    let live = state.live();
    let list: Vec<Value> = (table.endpoints.iter().zip(&live.behaviours))
        .filter(|(_, b)| b.zdr && !b.down)
        .map(|(e, _)| e.wire.clone())
        .collect();
    axum::Json(json!({ "data": list })).into_response()
}

pub(crate) async fn key(State(state): State<Arc<SimState>>, headers: HeaderMap) -> Response {
    let token = match authorize(&state, &headers) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let usage = state.billed_total().as_f64();
    let limit = state.cfg.key_limit_usd;
    // The real label shows a prefix and suffix of the key; so do we.
    let label = if token.len() > 16 {
        format!("{}...{}", &token[..10], &token[token.len() - 3..])
    } else {
        "sim-key".to_string()
    };
    axum::Json(json!({"data": {
        "label": label,
        "limit": limit,
        "limit_remaining": limit.map(|l| (l - usage).max(0.0)),
        "limit_reset": null,
        "usage": usage, "usage_daily": usage, "usage_weekly": usage, "usage_monthly": usage,
        "byok_usage": 0, "is_free_tier": false, "is_management_key": false,
        "is_provisioning_key": false, "expires_at": null,
        "rate_limit": {"requests": -1, "interval": "10s", "note": "deprecated"}
    }}))
    .into_response()
}

pub(crate) async fn credits(State(state): State<Arc<SimState>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&state, &headers) {
        return r;
    }
    error_response(403, "Only management keys can fetch credits", None)
}

#[derive(Deserialize)]
pub(crate) struct GenerationQuery {
    id: Option<String>,
}

pub(crate) async fn generation(
    State(state): State<Arc<SimState>>,
    headers: HeaderMap,
    Query(q): Query<GenerationQuery>,
) -> Response {
    if let Err(r) = authorize(&state, &headers) {
        return r;
    }
    let Some(id) = q.id else {
        return error_response(400, "Missing id", None);
    };
    let (lag, factor) = {
        let live = state.live();
        (live.generation_visible_after, live.generation_cost_factor)
    };
    match state.billing.generation(&id) {
        Some((e, age)) if age >= lag => axum::Json(json!({"data": {
            "id": e.id, "created_at": e.at, "model": state.cfg.table.model_id,
            "provider_name": e.provider, "streamed": e.streamed,
            "cancelled": e.outcome == Outcome::Cancelled,
            "finish_reason": e.finish_reason, "native_finish_reason": e.finish_reason,
            "latency": e.latency_ms, "generation_time": e.latency_ms,
            "tokens_prompt": e.prompt_tokens, "tokens_completion": e.completion_tokens,
            "native_tokens_prompt": e.prompt_tokens,
            "native_tokens_completion": e.completion_tokens,
            "native_tokens_reasoning": e.reasoning_tokens, "native_tokens_cached": 0,
            "total_cost": e.cost_usd.as_f64() * factor, "usage": e.cost_usd.as_f64() * factor,
            "upstream_inference_cost": null, "cache_discount": null,
            "provider_responses": [{"provider_name": e.provider, "status": 200}]
        }}))
        .into_response(),
        _ => error_response(404, &format!("Generation {id} not found"), None),
    }
}

pub(crate) async fn sim_state(State(state): State<Arc<SimState>>) -> Response {
    let live = state.live().clone();
    let per_tag = state.billing_per_tag();
    let eps: Vec<Value> = state
        .cfg
        .table
        .endpoints
        .iter()
        .zip(&live.behaviours)
        .zip(&state.in_flight)
        .map(|((e, b), n)| {
            json!({
                "tag": e.tag, "provider": e.provider_name, "behaviour": b,
                "in_flight": n.load(Ordering::Relaxed),
                "totals": per_tag.get(e.tag.as_str()).cloned().unwrap_or_default(),
            })
        })
        .collect();
    axum::Json(json!({
        "speed_scale": live.speed_scale, "output_tokens_mean": live.output_mean,
        "output_tokens_sigma": live.output_sigma,
        "generation_lag_ms": live.generation_visible_after.as_millis() as u64,
        "generation_cost_factor": live.generation_cost_factor,
        "billed_usd": state.billed_total(), "endpoints": eps,
        "chat_requests_by_http_version": {
            "http1": state.http1_requests.load(Ordering::Relaxed),
            "http2": state.http2_requests.load(Ordering::Relaxed),
        },
        "connections": state.connections(),
    }))
    .into_response()
}

pub(crate) async fn sim_control(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
    let req: ControlRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error_response(400, &format!("bad control request: {e}"), None),
    };
    match state.control(&req) {
        Ok(()) => sim_state(State(state)).await,
        Err(e) => error_response(400, &e, None),
    }
}

#[derive(Deserialize)]
pub(crate) struct SinceQuery {
    since: Option<u64>,
}

pub(crate) async fn sim_requests(
    State(state): State<Arc<SimState>>,
    Query(q): Query<SinceQuery>,
) -> Response {
    axum::Json(json!({"data": state.requests_since(q.since.unwrap_or(0))})).into_response()
}

pub(crate) async fn sim_billing(State(state): State<Arc<SimState>>) -> Response {
    axum::Json(json!({
        "total_usd": state.billed_total(),
        "per_endpoint": state.billing_per_tag(),
        "entries": state.billing_entries(),
    }))
    .into_response()
}
