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

/// A request refused before it is answered: the response that says why (boxed: it is large).
type Refused = Box<Response>;

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
    let (req, logged) = match parse_request(&state, &body) {
        Ok(r) => r,
        Err(r) => return *r,
    };
    let forced = match refuse_before_routing(&state, &req) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    if let Some(replay) = &state.cfg.replay {
        return replay.serve(&state, req.stream);
    }
    let table = &state.cfg.table;
    let prompt_tokens = count_prompt_tokens(&req.messages);
    if let Err(r) = check_context(table, prompt_tokens) {
        return *r;
    }
    let ph = prompt_hash(&req.messages);
    let occurrence = state.occurrence(ph);
    let mut rng = SmallRng::seed_from_u64(mix(state.cfg.seed ^ ph ^ (u64::from(occurrence) << 40)));
    let live = state.live().clone();
    let order = match candidates(&table.endpoints, &live.behaviours, &req, &mut rng) {
        Ok(o) => o,
        Err(no) => return no_endpoints(&req, &no.excluded_by),
    };
    let now_ms = state.elapsed_ms();
    let ticket = match admit(&state, &req, &live, order[0], prompt_tokens, (now_ms, ph)) {
        Ok(t) => t,
        Err(r) => return *r,
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
        let status = if fault.is_pre_stream() {
            if fault == Fault::RateLimit { 429 } else { 502 }
        } else {
            200
        };
        state.billing.record_request_with_body(
            now_ms,
            ep.tag.as_str(),
            status,
            fault_name(fault),
            ph,
            logged.clone(),
        );
        if fault.is_pre_stream() {
            last_error = Some(upstream_error(ep, b, fault, busy, live.speed_scale));
            continue;
        }
        state.in_flight[i].fetch_add(1, Ordering::Relaxed);
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

/// The request body as a `ChatRequest` (an unset `max_tokens` is the model's full output cap,
/// as in the API), and the body as sent when bodies are logged.
fn parse_request(state: &SimState, body: &[u8]) -> Result<(ChatRequest, Option<Value>), Refused> {
    let mut v: Value = serde_json::from_slice(body).map_err(|e| {
        Box::new(error_response(
            400,
            &format!("Invalid JSON body: {e}"),
            None,
        ))
    })?;
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
    let req = serde_json::from_value(v)
        .map_err(|e| Box::new(error_response(400, &format!("Invalid request: {e}"), None)))?;
    Ok((req, logged))
}

/// What is refused before any provider is asked: an unknown model, no messages, a forced
/// error before the stream, a key over its limit. Returns a forced mid-stream error, if any.
fn refuse_before_routing(
    state: &SimState,
    req: &ChatRequest,
) -> Result<Option<crate::sim::account::ForcedError>, Refused> {
    if !state.cfg.table.serves(&req.model) {
        let msg = format!("{} is not a valid model ID", req.model);
        return Err(Box::new(error_response(400, &msg, None)));
    }
    if req.messages.is_empty() {
        return Err(Box::new(error_response(
            400,
            "messages must not be empty",
            None,
        )));
    }
    let forced = state.take_forced();
    if let Some(f) = forced.as_ref().filter(|f| !f.mid_stream) {
        state
            .billing
            .record_request(state.elapsed_ms(), "(forced)", f.status, &f.error_type, 0);
        return Err(Box::new(respond_error(f.status, f.error_object())));
    }
    if let Some(limit) = state.cfg.key_limit_usd
        && state.billed_total().as_f64() >= limit
    {
        return Err(Box::new(error_response(
            402,
            "Key limit exceeded. Manage it using https://openrouter.ai/settings/keys",
            Some(("metadata", json!({"limit_source": "openrouter_credits"}))),
        )));
    }
    Ok(forced)
}

/// A prompt longer than the largest context any endpoint has is refused with OpenRouter's 400.
fn check_context(
    table: &crate::sim::table::ProviderTable,
    prompt_tokens: u64,
) -> Result<(), Refused> {
    let max_ctx = table
        .endpoints
        .iter()
        .map(|e| e.context_length)
        .max()
        .unwrap_or(0);
    if prompt_tokens <= max_ctx {
        return Ok(());
    }
    Err(Box::new(error_response(
        400,
        &format!(
            "This endpoint's maximum context length is {max_ctx} tokens. However, you requested about {prompt_tokens} tokens. Please reduce the length of the messages."
        ),
        Some(("metadata", json!({"error_type": "context_length_exceeded"}))),
    )))
}

/// OpenRouter's 404 when the provider preferences leave no endpoint.
fn no_endpoints(req: &ChatRequest, excluded_by: &[&str]) -> Response {
    error_response(
        404,
        "No endpoints found that can handle the requested parameters.",
        Some((
            "availability",
            json!({"code": "no_endpoints", "retryable": false,
                   "requested_models": [req.model], "excluded_by": excluded_by}),
        )),
    )
}

/// The account's in-flight budget, estimated at the first endpoint it would be served by.
fn admit(
    state: &SimState,
    req: &ChatRequest,
    live: &Live,
    first: usize,
    prompt_tokens: u64,
    (now_ms, ph): (u64, u64),
) -> Result<Option<crate::sim::account::Ticket>, Refused> {
    let ep = &state.cfg.table.endpoints[first];
    let prompt_cost = ep.price_in.cost(prompt_tokens);
    let estimate = prompt_cost + ep.price_out.cost(u64::from(req.max_tokens));
    state
        .account
        .admit(
            estimate,
            u64::from(req.max_tokens),
            prompt_cost,
            Instant::now(),
            live.speed_scale,
        )
        .map_err(|refusal| {
            Box::new(budget_refusal(
                (&state.account, &state.billing),
                live.speed_scale,
                refusal,
                now_ms,
                ph,
            ))
        })
}

/// An endpoint's error before the stream: a 429 (its shared pool, or its capacity when `busy`)
/// with `Retry-After`, or a 502.
fn upstream_error(
    ep: &crate::sim::table::SimEndpoint,
    b: &crate::sim::SimBehaviour,
    fault: Fault,
    busy: bool,
    speed_scale: f64,
) -> Response {
    let limited = fault == Fault::RateLimit;
    let status = if limited { 429 } else { 502 };
    let wait = (b.faults.retry_after_s * speed_scale.max(0.001)).max(0.0);
    let mut resp = error_response(
        status,
        "Provider returned error",
        Some((
            "metadata",
            json!({
                "provider_name": ep.provider_name,
                "raw": if limited { "temporarily rate-limited upstream" } else { "upstream connect error or disconnect/reset before headers" },
                "retry_after_seconds": if limited { json!(wait) } else { Value::Null },
                "limit_source": if busy { "upstream_provider_capacity" } else { "upstream_provider_shared_pool" },
                "is_byok": false,
            }),
        )),
    );
    if limited {
        let secs = wait.ceil().max(0.0) as u64;
        if let Ok(h) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, h);
        }
    }
    resp
}
