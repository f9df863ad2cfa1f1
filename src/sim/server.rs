//! The simulator's HTTP routes and the producer task that paces one response.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::domain::Usd;
use crate::openrouter::{ChatRequest, Effort};

use super::billing::{Billing, BillingEntry, EndpointTotals, Outcome, RequestEntry};
use super::errors::{budget_refusal, error_response, respond_error};
use super::faults::{Fault, FaultMix};
use super::generate::{
    ChunkWriter, DONE, FNV_OFFSET, KEEPALIVE, TextPlan, Vocabulary, count_prompt_tokens,
    draw_length, fnv1a, mix, pico_to_json, prompt_hash, text_rng,
};
use super::routing::candidates;
use super::table::{ProviderTable, SimBehaviour};
use super::{SimConfig, SimError};

/// Events formatted into one write at most (at full speed).
const MAX_BATCH: u64 = 64;
/// Longest a stalled stream hangs before the simulator gives up on it.
const STALL_LIMIT: Duration = Duration::from_secs(600);

/// Settings that `POST /sim/control` can change while the simulator runs.
#[derive(Clone, Debug, Serialize)]
struct Live {
    speed_scale: f64,
    /// Send `X-Generation-Id` (see [`SimConfig::generation_header`]).
    generation_header: bool,
    output_mean: f64,
    output_sigma: f64,
    behaviours: Vec<SimBehaviour>,
}

/// Everything the handlers share.
pub struct SimState {
    cfg: SimConfig,
    live: RwLock<Live>,
    in_flight: Vec<AtomicU32>,
    /// Times each prompt was seen, so a retry gets a fresh (but deterministic) draw.
    seen: Mutex<HashMap<u64, u32>>,
    pub billing: Billing,
    started: Instant,
    ids: AtomicU64,
    vocab: Vocabulary,
    pub(super) stopping: CancellationToken,
    /// The in-flight budget's live estimates.
    pub account: super::account::Account,
    /// An error forced on every chat request (see `ControlRequest::force_error`).
    forced: Mutex<Option<super::account::ForcedError>>,
    /// System prompts each endpoint has seen: sent again there, they are read from its cache.
    cached: Mutex<std::collections::HashSet<(usize, u64)>>,
    /// Chat requests by the HTTP version they came in (HTTP/1.1, HTTP/2 over TLS).
    http1_requests: AtomicU64,
    http2_requests: AtomicU64,
    /// Connections clients opened (over TLS: handshakes completed), so a benchmark can set a
    /// protocol's connection count and handshakes beside its CPU.
    connections: AtomicU64,
}

/// A change to one endpoint's behaviour: present fields replace the current ones.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointPatch {
    pub ttft_ms: Option<f64>,
    pub tokens_per_s: Option<f64>,
    pub capacity: Option<Option<u32>>,
    pub cancel_stops_billing: Option<bool>,
    /// A whole fault mix.
    pub faults: Option<FaultMix>,
    /// A `name=value,...` spec applied on top of the current mix.
    pub faults_spec: Option<String>,
    pub divergence: Option<f64>,
    pub reasoning_format: Option<super::table::ReasoningFormat>,
    pub down: Option<bool>,
}

/// Body of `POST /sim/control`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    pub speed_scale: Option<f64>,
    /// Send the `X-Generation-Id` header (the chunks' `id` carries the id either way).
    pub generation_header: Option<bool>,
    pub output_tokens_mean: Option<f64>,
    pub output_tokens_sigma: Option<f64>,
    /// Applied to every endpoint.
    pub all: Option<EndpointPatch>,
    /// Per endpoint tag.
    #[serde(default)]
    pub endpoints: HashMap<String, EndpointPatch>,
    /// Every chat request fails with this error (while its `remaining` lasts).
    #[serde(default)]
    pub force_error: Option<super::account::ForcedError>,
    /// Stops forcing an error.
    #[serde(default)]
    pub clear_forced_error: bool,
}

