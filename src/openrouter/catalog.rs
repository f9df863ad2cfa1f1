//! The catalog: `GET /models`, `GET /models/{author}/{slug}/endpoints` and `GET /key`, parsed
//! permissively into typed values (unknown fields ignored, optional fields optional, odd types
//! in statistics tolerated) while the raw JSON of each endpoint is kept for display.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::domain::{EndpointTag, Price, Quantization};

use super::error::ApiError;

/// Parses `T` from a value, or `None` when the value is null or of another shape. Used for
/// statistics fields whose type the API has changed before (numbers vs strings vs objects).
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

/// One entry of `GET /models`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Model {
    pub id: String,
    #[serde(default)]
    pub canonical_slug: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub created: Option<i64>,
    #[serde(default, deserialize_with = "lenient")]
    pub context_length: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub pricing: Option<ModelPricing>,
    #[serde(default, deserialize_with = "lenient")]
    pub top_provider: Option<TopProvider>,
    #[serde(default, deserialize_with = "lenient")]
    pub supported_parameters: Option<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ModelPricing {
    pub prompt: Price,
    pub completion: Price,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct TopProvider {
    #[serde(default, deserialize_with = "lenient")]
    pub context_length: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub max_completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub is_moderated: Option<bool>,
}

#[derive(Deserialize)]
pub(crate) struct ModelsEnvelope {
    pub data: Vec<Model>,
}

/// p50..p99 of latency (time to first token) or throughput (tokens/s) over the last 30 minutes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Percentiles {
    #[serde(default, deserialize_with = "lenient")]
    pub p50: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub p75: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub p90: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub p99: Option<f64>,
}

/// Prices of one endpoint. `prompt` and `completion` are required: an endpoint whose price we
/// cannot read cannot be budgeted.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct EndpointPricing {
    pub prompt: Price,
    pub completion: Price,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_cache_read: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_reasoning: Option<Price>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub discount: Option<f64>,
    /// Conditional prices (long prompts, time windows); see [`crate::pricing`].
    #[serde(
        default,
        deserialize_with = "lenient_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub overrides: Vec<crate::pricing::Override>,
}

impl EndpointPricing {
    /// The prices as [`crate::pricing::Tariff`] applies them.
    pub fn tariff(&self) -> crate::pricing::Tariff {
        use rust_decimal::prelude::FromPrimitive;
        crate::pricing::Tariff {
            prompt: self.prompt,
            completion: self.completion,
            request: self.request.unwrap_or_default(),
            cache_read: self.input_cache_read,
            discount: (self.discount)
                .and_then(rust_decimal::Decimal::from_f64)
                .unwrap_or_default(),
            overrides: self.overrides.clone(),
        }
    }
}

/// A list whose malformed entries are dropped rather than failing the whole listing.
fn lenient_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = Option::<Value>::deserialize(d)?;
    Ok(match v {
        Some(Value::Array(items)) => items
            .into_iter()
            .filter_map(|i| serde_json::from_value(i).ok())
            .collect(),
        _ => Vec::new(),
    })
}

/// A model id and its variant suffix: `moonshotai/kimi-k2.5:floor` is
/// (`moonshotai/kimi-k2.5`, `Some("floor")`). `:floor` sorts by price (and lets flex-tier
/// endpoints in), `:nitro` by throughput (and priority tiers), `:exacto` by tool-calling
/// quality: routing meanings sent with the chat request's `model`, which is how the docs use
/// them. The endpoint listing is read for the base id, the one whose lookup is documented
/// (guides/routing/model-variants; docs/openrouter-routing-facts.md §8).
pub fn split_variant(model: &str) -> (&str, Option<&str>) {
    match model.rsplit_once(':') {
        Some((base, v)) if !v.is_empty() && !v.contains('/') => (base, Some(v)),
        _ => (model, None),
    }
}

/// One endpoint (a provider serving the model at some precision and price).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Endpoint {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub model_id: Option<String>,
    #[serde(default)]
    pub model_name: Option<String>,
    pub provider_name: String,
    /// The routing slug; not always unique (two BaseTen endpoints once shared one).
    pub tag: EndpointTag,
    #[serde(default)]
    pub quantization: Quantization,
    #[serde(default, deserialize_with = "lenient")]
    pub context_length: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub max_completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub max_prompt_tokens: Option<u64>,
    pub pricing: EndpointPricing,
    #[serde(default, deserialize_with = "lenient")]
    pub supported_parameters: Option<Vec<String>>,
    /// 0 is normal; negative values are undocumented and mean degraded.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<i64>,
    /// Percent 0-100.
    #[serde(default, deserialize_with = "lenient")]
    pub uptime_last_5m: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub uptime_last_30m: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub uptime_last_1d: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub latency_last_30m: Option<Percentiles>,
    #[serde(default, deserialize_with = "lenient")]
    pub throughput_last_30m: Option<Percentiles>,
    #[serde(default, deserialize_with = "lenient")]
    pub supports_implicit_caching: Option<bool>,
    /// The endpoint exactly as the API sent it, for displaying fields we do not model.
    #[serde(skip)]
    pub raw: Value,
}

