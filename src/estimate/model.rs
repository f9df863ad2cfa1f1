//! What goes into an estimate and what comes out: the facts (prompts, outputs, endpoints and
//! their speeds), the per-dataset and per-endpoint figures, the totals and the verdict.

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;

use crate::config::Routing;
use crate::domain::{Price, Quantization, Usd};
use crate::policy::{Exclusion, Fidelity};

use super::*;

/// The tokenizer-free input estimate: `ceil(characters / chars_per_token)` plus
/// `tokens_per_message` for each message (role and chat-template tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TokenRule {
    pub chars_per_token: u64,
    pub tokens_per_message: u64,
}

impl TokenRule {
    pub const DEFAULT: TokenRule = TokenRule {
        chars_per_token: 4,
        tokens_per_message: 4,
    };

    /// Estimated prompt tokens of `text`.
    pub fn tokens(&self, text: &TextStats) -> u64 {
        let body = text.chars.div_ceil(self.chars_per_token.max(1));
        body.saturating_add(text.messages.saturating_mul(self.tokens_per_message))
    }
}

impl Default for TokenRule {
    fn default() -> Self {
        TokenRule::DEFAULT
    }
}

/// Size of a set of prompts, as sent (system prompt included when the config adds one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TextStats {
    pub prompts: u64,
    /// Requests these prompts take: one each, or one per assistant turn when every turn is
    /// regenerated (`turns = "all"`; then `messages` and `chars` count every request's).
    pub requests: u64,
    pub messages: u64,
    /// Unicode characters (not bytes) of every message's content.
    pub chars: u64,
    pub non_ascii_chars: u64,
}

impl TextStats {
    /// Counts one message of a prompt (call [`TextStats::add_prompt`] once per prompt too).
    pub fn add_message(&mut self, content: &str) {
        let chars = content.chars().count() as u64;
        let ascii = content.bytes().filter(u8::is_ascii).count() as u64;
        self.messages += 1;
        self.chars += chars;
        self.non_ascii_chars += chars.saturating_sub(ascii);
    }

    /// Counts one prompt sent in `requests` requests (1 unless every turn is regenerated).
    pub fn add_prompt(&mut self, requests: u64) {
        self.prompts += 1;
        self.requests += requests.max(1);
    }

    pub(super) fn non_ascii_share(&self) -> f64 {
        if self.chars == 0 {
            0.0
        } else {
            self.non_ascii_chars as f64 / self.chars as f64
        }
    }
}

/// The existing outputs of a dataset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub outputs: u64,
    /// Answers the outputs took: one each, or one per turn of a regenerated conversation.
    pub answers: u64,
    pub completion_tokens: u64,
    /// Outputs cut at `max_tokens` while thinking, and the largest `max_tokens` they had.
    pub cut_thinking: u64,
    pub cut_thinking_at: u64,
}

/// What one dataset has left, as read from its prompt file and the output directory.
#[derive(Clone, Debug, PartialEq)]
pub struct DatasetFacts {
    pub name: String,
    /// Distinct valid prompts in the file.
    pub prompts_in_file: u64,
    /// Lines that are not valid prompts (not counted anywhere else).
    pub bad_lines: u64,
    pub rejects: u64,
    /// Valid prompts with no output and no reject yet.
    pub fresh: u64,
    /// The prompts that will be sent: the fresh ones, the first `max_samples - outputs` of them
    /// when the dataset has a sample cap.
    pub remaining: TextStats,
    pub max_samples: Option<u64>,
    pub max_tokens: u32,
    pub output_token_budget: Option<u64>,
    pub observed: Observed,
}

/// Tokens and wall time of finished requests at one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpeedSample {
    pub requests: u64,
    pub completion_tokens: u64,
    /// Sum of whole-request times (TTFT included), seconds.
    pub seconds: f64,
}

impl SpeedSample {
    pub fn add(&mut self, completion_tokens: u64, seconds: f64) {
        self.requests += 1;
        self.completion_tokens += completion_tokens;
        self.seconds += seconds;
    }

    pub(super) fn tok_per_s(&self) -> Option<f64> {
        let ok = self.requests >= MIN_SPEED_SAMPLES && self.seconds > 0.0;
        ok.then(|| self.completion_tokens as f64 / self.seconds)
            .filter(|r| r.is_finite() && *r > 0.0)
    }
}

