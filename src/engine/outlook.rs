//! When the run ends and what it will have spent: the ETA the header and progress lines show,
//! whether the dollar budget ends the run first, and the projected final spend. Pure: spend,
//! rates and the streams in flight are passed in; table-tested below.
//!
//! Two regimes. While prompts are left to send, the work's ETA (the longest dataset's) races
//! the budget's at the last minute's spend rate. In the tail (every prompt sent, only streams
//! in flight left) neither says anything: the run ends as those streams end, and adds what they
//! stream still (reliability-probe-5 P17: four stalled streams at 8 tok/s read "proj 50.00 ...
//! ETA 5m06s (budget)" at $17.26 of $50, the minute before's spend rate carried forward).

use crate::domain::Usd;

/// One stream in flight in the tail: what it is expected to stream still.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Stream {
    /// Its dataset.
    pub dataset: usize,
    /// Output tokens it is expected to stream still.
    pub tokens_left: f64,
    /// What those cost, picodollars.
    pub pico_left: i64,
}

impl Stream {
    /// A stream of dataset `dataset`, whose answers are expected to be `expected` output
    /// tokens long, that has accrued `accrued_pico` at `pico_per_token`. What it has left is
    /// never below half an expected answer: an answer's length is nearly memoryless, one that
    /// is long already is not near its end (the budget's reservations reckon so too,
    /// `core/reserve.rs`).
    pub(crate) fn new(
        dataset: usize,
        expected: u64,
        accrued_pico: i64,
        pico_per_token: i64,
    ) -> Self {
        let streamed = if pico_per_token > 0 {
            accrued_pico.max(0) as f64 / pico_per_token as f64
        } else {
            0.0
        };
        let expected = expected as f64;
        let tokens_left = (expected - streamed).max(expected / 2.0);
        Stream {
            dataset,
            tokens_left,
            pico_left: (tokens_left * pico_per_token.max(0) as f64).round() as i64,
        }
    }
}

/// What the tail's streams come to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tail {
    /// Seconds until they have ended (or the budget closes them); `None` while they stream
    /// nothing (stalled: no rate to reckon by).
    pub eta_s: Option<f64>,
    /// The budget ends them first.
    pub at_budget: bool,
    /// What they are expected to add to the spend (no more than the budget leaves).
    pub adds: Usd,
}

/// `streams` stream `tok_per_s` together (the rate measured now: nothing else streams), each
/// an equal share, and end when the one with most left does; `room` is what the budget leaves
/// of the spend. They stop at the budget first when what they add would pass it.
pub(crate) fn tail(streams: &[Stream], tok_per_s: f64, room: Usd) -> Tail {
    let pico_left: i64 = streams.iter().map(|s| s.pico_left).sum();
    let tokens_left: f64 = streams.iter().map(|s| s.tokens_left).sum();
    let room = room.pico().max(0);
    let adds = Usd::from_pico(pico_left.min(room));
    let most = streams.iter().map(|s| s.tokens_left).fold(0.0, f64::max);
    let eta_s = if streams.is_empty() || most <= 0.0 {
        Some(0.0)
    } else if tok_per_s.is_finite() && tok_per_s > 0.0 {
        Some(most / (tok_per_s / streams.len() as f64))
    } else {
        None
    };
    // At the rate they spend (their mean price per token left, at the rate they stream).
    let pico_per_s = if tokens_left > 0.0 {
        pico_left as f64 / tokens_left * tok_per_s
    } else {
        0.0
    };
    let to_budget = (pico_left > room && pico_per_s > 0.0).then(|| room as f64 / pico_per_s);
    match (eta_s, to_budget) {
        (Some(e), Some(b)) if b < e => Tail {
            eta_s: Some(b),
            at_budget: true,
            adds,
        },
        (eta_s, _) => Tail {
            eta_s,
            at_budget: false,
            adds,
        },
    }
}

/// Seconds until the spend reaches `budget` at the present rate (USD a minute, spend and
/// accrual), when it is spending.
pub(crate) fn time_to_budget(budget: Usd, spent: Usd, usd_per_min: f64) -> Option<f64> {
    (usd_per_min > 0.0).then(|| (budget - spent).as_f64().max(0.0) / (usd_per_min / 60.0))
}

/// The run's ETA: the work's or the budget's, whichever comes first, and whether it is the
/// budget's (a run that will stop at its budget says when). Unknown while the work's is.
pub(crate) fn run_eta(work: Option<f64>, to_budget: Option<f64>) -> (Option<f64>, bool) {
    match (work, to_budget) {
        (Some(w), Some(b)) if b < w => (Some(b), true),
        (w, _) => (w, false),
    }
}

/// The run's ETA, whether it is the budget's, and the projected final spend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Outlook {
    pub eta_s: Option<f64>,
    pub at_budget: bool,
    pub projected: Option<Usd>,
}

