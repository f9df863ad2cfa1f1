//! The dollar budget and the request rate: what in-flight requests are still expected to cost
//! (the reservation), whether one more request fits under `budget_usd`, and the spacing of
//! requests under `requests_per_second`.

use std::time::{Duration, Instant};

use crate::domain::Usd;

use super::super::reason::StopReason;
use super::journal::Once;
use super::reserve::{Exposure, reservation};
use super::{Clock, Core, Live, Port};

/// The money side of the run: the budget, what in-flight requests reserve of it, the pacing.
pub(super) struct Budget {
    pub(super) budget_pico: i64,
    /// What in-flight requests are still expected to cost (or, where closing them would not
    /// stop the bill, their worst case), picodollars.
    pub(super) reserved_pico: i64,
    /// Under a requests-per-second cap, the earliest time of the next request.
    pub(super) next_send_at: Option<Instant>,
    /// When worst-case reservations first held a request back (the budget's last stretch).
    pub(super) last_stretch: Option<Instant>,
    /// What earlier runs of the output directory spent.
    pub(super) carried_over: Usd,
    /// The account's in-flight budget, learned from its 402s.
    pub(super) account: super::account::AccountGate,
    /// OpenRouter streams in flight (own servers' not counted).
    pub(super) or_in_flight: u32,
}

/// Whether one more request fits under the dollar budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fits {
    Yes,
    /// Not now: requests in flight will settle what they really cost first.
    Wait,
    /// Not even one more request fits and none is in flight: the run is over.
    Never,
}

impl Core {
    /// Spent + accrued + what in-flight requests are still expected to cost, picodollars.
    pub(crate) fn committed_pico(&self, live: &Live) -> i64 {
        live.spent_pico + live.accrued_pico + self.budget.reserved_pico
    }

    /// What in-flight requests are still expected to cost, with today's expectations: the
    /// observed mean output length replaces the guess each was dispatched with.
    pub(super) fn recompute_reserved(&mut self, port: &dyn Port) {
        let expected: Vec<u64> = (0..self.admission.datasets.len())
            .map(|d| self.expected_output_tokens(d))
            .collect();
        let mut total = 0;
        let mode = self.cfg.budget_mode;
        for (&key, f) in self.in_flight.iter_mut() {
            let out = f.price_out.cost(expected[f.job.dataset]).pico();
            f.expected_pico = f.price_in.cost(f.prompt_tokens).pico() + f.fee.pico() + out;
            let x = Exposure {
                expected: f.expected_pico,
                worst: f.worst_pico,
                accrued: port.accrued_pico(key),
                tail: out / 2,
            };
            f.reserved_pico = reservation(mode, f.billed_if_closed, x);
            total += f.reserved_pico;
        }
        self.budget.reserved_pico = total;
    }

    /// Whether a request that reserves `reserve` (its expected cost, or under the hard budget
    /// its worst case, see [`reservation`]) fits: what is spent, accrued and reserved must
    /// leave room for it. Says so in the log, and stops the run when nothing more ever will.
    /// `expected` is its expected cost: when that would fit and only the worst cases held it
    /// back, the run has entered the budget's last stretch (said once).
    /// `live` and `port`: the workers' counters and each attempt's running cost.
    pub(super) fn fits(
        &mut self,
        reserve: Usd,
        expected: Usd,
        (live, port): (&Live, &dyn Port),
        now: &Clock,
    ) -> Fits {
        let committed = self.committed_pico(live);
        if committed + reserve.pico() <= self.budget.budget_pico {
            return Fits::Yes;
        }
        let worst_held: i64 = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.billed_if_closed)
            .map(|(&key, f)| f.reserved_pico - (f.expected_pico - port.accrued_pico(key)).max(0))
            .sum();
        let at_expectation = committed - worst_held.max(0) + expected.pico();
        if self.cfg.budget_mode == crate::config::BudgetMode::Hard
            && at_expectation <= self.budget.budget_pico
            && self.budget.last_stretch.is_none()
        {
            self.budget.last_stretch = Some(now.mono);
            self.event(
                now,
                format!(
                    "dollar budget: last stretch ({} of {} committed at worst case): requests that \
                     may land where a cancelled stream is billed in full wait for room for their \
                     worst case (prompt + max_tokens), so spend stays under the budget \
                     (budget_mode = \"expected\" trades that bound for speed)",
                    Usd::from_pico(committed),
                    Usd::from_pico(self.budget.budget_pico)
                ),
            );
        }
        if self.in_flight.is_empty() {
            self.begin_stop(now, StopReason::DollarBudget);
            return Fits::Never;
        }
        if self.journal.first(Once::BudgetNearly) {
            self.event(
                now,
                format!(
                    "dollar budget nearly committed ({} of {}): dispatching only as requests finish",
                    Usd::from_pico(committed),
                    Usd::from_pico(self.budget.budget_pico)
                ),
            );
        }
        Fits::Wait
    }

    /// Whether the run may send another request now (stop, pause, concurrency, rate cap).
    pub(super) fn can_dispatch(&self, now: &Clock) -> bool {
        self.life.stopping.is_none()
            && !self.life.paused
            && (self.in_flight.len() as u64) < u64::from(self.concurrency)
            && self.budget.next_send_at.is_none_or(|t| t <= now.mono)
    }

    /// Spaces requests out under `requests_per_second` (a burst of at most one second's worth).
    pub(super) fn note_sent(&mut self, now: &Clock) {
        let Some(rps) = self.cfg.requests_per_second.filter(|r| *r > 0.0) else {
            return;
        };
        let gap = Duration::from_secs_f64(1.0 / rps);
        // After an idle spell the next request may go at once and `rps` in all within this
        // second (one, when the gap is longer): the one sent now counts as the first of them.
        let window = gap.max(Duration::from_secs(1));
        let floor = now.mono.checked_sub(window).map_or(now.mono, |t| t + gap);
        let base = self.budget.next_send_at.map_or(now.mono, |t| t.max(floor));
        self.budget.next_send_at = Some(base + gap);
    }
}
