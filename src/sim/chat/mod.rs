//! The simulator's chat completions: the handler that checks a request and answers it, the
//! plan it decides up front (`plan.rs`), and the stream that carries the answer (`stream.rs`).

mod plan;
mod stream;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde_json::{Value, json};

use crate::openrouter::ChatRequest;
use crate::sim::auth::authorize;
use crate::sim::errors::{budget_refusal, error_response, respond_error};
use crate::sim::faults::Fault;
use crate::sim::generate::*;
use crate::sim::routing::candidates;
use crate::sim::state::*;
use plan::*;
use stream::*;

pub(crate) async fn chat(
    State(state): State<Arc<SimState>>,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if version == axum::http::Version::HTTP_2 {
        state.http2_requests.fetch_add(1, Ordering::Relaxed);
    } else {
        state.http1_requests.fetch_add(1, Ordering::Relaxed);
    }
    if let Err(r) = authorize(&state, &headers) {
        return r;
    }
    let mut v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error_response(400, &format!("Invalid JSON body: {e}"), None),
    };
    // max_tokens is optional in the API; unset means the model's full output cap.
    if v.get("max_tokens").is_none_or(Value::is_null) {
        let cap = v
            .get("max_completion_tokens")
            .cloned()
            .filter(|x| !x.is_null())
            .unwrap_or_else(|| {
                state.cfg.table.model["top_provider"]["max_completion_tokens"]
                    .as_u64()
                    .map_or(json!(16384), |c| json!(c))
            });
        v["max_tokens"] = cap;
    }
    let logged = state.cfg.log_bodies.then(|| v.clone());
    let req: ChatRequest = match serde_json::from_value(v) {
        Ok(r) => r,
        Err(e) => return error_response(400, &format!("Invalid request: {e}"), None),
    };
    let table = &state.cfg.table;
    if !table.serves(&req.model) {
        return error_response(400, &format!("{} is not a valid model ID", req.model), None);
    }
    if req.messages.is_empty() {
        return error_response(400, "messages must not be empty", None);
    }
    let forced = state.take_forced();
    if let Some(f) = forced.as_ref().filter(|f| !f.mid_stream) {
        state
            .billing
            .record_request(state.elapsed_ms(), "(forced)", f.status, &f.error_type, 0);
        return respond_error(f.status, f.error_object());
    }
    if let Some(limit) = state.cfg.key_limit_usd
        && state.billed_total().as_f64() >= limit
    {
        return error_response(
            402,
            "Key limit exceeded. Manage it using https://openrouter.ai/settings/keys",
            Some(("metadata", json!({"limit_source": "openrouter_credits"}))),
        );
    }
    if let Some(replay) = &state.cfg.replay {
        return replay.serve(&state, req.stream);
    }
    let prompt_tokens = count_prompt_tokens(&req.messages);
    let max_ctx = table
        .endpoints
        .iter()
        .map(|e| e.context_length)
        .max()
        .unwrap_or(0);
    if prompt_tokens > max_ctx {
        return error_response(
            400,
            &format!(
                "This endpoint's maximum context length is {max_ctx} tokens. However, you requested about {prompt_tokens} tokens. Please reduce the length of the messages."
            ),
            Some(("metadata", json!({"error_type": "context_length_exceeded"}))),
        );
    }
    let ph = prompt_hash(&req.messages);
    let occurrence = state.occurrence(ph);
    let mut rng = SmallRng::seed_from_u64(mix(state.cfg.seed ^ ph ^ (u64::from(occurrence) << 40)));
    let live = state.live().clone();
    let order = match candidates(&table.endpoints, &live.behaviours, &req, &mut rng) {
        Ok(o) => o,
        Err(no) => {
            return error_response(
                404,
                "No endpoints found that can handle the requested parameters.",
                Some((
                    "availability",
                    json!({"code": "no_endpoints", "retryable": false,
                           "requested_models": [req.model], "excluded_by": no.excluded_by}),
                )),
            );
        }
    };
    let now_ms = state.elapsed_ms();
    // The account's in-flight budget, estimated at the first endpoint it would be served by.
    let ticket = {
        let ep = &table.endpoints[order[0]];
        let prompt_cost = ep.price_in.cost(prompt_tokens);
        let estimate = prompt_cost + ep.price_out.cost(u64::from(req.max_tokens));
        match state.account.admit(
            estimate,
            u64::from(req.max_tokens),
            prompt_cost,
            Instant::now(),
            live.speed_scale,
        ) {
            Ok(t) => t,
            Err(refusal) => {
                return budget_refusal(
                    (&state.account, &state.billing),
                    live.speed_scale,
                    refusal,
                    now_ms,
                    ph,
                );
            }
        }
    };
    let mut last_error: Option<Response> = None;
    for &i in &order {
        let ep = &table.endpoints[i];
        let b = &live.behaviours[i];
        let busy = b
            .capacity
            .is_some_and(|c| state.in_flight[i].load(Ordering::Relaxed) >= c);
        let fault = if busy {
            Fault::RateLimit
        } else {
            b.faults.draw(&mut rng)
        };
        if fault.is_pre_stream() {
            let (status, msg) = if fault == Fault::RateLimit {
                (429, "Provider returned error")
            } else {
                (502, "Provider returned error")
            };
            state.billing.record_request_with_body(
                now_ms,
                ep.tag.as_str(),
                status,
                fault_name(fault),
                ph,
                logged.clone(),
            );
            let wait = (b.faults.retry_after_s * live.speed_scale.max(0.001)).max(0.0);
            let mut resp = error_response(
                status,
                msg,
                Some((
                    "metadata",
                    json!({
                        "provider_name": ep.provider_name,
                        "raw": if fault == Fault::RateLimit { "temporarily rate-limited upstream" } else { "upstream connect error or disconnect/reset before headers" },
                        "retry_after_seconds": if fault == Fault::RateLimit { json!(wait) } else { Value::Null },
                        "limit_source": if busy { "upstream_provider_capacity" } else { "upstream_provider_shared_pool" },
                        "is_byok": false,
                    }),
                )),
            );
            if fault == Fault::RateLimit {
                let secs = wait.ceil().max(0.0) as u64;
                if let Ok(h) = HeaderValue::from_str(&secs.to_string()) {
                    resp.headers_mut().insert(header::RETRY_AFTER, h);
                }
            }
            last_error = Some(resp);
            continue;
        }
        state.in_flight[i].fetch_add(1, Ordering::Relaxed);
        state.billing.record_request_with_body(
            now_ms,
            ep.tag.as_str(),
            200,
            fault_name(fault),
            ph,
            logged.clone(),
        );
        let fault = if forced.is_some() {
            Fault::MidStream
        } else {
            fault
        };
        let mut plan = make_plan(&state, &req, &live, i, fault, ph, occurrence, &mut rng);
        plan.forced = forced;
        return respond(state.clone(), plan, rng, ticket);
    }
    last_error.unwrap_or_else(|| error_response(503, "No provider available", None))
}