impl Endpoint {
    /// Degraded per the API: a non-zero status. Whether it is down is judged from uptime.
    pub fn is_degraded(&self) -> bool {
        self.status.is_some_and(|s| s != 0)
    }

    /// The listing's names as one line each: they are shown inside lines of ours (progress,
    /// events, `providers`, the comments `init` writes), where a newline would forge a line or
    /// write TOML (reliability-probe-4 N2, D8).
    fn keep_to_one_line(&mut self) {
        let one = |s: &mut String| {
            if let std::borrow::Cow::Owned(o) = crate::printable::one_line(s) {
                *s = o;
            }
        };
        one(&mut self.name);
        one(&mut self.provider_name);
        one(&mut self.tag.0);
        for s in [&mut self.model_id, &mut self.model_name]
            .into_iter()
            .flatten()
        {
            one(s);
        }
        if let Quantization::Other(q) = &mut self.quantization {
            one(q);
        }
    }

    pub fn supports(&self, param: &str) -> bool {
        self.supported_parameters
            .as_ref()
            .is_some_and(|p| p.iter().any(|x| x == param))
    }
}

/// `GET /models/{author}/{slug}/endpoints`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModelEndpoints {
    pub id: String,
    pub name: Option<String>,
    pub endpoints: Vec<Endpoint>,
}

impl ModelEndpoints {
    /// Parses the endpoints response. Each endpoint is typed on its own so that an error names
    /// which one and which field is wrong.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let decode = |detail: String| ApiError::Decode {
            what: "endpoints response",
            detail,
        };
        let root: Value =
            serde_json::from_slice(body).map_err(|e| decode(format!("not JSON: {e}")))?;
        let data = root
            .get("data")
            .ok_or_else(|| decode("no `data` object".to_string()))?;
        let id = data
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let name = data.get("name").and_then(Value::as_str).map(str::to_string);
        let list = data
            .get("endpoints")
            .and_then(Value::as_array)
            .ok_or_else(|| decode("`data.endpoints` is missing or not a list".to_string()))?;
        let mut endpoints = Vec::with_capacity(list.len());
        for (i, raw) in list.iter().enumerate() {
            let mut ep: Endpoint = serde_json::from_value(raw.clone()).map_err(|e| {
                let who = raw
                    .get("tag")
                    .or_else(|| raw.get("provider_name"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                decode(format!("endpoint #{i} ({who}): {e}"))
            })?;
            ep.raw = raw.clone();
            ep.keep_to_one_line();
            endpoints.push(ep);
        }
        Ok(ModelEndpoints {
            id,
            name,
            endpoints,
        })
    }
}

/// `GET /key`: spend and limit of the key in use, for reconciling our ledger.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct KeyInfo {
    #[serde(default)]
    pub label: Option<String>,
    /// USD, null when the key has no cap.
    #[serde(default, deserialize_with = "lenient")]
    pub limit: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub limit_remaining: Option<f64>,
    #[serde(default)]
    pub limit_reset: Option<String>,
    /// USD spent with this key, all time.
    #[serde(default)]
    pub usage: f64,
    #[serde(default, deserialize_with = "lenient")]
    pub usage_daily: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub is_free_tier: Option<bool>,
}

/// `GET /generation`: the API's own record of one generation (most fields nullable).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct GenerationInfo {
    pub id: String,
    #[serde(default)]
    pub provider_name: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub cancelled: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub finish_reason: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub tokens_prompt: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub tokens_completion: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub native_tokens_prompt: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    pub native_tokens_completion: Option<u64>,
    /// USD charged by OpenRouter (on a BYOK key, only its fee).
    #[serde(default, deserialize_with = "lenient")]
    pub total_cost: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub is_byok: Option<bool>,
    /// What the provider charged, given for BYOK requests ("only available for BYOK",
    /// usage-accounting docs).
    #[serde(default, deserialize_with = "lenient")]
    pub upstream_inference_cost: Option<f64>,
}

impl GenerationInfo {
    /// What the generation cost the user: OpenRouter's charge, and on a BYOK key the
    /// provider's too (as [`crate::openrouter::Usage::cost_usd`] counts an answer).
    pub fn cost_to_user(&self) -> Option<f64> {
        let upstream = match self.is_byok {
            Some(true) => self.upstream_inference_cost.unwrap_or(0.0),
            _ => 0.0,
        };
        self.total_cost.map(|c| c + upstream)
    }
}

