//! The body of `POST /chat/completions`, built from typed parameters. Also deserialisable, so the
//! simulator reads requests with the same field names the client writes.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::domain::Quantization;

/// One chat turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
}

/// Reasoning effort levels OpenRouter accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Max,
    Xhigh,
    High,
    Medium,
    Low,
    Minimal,
    None,
}

/// The `reasoning` object: either an effort or a token budget; `exclude` hides the text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `provider.sort`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderSort {
    Price,
    Throughput,
    Latency,
    Exacto,
}

/// `provider.preferred_min_throughput` (tokens/s) or `preferred_max_latency` (seconds): a
/// number applies to the median, an object to chosen percentiles. Endpoints that miss it go
/// to the back of the line, never out (provider-selection docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PerformanceTarget {
    Median(f64),
    Percentiles(PercentileCutoffs),
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PercentileCutoffs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p75: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
}

/// `provider.max_price`, in USD per million tokens. The docs send numbers, the spec strings:
/// we send numbers and accept both.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MaxPrice {
    #[serde(
        default,
        deserialize_with = "number_or_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub prompt: Option<f64>,
    #[serde(
        default,
        deserialize_with = "number_or_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub completion: Option<f64>,
    #[serde(
        default,
        deserialize_with = "number_or_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub request: Option<f64>,
}

fn number_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("bad price {s:?}"))),
        Some(other) => Err(serde::de::Error::custom(format!(
            "price must be a number, got {other}"
        ))),
    }
}

/// The `provider` routing object (OpenRouter `ProviderPreferences`). Slugs are endpoint tags.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderPreferences {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_fallbacks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_parameters: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantizations: Option<Vec<Quantization>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort: Option<ProviderSort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<MaxPrice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_collection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zdr: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce_distillable_text: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_min_throughput: Option<PerformanceTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_max_latency: Option<PerformanceTarget>,
}

impl ProviderPreferences {
    /// Route to exactly one endpoint: `order: [tag]`, no fallbacks, every parameter honoured.
    pub fn pinned(tag: &str) -> Self {
        ProviderPreferences {
            order: Some(vec![tag.to_string()]),
            allow_fallbacks: Some(false),
            require_parameters: Some(true),
            ..Default::default()
        }
    }

    /// Route only among `tags`, never beyond them.
    pub fn only(tags: Vec<String>) -> Self {
        ProviderPreferences {
            only: Some(tags),
            allow_fallbacks: Some(false),
            ..Default::default()
        }
    }
}

/// `stream_options` for OpenAI-compatible servers that only report usage when asked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    pub include_usage: bool,
}

/// A chat completion request. `max_tokens` is always set: OpenRouter's in-flight budget
/// reserves credit for it, so leaving it unset blocks high-concurrency runs with 402s.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    #[serde(default)]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderPreferences>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Server-specific fields (`chat_template_kwargs`, ...) merged into the top level.
    #[serde(flatten, default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

impl ChatRequest {
    /// The parameters this request sets, under the names an endpoint's
    /// `supported_parameters` uses (what `require_parameters` checks).
    pub fn parameters_sent(&self) -> Vec<&'static str> {
        let mut p = vec!["max_tokens"];
        let checks: [(&'static str, bool); 11] = [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("top_k", self.top_k.is_some()),
            ("min_p", self.min_p.is_some()),
            ("presence_penalty", self.presence_penalty.is_some()),
            ("frequency_penalty", self.frequency_penalty.is_some()),
            ("repetition_penalty", self.repetition_penalty.is_some()),
            ("seed", self.seed.is_some()),
            ("stop", self.stop.is_some()),
            ("reasoning", self.reasoning.is_some()),
            ("tools", self.extra.contains_key("tools")),
        ];
        p.extend(checks.iter().filter(|(_, on)| *on).map(|(n, _)| *n));
        p
    }

    /// Sends the request without parameter `name` (a name of [`ChatRequest::parameters_sent`];
    /// `max_tokens` is always sent and stays).
    pub fn drop_parameter(&mut self, name: &str) {
        match name {
            "temperature" => self.temperature = None,
            "top_p" => self.top_p = None,
            "top_k" => self.top_k = None,
            "min_p" => self.min_p = None,
            "presence_penalty" => self.presence_penalty = None,
            "frequency_penalty" => self.frequency_penalty = None,
            "repetition_penalty" => self.repetition_penalty = None,
            "seed" => self.seed = None,
            "stop" => self.stop = None,
            "reasoning" => self.reasoning = None,
            "tools" => {
                self.extra.remove("tools");
            }
            _ => {}
        }
    }

    pub fn new(model: impl Into<String>, messages: Vec<Message>, max_tokens: u32) -> Self {
        ChatRequest {
            model: model.into(),
            messages,
            max_tokens,
            stream: false,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            presence_penalty: None,
            frequency_penalty: None,
            repetition_penalty: None,
            seed: None,
            stop: None,
            reasoning: None,
            provider: None,
            stream_options: None,
            extra: Map::new(),
        }
    }

    pub fn with_provider(mut self, p: ProviderPreferences) -> Self {
        self.provider = Some(p);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_request_serialises_the_routing_object() {
        let mut r = ChatRequest::new("moonshotai/kimi-k2.5", vec![Message::user("hi")], 64)
            .with_provider(ProviderPreferences::pinned("chutes/int4"));
        r.stream = true;
        r.temperature = Some(0.6);
        r.reasoning = Some(Reasoning {
            effort: Some(Effort::High),
            ..Default::default()
        });
        r.extra.insert(
            "chat_template_kwargs".into(),
            serde_json::json!({"thinking": true}),
        );
        let v = serde_json::to_value(&r).expect("json");
        assert_eq!(v["max_tokens"], 64);
        assert_eq!(v["provider"]["order"][0], "chutes/int4");
        assert_eq!(v["provider"]["allow_fallbacks"], false);
        assert_eq!(v["provider"]["require_parameters"], true);
        assert!(v["provider"].get("only").is_none());
        assert_eq!(v["reasoning"]["effort"], "high");
        assert_eq!(v["chat_template_kwargs"]["thinking"], true);
        assert!(v.get("top_p").is_none());
        let back: ChatRequest = serde_json::from_value(v).expect("roundtrip");
        assert_eq!(back, r);
    }

    #[test]
    fn quantizations_and_max_price_forms() {
        let p: ProviderPreferences = serde_json::from_str(
            r#"{"quantizations":["int4","fp4"],"max_price":{"prompt":"1","completion":3},"sort":"price"}"#,
        )
        .expect("prefs");
        assert_eq!(
            p.quantizations,
            Some(vec![Quantization::Int4, Quantization::Fp4])
        );
        let mp = p.max_price.expect("max price");
        assert_eq!((mp.prompt, mp.completion), (Some(1.0), Some(3.0)));
        assert_eq!(p.sort, Some(ProviderSort::Price));
    }
}
