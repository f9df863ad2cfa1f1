//! Whether closing a stream stops an endpoint's bill, learned from the bill. Each stream
//! harvest closes (the dollar cap, a stall, a stop-now) is looked up at `/generation`, which
//! says how many completion tokens were billed against the tokens harvest received. An
//! endpoint seen to bill past a close is taken to bill a cancel in full at once (a stream
//! there may cost its worst case); one seen to stop the bill earns that trust only after
//! [`STOPS_NEEDED`] closes, and keeps it only while closes billed past stay rare. Until then
//! the documented list (or the config's `cancel_stops_billing`) stands.

use std::sync::Arc;

use super::close_read::{Close, Wire, read_close};
use super::wire_rate;
use super::{Clock, Core, Effect, reserve};

/// Closes seen to stop the bill before an endpoint is trusted to stop it.
pub(crate) const STOPS_NEEDED: u32 = 3;

/// Under the hard budget: closes seen to stop the bill before a documented endpoint is trusted
/// to (see [`Evidence::believed`]).
pub(crate) const STOPS_NEEDED_HARD: u32 = 5;

/// What the closed streams of one endpoint showed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Evidence {
    /// What the run started with (the documented list or the config).
    pub documented: bool,
    /// Closes billed about as far as harvest received.
    pub stopped: u32,
    /// Closes billed well past what harvest received.
    pub billed_past: u32,
    /// The documented word is taken until closes say otherwise, and closes may show a stop
    /// nothing documented. Not under the hard budget (`false`): there closes seen to stop the
    /// bill must prove the documented word ([`super::cancel_check`]), and never show a stop
    /// where nothing documented one: a close near an answer's natural end reads as stopped
    /// whatever the endpoint does (the seeded simulation's seed 232 trusted a provider that
    /// bills closes on three such and passed the budget by 4%).
    pub trust_documented: bool,
    /// Closes that said nothing clear while the endpoint's tokens an event were not yet
    /// learned (events received, tokens billed): read again once they are. The hard budget's
    /// checks go out as its last stretch begins, often before any stream there has completed,
    /// and at several tokens an event the prior's range reads them all unclear.
    pub unread: Vec<(u64, u64)>,
    /// The latest closes that said nothing clear by the learned rate (events received,
    /// tokens billed): one by one a late notice and a short natural answer look alike, but a
    /// run of them tells them apart ([`unclear_closes_stopped`](super::late_stop::unclear_closes_stopped)).
    pub unclear: Vec<(u64, u64)>,
}

impl Evidence {
    pub(crate) fn new(documented: bool) -> Evidence {
        Evidence {
            documented,
            stopped: 0,
            billed_past: 0,
            trust_documented: true,
            unread: Vec::new(),
            unclear: Vec::new(),
        }
    }

    /// One closed stream: `received` stream events reached harvest, each carrying tokens in
    /// `per_event` (`learned`, or the prior's), and `billed` tokens were billed. A close that
    /// says neither is left out; under the prior it is kept to be read again. Returns how it
    /// read.
    pub(crate) fn add(
        &mut self,
        received: u64,
        billed: u64,
        wire: impl Into<Wire>,
        learned: bool,
    ) -> Close {
        let close = read_close(received, billed, wire);
        match close {
            Close::BilledPast => self.billed_past += 1,
            Close::Stopped => self.stopped += 1,
            Close::Unclear if !learned => self.unread.push((received, billed)),
            Close::Unclear => {
                if self.unclear.len() == KEPT_UNCLEAR {
                    self.unclear.remove(0);
                }
                self.unclear.push((received, billed));
            }
        }
        close
    }

    /// The closes kept unread, read by the endpoint's rate now learned; returns those that
    /// read stopped (events received, tokens billed).
    pub(crate) fn reread(&mut self, wire: impl Into<Wire>) -> Vec<(u64, u64)> {
        let wire = wire.into();
        let unread = std::mem::take(&mut self.unread);
        (unread.into_iter())
            .filter(|&(received, billed)| self.add(received, billed, wire, true) == Close::Stopped)
            .collect()
    }

