//! How far past a close an endpoint bills, learned from the bill: the tokens in transit when
//! harvest closes a stream (unread in the socket, on the network, and decoded by the provider
//! before it notices the close). The dollar cap holds them against the budget for every stream
//! it would close ([`super::attempt_money::transit_hold`]), so they must be what the endpoint
//! does, not a constant: at 500 tokens a second a provider that notices a close 200 ms late
//! bills 100 tokens past it, three times the 32 once assumed for every endpoint.
//!
//! Two figures per endpoint, each from the run's own streams:
//! - its decode pace, from completed streams (tokens after the first, over the time after the
//!   first): until closes are looked up, the allowance is the prior's events or
//!   [`PRIOR_NOTICE_S`] of decoding at that pace, whichever is more;
//! - what closes that stopped the bill were billed past what harvest received
//!   ([`super::cancel_billing`] reads each looked-up close): once [`CLOSES_NEEDED`] are seen, the
//!   allowance is the most of the recent ones, with a margin.

use std::collections::VecDeque;
use std::time::Duration;

use super::attempt_money::TRANSIT_TOKENS;

/// Before closes at an endpoint are looked up: how long a provider is taken to go on decoding
/// after a close (harvest's read pause, the network both ways, the provider noticing). Not
/// documented anywhere; a prior the endpoint's own closes replace.
pub(crate) const PRIOR_NOTICE_S: f64 = 0.5;

/// Closes seen to stop the bill before what they were billed past replaces the prior.
pub(crate) const CLOSES_NEEDED: usize = 3;

/// The recent closes kept (a provider's load changes how fast it notices).
const KEPT_CLOSES: usize = 16;

/// The recent completed streams a pace is taken from.
const KEPT_PACES: usize = 16;

/// Completed streams it takes to know a pace.
const PACES_NEEDED: usize = 4;

/// Above the most the recent closes were billed past: the next one may land later still.
const MARGIN: f64 = 1.25;

/// Never below what the read pause alone lets the fastest stream pile up, twice over
/// (`runtime::PILE_UP_TOKENS`): an endpoint whose checks landed on a quiet moment must not
/// leave the cap's closes, all at once on a busy thread, without room.
const FLOOR_TOKENS: f64 = 2.0 * crate::runtime::PILE_UP_TOKENS as f64;

/// The recent completed streams' lengths kept: how a natural answer there varies.
const KEPT_LENGTHS: usize = 32;

/// Answers longer than a close's received tokens it takes to say how a natural rest varies.
const LENGTHS_NEEDED: usize = 8;

/// What one endpoint's streams and closes showed.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Transit {
    /// Decode paces of recent completed streams, in tokens a second.
    paces: VecDeque<f64>,
    /// Tokens recent closes that stopped the bill were billed past what was received.
    past: VecDeque<f64>,
    /// Tokens of recent completed streams (their natural lengths).
    lengths: VecDeque<f64>,
}

impl Transit {
    /// A completed stream: `tokens` streamed, `decode` from its first token to its last.
    pub(crate) fn add_stream(&mut self, tokens: u64, decode: Duration) {
        if tokens > 0 {
            if self.lengths.len() == KEPT_LENGTHS {
                self.lengths.pop_front();
            }
            self.lengths.push_back(tokens as f64);
        }
        let secs = decode.as_secs_f64();
        if tokens < 16 || secs <= 0.0 {
            // Too short, or delivered at once (a buffered answer): no pace to learn.
            return;
        }
        if self.paces.len() == KEPT_PACES {
            self.paces.pop_front();
        }
        self.paces.push_back(tokens as f64 / secs);
    }

    /// A close that stopped the bill, billed `past` tokens beyond what was received.
    pub(crate) fn add_close(&mut self, past: f64) {
        if self.past.len() == KEPT_CLOSES {
            self.past.pop_front();
        }
        self.past.push_back(past.max(0.0));
    }

    /// The endpoint's decode pace (the recent streams' median), once known.
    pub(crate) fn pace(&self) -> Option<f64> {
        if self.paces.len() < PACES_NEEDED {
            return None;
        }
        let mut v: Vec<f64> = self.paces.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }

    /// Whether closes have replaced the prior.
    pub(crate) fn learned(&self) -> bool {
        self.past.len() >= CLOSES_NEEDED
    }

    /// How far past what was received the closes seen to stop the bill here may be billed,
    /// once they are enough to say ([`Transit::allowance`]).
    pub(crate) fn learned_past(&self) -> Option<f64> {
        self.learned().then(|| self.allowance(1.0))
    }

    /// How much the rest of a natural answer varies past `received` tokens (the coefficient
    /// of variation of `length - received` over the recent answers longer than that): what a
    /// close billed in full would be billed past what was received varies as much.
    pub(crate) fn natural_rest_spread(&self, received: f64) -> Option<f64> {
        let rests: Vec<f64> = (self.lengths.iter())
            .filter(|&&l| l > received)
            .map(|l| l - received)
            .collect();
        (rests.len() >= LENGTHS_NEEDED).then(|| spread(&rests))
    }

