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

/// Whether the dollar cap closes a stream now: where closing stops the bill as the run
/// believes now, and always where the stream was reserved as one the cap closes (its
/// expectation and its tokens in transit, `reserved_to_close`): an endpoint doubted since (a
/// recheck whose bill said nothing clear) may still stop the bill, and a stream left to run
/// there bills the rest of its answer past what was reserved for it (the seeded world
/// `HARVEST_SIM_SEED=164` passed its hard budget by 1.10% so).
pub(crate) fn closed_by_cap(believed_now: Option<bool>, reserved_to_close: bool) -> bool {
    close_at_cap(believed_now) || reserved_to_close
}

/// How much of an attempt's held worst case `pico` more streamed takes up: the hold is what is
/// left of the worst case (`worst - accrued`), never below zero, so the money streamed moves
/// from the hold into the running cost and their sum stays the worst case.
pub(crate) fn hold_released(worst: i64, accrued_before: i64, pico: i64) -> i64 {
    (worst - accrued_before).max(0).min(pico.max(0))
}

/// The dollar cap: spent, streamed, and the rest of the worst cases of the streams that run to
/// their end whatever happens (billed in full when closed, under the hard budget) reach the
/// budget. Then the streams that can be stopped are closed, so that those that cannot still
/// fit (issue #34: a last stretch that sends requests where a close stops the bill, reserving
/// only their expectation, must not let them eat the money an unstoppable stream will bill).
pub(crate) fn cap_reached(spent: i64, accrued: i64, held: i64, budget: i64) -> bool {
    spent + accrued + held >= budget
}

/// Tokens a stream the cap closes may still be billed for past what harvest has read: those in
/// transit between the provider and the socket when the close lands. Counted in events by the
/// prior (`core::close_transit::prior`), which an endpoint's pace and closes replace. Measured on the demo at
/// five times the real pace: about 26 a stream (300 closed at once billed $0.017 more than
/// read, +0.87% of $2); at the real pace a fifth of that.
pub(crate) const TRANSIT_TOKENS: i64 = 32;

// The read pause lets the fastest stream pile up about this many tokens unread (runtime.rs):
// no more than half the allowance, the rest being the network's and the wake-up's own work.
const _: () = assert!(2 * crate::runtime::PILE_UP_TOKENS as i64 <= TRANSIT_TOKENS);

/// What a stream the cap would close holds against the cap while it streams, at its completion
/// price a token: its `tokens` in transit (what its endpoint's closes are billed past what was
/// read, `core::close_transit`), so that the cap trips that much early and closing every such
/// stream still ends within the budget.
pub(crate) fn transit_hold(price_out_pico_per_token: i64, tokens: f64) -> i64 {
    (tokens.max(0.0) * price_out_pico_per_token.max(0) as f64).ceil() as i64
}

/// Failures that end a stream early without an error finish reason: once tokens were sent,
/// OpenRouter bills them (zero completion insurance covers error finishes and empty answers).
pub(crate) fn cut_after_tokens(kind: crate::openrouter::ErrorKind) -> bool {
    use crate::openrouter::ErrorKind;
    matches!(kind, ErrorKind::Connection | ErrorKind::Truncated)
}
