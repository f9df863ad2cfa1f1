//! Output records and where they live: `<dataset>.jsonl` (finished prompts),
//! `<dataset>.rejects.jsonl` (prompts that failed for good), `turns.jsonl` (turns of rows in
//! progress) and `spend.jsonl` (the spend ledger); and the appends made outside a run. A run's
//! own lines go through the one writer of `writer.rs`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::domain::Usd;

/// One turn of the `conversations` list (SpecForge / EAGLE-3 trainers read this shape).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The tool calls of an assistant turn, in the API's shape (`tool_call.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<crate::openrouter::ToolCall>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub reasoning_tokens: u64,
    /// `reported` by the server, or `counted` from streamed events.
    pub source: String,
    /// Prompt tokens read from the provider's cache (`prompt_tokens_details.cached_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// What the upstream provider charged, as the API reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_details: Option<crate::openrouter::CostDetails>,
    /// Served on the user's own provider key: `cost_usd` then includes the provider's charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_byok: Option<bool>,
}

/// One finished prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputRecord {
    pub id: String,
    pub conversations: Vec<Turn>,
    /// Display name of the provider that served it.
    pub provider: String,
    pub endpoint_tag: Option<String>,
    pub quantization: Option<String>,
    pub model: String,
    pub finish_reason: String,
    /// The provider's own finish reason, as OpenRouter passes it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_finish_reason: Option<String>,
    /// `finish_reason` was `length`: the answer was cut at `max_tokens`.
    pub truncated: bool,
    /// `cost_usd` is harvest's estimate from the endpoint's listed prices: the server
    /// reported no `usage.cost` (for a row of several turns: for one of them at least).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_estimated: bool,
    /// Cut at `max_tokens` before any content: the model was still thinking, and the row
    /// holds its reasoning and an empty answer (`truncated` too).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_thinking: bool,
    pub usage: RecordUsage,
    pub cost_usd: Usd,
    pub ttft_ms: Option<u64>,
    pub latency_ms: u64,
    pub attempts: u32,
    pub created_at: String,
    pub generation_id: Option<String>,
    /// The sampling parameters sent (max_tokens, temperature, ...).
    pub params: serde_json::Value,
    /// The answer's thinking came inline in `content` and was moved to `reasoning_content`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline_think: bool,
    /// Each generated assistant turn, first to last, when the dataset regenerates every turn
    /// (`turns = "all"`); the row's usage, cost and attempts are then their sums, and its
    /// endpoint the last turn's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnRecord>,
}

/// Where one regenerated assistant turn came from and what it cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub provider: String,
    pub endpoint_tag: Option<String>,
    pub finish_reason: String,
    pub usage: RecordUsage,
    pub cost_usd: Usd,
    pub attempts: u32,
    pub generation_id: Option<String>,
    pub ttft_ms: Option<u64>,
    pub latency_ms: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline_think: bool,
    /// `cost_usd` is harvest's estimate (no `usage.cost` came).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_estimated: bool,
}

impl OutputRecord {
    /// Where the row's one answer came from and what it cost, as a turn's record (a row of
    /// regenerated turns has each in `turns`).
    pub(crate) fn answer_record(&self) -> TurnRecord {
        TurnRecord {
            provider: self.provider.clone(),
            endpoint_tag: self.endpoint_tag.clone(),
            finish_reason: self.finish_reason.clone(),
            usage: self.usage.clone(),
            cost_usd: self.cost_usd,
            attempts: self.attempts,
            generation_id: self.generation_id.clone(),
            ttft_ms: self.ttft_ms,
            latency_ms: self.latency_ms,
            inline_think: self.inline_think,
            cost_estimated: self.cost_estimated,
        }
    }
}

/// One prompt that failed for good.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RejectRecord {
    pub id: String,
    /// Line of the prompt file, when known.
    pub line: Option<u64>,
    pub error: String,
    pub error_kind: String,
    pub attempts: u32,
    pub created_at: String,
    /// What the provider said of the failure, as typed fields (`error` has them in its text).
    #[serde(flatten)]
    pub cause: FailureCause,
}

/// What a provider said of a failure, when OpenRouter passed it on (`error.metadata`): whom it
/// blames, its typed `error_type`, and the upstream's own message, each one safe line.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FailureCause {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

