//! Canaries: does each endpoint serve the real model? The same small fixed prompt set goes to
//! every endpoint with greedy settings (temperature 0, a seed), pinned (no fallbacks), and
//! every answer is compared with the reference endpoint's answer to the same prompt: exact
//! match rate and a word-level similarity. A re-quantized or otherwise altered model drifts
//! from the reference after a few tokens; a faithful one agrees (up to the non-determinism of
//! batched inference, which is why similarity is reported beside exact matches).
//!
//! The result is a JSON file (`probe.json` in the output directory by default; its format and
//! reading are in `store::probe_file`) that `harvest providers` shows as a column and the
//! policy can use (`min_probe_agreement`).

use std::ops::ControlFlow;
use std::time::Duration;

use futures::StreamExt;

use crate::domain::{Price, Quantization, Usd};
use crate::openrouter::request::StreamOptions;
use crate::openrouter::{
    ApiError, ChatRequest, Completion, Message, OpenRouterClient, ProviderPreferences,
    StreamTimeouts,
};
use crate::store::output::{SpendEntry, SpendKind};
pub use crate::store::probe_file::{
    CancelFinding, CancelVerdict, EndpointScore, FILE_NAME, ProbeFileError, ProbeReport,
    ProbeSettings, SCHEMA,
};

pub mod cancel;

/// Fixed prompts: short, varied (prose, code, arithmetic, lists, translation, facts), each with
/// one natural greedy continuation so that a faithful model is stable on them.
pub const PROMPTS: &[&str] = &[
    "Explain in three sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "What is 17 multiplied by 23? Show the steps.",
    "List the first ten prime numbers, separated by commas.",
    "Translate into French: The library opens at nine in the morning.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "Give three differences between TCP and UDP as a bulleted list.",
    "Write a haiku about autumn leaves.",
    "What is the capital of Australia, and why is it not Sydney?",
    "Describe the water cycle for a ten-year-old in four sentences.",
    "Write a SQL query that returns the five most recent orders from a table named orders.",
    "Name the planets of the solar system in order from the Sun.",
];

/// One endpoint to probe.
#[derive(Clone, Debug)]
pub struct Target {
    pub tag: String,
    pub provider: String,
    pub quantization: Quantization,
    pub price_in: Price,
    pub price_out: Price,
    /// The client that reaches it (OpenRouter's, or an own server's).
    pub client: OpenRouterClient,
    /// The model name to send (the server's own name for own servers).
    pub model: String,
    /// Pinned through OpenRouter (`provider.order = [tag]`, no fallbacks); false for own servers.
    pub via_openrouter: bool,
    /// Parameters the endpoint lists; a pinned request with one it does not support is refused.
    pub supported_parameters: Option<Vec<String>>,
}

impl Target {
    fn supports(&self, p: &str) -> bool {
        self.supported_parameters
            .as_ref()
            .is_none_or(|sp| sp.iter().any(|s| s == p))
    }

    /// Whether greedy decoding can be asked for (some providers fix the sampling settings).
    pub fn can_be_greedy(&self) -> bool {
        self.supports("temperature")
    }
}

