//! The simulator's provider table: one model and its endpoints in OpenRouter's wire format, each
//! with a `sim` block saying how the simulated provider behaves. Loaded from a JSON file
//! (default: the embedded `assets/providers/kimi-k2.5.json`).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{EndpointTag, Price, Quantization};

use super::faults::FaultMix;

/// The embedded default table.
pub(crate) const KIMI_K25_TABLE: &str = include_str!("../../assets/providers/kimi-k2.5.json");

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read provider table {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("provider table {path}, line {line} column {column}: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("provider table {path}: endpoint #{index} ({tag}): {message}")]
    Endpoint {
        path: String,
        index: usize,
        tag: String,
        message: String,
    },
    #[error("provider table {path}: {message}")]
    Invalid { path: String, message: String },
}

/// How one simulated endpoint behaves.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimBehaviour {
    /// Median time to first token at speed scale 1.
    #[serde(default = "default_ttft")]
    pub ttft_ms: f64,
    /// Decode speed of one stream at speed scale 1.
    #[serde(default = "default_tps")]
    pub tokens_per_s: f64,
    /// Concurrent streams the provider takes before it answers 429 (None: unlimited).
    #[serde(default)]
    pub capacity: Option<u32>,
    /// Whether closing the connection stops billing (DeepInfra, Together, Novita, Fireworks,
    /// Chutes per the docs); otherwise a cancelled request is billed in full.
    #[serde(default)]
    pub cancel_stops_billing: bool,
    #[serde(default)]
    pub faults: FaultMix,
    /// Share of prompts on which this endpoint's output departs from the reference text after a
    /// few tokens (a re-quantized model).
    #[serde(default)]
    pub divergence: f64,
    /// Taken out of routing entirely (as if the provider vanished), set through the control route.
    #[serde(default)]
    pub down: bool,
    /// How the model's thinking comes back: in `reasoning` deltas (OpenRouter's parsed form),
    /// `inline` in the content as `<think>...</think>` (a server without a reasoning parser),
    /// or `only`: every token is reasoning and the content stays empty.
    #[serde(default)]
    pub reasoning_format: ReasoningFormat,
    /// The provider stores user data or trains on it: `data_collection: "deny"` keeps requests
    /// away (provider-selection docs). Not in the public listing, so only the simulator knows.
    #[serde(default)]
    pub collects_data: bool,
    /// A Zero Data Retention endpoint: listed at `GET /api/v1/endpoints/zdr`, and the only
    /// kind `zdr: true` routes to.
    #[serde(default)]
    pub zdr: bool,
    /// How many tokens one SSE event carries (see [`TokensPerEvent`]).
    #[serde(default)]
    pub tokens_per_event: TokensPerEvent,
    /// How long, at the endpoint's own pace, the provider goes on generating after the client
    /// closes the stream before it notices, where a close stops the bill: the tokens decoded
    /// meanwhile are billed (OpenRouter passes the close on to the provider, docs:
    /// api-reference/streaming "Stream Cancellation"; how fast a provider stops is not
    /// documented). In tokens-worth of the endpoint's decode speed, so it is the same share of
    /// a stream at every speed scale. 0: the close stops the bill at once.
    #[serde(default)]
    pub close_notice_ms: f64,
}

/// How many tokens one streamed event (one SSE `data:` chunk) carries. OpenRouter's docs show
/// one delta a chunk and leave its size to the provider (api-reference/streaming); in 518
/// recorded real OpenRouter streams with usage (public test cassettes: pydantic-ai,
/// charmbracelet/fantasy, llm-openrouter; issue #51) the median stream carries 2.7 tokens a
/// content event, Kimi K2.5's providers (Chutes, Together, Novita, Moonshot) 4.1 to 4.4 over a
/// whole stream, single events up to 50: providers that decode speculatively emit the tokens a
/// step accepted together.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokensPerEvent {
    /// Every event carries exactly this many.
    Fixed(u32),
    /// Each event's count drawn from a geometric distribution of this mean (at least one, with
    /// the long tail of a burst), at most [`TokensPerEvent::MOST`].
    Mean(f64),
}

impl TokensPerEvent {
    /// The most one event carries (the recorded maximum was 50).
    pub const MOST: u32 = 64;

    /// One event's count.
    pub fn draw(self, rng: &mut impl rand::Rng) -> u32 {
        match self {
            TokensPerEvent::Fixed(n) => n.clamp(1, Self::MOST),
            TokensPerEvent::Mean(m) if m <= 1.0 || !m.is_finite() => 1,
            TokensPerEvent::Mean(m) => {
                // Geometric on 1, 2, ...: P(k) = (1 - q)^(k - 1) q with q = 1 / m.
                let q = 1.0 / m;
                let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
                let k = (u.ln() / (1.0 - q).ln()).floor() as u64 + 1;
                k.min(u64::from(Self::MOST)) as u32
            }
        }
    }
}

