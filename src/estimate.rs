//! What the work a config has left will cost and take (`harvest estimate`). Pure: the facts
//! (prompts still to send and their size, outputs already written, the endpoints with their
//! prices and the policy's verdict) go in, an [`Estimate`] comes out. Gathering the facts from
//! files and the API is `commands::estimate`'s job.
//!
//! Money is exact: per-token [`Price`]s times token counts, rounded once to the picodollar; the
//! price-weighted mix is a decimal weighted sum. Times are floats (they are estimates anyway).
//! Every figure that rests on an assumption says so in [`Estimate::assumptions`].

use std::fmt::Write as _;

use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;
use serde::Serialize;

use crate::config::Routing;
use crate::domain::{Price, Quantization, Tokens, Usd, group_thousands};
use crate::policy::{Exclusion, Fidelity};

/// Version of the JSON document; bumped when a field changes meaning or goes away.
pub const SCHEMA: u32 = 1;
/// Per-stream tokens per second when nothing better is known.
pub const DEFAULT_STREAM_TPS: f64 = 20.0;
/// Finished outputs an endpoint needs before its observed speed is trusted.
pub const MIN_SPEED_SAMPLES: u64 = 10;
/// Above this share of non-ASCII characters, characters / 4 underestimates tokens noticeably.
const NON_ASCII_WARNING: f64 = 0.10;
/// Below this many outputs, the observed mean is flagged as an early (short-leaning) one.
const FEW_OUTPUTS: u64 = 100;

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

    fn non_ascii_share(&self) -> f64 {
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

    fn tok_per_s(&self) -> Option<f64> {
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
    fn new(cost: Usd, available: Usd, prompts: u64, output_tokens: u64) -> Fit {
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

/// Output tokens per prompt as an exact fraction `num / den` (`den > 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mean {
    num: u128,
    den: u128,
}

impl Mean {
    fn whole(n: u64) -> Mean {
        Mean {
            num: u128::from(n),
            den: 1,
        }
    }

    fn of(total: u64, count: u64) -> Mean {
        Mean {
            num: u128::from(total),
            den: u128::from(count.max(1)),
        }
    }

    fn at_most(self, cap: Mean) -> Mean {
        if self.num * cap.den > cap.num * self.den {
            cap
        } else {
            self
        }
    }

    /// Tokens of `prompts` answers, rounded to the nearest token.
    fn times(self, prompts: u64) -> u64 {
        let t = (u128::from(prompts) * self.num).saturating_add(self.den / 2) / self.den;
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// Answers it takes to produce `tokens`, rounded up (the last one may pass it).
    fn answers_for(self, tokens: u64) -> u64 {
        if self.num == 0 {
            return u64::MAX;
        }
        u64::try_from((u128::from(tokens) * self.den).div_ceil(self.num)).unwrap_or(u64::MAX)
    }

    fn as_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

/// `x * num / den`, rounded to the nearest; 0 when `den` is 0.
fn scale(x: u64, num: u64, den: u64) -> u64 {
    if den == 0 {
        return 0;
    }
    let v = (u128::from(x) * u128::from(num) + u128::from(den) / 2) / u128::from(den);
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// A dataset's remaining work before pricing.
fn plan_dataset(d: &DatasetFacts, given: Option<u64>, rule: TokenRule) -> DatasetEstimate {
    let remaining = d.remaining.prompts;
    // The mean is per answer: per request, so per turn when every turn is regenerated.
    let requests = d.remaining.requests.max(remaining);
    let max = u64::from(d.max_tokens);
    let budget_left = d
        .output_token_budget
        .map(|b| b.saturating_sub(d.observed.completion_tokens));
    let (basis, mean) = if d.observed.outputs > 0 {
        let o = d.observed;
        let basis = OutputBasis::Observed { outputs: o.outputs };
        (
            basis,
            Mean::of(o.completion_tokens, o.answers.max(o.outputs)),
        )
    } else if let Some(m) = given {
        (OutputBasis::Given, Mean::whole(m))
    } else if let Some(b) = budget_left {
        let spendable = b.min(requests.saturating_mul(max));
        (OutputBasis::BudgetSpent, Mean::of(spendable, requests))
    } else {
        (OutputBasis::MaxTokens, Mean::whole(max))
    };
    let mean = mean.at_most(Mean::whole(max));
    let requests_to_send = match budget_left {
        Some(b) => requests.min(mean.answers_for(b)),
        None => requests,
    };
    let to_send = if requests_to_send == requests {
        remaining
    } else {
        scale(remaining, requests_to_send, requests)
    };
    let output = match budget_left {
        Some(b) => mean.times(requests_to_send).min(b),
        None => mean.times(requests_to_send),
    };
    DatasetEstimate {
        name: d.name.clone(),
        prompts_in_file: d.prompts_in_file,
        bad_lines: d.bad_lines,
        done: d.observed.outputs,
        rejected: d.rejects,
        max_samples: d.max_samples,
        prompts_remaining: remaining,
        prompts_to_send: to_send,
        requests_to_send,
        input_tokens: scale(rule.tokens(&d.remaining), requests_to_send, requests),
        output_tokens: output,
        mean_output_tokens: mean.as_f64(),
        output_basis: basis,
        max_tokens: d.max_tokens,
        output_tokens_done: d.observed.completion_tokens,
        output_token_budget: d.output_token_budget,
        budget_left,
        cost_usd: CostRange::default(),
    }
}

/// What one endpoint charges for one dataset's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bill {
    input: Usd,
    output: Usd,
    requests: Usd,
}

impl Bill {
    fn of(e: &EndpointOffer, d: &DatasetEstimate) -> Bill {
        if let Some((t, at)) = &e.tariff {
            // The dataset's mean prompt decides which long-prompt prices apply.
            let mean_prompt = d.input_tokens.checked_div(d.requests_to_send).unwrap_or(0);
            let r = t.rates(mean_prompt, *at);
            return Bill {
                input: r.prompt.cost(d.input_tokens),
                output: r.completion.cost(d.output_tokens),
                requests: Usd::from_pico(
                    r.request.pico().saturating_mul(d.requests_to_send as i64),
                ),
            };
        }
        Bill {
            input: e.price_in.cost(d.input_tokens),
            output: e.price_out.cost(d.output_tokens),
            requests: e
                .price_request
                .map_or(Usd::ZERO, |p| p.cost(d.requests_to_send)),
        }
    }

    fn total(self) -> Usd {
        self.input + self.output + self.requests
    }
}

impl std::ops::Add for Bill {
    type Output = Bill;
    fn add(self, o: Bill) -> Bill {
        Bill {
            input: self.input + o.input,
            output: self.output + o.output,
            requests: self.requests + o.requests,
        }
    }
}

/// Each endpoint's share of requests under OpenRouter's price-based load balancing: weights
/// 1/price_out², normalised to sum to 1. Free endpoints (price 0) would have infinite weight:
/// they share everything equally. Empty in, empty out.
pub fn mix_weights(prices_out: &[Price]) -> Vec<Decimal> {
    let inverse_square = |p: &Price| {
        let per_m = p.usd_per_million();
        per_m
            .checked_mul(per_m)
            .filter(|sq| !sq.is_zero())
            .and_then(|sq| Decimal::ONE.checked_div(sq))
    };
    let inv: Vec<Option<Decimal>> = prices_out.iter().map(inverse_square).collect();
    let free = inv.iter().filter(|w| w.is_none()).count();
    if free > 0 {
        let share = Decimal::ONE / Decimal::from(free);
        return inv
            .iter()
            .map(|w| if w.is_none() { share } else { Decimal::ZERO })
            .collect();
    }
    let weights: Vec<Decimal> = inv.into_iter().flatten().collect();
    let total = weights
        .iter()
        .try_fold(Decimal::ZERO, |a, w| a.checked_add(*w));
    match total {
        Some(t) if !t.is_zero() => weights.iter().map(|w| *w / t).collect(),
        _ => vec![Decimal::ONE / Decimal::from(weights.len().max(1)); weights.len()],
    }
}

/// `Σ weight × cost`, rounded once to the picodollar.
fn weighted(weights: &[Decimal], costs: impl Iterator<Item = Usd>) -> Usd {
    let sum = weights
        .iter()
        .zip(costs)
        .fold(Decimal::ZERO, |a, (w, c)| a + *w * c.to_decimal());
    Usd::from_decimal(sum)
}

/// Tokens per second of one stream at `e`, and where the figure comes from. `mean_out` is the
/// mean output per request, to turn the listing's TTFT and throughput into one rate.
fn stream_speed(e: &EndpointOffer, given: Option<f64>, mean_out: f64) -> (f64, SpeedSource) {
    if let Some(tps) = given {
        return (tps, SpeedSource::Given);
    }
    if let Some(s) = e.observed_speed
        && let Some(tps) = s.tok_per_s()
    {
        return (
            tps,
            SpeedSource::Observed {
                outputs: s.requests,
            },
        );
    }
    if let Some(l) = e.listed_speed
        && l.tok_per_s.is_finite()
        && l.tok_per_s > 0.0
    {
        let ttft_s = l
            .ttft_ms
            .filter(|t| t.is_finite() && *t > 0.0)
            .unwrap_or(0.0)
            / 1000.0;
        let tps = if mean_out > 0.0 {
            mean_out / (ttft_s + mean_out / l.tok_per_s)
        } else {
            l.tok_per_s
        };
        return (tps, SpeedSource::Listing);
    }
    (DEFAULT_STREAM_TPS, SpeedSource::Default)
}

/// Wall time of the work at `streams` concurrent streams of `tps` tokens/s each, and no faster
/// than `requests_per_second` allows.
fn duration_s(output: u64, prompts: u64, streams: f64, tps: f64, rps: Option<f64>) -> f64 {
    let decode = if output == 0 {
        0.0
    } else if streams > 0.0 && tps > 0.0 {
        output as f64 / (streams * tps)
    } else {
        f64::INFINITY
    };
    let paced = rps
        .filter(|r| r.is_finite() && *r > 0.0)
        .map_or(0.0, |r| prompts as f64 / r);
    decode.max(paced)
}

fn price_string(p: Price) -> String {
    p.usd_per_token().normalize().to_string()
}

/// The remaining work of every dataset at every allowed endpoint.
pub fn estimate(inputs: &Inputs) -> Result<Estimate, EstimateError> {
    if inputs.endpoints.is_empty() {
        return Err(EstimateError::NoEndpoints {
            model: inputs.model.clone(),
        });
    }
    let (allowed, excluded): (Vec<&EndpointOffer>, Vec<&EndpointOffer>) =
        inputs.endpoints.iter().partition(|e| e.excluded.is_none());
    if allowed.is_empty() {
        let seen: Vec<String> = (inputs.endpoints.iter())
            .map(|e| format!("{} ({})", e.tag, e.quantization))
            .collect();
        return Err(EstimateError::NoneAllowed {
            policy: inputs.policy.clone(),
            count: inputs.endpoints.len(),
            model: inputs.model.clone(),
            seen: seen.join(", "),
        });
    }
    let mut datasets: Vec<DatasetEstimate> = (inputs.datasets.iter())
        .map(|d| plan_dataset(d, inputs.mean_output, inputs.rule))
        .collect();
    let prompts: u64 = datasets.iter().map(|d| d.prompts_to_send).sum();
    let requests: u64 = datasets.iter().map(|d| d.requests_to_send).sum();
    let input_tokens: u64 = datasets.iter().map(|d| d.input_tokens).sum();
    let output_tokens: u64 = datasets.iter().map(|d| d.output_tokens).sum();
    // Per request (a stream's length), which is per turn when every turn is regenerated.
    let mean_out = if requests == 0 {
        0.0
    } else {
        output_tokens as f64 / requests as f64
    };

    // bills[e][d]: what allowed endpoint e charges for dataset d.
    let bills: Vec<Vec<Bill>> = (allowed.iter())
        .map(|e| datasets.iter().map(|d| Bill::of(e, d)).collect())
        .collect();
    let prices: Vec<Price> = allowed.iter().map(|e| e.price_out).collect();
    let weights = mix_weights(&prices);
    let mut rows: Vec<EndpointEstimate> = Vec::with_capacity(allowed.len());
    let mut mix_pace = 0.0; // Σ share / tok_per_s: seconds per token of an average stream
    for (i, e) in allowed.iter().enumerate() {
        let bill = bills[i].iter().fold(Bill::default(), |a, b| a + *b);
        let (tps, source) = stream_speed(e, inputs.stream_tps, mean_out);
        let streams = e
            .stream_cap
            .map_or(inputs.concurrency, |c| c.min(inputs.concurrency));
        let share = weights[i].to_f64().unwrap_or(0.0);
        if share > 0.0 {
            mix_pace += share / tps;
        }
        let rps = inputs.requests_per_second;
        rows.push(EndpointEstimate {
            tag: e.tag.clone(),
            provider: e.provider.clone(),
            quantization: e.quantization.clone(),
            fidelity: e.fidelity,
            own_server: e.own_server,
            price_in_per_m: e.price_in.usd_per_million_f64(),
            price_out_per_m: e.price_out.usd_per_million_f64(),
            pricing: PriceStrings {
                prompt: price_string(e.price_in),
                completion: price_string(e.price_out),
                request: e.price_request.map(price_string),
            },
            mix_share: share,
            streams,
            stream_tok_per_s: tps,
            speed_source: source,
            input_cost_usd: bill.input,
            output_cost_usd: bill.output,
            request_cost_usd: bill.requests,
            cost_usd: bill.total(),
            time_s: duration_s(output_tokens, requests, f64::from(streams), tps, rps),
        });
    }

    // The cheapest and dearest endpoints for all the work (per-dataset figures use the same
    // two, so that they add up to the totals).
    let order = |a: &usize, b: &usize| {
        let (x, y) = (&rows[*a], &rows[*b]);
        (x.cost_usd, prices[*a], &x.tag).cmp(&(y.cost_usd, prices[*b], &y.tag))
    };
    let mut idx: Vec<usize> = (0..rows.len()).collect();
    idx.sort_by(order);
    let (lo, hi) = (idx[0], idx[idx.len() - 1]);
    for (j, d) in datasets.iter_mut().enumerate() {
        d.cost_usd = CostRange {
            cheapest: bills[lo][j].total(),
            mix: weighted(&weights, bills.iter().map(|b| b[j].total())),
            dearest: bills[hi][j].total(),
        };
    }
    let mix_cost = weighted(&weights, rows.iter().map(|r| r.cost_usd));
    let mix_tps = if mix_pace > 0.0 {
        1.0 / mix_pace
    } else {
        DEFAULT_STREAM_TPS
    };
    let pick = |i: usize| Pick {
        endpoint: Some(rows[i].tag.clone()),
        cost_usd: rows[i].cost_usd,
        time_s: rows[i].time_s,
    };
    let totals = Totals {
        prompts,
        input_tokens,
        output_tokens,
        cheapest: pick(lo),
        mix: Pick {
            endpoint: None,
            cost_usd: mix_cost,
            time_s: duration_s(
                output_tokens,
                requests,
                f64::from(inputs.concurrency),
                mix_tps,
                inputs.requests_per_second,
            ),
        },
        dearest: pick(hi),
    };
    let verdict = verdict(inputs, &totals);
    let ordered: Vec<EndpointEstimate> = idx.iter().map(|&i| rows[i].clone()).collect();
    let assumptions = assumptions(inputs, &datasets, &ordered, &verdict);
    Ok(Estimate {
        schema: SCHEMA,
        model: inputs.model.clone(),
        routing: inputs.routing,
        policy: inputs.policy.clone(),
        concurrency: inputs.concurrency,
        requests_per_second: inputs.requests_per_second,
        tokens: inputs.rule,
        datasets,
        endpoints: ordered,
        excluded: excluded.into_iter().map(excluded_row).collect(),
        totals,
        verdict,
        assumptions,
        account: None,
    })
}

fn excluded_row(e: &EndpointOffer) -> ExcludedEndpoint {
    let exclusion = e.excluded.clone().unwrap_or(Exclusion::Operator);
    ExcludedEndpoint {
        tag: e.tag.clone(),
        provider: e.provider.clone(),
        quantization: e.quantization.clone(),
        fidelity: e.fidelity,
        price_in_per_m: e.price_in.usd_per_million_f64(),
        price_out_per_m: e.price_out.usd_per_million_f64(),
        reason: exclusion.to_string(),
        exclusion,
    }
}

fn verdict(inputs: &Inputs, t: &Totals) -> Verdict {
    let available = (inputs.budget - inputs.spent).max(Usd::ZERO);
    let fit = |cost: Usd| Fit::new(cost, available, t.prompts, t.output_tokens);
    let (cheapest, mix, dearest) = (
        fit(t.cheapest.cost_usd),
        fit(t.mix.cost_usd),
        fit(t.dearest.cost_usd),
    );
    let status = if t.prompts == 0 {
        VerdictStatus::NothingLeft
    } else if dearest.fits {
        VerdictStatus::Fits
    } else if mix.fits {
        VerdictStatus::FitsAtMix
    } else if cheapest.fits {
        VerdictStatus::FitsAtCheapest
    } else {
        VerdictStatus::OverBudget
    };
    Verdict {
        status,
        budget_usd: inputs.budget,
        spent_usd: inputs.spent,
        available_usd: available,
        cheapest,
        mix,
        dearest,
    }
}

/// Every assumption the figures rest on, in the order an operator reads them: input, output,
/// prices, mix, time, budget, then what gathering the facts noticed.
fn assumptions(
    inputs: &Inputs,
    datasets: &[DatasetEstimate],
    endpoints: &[EndpointEstimate],
    verdict: &Verdict,
) -> Vec<String> {
    let r = inputs.rule;
    let mut out = vec![format!(
        "input tokens: estimated without a tokenizer, as characters / {} plus {} tokens per \
         message (role and template), system prompts included where the config adds them; \
         real counts vary with the model's tokenizer and the language",
        r.chars_per_token, r.tokens_per_message
    )];
    for (d, f) in datasets.iter().zip(&inputs.datasets) {
        let share = f.remaining.non_ascii_share();
        if share > NON_ASCII_WARNING {
            out.push(format!(
                "{}: {:.0}% of the prompt characters are not ASCII; CJK text has nearer 1 token \
                 per 1-2 characters, so its input tokens are underestimated",
                d.name,
                share * 100.0
            ));
        }
        out.extend(output_assumptions(d, f, inputs.mean_output));
    }
    out.push(format!("prices: {}", inputs.price_source));
    out.push(mix_assumption(inputs.routing, endpoints));
    out.push(time_assumption(inputs, endpoints));
    let mut budget = format!(
        "budget: budget_usd {} minus {} already spent in the output directory",
        verdict.budget_usd, verdict.spent_usd
    );
    if !verdict.cheapest.fits || !verdict.mix.fits || !verdict.dearest.fits {
        budget.push_str(
            "; what fits is scaled in proportion (same datasets, same input/output ratio)",
        );
    }
    out.push(budget);
    out.extend(inputs.notes.iter().cloned());
    out
}

fn output_assumptions(d: &DatasetEstimate, f: &DatasetFacts, given: Option<u64>) -> Vec<String> {
    let n = &d.name;
    let mean = group_thousands(d.mean_output_tokens.round() as u64);
    let max = group_thousands(u64::from(d.max_tokens));
    let mut out = Vec::new();
    if d.prompts_remaining == 0 {
        out.push(format!("{n}: no prompts left to send"));
        return out;
    }
    let capped = |raw: f64| raw > f64::from(d.max_tokens);
    match d.output_basis {
        OutputBasis::Observed { outputs } => {
            let answers = f.observed.answers.max(outputs);
            let raw = f.observed.completion_tokens as f64 / answers.max(1) as f64;
            let mut s = format!(
                "{n}: output tokens from the observed mean of {} existing outputs: {mean} per \
                 prompt",
                group_thousands(outputs)
            );
            if capped(raw) {
                s.push_str(&format!(" (capped at max_tokens {max})"));
            }
            if outputs < FEW_OUTPUTS {
                s.push_str("; few outputs yet, and short answers finish first, so it may lean low");
            }
            if given.is_some() {
                s.push_str("; --mean-output not used for it");
            }
            out.push(s);
        }
        OutputBasis::Given => {
            let mut s =
                format!("{n}: no observed outputs: --mean-output, {mean} tokens per prompt");
            if given.is_some_and(|g| g > u64::from(d.max_tokens)) {
                s.push_str(&format!(" (capped at max_tokens {max})"));
            }
            out.push(s);
        }
        OutputBasis::BudgetSpent => {
            let left = Tokens(d.budget_left.unwrap_or(0));
            let mut s = format!(
                "{n}: no observed outputs: assumes the token budget is spent ({left} tokens over \
                 the {} remaining prompts, {mean} each)",
                group_thousands(d.prompts_remaining)
            );
            if d.output_tokens < d.budget_left.unwrap_or(0) {
                s.push_str(&format!(
                    "; max_tokens {max} per prompt leaves part of it unspent"
                ));
            }
            out.push(s);
        }
        OutputBasis::MaxTokens => out.push(format!(
            "{n}: no observed outputs and no token budget: max_tokens ({max}) per prompt, an \
             upper bound; pass --mean-output for a likelier figure"
        )),
    }
    if u64::from(d.max_tokens) <= f.observed.cut_thinking_at
        && let Some(line) = crate::engine::core::cut_watch::earlier_cuts(
            n,
            f.observed.cut_thinking,
            f.observed.outputs,
            d.max_tokens,
        )
    {
        out.push(line.trim_start_matches("dataset ").to_string());
    }
    if f.remaining.requests > d.prompts_remaining {
        out.push(format!(
            "{n}: every assistant turn is regenerated (turns = \"all\"): {} requests for {} \
             prompts; the mean above is per request (turn), and input counts each turn's history",
            group_thousands(f.remaining.requests),
            group_thousands(d.prompts_remaining)
        ));
    }
    if d.prompts_to_send < d.prompts_remaining {
        out.push(format!(
            "{n}: the output-token budget ({} tokens left) is reached after about {} of the {} \
             remaining prompts; input is counted for those only",
            Tokens(d.budget_left.unwrap_or(0)),
            group_thousands(d.prompts_to_send),
            group_thousands(d.prompts_remaining)
        ));
    }
    if let Some(cap) = d.max_samples
        && f.fresh > d.prompts_remaining
    {
        out.push(format!(
            "{n}: max_samples {} leaves {} of the {} prompts not yet done",
            group_thousands(cap),
            group_thousands(d.prompts_remaining),
            group_thousands(f.fresh)
        ));
    }
    out
}

fn mix_assumption(routing: Routing, endpoints: &[EndpointEstimate]) -> String {
    let mut s = format!(
        "mix: OpenRouter's price-based load balancing, each of the {} allowed endpoints \
         weighted by 1 / price_out²",
        endpoints.len()
    );
    if endpoints.iter().any(|e| e.price_out_per_m == 0.0) {
        s.push_str(" (free endpoints take the whole mix)");
    }
    s.push_str("; OpenRouter also weighs speed and reliability, so the real split can differ");
    if endpoints.iter().any(|e| e.own_server) {
        s.push_str(". Own [[endpoint]] servers are weighted the same way");
    }
    if routing == Routing::Pinned {
        s.push_str(
            ". routing = \"pinned\" sends each request to the cheapest healthy endpoint: \
             expect the cheapest figure while it keeps up",
        );
    }
    s
}

fn time_assumption(inputs: &Inputs, endpoints: &[EndpointEstimate]) -> String {
    let mut s = format!(
        "time: output tokens / (streams x tokens per second per stream), TTFT included; \
         {} streams (concurrency{}); retries, 429 waits and breaker pauses are not modelled",
        inputs.concurrency,
        if endpoints.iter().any(|e| e.streams < inputs.concurrency) {
            ", fewer where an endpoint is capped"
        } else {
            ""
        }
    );
    if let Some(rps) = inputs.requests_per_second {
        let _ = write!(
            s,
            "; requests_per_second {rps} bounds it at prompts / {rps}"
        );
    }
    s.push_str("; per-stream speed: ");
    if let Some(tps) = inputs.stream_tps {
        let _ = write!(s, "--stream-tps {tps} at every endpoint");
        return s;
    }
    let mut parts = Vec::new();
    let tags = |kind: fn(&SpeedSource) -> bool| -> Vec<&str> {
        (endpoints.iter())
            .filter(|e| kind(&e.speed_source))
            .map(|e| e.tag.as_str())
            .collect()
    };
    let observed = tags(|k| matches!(k, SpeedSource::Observed { .. }));
    if !observed.is_empty() {
        parts.push(format!(
            "observed in this output directory (completion tokens over request time) for {}",
            observed.join(", ")
        ));
    }
    let listing = tags(|k| matches!(k, SpeedSource::Listing));
    if !listing.is_empty() {
        parts.push(format!(
            "the listing's 30-minute medians (TTFT, then the mean output at the median \
             throughput) for {}",
            listing.join(", ")
        ));
    }
    let default = tags(|k| matches!(k, SpeedSource::Default));
    if !default.is_empty() {
        parts.push(format!(
            "a default of {DEFAULT_STREAM_TPS} tok/s for {} (pass --stream-tps to set it)",
            default.join(", ")
        ));
    }
    s.push_str(&parts.join("; "));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn price(per_m: &str) -> Price {
        Price::per_million(Decimal::from_str(per_m).expect("decimal"))
    }

    fn dec(s: &str) -> Decimal {
        Decimal::from_str(s).expect("decimal")
    }

    #[test]
    fn mix_weights_are_inverse_square_of_output_price() {
        // The five faithful endpoints of the Kimi K2.5 table.
        let prices: Vec<Price> = ["2.2", "2.25", "2.5", "2.6", "3"]
            .iter()
            .map(|p| price(p))
            .collect();
        let w = mix_weights(&prices);
        assert_eq!(w.len(), 5);
        let sum: Decimal = w.iter().sum();
        assert!((sum - Decimal::ONE).abs() < dec("1e-20"), "{sum}");
        // w_a / w_b = (p_b / p_a)²: chutes against moonshotai is (3 / 2.2)².
        let ratio = w[0] / w[4];
        assert!(
            (ratio - dec("9") / dec("4.84")).abs() < dec("1e-20"),
            "{ratio}"
        );
        // Hand computation of chutes' share: (1/4.84) / Σ 1/p².
        let inv = |p: &str| Decimal::ONE / (dec(p) * dec(p));
        let total = inv("2.2") + inv("2.25") + inv("2.5") + inv("2.6") + inv("3");
        assert!((w[0] - inv("2.2") / total).abs() < dec("1e-20"));
        assert!(w.windows(2).all(|p| p[0] > p[1]), "dearer weighs less");
    }

    #[test]
    fn mix_weights_equal_prices_free_endpoints_and_empty() {
        let w = mix_weights(&[price("2"), price("2")]);
        assert_eq!(w, vec![dec("0.5"), dec("0.5")]);
        let w = mix_weights(&[price("2.2"), Price::ZERO, price("3"), Price::ZERO]);
        assert_eq!(
            w,
            vec![Decimal::ZERO, dec("0.5"), Decimal::ZERO, dec("0.5")]
        );
        assert!(mix_weights(&[]).is_empty());
        assert_eq!(mix_weights(&[price("7")]), vec![Decimal::ONE]);
    }

    #[test]
    fn token_rule_rounds_up_and_counts_messages() {
        let mut t = TextStats::default();
        t.add_prompt(1);
        t.add_message("héllo"); // 5 characters, 1 non-ASCII
        t.add_message("abcd");
        assert_eq!((t.chars, t.non_ascii_chars, t.messages), (9, 1, 2));
        // ceil(9 / 4) + 2 × 4.
        assert_eq!(TokenRule::DEFAULT.tokens(&t), 3 + 8);
    }

    fn offer(tag: &str, p_in: &str, p_out: &str) -> EndpointOffer {
        EndpointOffer {
            tag: tag.into(),
            provider: tag.into(),
            quantization: Quantization::Int4,
            fidelity: Fidelity::Native,
            price_in: price(p_in),
            price_out: price(p_out),
            price_request: None,
            tariff: None,
            excluded: None,
            own_server: false,
            stream_cap: None,
            observed_speed: None,
            listed_speed: None,
        }
    }

    fn facts(prompts: u64, chars_each: u64) -> DatasetFacts {
        DatasetFacts {
            name: "d".into(),
            prompts_in_file: prompts,
            bad_lines: 0,
            rejects: 0,
            fresh: prompts,
            remaining: TextStats {
                prompts,
                requests: prompts,
                messages: prompts,
                chars: prompts * chars_each,
                non_ascii_chars: 0,
            },
            max_samples: None,
            max_tokens: 16_384,
            output_token_budget: None,
            observed: Observed::default(),
        }
    }

    fn inputs(datasets: Vec<DatasetFacts>, endpoints: Vec<EndpointOffer>) -> Inputs {
        Inputs {
            model: "moonshotai/kimi-k2.5".into(),
            routing: Routing::Openrouter,
            policy: "faithful (native int4)".into(),
            concurrency: 100,
            requests_per_second: None,
            budget: Usd::from_f64(100.0),
            spent: Usd::ZERO,
            mean_output: None,
            stream_tps: None,
            rule: TokenRule::DEFAULT,
            price_source: "test".into(),
            datasets,
            endpoints,
            notes: Vec::new(),
        }
    }

    #[test]
    fn hand_computation_budget_spent_cheapest_and_dearest() {
        // 10,000 prompts of 3,984 characters: 996 + 4 = 1,000 tokens each, 10M in all.
        let mut d = facts(10_000, 3_984);
        d.output_token_budget = Some(60_000_000);
        let i = inputs(
            vec![d],
            vec![offer("dear", "0.6", "3"), offer("cheap", "0.45", "2.2")],
        );
        let e = estimate(&i).expect("estimate");
        let ds = &e.datasets[0];
        assert_eq!(ds.input_tokens, 10_000_000);
        assert_eq!(ds.output_tokens, 60_000_000);
        assert_eq!(ds.prompts_to_send, 10_000);
        assert_eq!(ds.output_basis, OutputBasis::BudgetSpent);
        assert_eq!(e.totals.cheapest.endpoint.as_deref(), Some("cheap"));
        // $0.45 × 10 + $2.20 × 60 = $136.50; $0.60 × 10 + $3 × 60 = $186.
        assert_eq!(
            e.totals.cheapest.cost_usd,
            Usd::from_pico(136_500_000_000_000)
        );
        assert_eq!(
            e.totals.dearest.cost_usd,
            Usd::from_pico(186_000_000_000_000)
        );
        assert_eq!(ds.cost_usd.cheapest, e.totals.cheapest.cost_usd);
        // Mix: weights 1/4.84 and 1/9.
        let (a, b) = (Decimal::ONE / dec("4.84"), Decimal::ONE / dec("9"));
        let want = (a * dec("136.5") + b * dec("186")) / (a + b);
        assert_eq!(e.totals.mix.cost_usd, Usd::from_decimal(want));
        assert_eq!(e.verdict.status, VerdictStatus::OverBudget);
        // $100 of $136.50 at the cheapest: 7,326 prompts, 43,956,043 output tokens.
        assert_eq!(e.verdict.cheapest.prompts_that_fit, 7_326);
        assert_eq!(e.verdict.cheapest.output_tokens_that_fit, 43_956_043);
        // 60M tokens / (100 streams × 20 tok/s) = 30,000 s.
        assert_eq!(e.totals.cheapest.time_s, 30_000.0);
        assert!(
            e.assumptions
                .iter()
                .any(|a| a.contains("assumes the token budget is spent")),
            "{:?}",
            e.assumptions
        );
    }

    #[test]
    fn observed_mean_wins_and_budget_limits_prompts() {
        let mut d = facts(1_000, 400);
        d.observed = Observed {
            outputs: 4,
            answers: 4,
            completion_tokens: 4_000,
            ..Observed::default()
        };
        d.output_token_budget = Some(504_000);
        let mut i = inputs(vec![d], vec![offer("a", "1", "2")]);
        i.mean_output = Some(50);
        let e = estimate(&i).expect("estimate");
        let ds = &e.datasets[0];
        assert_eq!(ds.output_basis, OutputBasis::Observed { outputs: 4 });
        assert_eq!(ds.mean_output_tokens, 1_000.0);
        // 500,000 tokens left at 1,000 a prompt: 500 of the 1,000 prompts.
        assert_eq!(ds.budget_left, Some(500_000));
        assert_eq!(ds.prompts_to_send, 500);
        assert_eq!(ds.output_tokens, 500_000);
        // Input for those 500 only: 500 × (100 + 4).
        assert_eq!(ds.input_tokens, 52_000);
        assert!(
            e.assumptions
                .iter()
                .any(|a| a.contains("--mean-output not used"))
        );
    }

    #[test]
    fn regenerated_turns_count_every_request_against_the_budget() {
        // 1,000 prompts of three turns each: 3,000 requests.
        let mut d = facts(1_000, 400);
        d.remaining.requests = 3_000;
        // 4 rows of three turns seen, 12,000 tokens: 1,000 per answer, not per row.
        d.observed = Observed {
            outputs: 4,
            answers: 12,
            completion_tokens: 12_000,
            ..Observed::default()
        };
        d.output_token_budget = Some(1_512_000);
        let e = estimate(&inputs(vec![d], vec![offer("a", "1", "2")])).expect("estimate");
        let ds = &e.datasets[0];
        assert_eq!(ds.mean_output_tokens, 1_000.0);
        // 1,500,000 tokens left: 1,500 requests, half of the 3,000, so 500 prompts.
        assert_eq!(ds.requests_to_send, 1_500);
        assert_eq!(ds.prompts_to_send, 500);
        assert_eq!(ds.output_tokens, 1_500_000);
        assert!(
            e.assumptions.iter().any(|a| a.contains("3,000 requests")),
            "{:?}",
            e.assumptions
        );
    }

    #[test]
    fn given_mean_then_max_tokens_without_budget() {
        let mut i = inputs(vec![facts(10, 40)], vec![offer("a", "1", "2")]);
        let e = estimate(&i).expect("estimate");
        assert_eq!(e.datasets[0].output_basis, OutputBasis::MaxTokens);
        assert_eq!(e.datasets[0].output_tokens, 163_840);
        i.mean_output = Some(1_500);
        let e = estimate(&i).expect("estimate");
        assert_eq!(e.datasets[0].output_basis, OutputBasis::Given);
        assert_eq!(e.datasets[0].output_tokens, 15_000);
        i.mean_output = Some(100_000);
        let e = estimate(&i).expect("estimate");
        assert_eq!(e.datasets[0].output_tokens, 163_840, "capped at max_tokens");
    }

    #[test]
    fn excluded_endpoints_are_not_priced_and_none_allowed_is_an_error() {
        let mut fp4 = offer("baseten/fp4", "0.1", "0.1");
        fp4.excluded = Some(Exclusion::Requantized("fp4".into()));
        let mut i = inputs(vec![facts(10, 40)], vec![fp4, offer("a", "1", "2")]);
        let e = estimate(&i).expect("estimate");
        assert_eq!(e.endpoints.len(), 1);
        assert_eq!(e.excluded[0].reason, "policy: fp4 re-quantized");
        assert_eq!(e.totals.cheapest.endpoint.as_deref(), Some("a"));
        i.endpoints.remove(1);
        let err = estimate(&i).expect_err("none allowed");
        assert!(
            err.to_string().contains("allows none of the 1 endpoints"),
            "{err}"
        );
    }

    #[test]
    fn speed_sources_in_order() {
        let mut e = offer("a", "1", "2");
        assert_eq!(stream_speed(&e, None, 1000.0), (20.0, SpeedSource::Default));
        e.listed_speed = Some(ListedSpeed {
            ttft_ms: Some(1000.0),
            tok_per_s: 50.0,
        });
        // 1,000 tokens in 1 s + 20 s.
        let (tps, src) = stream_speed(&e, None, 1000.0);
        assert_eq!(src, SpeedSource::Listing);
        assert!((tps - 1000.0 / 21.0).abs() < 1e-9);
        e.observed_speed = Some(SpeedSample {
            requests: 9,
            completion_tokens: 900,
            seconds: 30.0,
        });
        assert_eq!(
            stream_speed(&e, None, 1000.0).1,
            SpeedSource::Listing,
            "too few"
        );
        e.observed_speed = Some(SpeedSample {
            requests: 10,
            completion_tokens: 1000,
            seconds: 40.0,
        });
        assert_eq!(
            stream_speed(&e, None, 1000.0),
            (25.0, SpeedSource::Observed { outputs: 10 })
        );
        assert_eq!(
            stream_speed(&e, Some(7.0), 1000.0),
            (7.0, SpeedSource::Given)
        );
    }

    #[test]
    fn time_respects_caps_and_request_rate() {
        let mut capped = offer("own", "0", "0");
        capped.stream_cap = Some(10);
        capped.own_server = true;
        let mut i = inputs(vec![facts(100, 40)], vec![capped, offer("a", "1", "2")]);
        i.mean_output = Some(1_000);
        i.stream_tps = Some(10.0);
        let e = estimate(&i).expect("estimate");
        let own = e.endpoints.iter().find(|r| r.tag == "own").expect("own");
        // 100,000 tokens / (10 streams × 10 tok/s).
        assert_eq!(own.streams, 10);
        assert_eq!(own.time_s, 1_000.0);
        assert_eq!(own.mix_share, 1.0, "free takes the mix");
        assert_eq!(e.totals.mix.cost_usd, Usd::ZERO);
        i.requests_per_second = Some(0.01);
        let e = estimate(&i).expect("estimate");
        assert_eq!(e.totals.cheapest.time_s, 10_000.0, "100 prompts at 0.01/s");
    }

    #[test]
    fn verdict_levels() {
        let mut i = inputs(
            vec![facts(100, 40)],
            vec![offer("a", "1", "1"), offer("b", "1", "3")],
        );
        // 1M output tokens at $1 or $3 per M, plus 1,400 input tokens at $1/M.
        i.mean_output = Some(10_000);
        let e = estimate(&i).expect("e");
        assert_eq!(e.totals.cheapest.cost_usd, Usd::from_f64(1.0014));
        // Weights 1 and 1/9: (1.0014 + 3.0014 / 9) / (10 / 9) = 1.2014.
        assert_eq!(e.totals.mix.cost_usd, Usd::from_f64(1.2014));
        assert_eq!(e.totals.dearest.cost_usd, Usd::from_f64(3.0014));
        i.budget = Usd::from_f64(5.0);
        assert_eq!(estimate(&i).expect("e").verdict.status, VerdictStatus::Fits);
        i.budget = Usd::from_f64(2.0);
        assert_eq!(
            estimate(&i).expect("e").verdict.status,
            VerdictStatus::FitsAtMix
        );
        i.budget = Usd::from_f64(1.1);
        assert_eq!(
            estimate(&i).expect("e").verdict.status,
            VerdictStatus::FitsAtCheapest
        );
        i.spent = Usd::from_f64(1.0);
        let v = estimate(&i).expect("e").verdict;
        assert_eq!(v.status, VerdictStatus::OverBudget);
        assert_eq!(v.available_usd, Usd::from_f64(0.1));
        // $0.10 of $1.0014: 9 of 100 prompts, 99,860 of 1M tokens.
        assert_eq!(v.cheapest.prompts_that_fit, 9);
        assert_eq!(v.cheapest.output_tokens_that_fit, 99_860);
        i.spent = Usd::from_f64(7.0);
        assert_eq!(estimate(&i).expect("e").verdict.available_usd, Usd::ZERO);
        i.datasets[0].remaining = TextStats::default();
        let v = estimate(&i).expect("e").verdict;
        assert_eq!(v.status, VerdictStatus::NothingLeft);
    }
}
