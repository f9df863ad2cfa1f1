//! Money held for bills not known yet: a crash's open attempts and the streams an earlier run
//! closed, each held at the start until its look-up lands; a stream this run closes, held where
//! its close may be billed in full; what a lost attempt is booked at; and each hold released
//! once its bill is known. The figures are [`Budget`](super::budget::Budget)'s; these are the
//! core's rules for them.

use crate::config::BudgetMode;
use crate::domain::Usd;
use crate::store::output::SpendKind;

use super::Core;

impl Core {
    /// A bill not known yet is settled (found, or booked at its expectation): its hold goes.
    pub(super) fn release_open_bill(&mut self, e: &crate::store::output::SpendEntry) {
        if let Some(hold) = self.budget.release_open_bill(e) {
            self.effects.push(super::Effect::Hold(-hold));
        }
    }

    /// Spent + accrued + what in-flight requests reserve + the holds of bills not known yet,
    /// A crash's open attempts, and the streams an earlier run closed that no look-up has
    /// confirmed, before their look-ups: each holds its money ([`super::reserve::crash_hold`])
    /// until its look-up lands; the cap holds it too. A closed stream holds only where closing
    /// did not stop its bill (the provider may have gone on), less what it was booked at.
    pub(super) fn hold_crash(&mut self, open: Vec<crate::store::output::SpendEntry>) {
        let mut added = 0;
        for e in open {
            let Some(g) = e.generation_id.clone() else {
                continue;
            };
            let hold = match e.kind {
                SpendKind::Cancelled if !self.open_terms(&e).2 => continue,
                SpendKind::Cancelled => (self.crash_hold_of(&e) - e.usd.pico()).max(0),
                _ => self.crash_hold_of(&e),
            };
            let likely = crate::engine::reconcile::open_part(&e).pico();
            if self.budget.hold_open_bill(g, hold, likely) {
                added += hold;
            }
        }
        self.effects.push(super::Effect::Hold(added));
    }

    /// What one open attempt holds: by its dataset's `max_tokens` and its endpoint's prices
    /// and billing (the dearest allowed, billed when closed, when OpenRouter chose).
    fn crash_hold_of(&self, e: &crate::store::output::SpendEntry) -> i64 {
        let max_tokens = (self.admission.datasets().iter())
            .find(|d| d.name == e.dataset)
            .map_or(0, |d| u64::from(d.params.max_tokens));
        let (price_in, price_out, billed) = self.open_terms(e);
        let worst = (price_in.cost(e.prompt_tokens) + price_out.cost(max_tokens)).pico();
        let expected = e.expected_usd.map_or(worst, |u| u.pico());
        super::reserve::crash_hold(self.cfg.budget_mode, billed, expected, worst)
    }

    /// What an attempt costs that the API still does not know after
    /// [`UNKNOWN_AFTER`](crate::engine::reconcile::UNKNOWN_AFTER): what it held until then.
    /// Under the hard budget, where a close did not stop its bill, that is its worst case: a
    /// crash's leftovers are the long answers (the short ones finished first), and one the
    /// provider went on generating is billed in full (reliability-probe-5 P2: 14 such
    /// booked at their expectation, $0.0328, were billed $0.110, +6.8% past the budget). A
    /// stream a run closed keeps its booking, or that worst case where the close was billed.
    pub(crate) fn lost_cost(&self, e: &crate::store::output::SpendEntry) -> Usd {
        let hold = Usd::from_pico(self.crash_hold_of(e));
        match e.kind {
            SpendKind::Cancelled
                if self.open_terms(e).2 && self.cfg.budget_mode == BudgetMode::Hard =>
            {
                hold.max(e.usd)
            }
            SpendKind::Cancelled => e.usd,
            _ => hold,
        }
    }

    /// Whether an attempt a crash left open was likely billed past the crash (its endpoint,
    /// or one OpenRouter could have chosen, bills a closed stream in full): its look-up goes
    /// first.
    pub(crate) fn likely_billed(&self, e: &crate::store::output::SpendEntry) -> bool {
        self.open_terms(e).2
    }

