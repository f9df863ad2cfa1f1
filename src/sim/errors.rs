//! The API's error bodies as the simulator sends them: the documented `error_type` on every
//! error (docs: api_reference/errors-and-debugging, "Typed error codes"), availability errors
//! with their type on `error` too, and the in-flight budget's two 402s (see `account`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The documented `error_type` of a status, for bodies that do not name a more precise one
/// (docs: api_reference/errors-and-debugging, "Typed error codes").
pub(super) fn default_error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request",
        401 => "authentication",
        402 => "payment_required",
        403 => "permission_denied",
        404 => "not_found",
        408 | 504 => "timeout",
        413 => "payload_too_large",
        422 => "unprocessable",
        429 => "rate_limit_exceeded",
        502 => "provider_unavailable",
        503 => "provider_overloaded",
        _ => "server",
    }
}

pub(super) fn error_response(status: u16, message: &str, extra: Option<(&str, Value)>) -> Response {
    let mut err = json!({"code": status, "message": message});
    if let Some((k, v)) = extra {
        err[k] = v;
    }
    // Every error carries its type in `metadata`; availability errors on `error` too.
    if err["metadata"]["error_type"].is_null() {
        if !err["metadata"].is_object() {
            err["metadata"] = json!({});
        }
        err["metadata"]["error_type"] = json!(default_error_type(status));
    }
    if err.get("availability").is_some() {
        err["error_type"] = err["metadata"]["error_type"].clone();
    }
    respond_error(status, err)
}

/// `{"error": err}` with its status.
pub(super) fn respond_error(status: u16, err: Value) -> Response {
    let body = json!({"error": err, "user_id": "user_sim"});
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, axum::Json(body)).into_response()
}

/// The 402 of the in-flight budget (its `Retry-After` scaled by `speed`): wait (`Retry-After`) when the account is busy, or no
/// wait at all when this request alone is over the budget.
pub(super) fn budget_refusal(
    (account, billing): (&super::account::Account, &super::billing::Billing),
    speed: f64,
    refusal: super::account::Refusal,
    now_ms: u64,
    ph: u64,
) -> Response {
    use super::account::Refusal;
    let retry = account
        .budget()
        .map_or(1.0, |b| b.retry_after_s * speed.max(0.001));
    match refusal {
        Refusal::Busy { in_flight, budget } => {
            billing.record_request(now_ms, "(account)", 402, "inflight_budget", ph);
            let mut resp = error_response(
                402,
                &format!(
                    "In-flight spending budget reached: running and recently finished requests are estimated at ${:.2} of ${:.2}. Retry shortly, lower max_tokens, or add credits.",
                    in_flight.as_f64(),
                    budget.as_f64()
                ),
                Some((
                    "metadata",
                    json!({"error_type": "payment_required",
                           "limit_source": "openrouter_in_flight_budget",
                           "retry_after_seconds": retry}),
                )),
            );
            let secs = retry.ceil().max(1.0) as u64;
            if let Ok(h) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, h);
            }
            resp
        }
        Refusal::TooBig {
            requested,
            affordable,
        } => {
            billing.record_request(now_ms, "(account)", 402, "request_over_budget", ph);
            error_response(
                402,
                &format!(
                    "This request requires more credits, or fewer max_tokens. You requested up to {requested} tokens, but can only afford {affordable}. To increase, visit https://openrouter.ai/settings/credits and add more credits"
                ),
                Some((
                    "metadata",
                    json!({"error_type": "payment_required", "limit_source": "openrouter_credits"}),
                )),
            )
        }
    }
}
