//! What a finished answer holds ([`Shape`]): whole, tool calls, cut at `max_tokens` (with
//! content, or while still thinking), empty, or filtered. One reading of a finish reason, the
//! text and the calls, shared by the core's verdict on an answer (`engine::core::verdict`), the
//! driver's counters and the start's booking of kept answers a crash cut from their line
//! (`store::kept_booking`), so that all three judge an answer the same way.

use crate::openrouter::{Completion, ToolCall};

/// What a finished response holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Finished with content.
    Whole,
    /// Cut at `max_tokens` with content.
    Cut,
    /// Cut at `max_tokens` before any content: the model was still thinking. `reasoning` says
    /// whether any reasoning text came (hidden or encrypted reasoning gives none).
    CutThinking { reasoning: bool },
    /// Finished with tool calls (with or without text): an agent's turn, kept with its calls.
    Calls,
    /// Finished (not cut) with no content, or only whitespace, and no tool call: reasoning
    /// only, hidden reasoning.
    Empty,
    /// The provider filtered it (`finish_reason: "content_filter"`).
    Filtered,
}

impl Shape {
    /// The shape of an answer with this finish reason, content, reasoning and tool calls. A
    /// call cut at `max_tokens` is a cut answer: its arguments are a part of what the model
    /// wrote, as a cut text is.
    pub(crate) fn of(
        finish_reason: &str,
        content: &str,
        reasoning: Option<&str>,
        calls: &[ToolCall],
    ) -> Shape {
        let has_content = !content.trim().is_empty();
        let has_calls = !calls.is_empty();
        let has_reasoning = reasoning.is_some_and(|r| !r.trim().is_empty());
        match finish_reason {
            "content_filter" => Shape::Filtered,
            "length" if has_content || has_calls => Shape::Cut,
            "length" => Shape::CutThinking {
                reasoning: has_reasoning,
            },
            _ if has_calls => Shape::Calls,
            _ if has_content => Shape::Whole,
            _ => Shape::Empty,
        }
    }

    /// The shape of a completion as it came (before thinking inline in the text is split out:
    /// an answer with `<think>` text is not empty).
    pub(crate) fn of_completion(c: &Completion) -> Shape {
        Shape::of(
            &c.finish_reason,
            &c.content,
            c.reasoning.as_deref(),
            &c.tool_calls,
        )
    }

    /// Cut at `max_tokens`, with or without content.
    pub(crate) fn is_cut(self) -> bool {
        matches!(self, Shape::Cut | Shape::CutThinking { .. })
    }
}
