//! What a request in flight holds against the dollar budget (its reservation), as a pure
//! function of the budget mode, whether closing it would stop its bill, and its expected,
//! worst-case and accrued cost. Table-tested in `core/tests/reserve.rs`.
//!
//! The hard budget (`budget_mode = "hard"`, the default): at an endpoint that bills a cancelled
//! stream in full, closing the stream at the cap saves nothing, so such a request reserves its
//! worst case (prompt plus `max_tokens` at its price). Far from the cap that changes nothing
//! (the worst cases fit); near it, requests wait until what is in flight settles, and spend
//! stays under the budget but for the tokens in transit when a cancellable stream is closed.
//! `"expected"` reserves what a request is expected to cost: faster to the end, with an
//! overshoot of what streams billed anyway run past their expectation.

use crate::config::BudgetMode;

/// One request's money, in picodollars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exposure {
    /// Its expected cost: prompt, fee and the expected answer length.
    pub expected: i64,
    /// Its worst case: prompt, fee and `max_tokens`.
    pub worst: i64,
    /// What it has streamed so far, at its price (already in the live spend).
    pub accrued: i64,
    /// Half a mean answer: what a stream billed anyway keeps in reserve under the expected mode
    /// however far along it is (output lengths have a long tail).
    pub tail: i64,
}

/// What the request still holds against the budget beyond what it accrued.
pub(crate) fn reservation(mode: BudgetMode, billed_if_closed: bool, x: Exposure) -> i64 {
    match (mode, billed_if_closed) {
        (BudgetMode::Hard, true) => (x.worst - x.accrued).max(0),
        (BudgetMode::Expected, true) => (x.expected - x.accrued).max(x.tail).max(0),
        // Where the cap can close it, the hard budget still keeps a mean answer for a stream
        // running past its expectation (`2 * tail`; an answer's length is nearly memoryless:
        // one that is long already is not near its end): without it, the last stretch fills
        // the budget with expectations that the answers still in flight outrun, and the cap
        // closes them half-written (paid for, kept nowhere).
        (BudgetMode::Hard, false) => (x.expected - x.accrued)
            .max((2 * x.tail).min(x.worst - x.accrued))
            .max(0),
        (BudgetMode::Expected, false) => (x.expected - x.accrued).max(0),
    }
}

/// What an attempt an earlier run's crash left open holds against the budget until its
/// look-up says what it cost (reliability-probe-4 N1: a restart while `/generation` lags
/// reserved nothing for them and passed the budget by a third): like a live stream, its worst
/// case where a close does not stop the bill (the provider may still be generating it), under
/// the hard budget; its expectation elsewhere.
pub(crate) fn crash_hold(
    mode: BudgetMode,
    billed_if_closed: bool,
    expected: i64,
    worst: i64,
) -> i64 {
    if reserves_worst_case(mode, billed_if_closed) {
        worst.max(expected)
    } else {
        expected
    }
}

/// What a stream closed (or cut after tokens) is expected to be billed in all, before its
/// look-up says: where its endpoint bills a close in full, what it was booked at and `rest`,
/// what an answer that ran as long runs on for (its dataset's life table of answer lengths,
/// `answer_lengths`: one mean answer more put `status`'s open amount at 1.6 times what the
/// API then billed once streams were counted in tokens, not events, and the request's own
/// expectation at 2.7 times); where a close stops the bill, what it was booked at and the tokens in transit
/// (`transit`, at its price). Never below its booking, never above `bound` (the most it can be
/// billed). Written on its closed line as `expected_usd`: `status`'s open amount, a later
/// start's hold and look-up order read it (issue #51: after `harvest stop` at endpoints that
/// mostly bill a close in full, `status` said 0.0030 USD more and the API billed 0.0739 more).
pub(crate) fn closed_expected(
    billed_if_closed: bool,
    booked: i64,
    (rest, transit): (i64, i64),
    bound: i64,
) -> i64 {
    let all = if billed_if_closed {
        booked + rest
    } else {
        booked + transit
    };
    all.min(bound).max(booked)
}

/// Where a request goes in the hard budget's last stretch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StretchRoute {
    /// As routed: its reservation fits (or nothing better does, and it waits as routed).
    AsRouted,
    /// Narrowed to the endpoints where closing the stream stops the bill: there it reserves
    /// its expectation, since the dollar cap can close it.
    Stoppable,
}

/// The last stretch's rule (issue #34): the worst case is reserved only for requests that go
/// where closing does not stop the bill, and only as many as fit. In the stretch a request that
/// would reserve its worst case goes where a close stops the bill, when such an endpoint may
/// take it and its expectation there fits; otherwise it stays as routed (its worst case must
/// fit, or it waits). Outside the hard mode or the stretch nothing changes.
pub(crate) fn stretch_route(
    mode: BudgetMode,
    billed_if_closed: bool,
    in_stretch: bool,
    fits_stoppable: Option<bool>,
) -> StretchRoute {
    match (mode, billed_if_closed, in_stretch, fits_stoppable) {
        (BudgetMode::Hard, true, true, Some(true)) => StretchRoute::Stoppable,
        _ => StretchRoute::AsRouted,
    }
}

/// Whether the budget is in its last stretch for a request of worst case `worst`: it already
/// is, or the request's worst case does not fit, or a full complement of such requests
/// (`concurrency` of them) would not fit in what is left. The last is why the stretch may begin
/// at the first request: a $2 budget with 300 streams of 8,192 tokens, or a $100 budget with
/// 2,000 streams of 16,384, cannot hold every stream's worst case, and requests sent at their
/// worst case first would hold the budget for minutes (issue #34).
pub(crate) fn in_last_stretch(
    begun: bool,
    fits: bool,
    worst: i64,
    concurrency: u32,
    left: i64,
) -> bool {
    begun || !fits || worst.saturating_mul(i64::from(concurrency)) > left
}

/// Whether a request's reservation is its worst case rather than its expectation.
pub(crate) fn reserves_worst_case(mode: BudgetMode, billed_if_closed: bool) -> bool {
    mode == BudgetMode::Hard && billed_if_closed
}