impl EndpointPatch {
    fn apply(&self, b: &mut SimBehaviour) -> Result<(), String> {
        if let Some(v) = self.ttft_ms {
            b.ttft_ms = v.max(0.0);
        }
        if let Some(v) = self.tokens_per_s {
            if v.is_nan() || v <= 0.0 {
                return Err("tokens_per_s must be > 0".into());
            }
            b.tokens_per_s = v;
        }
        if let Some(v) = self.capacity {
            b.capacity = v;
        }
        if let Some(v) = self.cancel_stops_billing {
            b.cancel_stops_billing = v;
        }
        if let Some(f) = &self.faults {
            f.validate()?;
            b.faults = f.clone();
        }
        if let Some(s) = &self.faults_spec {
            b.faults.apply_spec(s)?;
        }
        if let Some(v) = self.reasoning_format {
            b.reasoning_format = v;
        }
        if let Some(v) = self.divergence {
            b.divergence = v.clamp(0.0, 1.0);
        }
        if let Some(v) = self.down {
            b.down = v;
        }
        Ok(())
    }
}

impl SimState {
    pub(super) fn new(cfg: SimConfig) -> Result<Self, SimError> {
        let billing = match &cfg.billing_log {
            Some(p) => Billing::with_log_file(p).map_err(|source| SimError::BillingLog {
                path: p.display().to_string(),
                source,
            })?,
            None => Billing::default(),
        };
        let live = Live {
            speed_scale: cfg.speed_scale.max(0.0),
            generation_header: cfg.generation_header,
            output_mean: cfg.table.output_tokens.mean,
            output_sigma: cfg.table.output_tokens.sigma,
            behaviours: cfg
                .table
                .endpoints
                .iter()
                .map(|e| e.behaviour.clone())
                .collect(),
        };
        let in_flight = cfg
            .table
            .endpoints
            .iter()
            .map(|_| AtomicU32::new(0))
            .collect();
        Ok(SimState {
            account: super::account::Account::new(cfg.inflight_budget.clone()),
            forced: Mutex::new(None),
            cached: Mutex::new(std::collections::HashSet::new()),
            http1_requests: AtomicU64::new(0),
            http2_requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            cfg,
            live: RwLock::new(live),
            in_flight,
            seen: Mutex::new(HashMap::new()),
            billing,
            started: Instant::now(),
            ids: AtomicU64::new(0),
            vocab: Vocabulary::new(),
            stopping: CancellationToken::new(),
        })
    }