/// The API's 30-minute medians for an endpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ListedSpeed {
    /// Time to first token, ms.
    pub ttft_ms: Option<f64>,
    /// Generation speed of one request, tokens/s.
    pub tok_per_s: f64,
}

/// One endpoint that could serve the model, with the policy's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointOffer {
    pub tag: String,
    pub provider: String,
    pub quantization: Quantization,
    pub fidelity: Fidelity,
    pub price_in: Price,
    pub price_out: Price,
    /// A fee per request, when the listing has one.
    pub price_request: Option<Price>,
    /// The listing's whole tariff and the UTC `HHMM` to price at: overrides by prompt length
    /// and hour, the discount, cache reads (none assumed). `None`: the flat prices above.
    pub tariff: Option<(crate::pricing::Tariff, u16)>,
    /// `None`: the policy allows it.
    pub excluded: Option<Exclusion>,
    /// One of the config's own `[[endpoint]]` servers.
    pub own_server: bool,
    /// Most streams it takes at once (own servers; `endpoint_concurrency` in pinned routing).
    pub stream_cap: Option<u32>,
    pub observed_speed: Option<SpeedSample>,
    pub listed_speed: Option<ListedSpeed>,
}

/// Everything an estimate is computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    pub model: String,
    pub routing: Routing,
    /// The policy in words: `faithful (native int4)`.
    pub policy: String,
    pub concurrency: u32,
    pub requests_per_second: Option<f64>,
    pub budget: Usd,
    /// Already spent in the output directory.
    pub spent: Usd,
    /// `--mean-output`: output tokens per prompt where none are observed.
    pub mean_output: Option<u64>,
    /// `--stream-tps`: tokens per second of one stream, at every endpoint.
    pub stream_tps: Option<f64>,
    pub rule: TokenRule,
    /// Where the prices come from, in words.
    pub price_source: String,
    pub datasets: Vec<DatasetFacts>,
    pub endpoints: Vec<EndpointOffer>,
    /// Further assumptions and warnings from gathering the facts.
    pub notes: Vec<String>,
}

/// Where a dataset's output-token figure comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputBasis {
    /// The mean completion tokens of the dataset's existing outputs.
    Observed { outputs: u64 },
    /// `--mean-output`.
    Given,
    /// No outputs yet: the output-token budget is assumed spent.
    BudgetSpent,
    /// No outputs yet and no budget: `max_tokens` per prompt, an upper bound.
    MaxTokens,
}

impl OutputBasis {
    /// A short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            OutputBasis::Observed { .. } => "observed",
            OutputBasis::Given => "given",
            OutputBasis::BudgetSpent => "budget",
            OutputBasis::MaxTokens => "max",
        }
    }
}

/// Where an endpoint's per-stream speed comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpeedSource {
    /// `--stream-tps`.
    Given,
    /// Completion tokens over request time of this output directory's outputs.
    Observed { outputs: u64 },
    /// The listing's 30-minute medians: TTFT plus the mean output at the median throughput.
    Listing,
    /// [`DEFAULT_STREAM_TPS`].
    Default,
}

impl SpeedSource {
    pub fn label(self) -> &'static str {
        match self {
            SpeedSource::Given => "given",
            SpeedSource::Observed { .. } => "observed",
            SpeedSource::Listing => "listing",
            SpeedSource::Default => "default",
        }
    }
}

/// A cost at the cheapest endpoint, at the price-weighted mix and at the dearest endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CostRange {
    pub cheapest: Usd,
    pub mix: Usd,
    pub dearest: Usd,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DatasetEstimate {
    pub name: String,
    pub prompts_in_file: u64,
    pub bad_lines: u64,
    /// Outputs already written.
    pub done: u64,
    pub rejected: u64,
    pub max_samples: Option<u64>,
    /// Prompts not done yet (after the sample cap).
    pub prompts_remaining: u64,
    /// Of those, the ones the output-token budget leaves room for.
    pub prompts_to_send: u64,
    /// The requests they take: one a prompt, or one a turn when every turn is regenerated.
    pub requests_to_send: u64,
    /// Estimated prompt tokens of the prompts to send.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub mean_output_tokens: f64,
    pub output_basis: OutputBasis,
    pub max_tokens: u32,
    pub output_tokens_done: u64,
    pub output_token_budget: Option<u64>,
    pub budget_left: Option<u64>,
    pub cost_usd: CostRange,
}

