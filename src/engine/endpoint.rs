//! An endpoint as a run knows it: its listing's facts and prices, whether closing a stream
//! there stops its bill, and what an operator's own server is called and asked. Facts only
//! (the client that reaches an own server lives with the workers, in `shared::Shared`): read
//! by the core's decisions, the pool and the workers alike.

use crate::domain::Price;

/// Static facts about an endpoint the run may use.
#[derive(Clone, Debug)]
pub(crate) struct RunEndpoint {
    pub tag: String,
    pub provider: String,
    pub quantization: crate::domain::Quantization,
    /// The prices of an ordinary request now (discount applied): for ordering, display and
    /// the policy; a request's own prices come from `tariff`.
    pub price_in: Price,
    pub price_out: Price,
    /// Every price the listing gives (overrides, cache reads, the request fee, the discount).
    pub tariff: crate::pricing::Tariff,
    pub supported_parameters: Option<Vec<String>>,
    pub status: Option<i64>,
    pub uptime_30m: Option<f64>,
    /// The most tokens (prompt and answer) the endpoint takes, as the listing says; `None` for
    /// an operator's own server (unknown).
    pub context_length: Option<u64>,
    /// Closing the connection stops billing here (OpenRouter documents DeepInfra, Together,
    /// Novita, Fireworks and Chutes); elsewhere a cancelled generation is billed in full.
    pub cancel_stops_billing: bool,
    /// Tokens one streamed event carries here, as the run learned it from the endpoint's
    /// completed streams (`core::wire_rate`; `None` until it has): the workers accrue a
    /// stream's cost and count its tokens in transit by it, and until it is known count a
    /// stream's tokens from its text (`bytes_per_token`).
    pub tokens_per_event: Option<f64>,
    /// Bytes of text a token holds, as the run learned it from all its completed streams (one
    /// model, one tokenizer; `wire_rate::BytesPerToken`, its prior until it has): what a
    /// stream's tokens are counted by until `tokens_per_event` is known.
    pub bytes_per_token: f64,
    /// Tokens a stream here may be billed past what was read when the dollar cap closes it,
    /// as the run learned it (`core::close_transit`; its prior until it has): the cap holds
    /// that much for each such stream.
    pub transit_tokens: f64,
    /// A server of the operator's own (`[[endpoint]]`), reached directly rather than through
    /// OpenRouter.
    pub custom: Option<CustomTarget>,
}

impl crate::policy::Judged for RunEndpoint {
    fn facts(&self) -> crate::policy::EndpointFacts<'_> {
        crate::policy::EndpointFacts {
            tag: &self.tag,
            provider_name: &self.provider,
            quantization: &self.quantization,
            uptime_30m: self.uptime_30m,
            prices: self
                .custom
                .is_none()
                .then_some((self.price_in, self.price_out)),
        }
    }
}

/// What an `[[endpoint]]` server is asked (the client that reaches it is the workers').
#[derive(Clone, Debug)]
pub(crate) struct CustomTarget {
    /// The model's name on that server.
    pub model: String,
    /// Extra JSON body fields for it (merged over the dataset's).
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// Most requests in flight there.
    pub concurrency: u32,
}

/// Providers whose billing stops when the client disconnects (OpenRouter docs, streaming
/// cancellation), by base slug.
pub(crate) const CANCEL_STOPS_BILLING: [&str; 5] =
    ["chutes", "deepinfra", "together", "novita", "fireworks"];

/// Whether closing a stream at this endpoint stops its bill: per the config's list when it
/// gives one, else per OpenRouter's documented list.
pub(crate) fn stops_billing_on_cancel(
    configured: Option<&[String]>,
    tag: &str,
    provider: &str,
) -> bool {
    match configured {
        Some(list) => crate::policy::list_matches(list, tag, provider),
        None => {
            let base = crate::domain::EndpointTag::base_of(tag);
            CANCEL_STOPS_BILLING
                .iter()
                .any(|p| p.eq_ignore_ascii_case(base))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_stops_billing_on_cancel() {
        // OpenRouter's documented list, by base slug.
        assert!(stops_billing_on_cancel(None, "chutes/int4", "Chutes"));
        assert!(stops_billing_on_cancel(
            None,
            "deepinfra/turbo",
            "DeepInfra"
        ));
        assert!(!stops_billing_on_cancel(
            None,
            "siliconflow/int4",
            "SiliconFlow"
        ));
        // The config's list replaces it; tags, base slugs and display names all match.
        let cfg = crate::config::Config::parse_unchecked(
            "cancel_stops_billing = [\"siliconflow\", \"Moonshot AI\"]\n[[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n",
            std::path::Path::new("harvest.toml"),
        )
        .expect("config");
        let list = cfg.cancel_stops_billing.as_deref();
        assert!(stops_billing_on_cancel(
            list,
            "siliconflow/int4",
            "SiliconFlow"
        ));
        assert!(stops_billing_on_cancel(
            list,
            "moonshotai/int4",
            "Moonshot AI"
        ));
        assert!(!stops_billing_on_cancel(list, "chutes/int4", "Chutes"));
    }
}