    fn live(&self) -> std::sync::RwLockReadGuard<'_, Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn table(&self) -> &ProviderTable {
        &self.cfg.table
    }

    /// Applies a control request (the same as `POST /sim/control`).
    pub fn control(&self, req: &ControlRequest) -> Result<(), String> {
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        let mut next = live.clone();
        if let Some(s) = req.speed_scale {
            next.speed_scale = s.max(0.0);
        }
        if let Some(g) = req.generation_header {
            next.generation_header = g;
        }
        if let Some(m) = req.output_tokens_mean {
            next.output_mean = m.max(1.0);
        }
        if let Some(s) = req.output_tokens_sigma {
            next.output_sigma = s.clamp(0.0, 3.0);
        }
        if let Some(all) = &req.all {
            for b in &mut next.behaviours {
                all.apply(b)?;
            }
        }
        for (tag, patch) in &req.endpoints {
            let i = self
                .cfg
                .table
                .endpoints
                .iter()
                .position(|e| e.tag.as_str() == tag)
                .ok_or_else(|| format!("no endpoint with tag {tag:?}"))?;
            patch.apply(&mut next.behaviours[i])?;
        }
        *live = next;
        let mut forced = self.forced.lock().unwrap_or_else(|p| p.into_inner());
        if req.clear_forced_error {
            *forced = None;
        }
        if let Some(f) = &req.force_error {
            *forced = Some(f.clone());
        }
        Ok(())
    }

    /// The forced error this request gets, if any (counting down its `remaining`).
    fn take_forced(&self) -> Option<super::account::ForcedError> {
        let mut forced = self.forced.lock().unwrap_or_else(|p| p.into_inner());
        let f = forced.as_mut()?;
        let out = f.clone();
        if let Some(n) = f.remaining.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                *forced = None;
            }
        }
        Some(out)
    }

    /// Requests streaming now, at every endpoint together.
    pub fn in_flight_total(&self) -> u32 {
        self.in_flight
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }

    /// A client opened a connection (over TLS: finished its handshake).
    pub(super) fn count_connection(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Connections clients opened so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Chat requests that came over HTTP/1.x and over HTTP/2.
    pub fn requests_by_http_version(&self) -> (u64, u64) {
        (
            self.http1_requests.load(Ordering::Relaxed),
            self.http2_requests.load(Ordering::Relaxed),
        )
    }

    /// Total billed, the figure `/key` reports as usage.
    pub fn billed_total(&self) -> Usd {
        self.billing.total()
    }

    pub fn requests_since(&self, since: u64) -> Vec<RequestEntry> {
        self.billing.requests_since(since)
    }

    pub fn billing_per_tag(&self) -> HashMap<String, EndpointTotals> {
        self.billing.per_tag()
    }

    pub fn billing_entries(&self) -> Vec<BillingEntry> {
        self.billing.billing_entries()
    }

    /// Streams open right now at each endpoint, by tag.
    pub fn in_flight(&self) -> Vec<(String, u32)> {
        self.cfg
            .table
            .endpoints
            .iter()
            .zip(&self.in_flight)
            .map(|(e, n)| (e.tag.to_string(), n.load(Ordering::Relaxed)))
            .collect()
    }

    pub(super) fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn occurrence(&self, h: u64) -> u32 {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() > 2_000_000 {
            seen.clear();
        }
        let n = seen.entry(h).or_insert(0);
        let k = *n;
        *n += 1;
        k
    }
}

pub(super) fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/api/v1/models", get(models))
        .route("/api/v1/models/{author}/{slug}/endpoints", get(endpoints))
        .route("/api/v1/endpoints/zdr", get(zdr_endpoints))
        .route("/api/v1/chat/completions", post(chat))
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

/// The bearer token, when it is acceptable.
#[allow(clippy::result_large_err)] // a handler helper: the error is the response to send
fn authorize(state: &SimState, headers: &HeaderMap) -> Result<String, Response> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    match (token, &state.cfg.api_key) {
        (None, _) if state.cfg.open_access => Ok(String::new()),
        (None, _) => Err(error_response(401, "No auth credentials found", None)),
        (Some(t), Some(k)) if t != k => Err(error_response(401, "User not found.", None)),
        (Some(t), _) => Ok(t.to_string()),
    }
}

async fn models(State(state): State<Arc<SimState>>) -> Response {
    axum::Json(
        json!({"data": [state.cfg.table.model.clone()], "total_count": 1, "links": {"next": null}}),
    )
    .into_response()
}

async fn endpoints(
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
async fn zdr_endpoints(State(state): State<Arc<SimState>>) -> Response {
    let table = &state.cfg.table;
    let live = state.live();
    let list: Vec<Value> = (table.endpoints.iter().zip(&live.behaviours))
        .filter(|(_, b)| b.zdr && !b.down)
        .map(|(e, _)| e.wire.clone())
        .collect();
    axum::Json(json!({ "data": list })).into_response()
}

async fn key(State(state): State<Arc<SimState>>, headers: HeaderMap) -> Response {
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

async fn credits(State(state): State<Arc<SimState>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&state, &headers) {
        return r;
    }
    error_response(403, "Only management keys can fetch credits", None)
}

#[derive(Deserialize)]
struct GenerationQuery {
    id: Option<String>,
}

async fn generation(
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
    match state.billing.generation(&id) {
        Some((e, age)) if age >= state.cfg.generation_visible_after => axum::Json(json!({"data": {
            "id": e.id, "created_at": e.at, "model": state.cfg.table.model_id,
            "provider_name": e.provider, "streamed": e.streamed,
            "cancelled": e.outcome == Outcome::Cancelled,
            "finish_reason": e.finish_reason, "native_finish_reason": e.finish_reason,
            "latency": e.latency_ms, "generation_time": e.latency_ms,
            "tokens_prompt": e.prompt_tokens, "tokens_completion": e.completion_tokens,
            "native_tokens_prompt": e.prompt_tokens,
            "native_tokens_completion": e.completion_tokens,
            "native_tokens_reasoning": e.reasoning_tokens, "native_tokens_cached": 0,
            "total_cost": e.cost_usd.as_f64(), "usage": e.cost_usd.as_f64(),
            "upstream_inference_cost": null, "cache_discount": null,
            "provider_responses": [{"provider_name": e.provider, "status": 200}]
        }}))
        .into_response(),
        _ => error_response(404, &format!("Generation {id} not found"), None),
    }
}

async fn sim_state(State(state): State<Arc<SimState>>) -> Response {
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
        "billed_usd": state.billed_total(), "endpoints": eps,
        "chat_requests_by_http_version": {
            "http1": state.http1_requests.load(Ordering::Relaxed),
            "http2": state.http2_requests.load(Ordering::Relaxed),
        },
        "connections": state.connections(),
    }))
    .into_response()
}