/// The exact API strings (USD per token).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PriceStrings {
    pub prompt: String,
    pub completion: String,
    pub request: Option<String>,
}

/// An allowed endpoint, as if it served all the remaining work.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndpointEstimate {
    pub tag: String,
    pub provider: String,
    pub quantization: Quantization,
    pub fidelity: Fidelity,
    pub own_server: bool,
    pub price_in_per_m: f64,
    pub price_out_per_m: f64,
    pub pricing: PriceStrings,
    /// Its share of requests in the price-weighted mix (0..1).
    pub mix_share: f64,
    pub streams: u32,
    pub stream_tok_per_s: f64,
    pub speed_source: SpeedSource,
    pub input_cost_usd: Usd,
    pub output_cost_usd: Usd,
    pub request_cost_usd: Usd,
    pub cost_usd: Usd,
    pub time_s: f64,
}

/// An endpoint the policy does not allow.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExcludedEndpoint {
    pub tag: String,
    pub provider: String,
    pub quantization: Quantization,
    pub fidelity: Fidelity,
    pub price_in_per_m: f64,
    pub price_out_per_m: f64,
    /// In words: `policy: fp4 re-quantized`.
    pub reason: String,
    pub exclusion: Exclusion,
}

/// One of the three ways the remaining work could be served.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pick {
    /// The endpoint, for the cheapest and the dearest; none for the mix.
    pub endpoint: Option<String>,
    pub cost_usd: Usd,
    pub time_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Totals {
    pub prompts: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cheapest: Pick,
    pub mix: Pick,
    pub dearest: Pick,
}

/// How the remaining work compares with what is left of the dollar budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictStatus {
    /// Nothing left to send.
    NothingLeft,
    /// Fits even at the dearest endpoint.
    Fits,
    /// Fits at the mix, not at the dearest endpoint.
    FitsAtMix,
    /// Fits only at the cheapest endpoint.
    FitsAtCheapest,
    /// Does not fit even at the cheapest endpoint.
    OverBudget,
}

/// The remaining work at one cost against the available budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Fit {
    pub cost_usd: Usd,
    pub fits: bool,
    /// Available minus cost: negative when it does not fit.
    pub headroom_usd: Usd,
    /// All of them when it fits; else the share the budget pays for, in proportion.
    pub prompts_that_fit: u64,
    pub output_tokens_that_fit: u64,
}

impl Fit {
    pub(super) fn new(cost: Usd, available: Usd, prompts: u64, output_tokens: u64) -> Fit {
        let fits = cost <= available;
        let (prompts_that_fit, output_tokens_that_fit) = if fits {
            (prompts, output_tokens)
        } else {
            let share = available.to_decimal() / cost.to_decimal();
            (
                floor_share(prompts, share),
                floor_share(output_tokens, share),
            )
        };
        Fit {
            cost_usd: cost,
            fits,
            headroom_usd: available - cost,
            prompts_that_fit,
            output_tokens_that_fit,
        }
    }
}

fn floor_share(n: u64, share: Decimal) -> u64 {
    (Decimal::from(n) * share).floor().to_u64().unwrap_or(0)
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub status: VerdictStatus,
    pub budget_usd: Usd,
    pub spent_usd: Usd,
    /// Budget minus spent, never below zero.
    pub available_usd: Usd,
    pub cheapest: Fit,
    pub mix: Fit,
    pub dearest: Fit,
}

/// The `--json` document of `harvest estimate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub schema: u32,
    pub model: String,
    pub routing: Routing,
    pub policy: String,
    pub concurrency: u32,
    pub requests_per_second: Option<f64>,
    pub tokens: TokenRule,
    pub datasets: Vec<DatasetEstimate>,
    /// Allowed endpoints, cheapest first.
    pub endpoints: Vec<EndpointEstimate>,
    pub excluded: Vec<ExcludedEndpoint>,
    pub totals: Totals,
    pub verdict: Verdict,
    pub assumptions: Vec<String>,
    /// What the API key and the account allow against this run (`GET /key`), when read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<crate::account::Preflight>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EstimateError {
    #[error("{model} has no endpoint to estimate with")]
    NoEndpoints { model: String },
    #[error(
        "the policy ({policy}) allows none of the {count} endpoints of {model}: {seen}. \
         Set policy.mode = \"any\", or list tags in policy.include"
    )]
    NoneAllowed {
        policy: String,
        count: usize,
        model: String,
        seen: String,
    },
}
