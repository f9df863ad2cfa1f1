//! `[request]` and a dataset's overrides of it: the sampling parameters, reasoning and extra
//! body fields every request of a dataset sends, merged once.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::openrouter::request::{ChatRequest, Effort, Message, Reasoning};

/// Request parameters: `[request]`, and the result of merging a dataset's overrides into it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestParams {
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub min_p: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Option<Vec<String>>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    #[serde(deserialize_with = "reasoning")]
    pub reasoning: Option<Reasoning>,
    /// Passed through as top-level JSON body fields (`chat_template_kwargs`, ...).
    pub extra: Map<String, Value>,
}

impl Default for RequestParams {
    fn default() -> Self {
        RequestParams {
            max_tokens: 16384,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            seed: None,
            stop: None,
            presence_penalty: None,
            frequency_penalty: None,
            repetition_penalty: None,
            reasoning: None,
            extra: Map::new(),
        }
    }
}

impl RequestParams {
    /// A non-streaming request for `model` with these parameters; the caller sets `stream`,
    /// `provider` and `stream_options`.
    pub fn chat_request(&self, model: &str, messages: Vec<Message>) -> ChatRequest {
        let mut r = ChatRequest::new(model, messages, self.max_tokens);
        r.temperature = self.temperature;
        r.top_p = self.top_p;
        r.top_k = self.top_k;
        r.min_p = self.min_p;
        r.seed = self.seed;
        r.stop = self.stop.clone();
        r.presence_penalty = self.presence_penalty;
        r.frequency_penalty = self.frequency_penalty;
        r.repetition_penalty = self.repetition_penalty;
        r.reasoning = self.reasoning.clone();
        r.extra = self.extra.clone();
        r
    }
}

/// A dataset's `request` table: any key set here replaces `[request]`'s; `extra` is merged
/// key by key (the dataset's keys win).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestOverride {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub min_p: Option<f64>,
    pub seed: Option<u64>,
    pub stop: Option<Vec<String>>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    #[serde(deserialize_with = "reasoning")]
    pub reasoning: Option<Reasoning>,
    pub extra: Map<String, Value>,
}

/// [`Reasoning`] as written in TOML, strict about its keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReasoningToml {
    #[serde(default)]
    effort: Option<Effort>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    exclude: Option<bool>,
    #[serde(default)]
    enabled: Option<bool>,
}

pub(super) fn reasoning<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Reasoning>, D::Error> {
    // `null` (the manifest's JSON of "no reasoning object") is none; TOML has no null.
    let Some(r) = Option::<ReasoningToml>::deserialize(d)? else {
        return Ok(None);
    };
    Ok(Some(Reasoning {
        effort: r.effort,
        max_tokens: r.max_tokens,
        exclude: r.exclude,
        enabled: r.enabled,
    }))
}