/// What a ledger line records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpendKind {
    /// A finished response, at its reported `usage.cost`.
    Complete,
    /// A response we closed (budget cap, stop-now, timeout): tokens received at the endpoint's
    /// price, an estimate until reconciled.
    Cancelled,
    /// A correction of an estimate, from the API's own figure (`GET /generation`).
    Adjustment,
    /// A generation began (headers received); zero dollars. A `started` line with no closing
    /// line after a crash is looked up on the next start.
    Started,
    /// What a generation left open by a crash cost, per the API.
    Recovered,
    /// A request was sent (zero dollars; `expected_usd` holds what it should cost). Every
    /// attempt is closed by a later line; one left open by a crash, with no generation id to
    /// look up, is booked `unknown` as a lost attempt on the next start.
    Dispatched,
    /// An attempt that failed without being billed (zero dollars).
    Failed,
    /// Our estimate for a request a crash left without any trace at the API we could look up.
    Unknown,
    /// A probe or any other spend.
    Other,
    /// Zero dollars: the API key's own usage (`GET /key`) at a run's start or end, beside the
    /// ledger's total then (`checkpoint`), so that crash estimates can be trued up against what
    /// the key was billed.
    KeyUsage,
    /// Zero dollars: a closed stream `/generation` still did not know when its run stopped
    /// asking, its expected cost reckoned again (`expected_usd`) from how long it has gone
    /// unknown (a generation billed in full is recorded when it ends, so it was still
    /// running). `status`'s open amount and a later start's hold read the last such line.
    Reckoned,
}

/// On `complete` lines: what the stream carried, the run's own measure of its wire that a
/// later start of the directory learns from before its first stream completes
/// (`engine::core::wire_rate`): its events, the UTF-8 bytes of its streamed text (content, and
/// reasoning where it was streamed) and the tokens those were (the usage's completion tokens,
/// less reasoning that was not streamed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Streamed {
    pub events: u64,
    pub text_bytes: u64,
    pub tokens: u64,
}

/// On `key_usage` lines: what the key and the ledger said at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyCheckpoint {
    /// `GET /key` `usage`, USD.
    pub key_usage_usd: f64,
    /// The ledger's total (plus outputs missing from it) at that moment.
    pub ledger_usd: Usd,
    /// Nothing was in flight or left open by a crash then: a sound base for a true-up.
    pub quiet: bool,
}

/// One line of `spend.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpendEntry {
    pub at: String,
    pub id: String,
    pub dataset: String,
    pub endpoint: Option<String>,
    pub kind: SpendKind,
    pub usd: Usd,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// True when the amount is our estimate, not the server's figure.
    pub estimated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_id: Option<String>,
    /// The attempt (`<run>-<n>`) a line belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<String>,
    /// On `dispatched` lines: the cost the request is expected to have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_usd: Option<Usd>,
    /// On `dispatched` lines: the most the request can cost (its prompt and `max_tokens` at the
    /// dearest price it could go to), the bound a cost from outside is checked against before
    /// it is booked (`booked_cost`). Absent from ledgers written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_usd: Option<Usd>,
    /// On `failed` lines and streams closed on a timeout: the kind of error (`rate_limited`,
    /// `timeout`, `truncated`, ...), as in the rejects file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// On `key_usage` lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<KeyCheckpoint>,
    /// What a line corrected, in words (the key true-up's adjustment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// On a closed stream's `adjustment` line: what its bill said of the close, the evidence
    /// a later start of the directory carries (`close_reading`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close: Option<crate::close_reading::Close>,
    /// On a checked close's `adjustment` line: how long after the close `/generation` had its
    /// record, in milliseconds. A later start of the directory times its own checks' look-ups
    /// by it (`close_reading::ClosesSeen::found_within`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_after_ms: Option<u64>,
    /// On `complete` lines with the API's usage: what the stream carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streamed: Option<Streamed>,
    /// On `cancelled` lines: the whole tokens harvest had received when it closed the stream
    /// (`completion_tokens` there counts its events). Absent from ledgers written before it
    /// was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_tokens: Option<u64>,
}

/// The turns file's name in an output directory (`turns_file.rs` reads it).
pub const TURNS_FILE: &str = "turns.jsonl";

pub fn turns_path(dir: &Path) -> PathBuf {
    dir.join(TURNS_FILE)
}

/// One finished assistant turn of a row in progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnLine {
    pub dataset: String,
    pub id: String,
    /// Its place among the row's assistant turns, from 0.
    pub turn: usize,
    /// The row's conversation as it is sent (`content_id` of its messages, the system prompt
    /// included): a row whose prompt changed since is started again, not continued.
    pub conversation: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    pub record: TurnRecord,
}

impl SpendEntry {
    /// A `kind` line for prompt `id` of `dataset` at `at` (RFC 3339): zero dollars and tokens,
    /// nothing optional; each site sets what its kind says (`..SpendEntry::new(..)`).
    pub fn new(
        kind: SpendKind,
        at: String,
        id: impl Into<String>,
        dataset: impl Into<String>,
    ) -> SpendEntry {
        SpendEntry {
            at,
            id: id.into(),
            dataset: dataset.into(),
            endpoint: None,
            kind,
            usd: Usd::ZERO,
            prompt_tokens: 0,
            completion_tokens: 0,
            estimated: false,
            generation_id: None,
            attempt: None,
            expected_usd: None,
            worst_usd: None,
            error: None,
            checkpoint: None,
            note: None,
            close: None,
            found_after_ms: None,
            streamed: None,
            received_tokens: None,
        }
    }
}