impl Default for TokensPerEvent {
    fn default() -> Self {
        TokensPerEvent::Fixed(1)
    }
}

impl std::str::FromStr for TokensPerEvent {
    type Err = String;
    /// `8` (every event 8 tokens) or `mean:4.2` (drawn, bursts included).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{s:?}: a whole number from 1 to {} (every event), or mean:M with M >= 1 (drawn)",
                Self::MOST
            )
        };
        match s.strip_prefix("mean:") {
            Some(m) => {
                let m: f64 = m.trim().parse().map_err(|_| bad())?;
                if !(m.is_finite() && m >= 1.0) {
                    return Err(bad());
                }
                Ok(TokensPerEvent::Mean(m))
            }
            None => {
                let n: u32 = s.trim().parse().map_err(|_| bad())?;
                if !(1..=Self::MOST).contains(&n) {
                    return Err(bad());
                }
                Ok(TokensPerEvent::Fixed(n))
            }
        }
    }
}

/// See [`SimBehaviour::reasoning_format`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningFormat {
    #[default]
    Separate,
    Inline,
    Only,
}

fn default_ttft() -> f64 {
    1000.0
}
fn default_tps() -> f64 {
    40.0
}

impl Default for SimBehaviour {
    fn default() -> Self {
        SimBehaviour {
            ttft_ms: default_ttft(),
            tokens_per_s: default_tps(),
            capacity: None,
            cancel_stops_billing: false,
            faults: FaultMix::default(),
            divergence: 0.0,
            down: false,
            reasoning_format: ReasoningFormat::Separate,
            collects_data: false,
            zdr: false,
            tokens_per_event: TokensPerEvent::default(),
            close_notice_ms: 0.0,
        }
    }
}

