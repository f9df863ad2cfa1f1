//! What an attempt costs when it ends, and whether a stream is closed at the dollar cap: the
//! two money rules the worker applies on its own (it books before the attempt's running cost
//! leaves the in-flight sum, and decides at the cap while the stream runs), decided here, pure
//! and table-tested (`core/tests/attempt_money.rs`).
//!
//! The rules follow OpenRouter's billing (docs: guides/features/zero-completion-insurance,
//! api_reference/streaming "Stream cancellation"): a finished answer costs its reported
//! `usage.cost`; a stream we closed costs what was streamed (our running estimate, until
//! `GET /generation` says); a stream cut after tokens by a reset or a clean truncation is billed
//! like a cancel; an error finish and a failure before any token are insured.

/// How an attempt ended, as far as money goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// A whole response, billed at `final_pico` (its `usage.cost`, else the endpoint's price).
    Done { final_pico: i64 },
    /// We closed it: stop-now, the dollar cap, the total timeout.
    Closed,
    /// It failed: `cut_after_tokens` when the failure is a cut after some tokens (a reset, a
    /// clean truncation), not an error finish.
    Failed { cut_after_tokens: bool },
}

/// What the attempt is booked at: `accrued` is its running cost (prompt + streamed tokens).
pub(crate) fn booked(ending: Ending, accrued: i64) -> i64 {
    match ending {
        Ending::Done { final_pico } => final_pico,
        Ending::Closed
        | Ending::Failed {
            cut_after_tokens: true,
        } => accrued,
        Ending::Failed {
            cut_after_tokens: false,
        } => 0,
    }
}

/// At the dollar cap: close the stream (`true`) unless it is known to run at an endpoint that
/// bills the whole generation however it ends; then it runs to the end, so that what is paid
/// for is kept. An endpoint not known yet is closed: nothing says closing is wasted.
pub(crate) fn close_at_cap(cancel_stops_billing: Option<bool>) -> bool {
    cancel_stops_billing != Some(false)
}

/// Failures that end a stream early without an error finish reason: once tokens were sent,
/// OpenRouter bills them (zero completion insurance covers error finishes and empty answers).
pub(crate) fn cut_after_tokens(kind: crate::openrouter::ErrorKind) -> bool {
    use crate::openrouter::ErrorKind;
    matches!(kind, ErrorKind::Connection | ErrorKind::Truncated)
}
