//! One chat request, decided up front: the endpoint that serves it, its faults, lengths and
//! pace (`Plan`), and the handler that checks the request and answers it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::Rng;
use rand::rngs::SmallRng;

use crate::domain::Usd;
use crate::openrouter::{ChatRequest, Effort};

use crate::sim::faults::Fault;
use crate::sim::generate::{
    FNV_OFFSET, TextPlan, count_prompt_tokens, draw_length, fnv1a, mix, text_rng,
};
use crate::sim::state::*;

/// Everything decided about one response before its first byte.
pub(crate) struct Plan {
    pub(crate) id: String,
    pub(crate) created: i64,
    pub(crate) endpoint: usize,
    pub(crate) tag: String,
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) prompt_tokens: u64,
    /// Tokens the model generates (reasoning included).
    pub(crate) completion_tokens: u64,
    pub(crate) reasoning_tokens: u64,
    pub(crate) reasoning_visible: bool,
    pub(crate) reasoning_format: crate::sim::table::ReasoningFormat,
    pub(crate) finish_reason: &'static str,
    pub(crate) fault: Fault,
    /// Token index at which a stream fault strikes.
    pub(crate) fault_at: u64,
    pub(crate) text: TextPlan,
    pub(crate) ttft: Duration,
    pub(crate) per_token: Duration,
    pub(crate) stream: bool,
    pub(crate) tariff: crate::pricing::Tariff,
    /// Prompt tokens read from the provider's cache (part of `prompt_tokens`).
    pub(crate) cached_tokens: u64,
    /// `HHMM` UTC when the request came, for time-window prices.
    pub(crate) at: u16,
    pub(crate) cancel_stops_billing: bool,
    /// A forced mid-stream error replaces the provider's.
    pub(crate) forced: Option<crate::sim::account::ForcedError>,
    /// How many tokens each streamed event carries.
    pub(crate) tokens_per_event: crate::sim::table::TokensPerEvent,
    /// Tokens the provider decodes after a close before it notices, where a close stops the
    /// bill ([`crate::sim::table::SimBehaviour::close_notice_ms`] at its decode speed).
    pub(crate) close_notice_tokens: u64,
}

impl Plan {
    pub(crate) fn cost(&self, completion: u64) -> Usd {
        let t = crate::pricing::TokenUse {
            prompt: self.prompt_tokens,
            cached: self.cached_tokens,
            completion,
        };
        self.tariff.cost(t, self.at)
    }
}

pub(crate) fn fault_name(f: Fault) -> &'static str {
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

#[allow(clippy::too_many_arguments)]
pub(crate) fn make_plan(
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
        tokens_per_event: b.tokens_per_event,
        close_notice_tokens: (b.close_notice_ms / 1000.0 * b.tokens_per_s).round() as u64,
    }
}

/// Prompt tokens an endpoint reads from its cache: a system prompt it has seen before, where
/// it caches (it lists a cache-read price or implicit caching). The docs' example shows
/// `cached_tokens` inside `prompt_tokens` (prompt-caching guide).
pub(crate) fn cached_tokens(
    state: &SimState,
    i: usize,
    ep: &crate::sim::table::SimEndpoint,
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