    /// Tokens a stream there may be billed past what harvest read when the cap closes it, its
    /// events carrying `per_event` tokens.
    pub(crate) fn allowance(&self, per_event: f64) -> f64 {
        if self.learned() {
            let most = self.past.iter().copied().fold(0.0, f64::max);
            return (most * MARGIN).max(FLOOR_TOKENS);
        }
        prior(per_event, self.pace())
    }
}

/// The coefficient of variation of `v` (its standard deviation over its mean; 0 for an empty
/// or all-zero `v`).
pub(crate) fn spread(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n.max(1.0);
    if mean <= 0.0 {
        return 0.0;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.max(1.0);
    var.sqrt() / mean
}

/// The allowance before any close is looked up: [`TRANSIT_TOKENS`] events (the pile-up between
/// two reads, counted as harvest reads them), or [`PRIOR_NOTICE_S`] of decoding at the
/// endpoint's `pace` where it is known and fast enough to decode more meanwhile.
pub(crate) fn prior(per_event: f64, pace: Option<f64>) -> f64 {
    let events = TRANSIT_TOKENS as f64 * per_event.max(1.0);
    events.max(pace.unwrap_or(0.0) * PRIOR_NOTICE_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// (what, completed streams (tokens, decode time), closes' tokens past, tokens an event,
    /// allowance)
    type Case<'a> = (&'a str, &'a [(u64, Duration)], &'a [f64], f64, f64);

    #[test]
    fn the_allowance_follows_the_pace_then_the_closes() {
        #[rustfmt::skip]
        let cases: [Case<'_>; 8] = [
            // (what, completed streams (tokens, decode time), closes' tokens past, tokens an
            //  event, allowance)
            ("nothing known: 32 events", &[], &[], 1.0, 32.0),
            ("nothing known, eight an event", &[], &[], 8.0, 256.0),
            ("a slow endpoint: the events' prior", &[(500, 10 * S); 4], &[], 1.0, 32.0),
            ("500 a second: half a second's decoding", &[(5_000, 10 * S); 4], &[], 1.0, 250.0),
            ("three streams say no pace yet", &[(5_000, 10 * S); 3], &[], 1.0, 32.0),
            ("closes learned: the most, a quarter above", &[(5_000, 10 * S); 4], &[80.0, 100.0, 60.0], 1.0, 125.0),
            ("closes that billed nothing past: the floor", &[], &[0.0, 2.0, 1.0], 8.0, 24.0),
            ("two closes are not enough", &[], &[100.0, 100.0], 1.0, 32.0),
        ];
        for (what, streams, closes, per_event, want) in cases {
            let mut t = Transit::default();
            for &(tokens, decode) in streams {
                t.add_stream(tokens, decode);
            }
            for &past in closes {
                t.add_close(past);
            }
            let got = t.allowance(per_event);
            assert!((got - want).abs() < 1e-9, "{what}: {got} != {want}");
        }
    }

    #[test]
    fn the_rest_of_a_natural_answer_varies_as_the_answers_past_a_close_do() {
        let mut t = Transit::default();
        (0..LENGTHS_NEEDED - 1).for_each(|i| t.add_stream(100 + 100 * i as u64, S));
        assert_eq!(t.natural_rest_spread(0.0), None, "too few answers");
        t.add_stream(900, S);
        // The answers (100 to 700, and 900) less the 50 received.
        let mut rests: Vec<f64> = (1..=7).map(|k| 100.0 * k as f64 - 50.0).collect();
        rests.push(850.0);
        assert_eq!(t.natural_rest_spread(50.0), Some(spread(&rests)));
        assert_eq!(
            t.natural_rest_spread(150.0),
            None,
            "only longer answers count"
        );
        assert_eq!(spread(&[5.0; 4]), 0.0);
        assert!((spread(&[1.0, 3.0]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn streams_that_say_nothing_of_a_pace_are_left_out() {
        let mut t = Transit::default();
        (0..PACES_NEEDED).for_each(|_| t.add_stream(10, S));
        (0..PACES_NEEDED).for_each(|_| t.add_stream(1_000, Duration::ZERO));
        assert_eq!(t.pace(), None);
        // The oldest go: a provider that slows down is followed.
        (0..KEPT_PACES).for_each(|_| t.add_stream(1_000, S));
        (0..KEPT_PACES).for_each(|_| t.add_stream(100, S));
        assert_eq!(t.pace(), Some(100.0));
        // So are its closes: the old slow ones leave the window.
        (0..KEPT_CLOSES).for_each(|_| t.add_close(400.0));
        (0..KEPT_CLOSES).for_each(|_| t.add_close(40.0));
        assert!((t.allowance(1.0) - 50.0).abs() < 1e-9);
    }
}
