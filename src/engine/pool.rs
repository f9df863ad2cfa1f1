//! The endpoint pool: the one place that turns the model's listing and the operator's own
//! servers (`[[endpoint]]`) into [`RunEndpoint`]s: for a run at start and when a refreshed
//! listing shows a new endpoint, and for `estimate` and `probe`.

use std::collections::HashMap;

use crate::config::{Config, EndpointConfig};
use crate::openrouter::{Endpoint, ModelEndpoints, OpenRouterClient};

use super::EngineError;
use super::endpoint::{CustomTarget, RunEndpoint, stops_billing_on_cancel};

/// An endpoint of OpenRouter's listing, as the run uses it.
pub(crate) fn from_listing(cfg: &Config, e: &Endpoint) -> RunEndpoint {
    listed(cfg.cancel_stops_billing.as_deref(), e)
}

/// An endpoint of OpenRouter's listing; `cancel_list` is the config's `cancel_stops_billing`
/// (`None`: OpenRouter's documented list).
pub(crate) fn listed(cancel_list: Option<&[String]>, e: &Endpoint) -> RunEndpoint {
    let tariff = e.pricing.tariff();
    // An ordinary request now: a short prompt, this hour's window, the discount applied.
    let now = tariff.rates(0, crate::pricing::hhmm(&chrono::Utc::now()));
    RunEndpoint {
        tag: e.tag.to_string(),
        provider: e.provider_name.clone(),
        quantization: e.quantization.clone(),
        price_in: now.prompt,
        price_out: now.completion,
        tariff,
        supported_parameters: e.supported_parameters.clone(),
        status: e.status,
        uptime_30m: e.uptime_last_30m,
        context_length: e.context_length,
        tokens_per_event: None,
        bytes_per_token: crate::engine::core::wire_rate::PRIOR_BYTES_PER_TOKEN,
        transit_tokens: crate::engine::core::close_transit::prior(1.0, None),
        cancel_stops_billing: stops_billing_on_cancel(
            cancel_list,
            e.tag.as_str(),
            &e.provider_name,
        ),
        custom: None,
    }
}

/// The listing's endpoints, then the operator's own servers (reached directly).
pub(crate) fn build(cfg: &Config, listing: &ModelEndpoints) -> Vec<RunEndpoint> {
    let mut endpoints: Vec<RunEndpoint> = listing
        .endpoints
        .iter()
        .map(|e| from_listing(cfg, e))
        .collect();
    endpoints.extend(cfg.endpoints.iter().map(own));
    endpoints
}

/// The clients that reach the operator's own servers, by endpoint tag (their `name`): the
/// workers' to use, kept out of the endpoints' facts.
pub(crate) fn own_clients(cfg: &Config) -> Result<HashMap<String, OpenRouterClient>, EngineError> {
    cfg.endpoints
        .iter()
        .map(|c| Ok((c.name.clone(), super::own_server_client(cfg, c)?)))
        .collect()
}

/// One of the operator's own servers, reached directly.
fn own(c: &EndpointConfig) -> RunEndpoint {
    RunEndpoint {
        tag: c.name.clone(),
        provider: c.name.clone(),
        quantization: c.quantization.clone(),
        price_in: c.price_in(),
        price_out: c.price_out(),
        tariff: crate::pricing::Tariff::flat(c.price_in(), c.price_out()),
        supported_parameters: None,
        status: None,
        uptime_30m: None,
        context_length: None,
        // Aborting a request on one's own server stops the generation.
        tokens_per_event: None,
        bytes_per_token: crate::engine::core::wire_rate::PRIOR_BYTES_PER_TOKEN,
        transit_tokens: crate::engine::core::close_transit::prior(1.0, None),
        cancel_stops_billing: true,
        custom: Some(CustomTarget {
            model: c.model.clone(),
            extra: c.extra.clone(),
            concurrency: c.concurrency,
        }),
    }
}
