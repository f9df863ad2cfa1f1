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
        (_, false) => (x.expected - x.accrued).max(0),
    }
}

/// Whether a request's reservation is its worst case rather than its expectation.
pub(crate) fn reserves_worst_case(mode: BudgetMode, billed_if_closed: bool) -> bool {
    mode == BudgetMode::Hard && billed_if_closed
}