async fn sim_control(State(state): State<Arc<SimState>>, body: Bytes) -> Response {
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
struct SinceQuery {
    since: Option<u64>,
}

async fn sim_requests(State(state): State<Arc<SimState>>, Query(q): Query<SinceQuery>) -> Response {
    axum::Json(json!({"data": state.requests_since(q.since.unwrap_or(0))})).into_response()
}

async fn sim_billing(State(state): State<Arc<SimState>>) -> Response {
    axum::Json(json!({
        "total_usd": state.billed_total(),
        "per_endpoint": state.billing_per_tag(),
        "entries": state.billing_entries(),
    }))
    .into_response()
}

/// Everything decided about one response before its first byte.
struct Plan {
    id: String,
    created: i64,
    endpoint: usize,
    tag: String,
    provider: String,
    model: String,
    prompt_tokens: u64,
    /// Tokens the model generates (reasoning included).
    completion_tokens: u64,
    reasoning_tokens: u64,
    reasoning_visible: bool,
    reasoning_format: super::table::ReasoningFormat,
    finish_reason: &'static str,
    fault: Fault,
    /// Token index at which a stream fault strikes.
    fault_at: u64,
    text: TextPlan,
    ttft: Duration,
    per_token: Duration,
    stream: bool,
    tariff: crate::pricing::Tariff,
    /// Prompt tokens read from the provider's cache (part of `prompt_tokens`).
    cached_tokens: u64,
    /// `HHMM` UTC when the request came, for time-window prices.
    at: u16,
    cancel_stops_billing: bool,
    /// A forced mid-stream error replaces the provider's.
    forced: Option<super::account::ForcedError>,
}

impl Plan {
    fn cost(&self, completion: u64) -> Usd {
        let t = crate::pricing::TokenUse {
            prompt: self.prompt_tokens,
            cached: self.cached_tokens,
            completion,
        };
        self.tariff.cost(t, self.at)
    }
}

fn fault_name(f: Fault) -> &'static str {
    match f {
        Fault::None => "ok",
        Fault::RateLimit => "rate_limit",
        Fault::ServerError => "server_error",
        Fault::MidStream => "mid_stream",
        Fault::Stall => "stall",
        Fault::Reset => "reset",
        Fault::Empty => "empty",
        Fault::Truncate => "truncate",
    }
}

