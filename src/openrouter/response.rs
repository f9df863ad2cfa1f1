//! Chat completion responses: the usage the API reports, the accumulator that turns a stream
//! of chunks (their shapes are in `chunk.rs`) into one [`Completion`] or one [`ApiError`], and
//! the non-streaming response.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::Usd;

use super::chunk::{Chunk, Delta, ReasoningDetail};
use super::chunk_prefix::ChunkPrefix;
use super::error::ApiError;
use super::tool_call::{ToolCall, ToolCalls};

/// Token counts and cost as the API reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    /// USD charged, when the server reports it (OpenRouter does; local servers do not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
    /// The request ran on the user's own provider key: `cost` is then OpenRouter's fee, and
    /// `cost_details.upstream_inference_cost` what the provider charged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_byok: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_details: Option<CostDetails>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

/// `usage.cost_details`: what the upstream provider charged (USD).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CostDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_inference_cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_inference_prompt_cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_inference_completions_cost: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn reasoning_tokens(&self) -> u64 {
        self.completion_tokens_details
            .as_ref()
            .map_or(0, |d| d.reasoning_tokens)
    }
    pub fn cached_tokens(&self) -> u64 {
        self.prompt_tokens_details
            .as_ref()
            .map_or(0, |d| d.cached_tokens)
    }
    /// The tokens as [`crate::pricing::Tariff::cost`] prices them.
    pub fn token_use(&self) -> crate::pricing::TokenUse {
        crate::pricing::TokenUse {
            prompt: self.prompt_tokens,
            cached: self.cached_tokens(),
            completion: self.completion_tokens,
        }
    }
    /// What the request cost the user: `cost`, and on their own provider key (BYOK), where
    /// `cost` is only OpenRouter's fee, the provider's charge too
    /// (`cost_details.upstream_inference_cost`, usage-accounting docs). None when the server
    /// sent none, or a figure that cannot be a bill (negative, not a number: a hostile or
    /// buggy gateway, reliability-probe-5 P3): the answer is then priced from its tokens.
    pub fn cost_usd(&self) -> Option<Usd> {
        let upstream = match (self.is_byok, &self.cost_details) {
            (Some(true), Some(d)) => d.upstream_inference_cost.unwrap_or(0.0),
            _ => 0.0,
        };
        let cost = crate::booked_cost::check(self.cost?, None).ok()?;
        Some(cost + crate::booked_cost::check(upstream, None).ok()?)
    }
}

/// Where the token counts of a completion came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageSource {
    /// The server's own usage report.
    Reported,
    /// Counted from streamed events (one event ≈ one token); the server sent no usage.
    CountedEvents,
}

/// A finished, successful completion.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    pub id: Option<String>,
    /// Display name of the provider that served it (top-level `provider`).
    pub provider: Option<String>,
    pub model: Option<String>,
    pub content: String,
    /// Reasoning text, when the model returned any.
    pub reasoning: Option<String>,
    /// The tool calls the model made, in the order it made them.
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: String,
    pub native_finish_reason: Option<String>,
    pub usage: Usage,
    pub usage_source: UsageSource,
    /// Content + reasoning events received (each carries one token or several).
    pub events: u64,
    pub ttft: Option<Duration>,
    pub latency: Duration,
}

impl Completion {
    pub fn cost(&self) -> Option<Usd> {
        self.usage.cost_usd()
    }
}

/// What one data event added, for live accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Content or reasoning deltas with text in this event (OpenRouter streams about one token
    /// per event).
    pub token_events: u32,
    pub content_events: u32,
    /// UTF-8 bytes of the text (content and reasoning) these events carried: what a stream's
    /// tokens are counted by until its endpoint's tokens an event are learned.
    pub text_bytes: u32,
}

