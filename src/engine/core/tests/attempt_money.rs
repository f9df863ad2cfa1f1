//! The money rules of an attempt's end: what each ending books, and which streams close at
//! the dollar cap.

use super::super::attempt_money::{Ending, booked, close_at_cap, closed_by_cap, cut_after_tokens};
use crate::openrouter::ErrorKind;

#[test]
fn what_each_ending_books() {
    let cases = [
        (Ending::Done { final_pico: 700 }, 500, 700),
        (Ending::Closed, 500, 500),
        (
            Ending::Failed {
                cut_after_tokens: true,
            },
            500,
            500,
        ),
        (
            Ending::Failed {
                cut_after_tokens: false,
            },
            500,
            0,
        ),
        (Ending::Done { final_pico: 0 }, 500, 0),
    ];
    for (ending, accrued, want) in cases {
        assert_eq!(booked(ending, accrued), want, "{ending:?}");
    }
}

#[test]
fn streams_close_at_the_cap_unless_closing_does_not_stop_the_bill() {
    assert!(close_at_cap(Some(true)));
    assert!(close_at_cap(None), "not known yet: closed");
    assert!(!close_at_cap(Some(false)), "billed anyway: runs to the end");
    // A stream reserved as one the cap closes is closed at the cap even where its endpoint is
    // doubted since: it holds no worst case, and its answer's rest was never reserved.
    assert!(closed_by_cap(Some(false), true));
    assert!(
        !closed_by_cap(Some(false), false),
        "held its worst case: paid for, kept"
    );
    assert!(closed_by_cap(Some(true), false));
}

#[test]
fn only_a_cut_after_tokens_is_billed_like_a_close() {
    let cases = [
        (ErrorKind::Connection, true),
        (ErrorKind::Truncated, true),
        (ErrorKind::Timeout, false),
        (ErrorKind::RateLimited, false),
        (ErrorKind::MidStream, false),
        (ErrorKind::Empty, false),
    ];
    for (kind, want) in cases {
        assert_eq!(cut_after_tokens(kind), want, "{kind:?}");
    }
}

/// A held worst case gives way to what streams, token by token, never below zero; the cap
/// counts spent, streamed and held alike.
#[test]
fn the_hold_gives_way_to_what_streams_and_the_cap_counts_it() {
    use super::super::attempt_money::{cap_reached, hold_released};
    // (worst, accrued before, streamed now, released)
    let cases = [
        (1000, 0, 100, 100),
        (1000, 950, 100, 50),
        (1000, 1000, 100, 0),
        (1000, 1200, 100, 0),
        (0, 0, 100, 0),
        (1000, 0, 0, 0),
    ];
    for (worst, before, pico, want) in cases {
        assert_eq!(
            hold_released(worst, before, pico),
            want,
            "{worst} {before} {pico}"
        );
    }
    // (spent, accrued, held, budget, tripped)
    let caps = [
        (400, 100, 400, 1000, false),
        (400, 100, 500, 1000, true),
        (900, 100, 0, 1000, true),
        (0, 0, 999, 1000, false),
    ];
    for (spent, accrued, held, budget, want) in caps {
        assert_eq!(cap_reached(spent, accrued, held, budget), want);
    }
    // A stream the cap closes holds its tokens in transit: 32 at its price a token.
    use super::super::attempt_money::transit_hold;
    assert_eq!(transit_hold(2_200_000, 32.0), 70_400_000);
    assert_eq!(transit_hold(2_200_000, 125.0), 275_000_000);
    assert_eq!(transit_hold(0, 32.0), 0);
    assert_eq!(transit_hold(2_200_000, -1.0), 0);
}
