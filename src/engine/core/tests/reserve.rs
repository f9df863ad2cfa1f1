//! What a request in flight holds against the dollar budget, as a table; and through the core,
//! the hard budget holding requests that would be billed in full when closed to their worst
//! case, where the expected mode lets them go.

use super::*;
use crate::config::BudgetMode;
use crate::engine::core::reserve::{Exposure, closed_expected, reservation};

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
        // Closing stops the bill: the expectation (the cap closes the stream); the hard
        // budget keeps a mean answer (twice `tail`) for a stream past it, never more than its
        // worst case leaves, so that the answers still in flight do not trip the cap.
        (BudgetMode::Hard, false, 0, 100),
        (BudgetMode::Hard, false, 400, 60),
        (BudgetMode::Hard, false, 990, 10),
        (BudgetMode::Hard, false, 1200, 0),
        (BudgetMode::Expected, false, 60, 40),
        (BudgetMode::Expected, false, 400, 0),
    ];
    for (mode, billed, accrued, want) in cases {
        assert_eq!(
            reservation(mode, billed, x(accrued)),
            want,
            "{mode:?} billed {billed} accrued {accrued}"
        );
    }
}

#[test]
fn what_a_closed_stream_is_expected_to_be_billed() {
    // (what, billed if closed, booked, the rest of such an answer, transit, expected in all)
    #[rustfmt::skip]
    let cases = [
        ("billed in full, closed early: the rest of the answer", true, 10, 60, 5, 70),
        ("billed in full, closed late: the rest of the answer", true, 400, 60, 5, 460),
        ("billed in full, far past: never above the bound", true, 980, 60, 5, 1000),
        ("the close stops the bill: the tokens in transit", false, 10, 60, 5, 15),
        ("the close stops the bill, near the bound", false, 998, 60, 5, 1000),
        ("booked above the bound (an old price): never below the booking", false, 1200, 60, 5, 1200),
        ("billed in full, booked above the bound: the booking", true, 1200, 60, 5, 1200),
    ];
    for (what, billed, booked, rest, transit, want) in cases {
        assert_eq!(
            closed_expected(billed, booked, (rest, transit), 1000),
            want,
            "{what}"
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

#[test]
fn the_last_stretch_sends_a_worst_case_that_does_not_fit_where_a_close_stops_the_bill() {
    use crate::engine::core::reserve::{StretchRoute, stretch_route};
    use StretchRoute::{AsRouted, Stoppable};
    // (mode, billed if closed, in the stretch, fits where a close stops the bill, choice)
    let cases = [
        // Before the stretch nothing changes, in either mode.
        (BudgetMode::Hard, true, false, Some(true), AsRouted),
        (BudgetMode::Expected, true, false, None, AsRouted),
        // In the stretch: a stoppable endpoint whose expectation fits takes it.
        (BudgetMode::Hard, true, true, Some(true), Stoppable),
        // No stoppable endpoint may take it, or its expectation does not fit there: as
        // routed, its worst case (it fits, or it waits).
        (BudgetMode::Hard, true, true, None, AsRouted),
        (BudgetMode::Hard, true, true, Some(false), AsRouted),
        // Already stoppable as routed (it reserves its expectation): nothing to narrow.
        (BudgetMode::Hard, false, true, Some(true), AsRouted),
        // The expected mode reserves expectations everywhere: nothing to narrow.
        (BudgetMode::Expected, true, true, Some(true), AsRouted),
    ];
    for (mode, billed, stretch, stoppable, want) in cases {
        assert_eq!(
            stretch_route(mode, billed, stretch, stoppable),
            want,
            "{mode:?} billed {billed} stretch {stretch} stoppable {stoppable:?}"
        );
    }
}

#[test]
fn the_last_stretch_begins_when_the_streams_worst_cases_cannot_all_fit() {
    use crate::engine::core::reserve::in_last_stretch;
    // (begun, fits, worst, concurrency, left, in the stretch)
    let cases = [
        // The demo: $2 left, 300 streams of ~$0.0246 worst: from the first request.
        (false, true, 24_600_000_000, 300, 2_000_000_000_000, true),
        // The seed's run: $100 left, 2,000 streams of ~$0.045: not yet ($90 fits) ...
        (
            false,
            true,
            45_000_000_000,
            2_000,
            100_000_000_000_000,
            false,
        ),
        // ... but once $89 is left.
        (false, true, 45_000_000_000, 2_000, 89_000_000_000_000, true),
        // Its worst case does not fit: in the stretch.
        (false, false, 45_000_000_000, 1, 100_000_000_000_000, true),
        // Once begun, it stays.
        (true, true, 1, 1, 100_000_000_000_000, true),
    ];
    for (begun, fits, worst, conc, left, want) in cases {
        assert_eq!(
            in_last_stretch(begun, fits, worst, conc, left),
            want,
            "{begun} {fits} {worst} {conc} {left}"
        );
    }
}

/// OpenRouter routing over Chutes (a close stops the bill) and Moonshot (billed in full), a
/// budget with room for two worst cases of fifty streams: the stretch begins at once, and the
/// hard budget sends the requests to Chutes alone at their expectation, where before it sent
/// two at their worst case and waited.
#[test]
fn in_the_last_stretch_requests_go_where_a_close_stops_the_bill() {
    let cfg = config(
        "budget_usd = 0.06\nbudget_mode = \"hard\"\nconcurrency = 50\n\
         [request]\nmax_tokens = 8192\n[policy]\nexclude = [\"together\"]",
    );
    let ids: Vec<String> = (0..50).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&refs]);
    let sent = h.dispatch();
    let only = |d: &Dispatch| {
        d.request
            .provider
            .as_ref()
            .and_then(|p| p.only.clone())
            .unwrap_or_default()
    };
    let held: Vec<&Dispatch> = sent.iter().filter(|d| d.held_worst > Usd::ZERO).collect();
    let narrowed: Vec<&Dispatch> = sent.iter().filter(|d| d.held_worst == Usd::ZERO).collect();
    // Fifty worst cases (~$0.0246 each, at the set's dearest price) cannot fit in $0.06: no
    // request holds one; $0.06 holds 14 expectations at Chutes (~$0.0041 each).
    assert_eq!(held.len(), 0, "no worst case held");
    assert_eq!(
        narrowed.len(),
        14,
        "expectations where a close stops the bill"
    );
    for d in &narrowed {
        assert_eq!(
            only(d),
            ["chutes/int4"],
            "a close stops the bill there alone"
        );
    }
    assert_eq!(h.core.stretch_shares(), (narrowed.len() as u64, 0));
    assert!(
        h.event_texts().iter().any(|e| e.contains("last stretch")),
        "{:?}",
        h.event_texts()
    );
    // The reservation: the held worst cases and the narrowed expectations fit the budget.
    assert!(h.core.reserved_pico() <= Usd::from_f64(0.06).pico());
}