async fn chat(
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

#[allow(clippy::too_many_arguments)]
fn make_plan(
    state: &SimState,
    req: &ChatRequest,
    live: &Live,
    i: usize,
    fault: Fault,
    ph: u64,
    occurrence: u32,
    rng: &mut SmallRng,
) -> Plan {
    let table = &state.cfg.table;
    let ep = &table.endpoints[i];
    let b = &live.behaviours[i];
    let greedy = req.temperature == Some(0.0);
    let text_seed = if greedy {
        mix(state.cfg.seed ^ ph)
    } else {
        mix(state.cfg.seed ^ ph ^ (u64::from(occurrence) << 32))
    };
    let mut trng = text_rng(text_seed);
    let natural = draw_length(&mut trng, live.output_mean, live.output_sigma);
    let (mut n, finish) = if natural > u64::from(req.max_tokens) {
        (u64::from(req.max_tokens), "length")
    } else {
        (natural, "stop")
    };
    let reasoning_on = match &req.reasoning {
        Some(r) => r.effort != Some(Effort::None) && r.enabled != Some(false),
        None => true,
    };
    let reasoning_visible = req.reasoning.as_ref().and_then(|r| r.exclude) != Some(true);
    // A thinking model thinks first, then answers, and `max_tokens` bounds both: reasoning
    // tokens are output tokens (openrouter.ai/docs/use-cases/reasoning-tokens). So the
    // reasoning is a share of the answer the model would have written, and a cut at
    // `max_tokens` that falls inside it leaves no content: `finish_reason: "length"` with
    // reasoning only, billed in full.
    let mut reasoning = if reasoning_on {
        ((natural as f64) * table.reasoning_share).round() as u64
    } else {
        0
    };
    if finish == "length" {
        reasoning = reasoning.min(n);
    } else if reasoning >= n {
        reasoning = n.saturating_sub(1);
    }
    let tag_hash = fnv1a(ep.tag.as_str().as_bytes(), FNV_OFFSET);
    let diverges = b.divergence > 0.0 && {
        let u = (mix(text_seed ^ tag_hash) >> 11) as f64 / (1u64 << 53) as f64;
        u < b.divergence
    };
    let diverge_at = diverges.then(|| 3 + mix(text_seed ^ tag_hash ^ 1) % 8);
    let fault_at = match fault {
        Fault::Empty => {
            n = 0;
            reasoning = 0;
            0
        }
        Fault::MidStream | Fault::Stall | Fault::Reset | Fault::Truncate => {
            rng.random_range(0..n.max(1))
        }
        _ => n,
    };
    let scale = live.speed_scale;
    let jitter = 0.5 + rng.random::<f64>();
    let slow = if b.faults.draw_slow_start(rng) {
        10.0
    } else {
        1.0
    };
    let ttft = Duration::from_secs_f64((b.ttft_ms / 1000.0) * scale * jitter * slow);
    let per_token = Duration::from_secs_f64(scale / b.tokens_per_s);
    let seq = state.ids.fetch_add(1, Ordering::Relaxed);
    let created = chrono::Utc::now().timestamp();
    Plan {
        id: format!("gen-{created}-{:016x}", mix(state.cfg.seed ^ seq)),
        created,
        endpoint: i,
        tag: ep.tag.to_string(),
        provider: ep.provider_name.clone(),
        model: table.model_id.clone(),
        prompt_tokens: count_prompt_tokens(&req.messages),
        completion_tokens: n,
        reasoning_tokens: reasoning,
        reasoning_visible,
        reasoning_format: b.reasoning_format,
        finish_reason: finish,
        fault,
        fault_at,
        text: TextPlan {
            text_seed,
            diverge_at,
            diverge_seed: mix(text_seed ^ tag_hash ^ 2),
        },
        ttft,
        per_token,
        stream: req.stream,
        tariff: ep.tariff.clone(),
        cached_tokens: cached_tokens(state, i, ep, req),
        at: crate::pricing::hhmm(&chrono::Utc::now()),
        cancel_stops_billing: b.cancel_stops_billing,
        forced: None,
    }
}

/// Prompt tokens an endpoint reads from its cache: a system prompt it has seen before, where
/// it caches (it lists a cache-read price or implicit caching). The docs' example shows
/// `cached_tokens` inside `prompt_tokens` (prompt-caching guide).
fn cached_tokens(
    state: &SimState,
    i: usize,
    ep: &super::table::SimEndpoint,
    req: &ChatRequest,
) -> u64 {
    let caches = ep.tariff.cache_read.is_some()
        || ep.wire["supports_implicit_caching"].as_bool() == Some(true);
    let Some(system) = req
        .messages
        .first()
        .filter(|m| caches && m.role == "system")
    else {
        return 0;
    };
    let key = (i, fnv1a(system.content.as_bytes(), FNV_OFFSET));
    let seen = !state
        .cached
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key);
    if seen {
        count_prompt_tokens(std::slice::from_ref(system))
    } else {
        0
    }
}