/// One endpoint: what the API shows (`wire`) plus the fields the simulator needs, typed.
#[derive(Clone, Debug)]
pub struct SimEndpoint {
    pub tag: EndpointTag,
    pub provider_name: String,
    pub quantization: Quantization,
    pub price_in: Price,
    pub price_out: Price,
    /// Every price its listing gives: what the simulator bills by (`crate::pricing`).
    pub tariff: crate::pricing::Tariff,
    pub context_length: u64,
    pub max_completion_tokens: Option<u64>,
    pub supported_parameters: Vec<String>,
    pub behaviour: SimBehaviour,
    /// The endpoint object as served by `/endpoints` (without the `sim` block).
    pub wire: Value,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OutputLength {
    /// Mean completion length in tokens (log-normal).
    pub mean: f64,
    /// Log-space standard deviation: the long tail.
    pub sigma: f64,
}

impl Default for OutputLength {
    fn default() -> Self {
        OutputLength {
            mean: 1700.0,
            sigma: 0.7,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    #[serde(default, rename = "_comment")]
    _comment: Option<Value>,
    model: Value,
    #[serde(default)]
    output_tokens: OutputLength,
    #[serde(default = "default_reasoning_share")]
    reasoning_share: f64,
    endpoints: Vec<Value>,
}

fn default_reasoning_share() -> f64 {
    0.3
}

/// A whole table.
#[derive(Clone, Debug)]
pub struct ProviderTable {
    /// The `/models` entry, as served.
    pub model: Value,
    pub model_id: String,
    pub canonical_slug: Option<String>,
    pub output_tokens: OutputLength,
    /// Share of the completion spent reasoning when reasoning is on.
    pub reasoning_share: f64,
    pub endpoints: Vec<SimEndpoint>,
}

impl ProviderTable {
    pub fn kimi_k25() -> Self {
        // The embedded table is checked by a unit test, so this cannot fail in a release.
        Self::parse(KIMI_K25_TABLE, "assets/providers/kimi-k2.5.json")
            .unwrap_or_else(|e| panic!("embedded provider table is invalid: {e}"))
    }

    pub fn load(path: &Path) -> Result<Self, TableError> {
        let text = std::fs::read_to_string(path).map_err(|source| TableError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn parse(text: &str, path: &str) -> Result<Self, TableError> {
        let raw: RawTable = serde_json::from_str(text).map_err(|e| TableError::Parse {
            path: path.to_string(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        let invalid = |message: String| TableError::Invalid {
            path: path.to_string(),
            message,
        };
        let model_id = raw
            .model
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("model.id is missing".into()))?
            .to_string();
        let canonical_slug = raw
            .model
            .get("canonical_slug")
            .and_then(Value::as_str)
            .map(str::to_string);
        if raw.endpoints.is_empty() {
            return Err(invalid("no endpoints".into()));
        }
        let mut endpoints = Vec::with_capacity(raw.endpoints.len());
        for (index, mut v) in raw.endpoints.into_iter().enumerate() {
            let tag = v
                .get("tag")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string();
            let err = |message: String| TableError::Endpoint {
                path: path.to_string(),
                index,
                tag: tag.clone(),
                message,
            };
            let sim = match v.as_object_mut().and_then(|o| o.remove("sim")) {
                Some(s) => serde_json::from_value::<SimBehaviour>(s)
                    .map_err(|e| err(format!("sim: {e}")))?,
                None => SimBehaviour::default(),
            };
            let typed: crate::openrouter::Endpoint =
                serde_json::from_value(v.clone()).map_err(|e| err(e.to_string()))?;
            sim.faults.validate().map_err(err)?;
            if sim.tokens_per_s.is_nan()
                || sim.tokens_per_s <= 0.0
                || sim.ttft_ms.is_nan()
                || sim.ttft_ms < 0.0
            {
                return Err(err("sim.tokens_per_s must be > 0 and ttft_ms >= 0".into()));
            }
            endpoints.push(SimEndpoint {
                tag: typed.tag,
                provider_name: typed.provider_name,
                quantization: typed.quantization,
                price_in: typed.pricing.prompt,
                price_out: typed.pricing.completion,
                tariff: typed.pricing.tariff(),
                context_length: typed.context_length.unwrap_or(131_072),
                max_completion_tokens: typed.max_completion_tokens,
                supported_parameters: typed.supported_parameters.unwrap_or_default(),
                behaviour: sim,
                wire: v,
            });
        }
        Ok(ProviderTable {
            model: raw.model,
            model_id,
            canonical_slug,
            output_tokens: raw.output_tokens,
            reasoning_share: raw.reasoning_share.clamp(0.0, 0.95),
            endpoints,
        })
    }

    /// Whether a request's `model` names this table's model.
    /// Whether it serves `model`, a variant (`:floor`) of it included.
    pub fn serves(&self, model: &str) -> bool {
        let (model, _) = crate::openrouter::split_variant(model);
        model == self.model_id || self.canonical_slug.as_deref() == Some(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_table_matches_the_seed_story() {
        let t = ProviderTable::kimi_k25();
        assert_eq!(t.model_id, "moonshotai/kimi-k2.5");
        assert_eq!(t.endpoints.len(), 11);
        let q = |tag: &str| {
            t.endpoints
                .iter()
                .find(|e| e.tag.as_str() == tag)
                .map(|e| e.quantization.clone())
        };
        for tag in [
            "chutes/int4",
            "siliconflow/int4",
            "atlas-cloud/int4",
            "parasail/int4",
            "moonshotai/int4",
        ] {
            assert_eq!(q(tag), Some(Quantization::Int4), "{tag}");
        }
        assert_eq!(q("baseten/fp4"), Some(Quantization::Fp4));
        for tag in ["deepinfra", "together", "novita", "fireworks", "venice"] {
            assert_eq!(q(tag), Some(Quantization::Unknown), "{tag}");
        }
        let baseten = t
            .endpoints
            .iter()
            .find(|e| e.tag.as_str() == "baseten/fp4")
            .expect("baseten");
        assert_eq!(baseten.wire["status"], -5);
        assert_eq!(baseten.wire["uptime_last_30m"], 29.8);
        assert!(baseten.wire.get("sim").is_none());
        let outs: Vec<String> = t
            .endpoints
            .iter()
            .map(|e| e.price_out.usd_per_million().to_string())
            .collect();
        assert!(outs.contains(&"2.2".to_string()) && outs.contains(&"3.75".to_string()));
    }

    #[test]
    fn bad_tables_name_the_place() {
        let e = ProviderTable::parse("{\n  \"model\": 3,\n", "t.json").expect_err("bad");
        assert!(
            e.to_string().starts_with("provider table t.json, line"),
            "{e}"
        );
        let e = ProviderTable::parse(
            r#"{"model":{"id":"m"},"endpoints":[{"provider_name":"X","tag":"x","pricing":{"prompt":"0","completion":"0"},"sim":{"ttft":1}}]}"#,
            "t.json",
        )
        .expect_err("bad sim");
        assert!(
            e.to_string()
                .contains("endpoint #0 (x): sim: unknown field `ttft`"),
            "{e}"
        );
    }
}