/// Folds stream events into a completion. Pure: no I/O and no clock, so it is tested on
/// recorded byte streams.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    id: Option<String>,
    provider: Option<String>,
    model: Option<String>,
    content: String,
    reasoning: String,
    tool_calls: ToolCalls,
    finish_reason: Option<String>,
    native_finish_reason: Option<String>,
    usage: Option<Usage>,
    saw_done: bool,
    events: u64,
    /// Servers other than OpenRouter may send no usage; then `[DONE]` after a finish reason
    /// is accepted as the proof of completeness.
    require_usage: bool,
    /// The bytes this stream's chunks repeat up to their delta, from the last chunk parsed in
    /// full: the fast path of the common chunk.
    pub(super) prefix: Option<ChunkPrefix>,
    /// Chunks in a row the fast path could not read since its last hit: a server whose chunks
    /// never fit it (a field it does not know after the delta, a prefix that changes each
    /// time) would otherwise cost a second parse or a new prefix on every chunk.
    pub(super) fast_misses: u8,
}

/// Misses in a row after which a stream stops trying the fast path. OpenRouter's streams miss
/// once or twice, at their end (the finish reason, the usage).
pub(super) const FAST_PATH_GIVES_UP: u8 = 4;

impl StreamAccumulator {
    pub fn new(require_usage: bool) -> Self {
        StreamAccumulator {
            require_usage,
            ..Default::default()
        }
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    pub fn saw_done(&self) -> bool {
        self.saw_done
    }

    pub fn provider(&self) -> Option<&str> {
        self.provider.as_deref()
    }

    /// Feeds the `data` of one SSE event. An error chunk ends the stream with an error.
    pub fn feed(&mut self, data: &str) -> Result<Progress, ApiError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Progress::default());
        }
        if data == "[DONE]" {
            self.saw_done = true;
            return Ok(Progress::default());
        }
        if let Some(delta) = self.prefix.as_ref().and_then(|p| p.delta(data)) {
            self.fast_misses = 0;
            let progress = self.take_delta(delta)?;
            self.events += u64::from(progress.token_events);
            return Ok(progress);
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| ApiError::Decode {
            what: "stream chunk",
            detail: format!("{e} in {}", snippet(data)),
        })?;
        // Only a chunk of one choice with a delta and nothing else to read before it teaches
        // the prefix (an id, model or provider that changes is learnt again).
        let learn = chunk.usage.is_none()
            && chunk.error.is_none()
            && matches!(&chunk.choices[..], [c] if c.delta.is_some() && c.message.is_none() && c.error.is_none());
        let progress = self.absorb(chunk)?;
        if learn && self.fast_misses < FAST_PATH_GIVES_UP {
            if self.prefix.is_some() {
                self.fast_misses += 1;
            }
            // The same prefix again (the end did not fit): nothing new to learn.
            if !self.prefix.as_ref().is_some_and(|p| p.starts(data)) {
                self.prefix = ChunkPrefix::learn(data);
            }
            if self.fast_misses >= FAST_PATH_GIVES_UP {
                self.prefix = None;
            }
        }
        Ok(progress)
    }

    fn absorb(&mut self, chunk: Chunk<'_>) -> Result<Progress, ApiError> {
        if self.id.is_none() {
            self.id = chunk.id.map(|t| t.0.into_owned());
        }
        if let Some(p) = chunk.provider
            && self.provider.as_deref() != Some(&*p.0)
        {
            self.provider = Some(p.0.into_owned());
        }
        if self.model.is_none() {
            self.model = chunk.model.map(|t| t.0.into_owned());
        }
        if let Some(err) = chunk.error {
            return Err(err.into_mid_stream(self.events));
        }
        let mut progress = Progress::default();
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(err) = choice.error {
                return Err(err.into_mid_stream(self.events));
            }
            if let Some(delta) = choice.delta.or(choice.message) {
                progress = self.take_delta(delta)?;
            }
            if let Some(f) = choice.finish_reason {
                if f.0 == "error" {
                    return Err(ApiError::MidStream {
                        message: "finish_reason error without details".to_string(),
                        partial_events: self.events,
                        detail: Box::default(),
                    });
                }
                self.finish_reason = Some(f.0.into_owned());
                self.native_finish_reason = choice.native_finish_reason.map(|t| t.0.into_owned());
            }
        }
        if let Some(u) = chunk.usage {
            self.usage = Some(u);
        }
        self.events += u64::from(progress.token_events);
        Ok(progress)
    }

    /// The text a delta adds: its content, and its reasoning from `reasoning` (or vLLM's
    /// `reasoning_content`), else from `reasoning_details`, which carry the same text.
    fn take_delta(&mut self, delta: Delta<'_>) -> Result<Progress, ApiError> {
        let mut progress = Progress::default();
        if let Some(c) = delta.content.filter(|c| !c.0.is_empty()) {
            self.content.push_str(&c.0);
            progress.content_events = 1;
            progress.token_events = 1;
            progress.text_bytes += text_bytes(&c.0);
        }
        match delta.reasoning.or(delta.reasoning_content) {
            Some(r) if !r.0.is_empty() => {
                self.reasoning.push_str(&r.0);
                progress.token_events = 1;
                progress.text_bytes += text_bytes(&r.0);
            }
            _ => {
                let details: Vec<ReasoningDetail<'_>> = match delta.reasoning_details {
                    Some(raw) => serde_json::from_str(raw.get()).map_err(|e| ApiError::Decode {
                        what: "stream chunk",
                        detail: format!("{e} in reasoning_details {}", snippet(raw.get())),
                    })?,
                    None => Vec::new(),
                };
                for d in details {
                    let text = match d.kind.as_ref().map(|k| &*k.0) {
                        Some("reasoning.summary") => d.summary,
                        Some("reasoning.encrypted") => None,
                        _ => d.text,
                    };
                    if let Some(t) = text.filter(|t| !t.0.is_empty()) {
                        self.reasoning.push_str(&t.0);
                        progress.token_events = 1;
                        progress.text_bytes += text_bytes(&t.0);
                    }
                }
            }
        }
        if let Some(raw) = delta.tool_calls {
            let bytes = self
                .tool_calls
                .add(raw.get())
                .map_err(|e| ApiError::Decode {
                    what: "stream chunk",
                    detail: format!("{e} in tool_calls {}", snippet(raw.get())),
                })?;
            // A call's name and arguments are tokens the model wrote, counted as its text is.
            if bytes > 0 {
                progress.token_events = 1;
                progress.content_events = 1;
                progress.text_bytes = progress.text_bytes.saturating_add(bytes);
            }
        }
        Ok(progress)
    }

    /// Ends the stream: a completion when it is complete, else why it is not.
    pub fn finish(self, ttft: Option<Duration>, latency: Duration) -> Result<Completion, ApiError> {
        let Some(finish_reason) = self.finish_reason else {
            return Err(ApiError::Truncated(format!(
                "no finish_reason after {} events{}",
                self.events,
                if self.saw_done { " ([DONE] seen)" } else { "" }
            )));
        };
        let (usage, usage_source) = match self.usage {
            Some(u) => (u, UsageSource::Reported),
            None if self.require_usage => {
                return Err(ApiError::Truncated(format!(
                    "finish_reason {finish_reason} but no usage chunk{}",
                    if self.saw_done { "" } else { " and no [DONE]" }
                )));
            }
            None if !self.saw_done => {
                return Err(ApiError::Truncated(format!(
                    "finish_reason {finish_reason} but neither usage nor [DONE]"
                )));
            }
            None => (
                Usage {
                    completion_tokens: self.events,
                    total_tokens: self.events,
                    ..Default::default()
                },
                UsageSource::CountedEvents,
            ),
        };
        // A complete answer without text (hidden or encrypted reasoning) is still a billed
        // answer: it goes out as one, for the core to book at its `usage.cost` and judge as
        // empty. A tool call is an answer with its calls.
        Ok(Completion {
            id: self.id,
            provider: self.provider,
            model: self.model,
            content: self.content,
            reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
            tool_calls: self.tool_calls.into_calls(),
            finish_reason,
            native_finish_reason: self.native_finish_reason,
            usage,
            usage_source,
            events: self.events,
            ttft,
            latency,
        })
    }
}

