//! `[provider]`: the fields of OpenRouter's `provider` object that the policy does not decide
//! (data policy, distillation, sort, price caps, performance preferences), how they go into a
//! request, and how they read in a title.

use serde::{Deserialize, Serialize};

use crate::domain::Price;

/// `[provider]`: fields of OpenRouter's `provider` object that harvest does not decide itself
/// (it builds `order`, `only`, `ignore`, `allow_fallbacks` and `quantizations` from the policy).
/// Sent with every OpenRouter request, in both routings (provider-selection docs;
/// docs/openrouter-routing-facts.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderConfig {
    /// Route only to endpoints that support every parameter sent. Without it OpenRouter drops
    /// the ones an endpoint lacks ("will ignore unknown parameters", provider-selection docs)
    /// and the row would claim parameters that were not applied. Pinned requests always
    /// require them.
    pub require_parameters: bool,
    /// `deny`: only providers that do not store user data non-transiently or train on it.
    pub data_collection: Option<DataCollection>,
    /// Only endpoints with a Zero Data Retention policy.
    pub zdr: bool,
    /// Only models whose author allows text distillation (meant for building training data).
    pub enforce_distillable_text: bool,
    /// `price`, `throughput` or `latency` (OpenRouter's order within the allowed set).
    pub sort: Option<crate::openrouter::ProviderSort>,
    /// The most to pay, USD per million tokens: `{ prompt = 1.0, completion = 3.0 }`, or
    /// `"auto"`: the highest prices among the allowed endpoints, a guard against a price rise
    /// between listing refreshes.
    pub max_price: Option<MaxPriceSetting>,
    /// Tokens/s (a number: the median; or `{ p90 = 20 }`): slower endpoints go last.
    pub preferred_min_throughput: Option<crate::openrouter::PerformanceTarget>,
    /// Seconds to the first token, the same way: slower endpoints go last.
    pub preferred_max_latency: Option<crate::openrouter::PerformanceTarget>,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            require_parameters: true,
            data_collection: None,
            zdr: false,
            enforce_distillable_text: false,
            sort: None,
            max_price: None,
            preferred_min_throughput: None,
            preferred_max_latency: None,
        }
    }
}

/// `[provider] data_collection`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataCollection {
    Allow,
    Deny,
}

impl DataCollection {
    pub fn as_str(self) -> &'static str {
        match self {
            DataCollection::Allow => "allow",
            DataCollection::Deny => "deny",
        }
    }
}

/// `[provider] max_price`: fixed limits, or `"auto"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaxPriceSetting {
    Auto(AutoWord),
    Fixed(crate::openrouter::MaxPrice),
}

/// The word `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoWord {
    Auto,
}

impl ProviderConfig {
    /// Puts these fields into a `provider` object; `auto` is the highest `(input, output)`
    /// price among the allowed endpoints, for `max_price = "auto"`.
    pub fn apply(&self, p: &mut crate::openrouter::ProviderPreferences, auto: (Price, Price)) {
        p.data_collection = self.data_collection.map(|d| d.as_str().to_string());
        p.zdr = self.zdr.then_some(true);
        p.enforce_distillable_text = self.enforce_distillable_text.then_some(true);
        if self.sort.is_some() {
            p.sort = self.sort;
        }
        p.max_price = self.max_price_for(auto);
        p.preferred_min_throughput = self.preferred_min_throughput.clone();
        p.preferred_max_latency = self.preferred_max_latency.clone();
    }

    /// The `max_price` to send, in USD per million tokens.
    pub fn max_price_for(&self, auto: (Price, Price)) -> Option<crate::openrouter::MaxPrice> {
        match &self.max_price {
            None => None,
            Some(MaxPriceSetting::Fixed(m)) => Some(m.clone()),
            Some(MaxPriceSetting::Auto(_)) => Some(crate::openrouter::MaxPrice {
                prompt: Some(auto.0.usd_per_million_f64()),
                completion: Some(auto.1.usd_per_million_f64()),
                request: None,
            }),
        }
    }

    /// What the run asks of OpenRouter beyond the policy, for titles: `data_collection=deny
    /// zdr max_price=auto`; empty when nothing.
    pub fn summary(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        if let Some(d) = self.data_collection {
            out.push(format!("data_collection={}", d.as_str()));
        }
        if self.zdr {
            out.push("zdr".into());
        }
        if self.enforce_distillable_text {
            out.push("distillable".into());
        }
        if let Some(s) = self.sort {
            out.push(format!(
                "sort={}",
                serde_json::to_value(s)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ));
        }
        match &self.max_price {
            Some(MaxPriceSetting::Auto(_)) => out.push("max_price=auto".into()),
            Some(MaxPriceSetting::Fixed(m)) => {
                let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x}"));
                out.push(format!(
                    "max_price={}/{} per M",
                    f(m.prompt),
                    f(m.completion)
                ));
            }
            None => {}
        }
        if self.preferred_min_throughput.is_some() {
            out.push("min_throughput".into());
        }
        if self.preferred_max_latency.is_some() {
            out.push("max_latency".into());
        }
        out.join(" ")
    }
}
