//! The money rules of an attempt's end: what each ending books, and which streams close at
//! the dollar cap.

use super::super::attempt_money::{Ending, booked, close_at_cap, cut_after_tokens};
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