/// What one endpoint answered to one prompt.
#[derive(Clone, Debug, Default)]
struct Sample {
    text: Option<String>,
    finish_reason: Option<String>,
    output_tokens: u64,
    error: Option<String>,
    cost: Usd,
    estimated_cost: bool,
    generation_id: Option<String>,
    prompt_tokens: u64,
    /// What the answer's stream carried (tokens and events), by the API's usage.
    streamed: Option<(u64, u64)>,
    /// Attempts that failed once a generation had begun (a stall, a cut stream) before the
    /// one that answered: the provider may bill them, so each is booked as a closed stream
    /// (its generation id and the events received), for the next start to look up
    /// (reliability-probe-5 P13: a stalled canary's cost was in no ledger line).
    abandoned: Vec<(String, u64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    File(#[from] ProbeFileError),
    #[error("no endpoint to probe")]
    NoTargets,
    #[error("reference endpoint {0} is not among the probed endpoints")]
    UnknownReference(String),
}

/// Rough prompt tokens of a probe prompt (characters / 4 plus the chat template's overhead).
fn prompt_tokens_estimate(p: &str) -> u64 {
    (p.chars().count() as u64).div_ceil(4) + 8
}

/// The most the probe can cost: every prompt on every endpoint running to max_tokens.
pub fn estimate_cost(targets: &[Target], s: &ProbeSettings) -> Usd {
    let prompts = &PROMPTS[..s.prompts.min(PROMPTS.len())];
    targets
        .iter()
        .map(|t| {
            prompts
                .iter()
                .map(|p| {
                    t.price_in.cost(prompt_tokens_estimate(p))
                        + t.price_out.cost(u64::from(s.max_tokens))
                })
                .sum::<Usd>()
        })
        .sum()
}

fn request(t: &Target, prompt: &str, s: &ProbeSettings) -> ChatRequest {
    let mut req = ChatRequest::new(t.model.clone(), vec![Message::user(prompt)], s.max_tokens);
    // Pinned requests require every parameter they send: leave out what the endpoint ignores.
    req.temperature = t.supports("temperature").then_some(0.0);
    req.seed = t.supports("seed").then_some(s.seed);
    if t.via_openrouter {
        req.provider = Some(ProviderPreferences::pinned(&t.tag));
    } else {
        req.stream_options = Some(StreamOptions {
            include_usage: true,
        });
    }
    req
}

async fn ask(t: &Target, prompt: &str, s: &ProbeSettings) -> Sample {
    let req = request(t, prompt, s);
    let mut last: Option<ApiError> = None;
    let mut abandoned = Vec::new();
    for attempt in 0..s.attempts.max(1) {
        if attempt > 0 {
            let wait = last
                .as_ref()
                .and_then(ApiError::retry_after)
                .unwrap_or(Duration::from_millis(500 << attempt.min(4)))
                .min(Duration::from_secs(10));
            tokio::time::sleep(wait).await;
        }
        let result: Result<Completion, ApiError> =
            match t.client.chat_stream(&req, StreamTimeouts::default()).await {
                Ok(mut stream) => match stream.drive(|_| ControlFlow::Continue(())).await {
                    Ok(_) => stream.finish(),
                    Err(e) => {
                        if let Some(g) = stream.generation_id() {
                            abandoned.push((g.to_string(), stream.events()));
                        }
                        Err(e)
                    }
                },
                Err(e) => Err(e),
            };
        match result {
            Ok(c) => {
                let (cost, estimated) = match c.cost() {
                    Some(usd) => (usd, false),
                    None => (
                        t.price_in.cost(c.usage.prompt_tokens)
                            + t.price_out.cost(c.usage.completion_tokens),
                        true,
                    ),
                };
                let mut text = c.reasoning.clone().unwrap_or_default();
                text.push_str(&c.content);
                return Sample {
                    text: Some(text),
                    finish_reason: Some(c.finish_reason.clone()),
                    output_tokens: c.usage.completion_tokens,
                    error: None,
                    cost,
                    estimated_cost: estimated,
                    generation_id: c.id.clone(),
                    prompt_tokens: c.usage.prompt_tokens,
                    streamed: crate::engine::core::wire_rate::streamed(&c)
                        .map(|w| (w.tokens, w.events)),
                    abandoned,
                };
            }
            Err(ApiError::Empty { .. }) => {
                return Sample {
                    text: Some(String::new()),
                    abandoned,
                    ..Default::default()
                };
            }
            Err(e) => {
                let retry = e.is_retryable();
                last = Some(e);
                if !retry {
                    break;
                }
            }
        }
    }
    Sample {
        error: last.map(|e| e.to_string()),
        abandoned,
        ..Default::default()
    }
}

/// Word-level similarity of two answers: 1 when identical, 0 when they share nothing.
pub fn similarity(a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    f64::from(similar::TextDiff::from_words(a, b).ratio())
}

/// Picks the reference: the one named, else the model author's own endpoint (its tag's
/// provider slug is the model id's author), else the first of `preferred` (native precision,
/// cheapest first), else none (majority answer). Only endpoints that take `temperature` can be
/// the reference unless named: a sampled answer is no yardstick.
pub fn choose_reference(
    model: &str,
    targets: &[Target],
    named: Option<&str>,
    preferred: &[String],
) -> Result<Option<String>, ProbeError> {
    if let Some(n) = named {
        return targets
            .iter()
            .find(|t| t.tag == n)
            .map(|t| Some(t.tag.clone()))
            .ok_or_else(|| ProbeError::UnknownReference(n.to_string()));
    }
    let author = model
        .split('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    if let Some(t) = targets.iter().find(|t| {
        t.via_openrouter && t.can_be_greedy() && t.tag.split('/').next() == Some(author.as_str())
    }) {
        return Ok(Some(t.tag.clone()));
    }
    Ok(preferred
        .iter()
        .find(|p| targets.iter().any(|t| &t.tag == *p && t.can_be_greedy()))
        .cloned())
}

/// Runs the probe and scores every endpoint.
pub async fn run(
    model: &str,
    targets: &[Target],
    reference: Option<String>,
    s: &ProbeSettings,
) -> Result<(ProbeReport, Vec<SpendEntry>), ProbeError> {
    if targets.is_empty() {
        return Err(ProbeError::NoTargets);
    }
    let prompts = &PROMPTS[..s.prompts.clamp(1, PROMPTS.len())];
    let grid = ask_all(targets, prompts, s).await;
    // The text each prompt is compared with: the reference's, or the most common answer.
    let reference_idx = reference
        .as_ref()
        .and_then(|r| targets.iter().position(|t| &t.tag == r));
    let expected = expected_answers(&grid, targets, reference_idx, prompts.len());

    let now = crate::domain::rfc3339(chrono::Utc::now());
    let mut spend = Vec::new();
    let mut endpoints: Vec<EndpointScore> = targets
        .iter()
        .zip(&grid)
        .enumerate()
        .map(|(i, (t, row))| {
            spend.extend(spend_lines(t, row, s, &now));
            score(t, row, &expected, Some(i) == reference_idx)
        })
        .collect();
    endpoints.sort_by(|a, b| {
        b.is_reference
            .cmp(&a.is_reference)
            .then(
                b.similarity
                    .unwrap_or(-1.0)
                    .total_cmp(&a.similarity.unwrap_or(-1.0)),
            )
            .then(a.tag.cmp(&b.tag))
    });
    let cost = endpoints.iter().map(|e| e.cost).sum();
    Ok((
        ProbeReport {
            schema: SCHEMA,
            model: model.to_string(),
            created_at: now,
            reference,
            settings: s.clone(),
            estimated_cost: estimate_cost(targets, s),
            cost,
            endpoints,
            cancel: Vec::new(),
        },
        spend,
    ))
}

/// Asks every target every prompt, `s.concurrency` at a time: the samples by target, then prompt.
async fn ask_all(targets: &[Target], prompts: &[&str], s: &ProbeSettings) -> Vec<Vec<Sample>> {
    let jobs: Vec<(usize, usize)> = (0..targets.len())
        .flat_map(|t| (0..prompts.len()).map(move |p| (t, p)))
        .collect();
    let results: Vec<((usize, usize), Sample)> = futures::stream::iter(jobs)
        .map(|(t, p)| async move { ((t, p), ask(&targets[t], prompts[p], s).await) })
        .buffer_unordered(s.concurrency.max(1))
        .collect()
        .await;
    let mut grid: Vec<Vec<Sample>> = targets
        .iter()
        .map(|_| vec![Sample::default(); prompts.len()])
        .collect();
    for ((t, p), sample) in results {
        grid[t][p] = sample;
    }
    grid
}

/// The answer each prompt is compared with: the reference's; where the reference failed a
/// prompt, the greedy endpoints' majority answer stands in.
fn expected_answers(
    grid: &[Vec<Sample>],
    targets: &[Target],
    reference_idx: Option<usize>,
    prompts: usize,
) -> Vec<Option<String>> {
    (0..prompts)
        .map(|p| {
            reference_idx
                .and_then(|r| grid[r][p].text.clone().filter(|t| !t.is_empty()))
                .or_else(|| {
                    majority(
                        grid.iter()
                            .zip(targets)
                            .filter(|(_, t)| t.can_be_greedy())
                            .filter_map(|(row, _)| row[p].text.as_deref()),
                    )
                })
        })
        .collect()
}

/// The ledger lines of one target's samples: each that cost something or named a generation,
/// and each attempt abandoned after its generation began (booked as a closed stream at what
/// it had streamed, estimated, for the next start to look up).
fn spend_lines(t: &Target, row: &[Sample], s: &ProbeSettings, now: &str) -> Vec<SpendEntry> {
    let abandoned = (row.iter().enumerate()).flat_map(|(p, sample)| {
        (sample.abandoned.iter().enumerate()).map(move |(k, (g, events))| {
            let prompt = prompt_tokens_estimate(PROMPTS[p % PROMPTS.len()]);
            SpendEntry {
                endpoint: Some(t.tag.clone()),
                usd: t.price_in.cost(prompt) + t.price_out.cost(*events),
                prompt_tokens: prompt,
                completion_tokens: *events,
                estimated: true,
                generation_id: Some(g.clone()),
                attempt: Some(format!("probe-{now}-{}-{p}-{k}", t.tag)),
                // Prompt tokens at most a byte each, and the chat template's markers.
                worst_usd: Some(
                    t.price_in
                        .cost(PROMPTS[p % PROMPTS.len()].len() as u64 + 64)
                        + t.price_out.cost(u64::from(s.max_tokens)),
                ),
                ..SpendEntry::new(
                    SpendKind::Cancelled,
                    now.to_string(),
                    format!("probe-{p}"),
                    "probe",
                )
            }
        })
    });
    let answered = row
        .iter()
        .enumerate()
        .filter(|(_, sample)| sample.cost != Usd::ZERO || sample.generation_id.is_some())
        .map(|(p, sample)| SpendEntry {
            endpoint: Some(t.tag.clone()),
            usd: sample.cost,
            prompt_tokens: sample.prompt_tokens,
            completion_tokens: sample.output_tokens,
            estimated: sample.estimated_cost,
            generation_id: sample.generation_id.clone(),
            ..SpendEntry::new(
                SpendKind::Other,
                now.to_string(),
                format!("probe-{p}"),
                "probe",
            )
        });
    answered.chain(abandoned).collect()
}

/// How one target's answers compare with the expected ones.
fn score(
    t: &Target,
    row: &[Sample],
    expected: &[Option<String>],
    is_reference: bool,
) -> EndpointScore {
    let prompts = row.len();
    let mut score = EndpointScore {
        tag: t.tag.clone(),
        provider: t.provider.clone(),
        quantization: t.quantization.to_string(),
        is_reference,
        greedy: t.can_be_greedy(),
        prompts: prompts as u64,
        answered: 0,
        compared: 0,
        exact_match_rate: None,
        similarity: None,
        mean_output_tokens: None,
        length_rate: None,
        empty_rate: 0.0,
        errors: 0,
        last_error: None,
        cost: Usd::ZERO,
        tokens_per_event: None,
    };
    let (mut exact, mut sim_sum, mut tokens, mut length, mut empty) = (0u64, 0.0, 0u64, 0u64, 0u64);
    for (p, sample) in row.iter().enumerate() {
        score.cost += sample.cost;
        if let Some(e) = &sample.error {
            score.errors += 1;
            score.last_error = Some(e.clone());
            continue;
        }
        let Some(text) = &sample.text else { continue };
        if text.is_empty() {
            empty += 1;
            continue;
        }
        score.answered += 1;
        tokens += sample.output_tokens;
        if sample.finish_reason.as_deref() == Some("length") {
            length += 1;
        }
        if let Some(want) = &expected[p] {
            score.compared += 1;
            if text == want {
                exact += 1;
            }
            sim_sum += similarity(text, want);
        }
    }
    score.empty_rate = empty as f64 / prompts as f64;
    if score.answered > 0 {
        score.mean_output_tokens = Some(tokens as f64 / score.answered as f64);
        score.length_rate = Some(length as f64 / score.answered as f64);
    }
    if score.compared > 0 {
        score.exact_match_rate = Some(exact as f64 / score.compared as f64);
        score.similarity = Some(sim_sum / score.compared as f64);
    }
    let streams: Vec<(u64, u64)> = row.iter().filter_map(|s| s.streamed).collect();
    score.tokens_per_event = crate::engine::core::wire_rate::pooled(&streams, RATE_EVENTS_NEEDED);
    score
}

/// The events of the probe's answers at an endpoint that it takes to read its tokens an
/// event (pooled: two default answers at 4.2 an event); `--cancel` reads one close by it, and
/// by the widest range where there are fewer.
pub(crate) const RATE_EVENTS_NEEDED: u64 = 24;

/// The most common non-empty answer (ties: the first seen).
fn majority<'a>(answers: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for a in answers.filter(|a| !a.is_empty()) {
        match counts.iter_mut().find(|(t, _)| *t == a) {
            Some((_, n)) => *n += 1,
            None => counts.push((a, 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max()?;
    counts
        .into_iter()
        .find(|(_, n)| *n == best)
        .map(|(t, _)| t.to_string())
}

impl ProbeReport {
    /// The text table.
    pub fn render(&self) -> String {
        let pct = |v: Option<f64>| {
            v.map(|v| format!("{:.0}%", v * 100.0))
                .unwrap_or_else(|| "-".into())
        };
        let mut out = format!(
            "probe of {}: {} prompts, greedy (temperature 0, seed {}), max_tokens {}; reference: {}\n",
            self.model,
            self.settings.prompts,
            self.settings.seed,
            self.settings.max_tokens,
            self.reference
                .as_deref()
                .unwrap_or("the majority answer per prompt"),
        );
        out.push_str(&format!(
            "{:<22} {:<8} {:>6} {:>7} {:>8} {:>7} {:>7} {:>6} {:>6} {:>10}\n",
            "endpoint",
            "quant",
            "exact",
            "similar",
            "answered",
            "mean tok",
            "length",
            "empty",
            "errors",
            "USD"
        ));
        for e in &self.endpoints {
            out.push_str(&format!(
                "{:<22} {:<8} {:>6} {:>7} {:>8} {:>7} {:>7} {:>6} {:>6} {:>10.6}{}\n",
                e.tag,
                e.quantization,
                pct(e.exact_match_rate),
                e.similarity
                    .map(|v| format!("{v:.3}"))
                    .unwrap_or_else(|| "-".into()),
                format!("{}/{}", e.answered, e.prompts),
                e.mean_output_tokens
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into()),
                pct(e.length_rate),
                format!("{:.0}%", e.empty_rate * 100.0),
                e.errors,
                e.cost.as_f64(),
                if e.is_reference {
                    "  (reference)"
                } else if !e.greedy {
                    "  (no temperature: sampled)"
                } else {
                    ""
                }
            ));
            if let Some(err) = &e.last_error {
                out.push_str(&format!("  {}: {err}\n", e.tag));
            }
        }
        out.push_str(&format!(
            "cost: {:.6} USD (estimated at most {:.6})\n",
            self.cost.as_f64(),
            self.estimated_cost.as_f64()
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similarity_is_one_for_equal_and_drops_with_drift() {
        let a = "the quick brown fox jumps over the lazy dog";
        assert_eq!(similarity(a, a), 1.0);
        let b = "the quick brown fox sat under a tall tree";
        let s = similarity(a, b);
        assert!(s > 0.3 && s < 0.8, "{s}");
        assert!(similarity(a, "") < 0.01);
    }

    #[test]
    fn majority_takes_the_most_common_non_empty_answer() {
        let answers = ["b", "a", "", "a", "c"];
        assert_eq!(majority(answers.iter().copied()).as_deref(), Some("a"));
        assert_eq!(majority(["", ""].iter().copied()), None);
    }
}