    /// An open attempt's prices and whether closing it stopped the bill: its endpoint's, or
    /// when OpenRouter chose, the dearest allowed prices and billed if any allowed endpoint
    /// bills a cancel in full.
    fn open_terms(
        &self,
        e: &crate::store::output::SpendEntry,
    ) -> (crate::domain::Price, crate::domain::Price, bool) {
        let eps = self.fleet.endpoints();
        let at = e
            .endpoint
            .as_deref()
            .and_then(|t| eps.iter().find(|x| x.tag == t));
        match at {
            Some(x) => (x.price_in, x.price_out, !x.cancel_stops_billing),
            None => {
                let allowed: Vec<usize> = (0..eps.len())
                    .filter(|&i| self.fleet.permitted(i))
                    .collect();
                let top = allowed.iter().fold(
                    (crate::domain::Price::ZERO, crate::domain::Price::ZERO),
                    |(a, b), &i| (a.max(eps[i].price_in), b.max(eps[i].price_out)),
                );
                let billed = allowed.iter().any(|&i| !eps[i].cancel_stops_billing);
                (top.0, top.1, billed)
            }
        }
    }

    /// A stream closed or cut where the provider may bill what it goes on to generate (a close
    /// does not stop its bill there, or OpenRouter chose among endpoints of which one bills
    /// it): booked at what streamed, it holds the rest of its worst case (hard budget) or of
    /// its expectation until its look-up says what it cost. Found by the seeded simulation
    /// (resets at a pinned endpoint that bills a close in full passed the hard budget: the
    /// freed worst case went to new requests while the provider billed the whole answer).
    pub(super) fn hold_closed(
        &mut self,
        f: &super::InFlight,
        r: &super::attempt::AttemptResult,
        expected: i64,
    ) {
        let billed = self.close_billed(f, r);
        let Some(g) = r.generation_id.as_ref().filter(|_| billed) else {
            return;
        };
        let hold = super::reserve::crash_hold(self.cfg.budget_mode, true, expected, f.worst_pico);
        let hold = (hold - r.booked_pico).max(0);
        // Waited for near the cap, as a crash's: the look-up lands or gives up (`Unsettled`).
        let likely = (expected - r.booked_pico).max(0);
        if hold > 0 && self.budget.hold_open_bill(g.clone(), hold, likely) {
            self.effects.push(super::Effect::Hold(hold));
        }
    }

    /// Whether a stream closed (or cut) may be billed for what its provider goes on to generate:
    /// its endpoint bills a close in full, or OpenRouter chose among endpoints of which one
    /// does and the stream did not say which.
    pub(super) fn close_billed(
        &self,
        f: &super::InFlight,
        r: &super::attempt::AttemptResult,
    ) -> bool {
        match r.endpoint {
            Some(e) => !self.fleet.endpoint(e).cancel_stops_billing,
            None => f.billed_if_closed,
        }
    }

    /// What a stream closed (or cut) is expected to be billed in all, picodollars
    /// ([`reserve::closed_expected`](super::reserve::closed_expected)): where its endpoint
    /// bills a close in full, what an answer that ran as long as it did runs on for (its
    /// dataset's answer lengths, [`AnswerLengths`](super::answer_lengths::AnswerLengths), with
    /// the streams in flight as at least as long as they have streamed; the expected answer
    /// while none has ended); else its endpoint's tokens in transit. Priced at the endpoint that
    /// served it, when the stream named one: a request OpenRouter routed was dispatched at the
    /// dearest price of its set (at the simulator's endpoints 3.00 against 2.24 to 2.50 USD/M,
    /// which put `status`'s open amount a quarter above the bill).
    pub(super) fn closed_expected(
        &self,
        f: &super::InFlight,
        r: &super::attempt::AttemptResult,
        now: &super::Clock,
    ) -> i64 {
        let transit = r
            .endpoint
            .map_or(super::attempt_money::TRANSIT_TOKENS as f64, |e| {
                self.fleet.endpoint(e).transit_tokens
            });
        let d = f.job.dataset;
        let running = self
            .in_flight
            .values()
            .filter(|g| g.job.dataset == d)
            .map(|g| g.streamed_tokens);
        let rest = (self.admission.lengths(d))
            .rest_after(r.received_tokens, running)
            .unwrap_or_else(|| self.admission.expected_output_tokens(d));
        let price_out = r.endpoint.map_or(f.price_out, |e| {
            let at = crate::pricing::hhmm(&now.wall);
            self.fleet
                .endpoint(e)
                .tariff
                .rates(f.prompt_tokens, at)
                .completion
        });
        let rest = price_out.cost(rest).pico();
        let transit = price_out.cost(transit.ceil() as u64).pico();
        let billed = self.close_billed(f, r);
        let bound = f.bill_bound.pico();
        super::reserve::closed_expected(billed, r.booked_pico, (rest, transit), bound)
    }
}