/// Where a run goes that has spent and accrued `so_far` of `budget`, at `usd_per_min` over
/// the last minute, its work done in `work_eta` (the longest dataset's) while prompts are left
/// to send; in its tail ([`tail`] of what is in flight) it ends as its streams do.
pub(crate) fn outlook(
    so_far: Usd,
    budget: Usd,
    usd_per_min: f64,
    work_eta: Option<f64>,
    in_tail: Option<Tail>,
) -> Outlook {
    if let Some(t) = in_tail {
        return Outlook {
            eta_s: t.eta_s,
            at_budget: t.at_budget,
            projected: Some(so_far + t.adds),
        };
    }
    let (eta_s, at_budget) = run_eta(work_eta, time_to_budget(budget, so_far, usd_per_min));
    let projected = eta_s.map(|eta| {
        let p = so_far.as_f64() + usd_per_min / 60.0 * eta;
        Usd::from_f64(p.min(budget.as_f64()))
    });
    Outlook {
        eta_s,
        at_budget,
        projected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const USD: fn(f64) -> Usd = Usd::from_f64;

    #[test]
    fn the_eta_is_the_works_or_the_budgets_whichever_comes_first() {
        // $10 budget, $4 spent, $2 a minute: three minutes to the budget.
        let b = time_to_budget(USD(10.0), USD(4.0), 2.0);
        assert_eq!(b, Some(180.0));
        assert_eq!(
            time_to_budget(USD(10.0), USD(4.0), 0.0),
            None,
            "not spending"
        );
        assert_eq!(time_to_budget(USD(10.0), USD(10.5), 2.0), Some(0.0));
        let cases = [
            ((Some(600.0), Some(180.0)), (Some(180.0), true)),
            ((Some(120.0), Some(180.0)), (Some(120.0), false)),
            ((None, Some(180.0)), (None, false)),
            ((Some(120.0), None), (Some(120.0), false)),
            // The seed's last stretch: a trickle of work, the budget minutes away.
            ((Some(47_692_800.0), Some(240.0)), (Some(240.0), true)),
        ];
        for ((work, budget), want) in cases {
            assert_eq!(run_eta(work, budget), want, "{work:?} {budget:?}");
        }
    }

    /// $2.50 per million output tokens: 2,500,000 picodollars a token.
    const PER_TOKEN: i64 = 2_500_000;

    #[test]
    fn a_stream_has_what_its_answer_is_expected_to_stream_still_and_never_under_half() {
        // (expected tokens, tokens streamed so far, price) -> tokens left
        let cases = [
            ("fresh", 1_700, 0, PER_TOKEN, 1_700.0),
            ("a third along", 1_500, 500, PER_TOKEN, 1_000.0),
            ("past half: half an answer", 1_700, 1_200, PER_TOKEN, 850.0),
            ("past its expectation", 1_700, 5_000, PER_TOKEN, 850.0),
            ("a free model: nothing accrues", 1_700, 900, 0, 1_700.0),
        ];
        for (what, expected, streamed, price, left) in cases {
            let s = Stream::new(1, expected, streamed * price, price);
            assert_eq!(s.tokens_left, left, "{what}");
            assert_eq!(s.pico_left, (left * price as f64) as i64, "{what}");
            assert_eq!(s.dataset, 1);
        }
    }

    #[test]
    fn the_tail_ends_when_its_slowest_stream_does() {
        let s = |left: f64| Stream {
            dataset: 0,
            tokens_left: left,
            pico_left: (left * PER_TOKEN as f64) as i64,
        };
        let plenty = USD(30.0);
        // (streams, tok/s together, room) -> (eta, at budget, adds)
        let cases: [(&str, Vec<Stream>, f64, Usd, Tail); 5] = [
            (
                "four streams at 8 tok/s: 2 each, 850 tokens left",
                vec![s(850.0); 4],
                8.0,
                plenty,
                Tail {
                    eta_s: Some(425.0),
                    at_budget: false,
                    adds: USD(0.0085),
                },
            ),
            (
                "the one with most left decides",
                vec![s(100.0), s(400.0)],
                10.0,
                plenty,
                Tail {
                    eta_s: Some(80.0),
                    at_budget: false,
                    adds: USD(0.00125),
                },
            ),
            (
                "stalled: no rate, no ETA; the money is still expected",
                vec![s(850.0); 4],
                0.0,
                plenty,
                Tail {
                    eta_s: None,
                    at_budget: false,
                    adds: USD(0.0085),
                },
            ),
            (
                "the budget closes them first",
                vec![s(1_000.0); 2],
                10.0,
                USD(0.001),
                Tail {
                    eta_s: Some(40.0),
                    at_budget: true,
                    adds: USD(0.001),
                },
            ),
            (
                "nothing in flight: over",
                vec![],
                0.0,
                plenty,
                Tail {
                    eta_s: Some(0.0),
                    at_budget: false,
                    adds: Usd::ZERO,
                },
            ),
        ];
        for (what, streams, rate, room, want) in cases {
            assert_eq!(tail(&streams, rate, room), want, "{what}");
        }
    }

    /// The probe's tail (reliability-probe-5 P17): $17.26 of $50 spent, the last minute's
    /// $6.42 a minute (the run at full speed) putting the budget 5m06s away, a work ETA of
    /// hours from the trickle; but every prompt is sent and four streams are left at 8 tok/s.
    #[test]
    fn in_the_tail_the_run_ends_as_its_streams_do_and_spends_what_they_add() {
        let so_far = USD(17.26);
        let budget = USD(50.0);
        let per_min = 6.42;
        let work = Some(10_000.0);
        let before = outlook(so_far, budget, per_min, work, None);
        assert_eq!(
            (before.eta_s.map(|e| e.round()), before.at_budget),
            (Some(306.0), true),
            "prompts left to send: the budget's ETA, as before"
        );
        assert_eq!(before.projected, Some(budget));
        let streams = [Stream::new(0, 1_700, 1_200 * PER_TOKEN, PER_TOKEN); 4];
        let t = tail(&streams, 8.0, budget - so_far);
        let after = outlook(so_far, budget, per_min, work, Some(t));
        assert_eq!(
            after,
            Outlook {
                eta_s: Some(425.0),
                at_budget: false,
                projected: Some(USD(17.2685)),
            }
        );
    }
}