    /// Whether closing a stream there stops its bill, as far as the run can tell. Under the
    /// hard budget (`!trust_documented`) one close billed past is enough to doubt it for good
    /// (an endpoint that stops the bill cannot bill hundreds of tokens past a close), and it
    /// takes [`STOPS_NEEDED_HARD`] closes to trust it: a close near an answer's natural end
    /// reads as stopped whatever the endpoint does (seed 5 of the simulation, with short
    /// answers, read three such in a row and passed the budget by 8%).
    pub(crate) fn believed(&self) -> bool {
        if !self.trust_documented {
            return self.billed_past == 0 && self.documented && self.stopped >= STOPS_NEEDED_HARD;
        }
        if self.billed_past > 0 && self.billed_past * 4 >= self.stopped {
            false
        } else {
            self.stopped >= STOPS_NEEDED || self.documented
        }
    }

    /// Whether the hard budget trusts the endpoint's closes on their own evidence (not on the
    /// documents' word).
    pub(crate) fn trusted_on_evidence(&self) -> bool {
        !self.trust_documented && self.believed()
    }

    /// Closes seen to stop the bill before it is trusted to stop it.
    pub(crate) fn stops_needed(&self) -> u32 {
        if self.trust_documented {
            STOPS_NEEDED
        } else {
            STOPS_NEEDED_HARD
        }
    }
}

/// Closes read unclear kept per endpoint for
/// [`unclear_closes_stopped`](super::late_stop::unclear_closes_stopped).
const KEPT_UNCLEAR: usize = 16;

impl Core {
    /// A stream harvest closed was found at `/generation`: `billed` completion tokens where it
    /// received `received`, at endpoint `tag`. A changed belief goes to the workers' pool and
    /// the event log; returns what the close's bill said (`None`: not an endpoint of the run).
    /// (`check`: the close was a check's, whose reading may suspend or restore the trust its
    /// endpoint's earlier checks earned, `cancel_check::Checks::suspended`.)
    pub(super) fn learn_cancel_billing(
        &mut self,
        tag: &str,
        (received, billed): (u64, u64),
        check: bool,
        now: &Clock,
    ) -> Option<Close> {
        let i = self.fleet.endpoints().iter().position(|e| e.tag == tag)?;
        let was = self.fleet.endpoint(i).cancel_stops_billing;
        let rate = self.fleet.wire(tag);
        let learned = rate.is_some_and(wire_rate::TokensPerEvent::learned);
        let per_event = rate.map_or(wire_rate::PRIOR, wire_rate::TokensPerEvent::range);
        let estimate = rate.and_then(wire_rate::TokensPerEvent::estimate);
        let trusted = self
            .fleet
            .cancel(tag)
            .is_some_and(Evidence::trusted_on_evidence);
        let wire = Wire::of(per_event, estimate, self.fleet.transit(tag), trusted);
        let ev = self.fleet.cancel_or(tag.to_string(), Evidence::new(was));
        let mut close = ev.add(received, billed, wire, learned);
        if close == Close::Stopped
            && let Some(k) = estimate
        {
            self.learn_transit(i, &[(received, billed)], k);
        }
        let read_together = close == Close::Unclear
            && estimate.is_some_and(|k| self.unclear_closes_read_together(i, k, now));
        if read_together {
            close = Close::Stopped;
        }
        // Checks among the closes read together said nothing clear one by one, and that
        // suspended the endpoint's trust: read together, they lift it as a check reading
        // stopped does.
        tracing::debug!(
            endpoint = tag,
            received,
            billed,
            check,
            ?close,
            "a close read at /generation"
        );
        if check || read_together {
            self.checked(i, close, now);
        }
        self.settle_cancel_belief(i, (received, billed), now);
        Some(close)
    }

    /// What earlier runs of the output directory read of endpoints' closes within the day
    /// (`Core::with_closes_before`) joins their evidence before anything is sent: each start
    /// checked every documented stopper again from nothing, its streams holding their worst
    /// case meanwhile (issue #51 item 6). An endpoint trusted then is trusted now (the last
    /// stretch's rechecks still test it); one seen to bill past a close is doubted from the
    /// start; one short of trust is checked only for the closes it lacks.
    pub(super) fn carry_closes(&mut self, now: &Clock) {
        for (tag, seen) in self.fleet.take_closes_before() {
            let Some(i) = self.fleet.endpoints().iter().position(|e| e.tag == tag) else {
                continue;
            };
            let fresh = self.new_evidence(i);
            if let Some(d) = seen.found_within {
                let checks = self.fleet.checks_of(tag.clone());
                checks.found_within = Some(checks.found_within.map_or(d, |w| w.max(d)));
            }
            let ev = self.fleet.cancel_or(tag.clone(), fresh);
            ev.stopped += seen.stopped;
            ev.billed_past += seen.billed_past;
            let (believed, documented) = (ev.believed(), ev.documented);
            let short = ev.stops_needed().saturating_sub(ev.stopped);
            if believed != self.fleet.endpoint(i).cancel_stops_billing {
                self.set_cancel_belief(i, believed);
            }
            let then = if believed {
                "its closes are taken to stop the bill".to_string()
            } else if seen.billed_past > 0 || !documented {
                "a stream there is taken to cost its worst case".to_string()
            } else {
                format!(
                    "{short} more closes there are checked before the hard budget relies on \
                     them; until then its streams reserve their worst case"
                )
            };
            let lag = seen.found_within.map_or(String::new(), |d| {
                format!(
                    "; its checks were found at /generation within {:.1}s of their close",
                    d.as_secs_f64()
                )
            });
            let text = format!(
                "{tag}: this directory's earlier runs read {} closes that stopped the bill and \
                 {} billed past it within the day: {then}{lag}",
                seen.stopped, seen.billed_past
            );
            self.event(now, text);
        }
    }