#[derive(Deserialize)]
pub(crate) struct DataEnvelope<T> {
    pub data: T,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_suffixes_split_off_the_base_id() {
        let cases = [
            (
                "moonshotai/kimi-k2.5:floor",
                ("moonshotai/kimi-k2.5", Some("floor")),
            ),
            (
                "moonshotai/kimi-k2.5:nitro",
                ("moonshotai/kimi-k2.5", Some("nitro")),
            ),
            ("moonshotai/kimi-k2.5", ("moonshotai/kimi-k2.5", None)),
            ("moonshotai/kimi-k2.5:", ("moonshotai/kimi-k2.5:", None)),
        ];
        for (id, want) in cases {
            assert_eq!(split_variant(id), want, "{id}");
        }
    }

    const SILICONFLOW: &str = r#"{"data":{"id":"moonshotai/kimi-k2.5","name":"MoonshotAI: Kimi K2.5","created":1769487076,"endpoints":[{
   "name":"SiliconFlow | moonshotai/kimi-k2.5-0127","model_id":"moonshotai/kimi-k2.5-0127","model_name":"Kimi K2.5",
   "provider_name":"SiliconFlow","tag":"siliconflow/int4","quantization":"int4",
   "context_length":262144,"max_completion_tokens":235929,"max_prompt_tokens":null,
   "pricing":{"prompt":"0.00000045","completion":"0.00000225","input_cache_read":"0.00000007","discount":0},
   "supported_parameters":["max_tokens","temperature","reasoning","include_reasoning","tools"],
   "status":0,"uptime_last_5m":100,"uptime_last_30m":99.8,"uptime_last_1d":99.5,
   "latency_last_30m":{"p50":850,"p75":1200,"p90":2100,"p99":5200},
   "throughput_last_30m":{"p50":45.2,"p75":38.5,"p90":28.3,"p99":15.1},
   "supports_implicit_caching":true, "brand_new_field": {"x": 1}}]}}"#;

    #[test]
    fn parses_the_documented_endpoint() {
        let m = ModelEndpoints::parse(SILICONFLOW.as_bytes()).expect("parse");
        assert_eq!(m.id, "moonshotai/kimi-k2.5");
        let e = &m.endpoints[0];
        assert_eq!(e.tag.as_str(), "siliconflow/int4");
        assert_eq!(e.quantization, Quantization::Int4);
        assert_eq!(e.pricing.completion.to_string(), "$2.25/M");
        assert_eq!(e.max_completion_tokens, Some(235_929));
        assert_eq!(e.uptime_last_30m, Some(99.8));
        assert_eq!(e.latency_last_30m.and_then(|p| p.p50), Some(850.0));
        assert!(e.supports("reasoning"));
        assert_eq!(e.raw["brand_new_field"]["x"], 1);
    }

    #[test]
    fn tolerates_nulls_and_odd_stat_types() {
        let body = r#"{"data":{"id":"m","endpoints":[{"provider_name":"X","tag":"x",
            "quantization":null,"pricing":{"prompt":"0","completion":"0.000001"},
            "status":"weird","uptime_last_30m":null,"latency_last_30m":{"p50":"fast"}}]}}"#;
        let m = ModelEndpoints::parse(body.as_bytes()).expect("parse");
        let e = &m.endpoints[0];
        assert_eq!(e.quantization, Quantization::Unknown);
        assert_eq!(e.status, None);
        assert_eq!(e.latency_last_30m.and_then(|p| p.p50), None);
    }

    #[test]
    fn malformed_responses_name_what_is_wrong() {
        let err = |b: &str| {
            ModelEndpoints::parse(b.as_bytes())
                .expect_err("should fail")
                .to_string()
        };
        assert!(err("<html>").contains("not JSON"));
        assert!(err(r#"{"error":{}}"#).contains("no `data`"));
        assert!(err(r#"{"data":{"endpoints":3}}"#).contains("not a list"));
        let e = err(
            r#"{"data":{"endpoints":[{"provider_name":"Chutes","tag":"chutes/int4","pricing":{"prompt":"0.1"}}]}}"#,
        );
        assert!(e.contains("endpoint #0 (chutes/int4)"), "{e}");
        assert!(e.contains("completion"), "{e}");
        let e = err(
            r#"{"data":{"endpoints":[{"provider_name":"Chutes","tag":"chutes/int4","pricing":{"prompt":"abc","completion":"1"}}]}}"#,
        );
        assert!(e.contains("bad price"), "{e}");
    }

    #[test]
    fn key_info_with_and_without_limit() {
        let k: DataEnvelope<KeyInfo> = serde_json::from_str(
            r#"{"data":{"label":"sk-or-v1-au7...890","limit":100,"limit_remaining":74.5,"limit_reset":"monthly","usage":25.5,"usage_daily":25.5,"is_free_tier":false,"rate_limit":{"x":1}}}"#,
        )
        .expect("key");
        assert_eq!(k.data.limit, Some(100.0));
        assert_eq!(k.data.usage, 25.5);
        let k: DataEnvelope<KeyInfo> =
            serde_json::from_str(r#"{"data":{"limit":null,"usage":0}}"#).expect("key");
        assert_eq!(k.data.limit, None);
    }
}
