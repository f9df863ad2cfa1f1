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
/// (openrouter routing) OpenRouter sends them nothing, and requests go elsewhere; pinned
/// routing drops the parameter for them (and the row's `params` says so). The rule is the
/// core's (`params::unlisted`, `params::eligible`), which routing and dispatch follow too.
/// A dataset that no allowed endpoint would take is refused: its requests could only wait.
pub(super) fn parameter_notes(
    cfg: &Config,
    endpoints: &[RunEndpoint],
    probe: &HashMap<String, f64>,
) -> Result<Vec<String>, EngineError> {
    use crate::engine::core::params::{eligible, unlisted};
    let (native, _) = cfg.policy.native_for(&cfg.model);
    let allowed: Vec<&RunEndpoint> = endpoints
        .iter()
        .filter(|e| {
            e.custom.is_some()
                || cfg
                    .policy
                    .judge(&native, *e, probe.get(&e.tag).copied())
                    .is_none()
        })
        .collect();
    let require = cfg.provider.require_parameters;
    let mut notes = Vec::new();
    let mut said: Vec<(String, Vec<&str>)> = Vec::new();
    for d in &cfg.datasets {
        let sent = cfg
            .request_for(d)
            .chat_request(&cfg.model, Vec::new())
            .parameters_sent();
        let mut takers = 0;
        for e in &allowed {
            let missing = unlisted(&sent, e.supported_parameters.as_deref());
            if eligible(cfg.routing, require, &missing) {
                takers += 1;
            }
            if missing.is_empty() || said.iter().any(|(t, m)| *t == e.tag && *m == missing) {
                continue;
            }
            said.push((e.tag.clone(), missing.clone()));
            let what = missing.join(", ");
            notes.push(match cfg.routing {
                Routing::Openrouter if require => format!(
                    "{} does not list {what}: with [provider] require_parameters OpenRouter \
                     sends it nothing, so harvest routes those requests elsewhere \
                     (require_parameters = false lets it serve without them)",
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
        if takers == 0 && !allowed.is_empty() {
            return Err(EngineError::Input(format!(
                "dataset {}: no allowed endpoint lists every parameter its requests send ({}), \
                 and with [provider] require_parameters OpenRouter would send them nowhere. \
                 Remove the parameters no endpoint lists, or set require_parameters = false",
                d.name,
                sent.join(", ")
            )));
        }
    }
    Ok(notes)
}
