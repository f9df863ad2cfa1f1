//! What a closed stream is expected to cost once `/generation` has gone on not knowing it: the
//! expectation its close wrote, reckoned again from how long it has been unknown (issue #51
//! item 3).
//!
//! At an endpoint that bills a close in full the provider decodes on to the answer's end, and
//! the API records the generation only when it ends (OpenRouter's `GET /generation` answers 404
//! until then; `harvest sim` does the same), so a close still unknown `t` after it was made has
//! run on for at least `t` less the API's lag, at the endpoint's pace. The end of a run asks
//! about its last closes for a few seconds: those it finds are the ones that ended soon after
//! their close, and those it leaves to `status` are the long ones. Their expectations as
//! written at the close (the life table's rest past what was received) put `status`'s open
//! amount after a drain at 0.70 of what the API then billed; conditioned on having run on,
//! the rest is the life table's past that longer length.

use std::time::Duration;

use crate::domain::Usd;
use crate::store::output::{SpendEntry, SpendKind};

use super::super::Core;

/// Tokens a generation billed in full has decoded past its close if `/generation` still has
/// no record of it `unknown_for` after the close: the record appears `lag` after it ends, and
/// until then it decodes at `pace` tokens a second.
pub(crate) fn decoded_while_unknown(unknown_for: Duration, lag: Duration, pace: f64) -> u64 {
    let running = unknown_for.saturating_sub(lag).as_secs_f64();
    (running * pace.max(0.0)).floor() as u64
}

impl Core {
    /// `entry`'s expected cost at `now`, reckoned again, when its look-up found nothing and
    /// that says more than its close did: a closed stream at an endpoint that bills a close in
    /// full, whose received tokens, pace and dataset are known. `None` where nothing more can
    /// be said: the close stops the bill there (an unknown close says nothing of its length),
    /// the line predates the received count, the pace is not learned, it is unknown no longer
    /// than the API's lag, or the stream would by now have reached `max_tokens`
    /// (its record's absence is then a lagging or losing API, not an answer still running:
    /// the API's own rules for those apply, [`UNKNOWN_AFTER`](crate::engine::reconcile)).
    pub(crate) fn reckon_unknown_close(
        &self,
        entry: &SpendEntry,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Usd> {
        if entry.kind != SpendKind::Cancelled {
            return None;
        }
        let received = entry.received_tokens?;
        let tag = entry.endpoint.as_deref()?;
        let at = (self.fleet.endpoints().iter()).find(|x| x.tag == tag)?;
        if at.cancel_stops_billing {
            return None;
        }
        let pace = self.fleet.transit(tag)?.pace()?;
        let d = self.admission.dataset_named(&entry.dataset)?;
        let lengths = self.admission.lengths(d);
        // The longest the run has seen `/generation` take to record a close where closing
        // stops the bill: the lag of its records (a close billed in full is recorded only
        // when its answer ends, a minute on). None seen: none assumed, which reckons the most
        // run on.
        let lag = (self.fleet.endpoints().iter())
            .filter(|x| x.cancel_stops_billing)
            .filter_map(|x| self.fleet.checks(&x.tag)?.found_within)
            .max()
            .unwrap_or_default();
        let ran_on = decoded_while_unknown(crate::engine::reconcile::age(entry, now), lag, pace);
        if ran_on == 0 {
            // Within the lag: its absence says nothing yet.
            return None;
        }
        let at_least = received + ran_on;
        if at_least >= lengths.max_tokens() {
            return None;
        }
        let running = (self.in_flight.values())
            .filter(|g| g.job.dataset == d)
            .map(|g| g.streamed_tokens);
        let rest = ran_on + lengths.rest_after(at_least, running)?;
        let closed_at = chrono::DateTime::parse_from_rfc3339(&entry.at)
            .ok()?
            .to_utc();
        let price = (at.tariff)
            .rates(entry.prompt_tokens, crate::pricing::hhmm(&closed_at))
            .completion;
        let bound = entry.worst_usd.map_or(i64::MAX, Usd::pico);
        let booked = entry.usd.pico();
        let expected = super::super::reserve::closed_expected(
            true,
            booked,
            (price.cost(rest).pico(), 0),
            bound,
        );
        // Only what says more: a life table that has learned since the close may say less of
        // the same stream, but the close's own figure stands for it then.
        let expected = Usd::from_pico(expected);
        (entry.expected_usd.is_none_or(|was| expected > was)).then_some(expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_close_unknown_past_the_lag_has_run_on_at_its_pace() {
        // (what, unknown for, lag, pace, tokens decoded past the close)
        let cases = [
            (
                "asked at once: nothing yet",
                Duration::ZERO,
                Duration::ZERO,
                40.0,
                0,
            ),
            (
                "8 s at 40 a second, no lag",
                8 * S,
                Duration::ZERO,
                40.0,
                320,
            ),
            ("8 s with a 3 s lag: 5 s of it", 8 * S, 3 * S, 40.0, 200),
            ("within the lag: nothing", 2 * S, 3 * S, 40.0, 0),
            ("a fast endpoint", 8 * S, 3 * S, 250.0, 1_250),
            (
                "a pace that cannot be: nothing",
                8 * S,
                Duration::ZERO,
                -5.0,
                0,
            ),
        ];
        for (what, unknown_for, lag, pace, want) in cases {
            assert_eq!(
                decoded_while_unknown(unknown_for, lag, pace),
                want,
                "{what}"
            );
        }
    }
}
