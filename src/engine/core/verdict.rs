//! Whether a paid answer is kept: its [`Shape`] (whole, tool calls, cut at `max_tokens`, cut
//! while thinking, empty, filtered) and the [`Verdict`] the config gives that shape. Pure and
//! table-tested (`core/tests/verdict.rs`); the outcome room books the answer first, whatever
//! the verdict, and the driver's counters read the same shape.
//!
//! A thinking model that reaches `max_tokens` while still thinking returns `finish_reason:
//! "length"` with reasoning and no content. That is a cut, not an empty answer: sending the same
//! request at the same `max_tokens` mostly buys the same cut, and for a drafter the reasoning is
//! the model's own output, worth keeping. So it is kept as a truncated row (unless
//! `retry.on_length = "reject"`), never retried; `--retry-truncated` at a larger `max_tokens` is
//! the remedy. `on_empty` applies only to answers that *finished* with no content.

use crate::answer_shape::Shape;
use crate::config::{OnEmpty, OnLength};

/// What to do with a paid answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Write it to the outputs (`truncated` when cut).
    Keep,
    /// Send the prompt again (the answer stays booked).
    Retry,
    /// A final reject, with its kind label and text.
    Reject { kind: &'static str, why: String },
}

/// The config's answer options, as the verdict reads them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnswerRules {
    pub on_length: OnLength,
    pub on_empty: OnEmpty,
    pub max_attempts: u32,
    pub max_tokens: u32,
}

/// What to do with an answer of `shape`, after `attempts` attempts (this one included).
pub(crate) fn verdict(shape: Shape, rules: AnswerRules, attempts: u32) -> Verdict {
    let retries_left = attempts < rules.max_attempts;
    let plural = if attempts == 1 { "" } else { "s" };
    match shape {
        Shape::Whole | Shape::Calls => Verdict::Keep,
        Shape::Filtered => Verdict::Reject {
            kind: crate::openrouter::ErrorKind::ContentPolicy.label(),
            why: "finish_reason content_filter: the provider filtered the answer".into(),
        },
        Shape::Cut => match rules.on_length {
            OnLength::Keep => Verdict::Keep,
            OnLength::Retry if retries_left => Verdict::Retry,
            OnLength::Retry | OnLength::Reject => Verdict::Reject {
                kind: LENGTH,
                why: format!(
                    "finish_reason length: cut at max_tokens {} after {attempts} attempt{plural}",
                    rules.max_tokens
                ),
            },
        },
        // Never retried: the same max_tokens buys the same cut.
        Shape::CutThinking { reasoning: true } if rules.on_length != OnLength::Reject => {
            Verdict::Keep
        }
        Shape::CutThinking { reasoning } => Verdict::Reject {
            kind: CUT_THINKING,
            why: format!(
                "cut while thinking at max_tokens {}{}: raise max_tokens, then run with \
                 --retry-truncated",
                rules.max_tokens,
                if reasoning {
                    ""
                } else {
                    " (no reasoning text came back: hidden or encrypted)"
                }
            ),
        },
        Shape::Empty => match rules.on_empty {
            OnEmpty::Keep => Verdict::Keep,
            OnEmpty::Retry if retries_left => Verdict::Retry,
            OnEmpty::Retry | OnEmpty::Reject => Verdict::Reject {
                kind: crate::openrouter::ErrorKind::Empty.label(),
                why: format!(
                    "empty answer content (reasoning only, or hidden reasoning) after {attempts} attempt{plural}"
                ),
            },
        },
    }
}

/// The reject kind of an answer cut at `max_tokens` (with content).
pub(crate) const LENGTH: &str = "length";
/// The kind of an answer cut at `max_tokens` before any content, in rejects, stats and report.
pub(crate) const CUT_THINKING: &str = "cut-thinking";
/// The kind of a tool call before a conversation's last turn (`turns = "all"`): no tool's
/// answer follows it to go on from.
pub(crate) const TOOL_CALL_MID: &str = "tool-call-mid-conversation";

/// Every `error_kind` a reject can carry: the error kinds', these rules' own, and `input` (a
/// prompt-file line that is no prompt, `on_bad_line = "skip"`).
pub(crate) fn reject_kinds() -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = crate::openrouter::ErrorKind::ALL
        .iter()
        .map(|k| k.label())
        .collect();
    kinds.extend([LENGTH, CUT_THINKING, TOOL_CALL_MID, "input"]);
    kinds
}