    /// Endpoint `i`'s tokens an event are now learned: the closes that said nothing under the
    /// prior are read by them.
    pub(super) fn reread_closes(&mut self, i: usize, now: &Clock) {
        let tag = self.fleet.endpoint(i).tag.clone();
        let Some(rate) = self.fleet.wire(&tag) else {
            return;
        };
        let (per_event, estimate) = (rate.range(), rate.estimate());
        let trusted = self
            .fleet
            .cancel(&tag)
            .is_some_and(Evidence::trusted_on_evidence);
        let wire = Wire::of(per_event, estimate, self.fleet.transit(&tag), trusted);
        let Some(ev) = self.fleet.cancel_mut(&tag) else {
            return;
        };
        let Some(&last) = ev.unread.last() else {
            return;
        };
        let stopped = ev.reread(wire);
        if let Some(k) = estimate {
            self.learn_transit(i, &stopped, k);
        }
        self.keep_readings(
            i,
            stopped.len(),
            "read again by its tokens an event, learned since",
            now,
        );
        self.settle_cancel_belief(i, last, now);
    }

    /// Closes at endpoint `i` that stopped the bill (events received, tokens billed), its
    /// events carrying `per_event` tokens: how far past what was received each billed is what
    /// the cap's closes there may be billed past (`close_transit`).
    pub(super) fn learn_transit(&mut self, i: usize, stopped: &[(u64, u64)], per_event: f64) {
        if stopped.is_empty() {
            return;
        }
        let tag = self.fleet.endpoint(i).tag.clone();
        let transit = self.fleet.transit_of(tag);
        for &(received, billed) in stopped {
            transit.add_close(billed as f64 - received as f64 * per_event);
        }
        self.publish_wire(i);
    }

    /// What endpoint `i`'s closes now say, if it changed the run's belief: the workers' pool
    /// and the event log hear it (`last`: the latest close, events received and tokens billed).
    fn settle_cancel_belief(&mut self, i: usize, (received, billed): (u64, u64), now: &Clock) {
        let tag = self.fleet.endpoint(i).tag.clone();
        let was = self.fleet.endpoint(i).cancel_stops_billing;
        let Some(ev) = self.fleet.cancel(&tag) else {
            return;
        };
        // A check not found in time, or one whose bill said nothing clear, suspends the trust
        // the endpoint's earlier checks earned.
        let suspended = self.fleet.checks(&tag).is_some_and(|c| c.suspended);
        let now_believed = ev.believed() && !suspended;
        let (stopped, past) = (ev.stopped, ev.billed_past);
        if now_believed == was {
            return;
        }
        self.set_cancel_belief(i, now_believed);
        let text = if now_believed {
            format!(
                "{tag} stopped the bill at the close of {stopped} streams harvest closed: its \
                 streams may be closed at the budget and reserve their expectation"
            )
        } else if past == 0 && suspended {
            format!(
                "a check of {tag}'s close said nothing clear ({billed} tokens billed, {received} \
                 events received): a close there may now be billed in full; its streams reserve \
                 their worst case until a check reads stopped again"
            )
        } else {
            format!(
                "{tag} billed past the close of {past} of {} streams harvest closed (the last: \
                 {billed} tokens billed, {received} received): a stream there is taken to cost \
                 its worst case",
                stopped + past
            )
        };
        self.event(now, text);
    }
}