type Chunk = Result<Bytes, std::io::Error>;

fn respond(
    state: Arc<SimState>,
    plan: Plan,
    rng: SmallRng,
    ticket: Option<super::account::Ticket>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Chunk>(2);
    let stream = plan.stream;
    let id = plan.id.clone();
    let header_id = state.live().generation_header;
    tokio::spawn(async move {
        // Counted against the in-flight budget until the generation ends.
        let _ticket = ticket;
        produce(state, plan, rng, tx).await;
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (c, rx))
    }));
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    if stream {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    } else {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if header_id && let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("x-generation-id", v);
    }
    resp
}

/// Decrements the endpoint's in-flight count however the producer ends.
struct InFlight(Arc<SimState>, usize);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight[self.1].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sends one piece of the body; `false` when the client has gone.
struct Sender {
    tx: mpsc::Sender<Chunk>,
    rng: SmallRng,
    split: bool,
}

impl Sender {
    async fn send(&mut self, s: String) -> bool {
        let bytes = Bytes::from(s);
        if self.split && bytes.len() > 1 && self.rng.random::<f64>() < 0.25 {
            // Anywhere, even inside a multi-byte character or the `data:` prefix.
            let at = self.rng.random_range(1..bytes.len());
            if self.tx.send(Ok(bytes.slice(..at))).await.is_err() {
                return false;
            }
            return self.tx.send(Ok(bytes.slice(at..))).await.is_ok();
        }
        self.tx.send(Ok(bytes)).await.is_ok()
    }
}