impl SpendEntry {
    /// The line that closes the attempt `self` (its `dispatched` or `started` line) as `kind`
    /// at `usd`, written `at`: what only an open line carries (its expectation, its worst
    /// case) and any error go.
    pub(crate) fn closed_as(self, kind: SpendKind, usd: Usd, estimated: bool, at: String) -> Self {
        SpendEntry {
            at,
            kind,
            usd,
            estimated,
            expected_usd: None,
            worst_usd: None,
            error: None,
            ..self
        }
    }

    /// The `adjustment` line that books this line's difference to `actual` (what the API said
    /// it cost), at `at`: a correction, not another attempt (no error, not an estimate).
    pub(crate) fn adjusted_to(self, actual: Usd, at: String) -> Self {
        SpendEntry {
            at,
            kind: SpendKind::Adjustment,
            usd: actual - self.usd,
            estimated: false,
            error: None,
            checkpoint: None,
            ..self
        }
    }

    /// The `reckoned` line that says this closed stream is now expected to cost `expected` in
    /// all, at `at`: zero dollars, the close's own fields kept (its attempt is what a later
    /// scan finds it by).
    pub(crate) fn reckoned(self, expected: Usd, at: String, why: &str) -> Self {
        SpendEntry {
            at,
            kind: SpendKind::Reckoned,
            usd: Usd::ZERO,
            expected_usd: Some(expected),
            estimated: true,
            error: None,
            checkpoint: None,
            note: Some(why.to_string()),
            ..self
        }
    }
}

/// The files of one dataset.
pub fn output_path(dir: &Path, dataset: &str) -> PathBuf {
    dir.join(format!("{dataset}.jsonl"))
}

pub fn rejects_path(dir: &Path, dataset: &str) -> PathBuf {
    dir.join(format!("{dataset}.rejects.jsonl"))
}

pub fn ledger_path(dir: &Path) -> PathBuf {
    dir.join("spend.jsonl")
}

/// Appends lines to the spend ledger outside a run (the probe), synced before returning. Each
/// line goes out in one `write` on an append-mode file, so a run writing at the same time
/// cannot interleave inside it.
pub fn append_spend(dir: &Path, entries: &[SpendEntry]) -> std::io::Result<()> {
    use std::io::Write;
    super::create_private_dir(dir)?;
    let mut f = super::no_follow(std::fs::OpenOptions::new().create(true).append(true))
        .open(ledger_path(dir))?;
    for e in entries {
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        f.write_all(&line)?;
    }
    f.sync_data()
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, synced, then
/// renamed over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("state")
    ));
    {
        let mut f = super::create_replacement(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ledger line of prompt `id` of dataset `d` (a `complete` line at 1 microdollar; also for
    /// other modules' tests).
    pub(crate) fn ledger_line(
        kind: SpendKind,
        attempt: &str,
        id: &str,
        generation: Option<&str>,
    ) -> String {
        serde_json::to_string(&SpendEntry {
            attempt: Some(attempt.into()),
            generation_id: generation.map(str::to_string),
            usd: if kind == SpendKind::Complete {
                Usd::from_pico(1_000_000)
            } else {
                Usd::ZERO
            },
            ..SpendEntry::new(kind, "2026-12-04T00:00:00.000Z".into(), id, "d")
        })
        .expect("json")
            + "\n"
    }

    /// A kept answer of prompt `id` that cost `cost` picodollars (also for other modules' tests).
    pub(crate) fn rec(id: &str, cost: i64) -> OutputRecord {
        OutputRecord {
            id: id.into(),
            conversations: vec![
                Turn {
                    role: "user".into(),
                    content: "hi".into(),
                    reasoning_content: None,
                    tool_calls: Vec::new(),
                },
                Turn {
                    role: "assistant".into(),
                    content: "hello".into(),
                    reasoning_content: Some("think".into()),
                    tool_calls: Vec::new(),
                },
            ],
            provider: "Chutes".into(),
            endpoint_tag: Some("chutes/int4".into()),
            quantization: Some("int4".into()),
            model: "m".into(),
            finish_reason: "stop".into(),
            native_finish_reason: None,
            truncated: false,
            cut_thinking: false,
            cost_estimated: false,
            usage: RecordUsage {
                prompt_tokens: 5,
                completion_tokens: 7,
                reasoning_tokens: 1,
                source: "reported".into(),
                ..RecordUsage::default()
            },
            cost_usd: Usd::from_pico(cost),
            ttft_ms: Some(10),
            latency_ms: 20,
            attempts: 1,
            created_at: "2026-11-29T00:00:00Z".into(),
            generation_id: None,
            params: serde_json::json!({"max_tokens": 16}),
            inline_think: false,
            turns: Vec::new(),
        }
    }

    #[test]
    fn atomic_write_replaces() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("state.json");
        write_atomic(&p, b"one").expect("w1");
        write_atomic(&p, b"two").expect("w2");
        assert_eq!(std::fs::read_to_string(&p).expect("read"), "two");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1);
    }
}
