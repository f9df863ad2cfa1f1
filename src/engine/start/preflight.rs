//! What the start says before anything is sent: whether the policy lets something serve, the
//! account's limits against the run, the parameters endpoints would drop.

use std::collections::HashMap;

use crate::config::{Config, Routing};

use super::super::EngineError;
use super::super::endpoint::RunEndpoint;
use super::super::supervisor::DatasetRun;

/// The run's settings as the account sees them: the largest `max_tokens`, a typical prompt
/// (bytes / 4), and the price range of the OpenRouter endpoints the policy allows.
pub(super) fn account_plan(
    cfg: &Config,
    endpoints: &[RunEndpoint],
    probe: &HashMap<String, f64>,
    datasets: &[DatasetRun],
    (bytes, prompts): (u64, u64),
) -> crate::account::Plan {
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let allowed: Vec<&RunEndpoint> = endpoints
        .iter()
        .filter(|e| e.custom.is_none())
        .filter(|e| {
            cfg.policy
                .judge(&native, *e, probe.get(&e.tag).copied())
                .is_none()
        })
        .collect();
    let cheapest = allowed.iter().min_by_key(|e| (e.price_out, e.price_in));
    let dearest = allowed.iter().max_by_key(|e| (e.price_out, e.price_in));
    crate::account::Plan {
        budget: cfg.budget(),
        concurrency: cfg.concurrency,
        max_tokens: datasets
            .iter()
            .map(|d| d.book.params.max_tokens)
            .max()
            .unwrap_or(cfg.request.max_tokens),
        prompt_tokens: (bytes / prompts.max(1)).div_ceil(4).max(1),
        prices: cheapest
            .zip(dearest)
            .map(|(c, d)| ((c.price_in, c.price_out), (d.price_in, d.price_out))),
    }
}

pub(super) fn check_policy(
    cfg: &Config,
    endpoints: &[RunEndpoint],
    probe: &HashMap<String, f64>,
) -> Result<(), EngineError> {
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let allowed = endpoints.iter().any(|e| {
        cfg.policy
            .judge(&native, e, probe.get(&e.tag).copied())
            .is_none()
    });
    if allowed {
        return Ok(());
    }
    let seen: Vec<String> = endpoints
        .iter()
        .map(|e| format!("{} ({})", e.tag, e.quantization))
        .collect();
    Err(EngineError::Input(format!(
        "the policy ({:?}, native {native}) allows none of the {} endpoints of {}: {}. \
         Set policy.mode = \"any\", or list tags in policy.include",
        cfg.policy.mode,
        endpoints.len(),
        cfg.model,
        seen.join(", ")
    )))
}

/// Allowed endpoints that do not list a parameter the requests set: with `require_parameters`
/// (openrouter routing) OpenRouter sends them nothing; pinned routing drops the parameter for
/// them (and the row's `params` says so).
pub(super) fn parameter_notes(
    cfg: &Config,
    endpoints: &[RunEndpoint],
    probe: &HashMap<String, f64>,
) -> Vec<String> {
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let mut sent: Vec<&'static str> = Vec::new();
    for d in &cfg.datasets {
        for p in cfg
            .request_for(d)
            .chat_request(&cfg.model, Vec::new())
            .parameters_sent()
        {
            if !sent.contains(&p) {
                sent.push(p);
            }
        }
    }
    let mut notes = Vec::new();
    for e in endpoints.iter().filter(|e| e.custom.is_none()) {
        let Some(listed) = &e.supported_parameters else {
            continue;
        };
        if cfg
            .policy
            .judge(&native, e, probe.get(&e.tag).copied())
            .is_some()
        {
            continue;
        }
        let missing: Vec<&str> = (sent.iter().copied())
            .filter(|p| !listed.iter().any(|l| l == p))
            .collect();
        if missing.is_empty() {
            continue;
        }
        let what = missing.join(", ");
        notes.push(match cfg.routing {
            Routing::Openrouter if cfg.provider.require_parameters => format!(
                "{} does not list {what}: with [provider] require_parameters OpenRouter sends \
                 it nothing (require_parameters = false lets it serve without them)",
                e.tag
            ),
            Routing::Openrouter => format!(
                "{} does not list {what}: OpenRouter drops them there, and rows it serves \
                 claim them ([provider] require_parameters = true avoids it)",
                e.tag
            ),
            Routing::Pinned => format!(
                "{} does not list {what}: its requests go without them (its rows' params \
                 say so)",
                e.tag
            ),
        });
    }
    notes
}