/// Paces one response: keep-alives during the wait for the first token, tokens at the
/// endpoint's decode speed (due tokens go out together at most every `min_tick`), then the
/// finish and usage chunks and `[DONE]`, or the planned fault. Bills as the module doc says.
async fn produce(state: Arc<SimState>, plan: Plan, rng: SmallRng, tx: mpsc::Sender<Chunk>) {
    let _in_flight = InFlight(state.clone(), plan.endpoint);
    let started = Instant::now();
    let mut out = Sender {
        tx,
        rng,
        split: state.cfg.split_writes && plan.stream,
    };
    let stopping = state.stopping.clone();
    let writer = ChunkWriter::new(&plan.id, plan.created, &plan.model, &plan.provider);
    let hidden = if plan.reasoning_visible {
        0
    } else {
        plan.reasoning_tokens
    };
    let first_at = started + plan.ttft + plan.per_token.mul_f64(hidden as f64);
    let limit = if plan.fault == Fault::None {
        plan.completion_tokens
    } else {
        plan.fault_at
    };

    if plan.stream && !out.send(KEEPALIVE.to_string()).await {
        return cancelled(&state, &plan, 0, started);
    }
    // Wait for the first token, with a keep-alive comment every second.
    loop {
        let now = Instant::now();
        if now >= first_at {
            break;
        }
        let next = (now + Duration::from_secs(1)).min(first_at);
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {
                if next < first_at && plan.stream && !out.send(KEEPALIVE.to_string()).await {
                    return cancelled(&state, &plan, 0, started);
                }
            }
            _ = out.tx.closed() => return cancelled(&state, &plan, 0, started),
            _ = stopping.cancelled() => return,
        }
    }

    let mut content = String::new();
    let mut reasoning = String::new();
    let mut i = hidden.min(limit);
    let min_tick = state.cfg.min_tick;
    let keepalive_at = if out.rng.random::<f64>() < 0.1 && limit > 2 {
        out.rng.random_range(1..limit)
    } else {
        u64::MAX
    };
    while i < limit {
        if !plan.per_token.is_zero() {
            let since = Instant::now().saturating_duration_since(first_at);
            let due = ((since.as_secs_f64() / plan.per_token.as_secs_f64()).floor() as u64 + 1)
                .min(limit);
            if due <= i {
                let next_due = first_at + plan.per_token.mul_f64(i as f64);
                let wake = next_due.max(Instant::now() + min_tick);
                tokio::select! {
                    _ = tokio::time::sleep_until(wake.into()) => {}
                    _ = out.tx.closed() => return cancelled(&state, &plan, i, started),
                    _ = stopping.cancelled() => return,
                }
                continue;
            }
        }
        let due = if plan.per_token.is_zero() {
            limit
        } else {
            let since = Instant::now().saturating_duration_since(first_at);
            ((since.as_secs_f64() / plan.per_token.as_secs_f64()).floor() as u64 + 1).min(limit)
        };
        let end = due.min(i + MAX_BATCH);
        let mut buf = String::with_capacity(((end - i) as usize) * 220);
        for j in i..end {
            let w = plan.text.word(j, state.vocab.len());
            if j == keepalive_at && plan.stream {
                buf.push_str(KEEPALIVE);
            }
            use super::table::ReasoningFormat as RF;
            let thinking = j < plan.reasoning_tokens || plan.reasoning_format == RF::Only;
            if plan.reasoning_format == RF::Inline && plan.reasoning_visible {
                // No reasoning parser: the thinking is part of the text.
                let mut word = String::new();
                if j == 0 && plan.reasoning_tokens > 0 {
                    word.push_str("<think>");
                }
                if j == plan.reasoning_tokens && j > 0 {
                    word.push_str("</think>");
                }
                word.push_str(state.vocab.raw(w));
                if plan.stream {
                    let mut escaped = String::new();
                    crate::sim::generate::json_escape(&word, &mut escaped);
                    writer.content(&escaped, &mut buf);
                } else {
                    content.push_str(&word);
                }
            } else if thinking {
                if plan.reasoning_visible {
                    if plan.stream {
                        writer.reasoning(state.vocab.escaped(w), &mut buf);
                    } else {
                        reasoning.push_str(state.vocab.raw(w));
                    }
                }
            } else if plan.stream {
                writer.content(state.vocab.escaped(w), &mut buf);
            } else {
                content.push_str(state.vocab.raw(w));
            }
        }
        if !buf.is_empty() && !out.send(buf).await {
            return cancelled(&state, &plan, end, started);
        }
        i = end;
        if plan.per_token.is_zero() {
            tokio::task::yield_now().await;
        }
    }

    match plan.fault {
        Fault::None | Fault::Empty => {
            let n = plan.completion_tokens;
            let cost = if plan.fault == Fault::Empty {
                Usd::ZERO
            } else {
                plan.cost(n)
            };
            let cost_json = pico_to_json(cost.pico());
            let body = if plan.stream {
                let mut b = String::new();
                writer.finish(plan.finish_reason, &mut b);
                writer.usage(
                    (plan.prompt_tokens, plan.cached_tokens),
                    n,
                    plan.reasoning_tokens,
                    &cost_json,
                    &mut b,
                );
                b.push_str(DONE);
                b
            } else {
                non_stream_body(&plan, &content, &reasoning, n, &cost_json)
            };
            if !out.send(body).await {
                return cancelled(&state, &plan, n, started);
            }
            if plan.fault == Fault::None {
                bill(&state, &plan, n, Outcome::Complete, started);
            }
        }
        Fault::MidStream => {
            let code = if out.rng.random::<bool>() {
                "502"
            } else {
                "\"server_error\""
            };
            let body = if let Some(f) = &plan.forced {
                let err = f.error_object();
                if plan.stream {
                    let mut b = String::new();
                    writer.error_object(&err, &mut b);
                    b.push_str(DONE);
                    b
                } else {
                    json!({ "error": err }).to_string()
                }
            } else if plan.stream {
                let mut b = String::new();
                writer.error(code, "Provider returned error", &plan.provider, &mut b);
                b.push_str(DONE);
                b
            } else {
                json!({"error": {"code": 502, "message": "Provider returned error",
                       "metadata": {"provider_name": plan.provider}}})
                .to_string()
            };
            let _ = out.send(body).await;
        }
        Fault::Reset => {
            let _ = out
                .tx
                .send(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "simulated connection reset",
                )))
                .await;
            // Not covered by zero completion insurance once tokens were sent (see `cancelled`).
            cancelled(&state, &plan, i, started);
        }
        Fault::Truncate => {
            if !plan.stream {
                let body = non_stream_body(&plan, &content, &reasoning, i, "0");
                let _ = out.send(body[..body.len() / 2].to_string()).await;
            }
            // Dropping the sender ends the body cleanly: no finish, no usage, no [DONE]. Billed
            // like a reset.
            cancelled(&state, &plan, i, started);
        }
        Fault::Stall => {
            tokio::select! {
                _ = out.tx.closed() => cancelled(&state, &plan, i, started),
                _ = tokio::time::sleep(STALL_LIMIT) => {}
                _ = stopping.cancelled() => {}
            }
        }
        Fault::RateLimit | Fault::ServerError => {}
    }
}