impl Core {
    /// The run now takes a close at endpoint `i` to stop its bill (`stops`) or not: the
    /// workers' pool hears it, and where it does not, the streams in flight there reserve their
    /// worst case.
    pub(super) fn set_cancel_belief(&mut self, i: usize, stops: bool) {
        let mut pool = self.fleet.endpoints().as_ref().clone();
        pool[i].cancel_stops_billing = stops;
        self.effects.push(Effect::Repriced {
            index: i,
            endpoint: Box::new(pool[i].clone()),
        });
        self.fleet.set_endpoints(Arc::new(pool));
        if !stops {
            self.reserve_worst_at(i);
        }
    }

    /// Endpoint `i` bills a closed stream in full after all: the streams in flight that may be
    /// served there reserve their worst case from now on (the whole of it until the next
    /// recount deducts what they accrued), so nothing more is sent until it fits beside them.
    /// The dollar cap does not hold them: closing them would not stop their bills, and holding
    /// worst cases the budget never had room for would end the run at once.
    fn reserve_worst_at(&mut self, i: usize) {
        if !reserve::reserves_worst_case(self.cfg.budget_mode, true) {
            return;
        }
        for f in self.in_flight.values_mut() {
            let there = f.endpoint == Some(i) || (f.endpoint.is_none() && f.over.contains(&i));
            if f.billed_if_closed || !there {
                continue;
            }
            f.billed_if_closed = true;
            self.budget.reserve_more(f.worst_pico - f.reserved_pico);
            f.reserved_pico = f.worst_pico;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::core::wire_rate::Range;

    /// The hard budget's checks go out as its last stretch begins, often before a stream at
    /// the endpoint has completed: at several tokens an event the prior's range reads their
    /// closes unclear. They are kept, and read again once the endpoint's rate is learned
    /// (seed-shape at a drawn 4.2 tokens an event: ten checks read unclear and the run never
    /// sent a request where a close stops the bill).
    #[test]
    fn closes_read_unclear_under_the_prior_are_read_again_once_the_rate_is_learned() {
        let learned = Range { lo: 2.1, hi: 4.2 };
        let mut ev = Evidence::new(true);
        ev.trust_documented = false;
        for _ in 0..5 {
            ev.add(64, 180, wire_rate::PRIOR, false);
        }
        assert!(!ev.believed());
        assert_eq!(ev.unread.len(), 5);
        ev.reread(learned);
        assert!(ev.believed(), "five stops once read by the learned rate");
        assert!(ev.unread.is_empty());
        // A close billed past stays billed past when read again, and doubts it for good.
        let mut ev = Evidence::new(true);
        ev.trust_documented = false;
        for _ in 0..5 {
            ev.add(64, 180, wire_rate::PRIOR, false);
        }
        ev.add(64, 1_000, wire_rate::PRIOR, false);
        ev.reread(learned);
        assert_eq!((ev.stopped, ev.billed_past), (5, 1));
        assert!(!ev.believed());
        // Read under a learned rate, an unclear close is not kept.
        let mut ev = Evidence::new(true);
        ev.add(64, 300, learned, true);
        assert!(ev.unread.is_empty());
    }

    #[test]
    fn billing_past_a_close_is_believed_at_once_stopping_it_after_three() {
        // (documented, closes as (received, billed), believed after each)
        type Case<'a> = (bool, &'a [(u64, u64)], &'a [bool]);
        let cases: [Case; 4] = [
            // Documented to stop, seen to bill: at once.
            (true, &[(100, 1_900)], &[false]),
            // Documented to bill, seen to stop three times.
            (
                false,
                &[(100, 110), (50, 60), (10, 10)],
                &[false, false, true],
            ),
            // Trusted, then one bill past in five closes: no longer.
            (
                false,
                &[(100, 100), (100, 100), (100, 100), (100, 100), (100, 1_900)],
                &[false, false, true, true, false],
            ),
            // One bill past among many stops: still trusted; an unclear close counts for nothing.
            (
                true,
                &[(1, 1), (1, 1), (1, 1), (1, 1), (1, 1), (10, 700), (10, 100)],
                &[true, true, true, true, true, true, true],
            ),
        ];
        for (documented, closes, want) in cases {
            let mut ev = Evidence::new(documented);
            let got: Vec<bool> = closes
                .iter()
                .map(|&(r, b)| {
                    ev.add(r, b, wire_rate::PRIOR, false);
                    ev.believed()
                })
                .collect();
            assert_eq!(got, want, "{documented} {closes:?}");
        }
    }
}
