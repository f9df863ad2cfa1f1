//! What a kept answer writes: the record of one turn (where it came from, what it used and
//! cost) and the row of a finished prompt, its turns' sums included. Pure builders: the
//! outcome room decides whether an answer is kept, this room says what it holds.

use std::time::Duration;

use crate::openrouter::{Completion, UsageSource};
use crate::store::output::{OutputRecord, RecordUsage, Turn, TurnRecord};

use super::super::endpoint::RunEndpoint;
use super::{Job, turns};

/// A kept answer's text, as it goes into the row.
pub(super) struct Kept {
    pub content: String,
    pub reasoning: Option<String>,
    /// Its tool calls (only the last turn of a row has any: `outcome.rs`).
    pub calls: Vec<crate::openrouter::ToolCall>,
    /// Its thinking came inline and was moved to `reasoning`.
    pub split: bool,
    pub shape: crate::answer_shape::Shape,
}

/// Where an answer came from and what it took: the parts of its turn record and its row.
pub(super) struct Served<'a> {
    pub endpoint: Option<&'a RunEndpoint>,
    pub cost: crate::domain::Usd,
    pub elapsed: Duration,
}

/// The usage an answer reports, as rows record it.
fn usage_of(c: &Completion) -> RecordUsage {
    RecordUsage {
        prompt_tokens: c.usage.prompt_tokens,
        completion_tokens: c.usage.completion_tokens,
        reasoning_tokens: c.usage.reasoning_tokens(),
        source: match c.usage_source {
            UsageSource::Reported => "reported".into(),
            UsageSource::CountedEvents => "counted".into(),
        },
        cached_tokens: c.usage.cached_tokens(),
        cost_details: c.usage.cost_details.clone(),
        is_byok: c.usage.is_byok,
    }
}

/// Who served it, by name: an own server's name, else the provider the stream named.
pub(super) fn provider_of(c: &Completion, endpoint: Option<&RunEndpoint>) -> String {
    match endpoint {
        Some(e) if e.custom.is_some() => e.provider.clone(),
        _ => c.provider.clone().unwrap_or_else(|| "?".into()),
    }
}

/// The record of one answered turn (`attempts`: those the turn took).
pub(super) fn turn_record(
    c: &Completion,
    s: &Served<'_>,
    attempts: u32,
    split: bool,
) -> TurnRecord {
    TurnRecord {
        provider: provider_of(c, s.endpoint),
        endpoint_tag: s.endpoint.map(|e| e.tag.clone()),
        finish_reason: c.finish_reason.clone(),
        usage: usage_of(c),
        cost_usd: s.cost,
        attempts,
        generation_id: c.id.clone(),
        ttft_ms: c.ttft.map(|t| t.as_millis() as u64),
        latency_ms: s.elapsed.as_millis() as u64,
        inline_think: split,
        cost_estimated: c.cost().is_none(),
    }
}

/// The row of a finished prompt: its conversation with every turn the model wrote, the last
/// answer's provenance, and (every turn regenerated) each turn's record with their sums.
/// `model`: the run's, when the answer does not name one; `created_at`: now, RFC 3339.
pub(super) fn record(
    job: Job,
    c: Completion,
    kept: Kept,
    s: &Served<'_>,
    (all_turns, last_turn): (bool, TurnRecord),
    (model, created_at, params): (&str, String, serde_json::Value),
) -> OutputRecord {
    let cut = kept.shape;
    let last = Turn {
        role: "assistant".into(),
        content: kept.content,
        reasoning_content: kept.reasoning,
        tool_calls: kept.calls,
    };
    let conversations = turns::conversation(&job.prompt, &job.done_turns, last);
    let cost_estimated = last_turn.cost_estimated;
    let mut turn_records: Vec<TurnRecord> = Vec::new();
    let (usage, cost, attempts) = if all_turns {
        turn_records = job.done_turns.into_iter().map(|t| t.record).collect();
        turn_records.push(last_turn);
        (
            turns::total_usage(&turn_records),
            turn_records.iter().map(|t| t.cost_usd).sum(),
            turn_records.iter().map(|t| t.attempts).sum(),
        )
    } else {
        (last_turn.usage, last_turn.cost_usd, last_turn.attempts)
    };
    OutputRecord {
        id: job.prompt.id,
        conversations,
        provider: provider_of(&c, s.endpoint),
        endpoint_tag: s.endpoint.map(|e| e.tag.clone()),
        quantization: s.endpoint.map(|e| e.quantization.to_string()),
        model: c.model.unwrap_or_else(|| model.to_string()),
        finish_reason: c.finish_reason,
        native_finish_reason: c.native_finish_reason,
        truncated: cut.is_cut(),
        cut_thinking: matches!(cut, crate::answer_shape::Shape::CutThinking { .. }),
        cost_estimated: turn_records.iter().any(|t| t.cost_estimated) || cost_estimated,
        usage,
        cost_usd: cost,
        ttft_ms: c.ttft.map(|t| t.as_millis() as u64),
        latency_ms: s.elapsed.as_millis() as u64,
        attempts,
        created_at,
        generation_id: c.id,
        params,
        inline_think: kept.split,
        turns: turn_records,
    }
}
