//! What a request in flight holds against the dollar budget, as a table; and through the core,
//! the hard budget holding requests that would be billed in full when closed to their worst
//! case, where the expected mode lets them go.

use super::*;
use crate::config::BudgetMode;
use crate::engine::core::reserve::{Exposure, reservation};

#[test]
fn what_a_request_reserves() {
    let x = |accrued| Exposure {
        expected: 100,
        worst: 1000,
        accrued,
        tail: 30,
    };
    // (mode, billed if closed, accrued, reservation)
    let cases = [
        // Billed in full when closed: the hard budget holds the worst case, less what streamed.
        (BudgetMode::Hard, true, 0, 1000),
        (BudgetMode::Hard, true, 400, 600),
        (BudgetMode::Hard, true, 1200, 0),
        // The expected mode holds the expectation, and half a mean answer past it.
        (BudgetMode::Expected, true, 0, 100),
        (BudgetMode::Expected, true, 90, 30),
        (BudgetMode::Expected, true, 400, 30),
        // Closing stops the bill: the expectation in either mode (the cap closes the stream).
        (BudgetMode::Hard, false, 0, 100),
        (BudgetMode::Hard, false, 400, 0),
        (BudgetMode::Expected, false, 60, 40),
    ];
    for (mode, billed, accrued, want) in cases {
        assert_eq!(
            reservation(mode, billed, x(accrued)),
            want,
            "{mode:?} billed {billed} accrued {accrued}"
        );
    }
}

/// Requests sent at once to Moonshot (bills a cancelled stream in full), pinned, under a budget
/// that covers 20 expected answers but only 2 worst cases.
fn sent_under(mode: &str) -> (usize, Vec<String>) {
    // $3/M out, max_tokens 8192: a worst case ~$0.0246; the prior expectation (2,048 tokens)
    // ~$0.0061. Budget $0.06.
    let cfg = config(&format!(
        "budget_usd = 0.06\nbudget_mode = \"{mode}\"\nconcurrency = 50\nrouting = \"pinned\"\n\
         [request]\nmax_tokens = 8192\n[policy]\nexclude = [\"chutes\", \"together\"]"
    ));
    let ids: Vec<String> = (0..50).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&refs]);
    let sent = h.dispatch();
    (sent.len(), h.event_texts())
}

#[test]
fn the_hard_budget_holds_requests_billed_when_closed_to_their_worst_case() {
    let (hard, events) = sent_under("hard");
    let (expected, _) = sent_under("expected");
    assert_eq!(hard, 2, "two worst cases fit in $0.06");
    assert!(
        expected >= 9,
        "the expected mode sends ~$0.06 of expectations: {expected}"
    );
    assert!(
        events.iter().any(|e| e.contains("last stretch")),
        "the last stretch is said: {events:?}"
    );
}