fn non_stream_body(plan: &Plan, content: &str, reasoning: &str, n: u64, cost_json: &str) -> String {
    let message = if reasoning.is_empty() {
        json!({"role": "assistant", "content": content, "refusal": null})
    } else {
        json!({"role": "assistant", "content": content, "refusal": null, "reasoning": reasoning,
               "reasoning_details": [{"type": "reasoning.text", "text": reasoning, "format": "unknown", "index": 0}]})
    };
    let cost: Value = serde_json::from_str(cost_json).unwrap_or(json!(0));
    let body = json!({
        "id": plan.id, "object": "chat.completion", "created": plan.created, "model": plan.model,
        "provider": plan.provider, "system_fingerprint": null,
        "choices": [{"index": 0, "logprobs": null, "finish_reason": plan.finish_reason,
                     "native_finish_reason": plan.finish_reason, "message": message}],
        "usage": {"prompt_tokens": plan.prompt_tokens, "completion_tokens": n,
                  "total_tokens": plan.prompt_tokens + n, "cost": cost, "is_byok": false,
                  "prompt_tokens_details": {"cached_tokens": plan.cached_tokens},
                  "completion_tokens_details": {"reasoning_tokens": plan.reasoning_tokens}}
    });
    // Real non-streamed bodies can start with keep-alive whitespace.
    format!("\n   \n{body}")
}

fn bill(state: &SimState, plan: &Plan, completion: u64, outcome: Outcome, started: Instant) {
    state.billing.bill(BillingEntry {
        id: plan.id.clone(),
        at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        tag: plan.tag.clone(),
        provider: plan.provider.clone(),
        prompt_tokens: plan.prompt_tokens,
        completion_tokens: completion,
        reasoning_tokens: plan.reasoning_tokens.min(completion),
        cost_usd: plan.cost(completion),
        outcome,
        streamed: plan.stream,
        finish_reason: (outcome == Outcome::Complete).then(|| plan.finish_reason.to_string()),
        latency_ms: started.elapsed().as_millis() as u64,
    });
}

/// The client closed the connection after `sent` tokens.
/// Bills a generation whose stream ended early: closed by the client, reset, or cut cleanly
/// after `sent` tokens. OpenRouter's zero completion insurance (docs: guides/features/
/// zero-completion-insurance) covers only "the response has zero completion tokens AND a
/// blank/null finish reason" and "the response has an error finish reason": a stream cut after
/// tokens is neither, so it is billed as a cancel (the tokens sent where cancelling stops the
/// bill, the whole generation elsewhere). One with no token yet is free.
fn cancelled(state: &SimState, plan: &Plan, sent: u64, started: Instant) {
    if matches!(plan.fault, Fault::MidStream | Fault::Empty) {
        // An error finish reason, or nothing at all: covered by the insurance.
        return;
    }
    if sent == 0 && plan.fault != Fault::None && plan.fault != Fault::Stall {
        return;
    }
    let billed = if plan.cancel_stops_billing {
        sent
    } else {
        plan.completion_tokens
    };
    bill(state, plan, billed, Outcome::Cancelled, started);
}