/// Parses a non-streaming body (which may start with keep-alive whitespace) into a completion.
pub fn parse_completion_body(
    body: &[u8],
    require_usage: bool,
    latency: Duration,
) -> Result<Completion, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| ApiError::Decode {
        what: "completion body",
        detail: e.to_string(),
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::Empty {
            provider: "?".to_string(),
        });
    }
    let chunk: Chunk<'_> =
        serde_json::from_str(text.trim_start()).map_err(|e| ApiError::Decode {
            what: "completion body",
            detail: format!("{e} in {}", snippet(text)),
        })?;
    if let Some(err) = chunk.error {
        // A whole-body error with HTTP 200: the provider failed after OpenRouter accepted.
        return Err(ApiError::Http {
            status: 200,
            message: err.message.clone().unwrap_or_else(|| "(no message)".into()),
            retry_after: None,
            detail: Box::new(err),
        });
    }
    let mut acc = StreamAccumulator::new(require_usage);
    acc.saw_done = true;
    acc.absorb(chunk)?;
    acc.finish(None, latency)
}

fn snippet(s: &str) -> String {
    let mut out: String = s.chars().take(120).collect();
    if s.chars().count() > 120 {
        out.push('…');
    }
    out
}

/// A delta's UTF-8 bytes, saturating (one delta is never near 4 GiB).
fn text_bytes(text: &str) -> u32 {
    u32::try_from(text.len()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[&str], require_usage: bool) -> Result<Completion, ApiError> {
        let mut acc = StreamAccumulator::new(require_usage);
        for e in events {
            acc.feed(e)?;
        }
        acc.finish(None, Duration::from_millis(5))
    }

    #[test]
    fn reasoning_details_alone_are_read_once() {
        let c = run(
            &[
                r#"{"choices":[{"delta":{"content":"","reasoning":"think ","reasoning_details":[{"type":"reasoning.text","text":"think "}]}}]}"#,
                r#"{"choices":[{"delta":{"content":"","reasoning_details":[{"type":"reasoning.summary","summary":"sum"}]}}]}"#,
                r#"{"choices":[{"delta":{"content":"hi"},"finish_reason":"stop","native_finish_reason":"stop"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"cost":0.00001,"completion_tokens_details":{"reasoning_tokens":2}}}"#,
                "[DONE]",
            ],
            true,
        )
        .expect("complete");
        assert_eq!(c.reasoning.as_deref(), Some("think sum"));
        assert_eq!(c.content, "hi");
        assert_eq!(c.events, 3);
        assert_eq!(c.usage.reasoning_tokens(), 2);
    }

    #[test]
    fn incomplete_streams_are_failures() {
        let content = r#"{"choices":[{"delta":{"content":"x"}}]}"#;
        let finish = r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#;
        assert!(matches!(run(&[content], true), Err(ApiError::Truncated(_))));
        assert!(matches!(
            run(&[content, "[DONE]"], true),
            Err(ApiError::Truncated(_))
        ));
        assert!(matches!(
            run(&[content, finish], true),
            Err(ApiError::Truncated(_))
        ));
        // Without a usage requirement, [DONE] after a finish reason completes it.
        assert!(matches!(
            run(&[content, finish], false),
            Err(ApiError::Truncated(_))
        ));
        let c = run(&[content, finish, "[DONE]"], false).expect("ok");
        assert_eq!(c.usage_source, UsageSource::CountedEvents);
        assert_eq!(c.usage.completion_tokens, 1);
    }

    #[test]
    fn a_complete_answer_without_text_is_an_answer_with_its_bill() {
        // Nothing at all: still an answer, for the core to book and judge empty.
        let c = run(
            &[
                r#"{"provider":"Fireworks","choices":[{"delta":{"content":""},"finish_reason":"stop"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}"#,
                "[DONE]",
            ],
            true,
        )
        .expect("an answer");
        assert_eq!((c.content.as_str(), c.reasoning.as_deref()), ("", None));
        assert_eq!(c.provider.as_deref(), Some("Fireworks"));
        // A tool call only, billed (as Kimi K2 via Chutes streams it): booked at its cost.
        let c = run(
            &[
                r#"{"id":"gen-1","provider":"Chutes","choices":[{"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
                r#"{"id":"gen-1","provider":"Chutes","choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
                r#"{"id":"gen-1","provider":"Chutes","choices":[],"usage":{"prompt_tokens":90,"completion_tokens":20,"total_tokens":110,"cost":0.000137}}"#,
                "[DONE]",
            ],
            true,
        )
        .expect("an answer");
        assert_eq!(c.finish_reason, "tool_calls");
        assert!(c.content.is_empty());
        assert_eq!(c.cost(), Some(Usd::from_f64(0.000137)));
        // Encrypted reasoning only: no text to keep, the bill all the same.
        let c = run(
            &[
                r#"{"id":"gen-2","choices":[{"delta":{"content":"","reasoning_details":[{"type":"reasoning.encrypted","data":"xyz"}]}}]}"#,
                r#"{"id":"gen-2","choices":[{"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":40,"cost":0.0002}}"#,
            ],
            true,
        )
        .expect("an answer");
        assert_eq!(c.reasoning, None);
        assert_eq!(c.usage.completion_tokens, 40);
    }

    #[test]
    fn error_chunk_numeric_or_string_code() {
        let r = run(
            &[
                r#"{"choices":[{"delta":{"content":"a"}}]}"#,
                r#"{"id":"g","provider":"OpenAI","error":{"code":429,"message":"Rate limit exceeded","metadata":{"error_type":"rate_limit_exceeded"}},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#,
            ],
            true,
        );
        match r {
            Err(ApiError::MidStream {
                detail,
                partial_events,
                ..
            }) => {
                assert_eq!(detail.code, Some(serde_json::json!(429)));
                assert_eq!(partial_events, 1);
            }
            other => panic!("{other:?}"),
        }
        let r = run(
            &[
                r#"{"choices":[{"delta":{"content":""},"finish_reason":"error","error":{"code":"server_error","message":"boom"}}]}"#,
            ],
            true,
        );
        assert!(
            matches!(r, Err(ApiError::MidStream { ref detail, .. }) if detail.code_text() == "server_error")
        );
    }

    #[test]
    fn non_streaming_body_with_leading_keepalives() {
        let body = b"\n   \n{\"id\":\"gen-1\",\"provider\":\"Novita\",\"choices\":[{\"finish_reason\":\"stop\",\"native_finish_reason\":\"stop\",\"message\":{\"role\":\"assistant\",\"content\":\"hello\",\"reasoning\":\"The user\"}}],\"usage\":{\"prompt_tokens\":173,\"completion_tokens\":74,\"total_tokens\":247,\"cost\":0.00023947}}";
        let c = parse_completion_body(body, true, Duration::ZERO).expect("ok");
        assert_eq!(c.provider.as_deref(), Some("Novita"));
        assert_eq!(c.reasoning.as_deref(), Some("The user"));
        assert_eq!(c.cost(), Some(Usd::from_pico(239_470_000)));
        let e = parse_completion_body(
            br#"{"error":{"code":502,"message":"upstream"}}"#,
            true,
            Duration::ZERO,
        )
        .expect_err("error body");
        assert!(e.is_retryable());
        assert!(matches!(
            parse_completion_body(b"  ", true, Duration::ZERO),
            Err(ApiError::Empty { .. })
        ));
    }
}
