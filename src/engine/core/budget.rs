//! The dollar budget and the request rate: what in-flight requests are still expected to cost
//! (the reservation), whether one more request fits under `budget_usd`, and the spacing of
//! requests under `requests_per_second`.

use std::time::{Duration, Instant};

use crate::config::BudgetMode;
use crate::domain::Usd;

use super::super::reason::StopReason;
use super::journal::Once;
use super::reserve::{Exposure, reservation};
use super::{Clock, Core, Live, Port};

/// The money side of the run: the budget, what in-flight requests reserve of it, the pacing.
/// Its fields are its own: the rest of the core asks and tells it through the methods below
/// (issue #52 item 2).
pub(super) struct Budget {
    budget_pico: i64,
    /// What in-flight requests are still expected to cost (or, where closing them would not
    /// stop the bill, their worst case), picodollars.
    reserved_pico: i64,
    /// Under a requests-per-second cap, the earliest time of the next request.
    next_send_at: Option<Instant>,
    /// When worst-case reservations first held a request back (the budget's last stretch).
    last_stretch: Option<Instant>,
    /// What earlier runs of the output directory spent.
    carried_over: Usd,
    /// The account's in-flight budget, learned from its 402s.
    account: super::account::AccountGate,
    /// OpenRouter streams in flight (own servers' not counted).
    or_in_flight: u32,
    /// What the later turns of the multi-turn rows in progress are expected to cost: new work
    /// does not take it, so that a budget stop leaves rows finished rather than started.
    owed_pico: i64,
    /// Requests sent in the last stretch where a close stops the bill, narrowed there because
    /// their worst case did not fit as routed.
    stretch_narrowed: u64,
    /// Requests sent in the last stretch with their worst case reserved.
    stretch_worst: u64,
    /// The last dispatch round ended for want of room in the budget: a queued request waits
    /// for a result, a look-up or a tick, not for the clock (no wake of its own).
    waiting_for_room: bool,
    /// Bills not known yet, by generation id: an attempt a crash left open, or a stream closed
    /// or cut where the provider may bill it in full.
    open_bills: std::collections::HashMap<String, OpenBill>,
    /// The sum of those holds, picodollars.
    open_bills_pico: i64,
    /// Money booked in this event that no worker accrued, told to the live spend by an
    /// [`Effect::Spent`](super::Effect) the driver performs once the event is decided: until
    /// then the workers' counters lack it, and what this event starts must count it.
    unpublished_pico: i64,
}

/// A bill not known yet: what it holds until its look-up lands, what it will likely come to
/// past what is booked of it (its expectation), and where its look-up stands.
#[derive(Clone, Copy, Debug)]
pub(super) struct OpenBill {
    hold: i64,
    likely: i64,
    look_up: LookUp,
}

/// Where the look-up of an open bill stands, for the run near the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LookUp {
    /// Asked, not answered yet: the run waits for it rather than stop, or spend past it.
    First,
    /// Unknown on its first ask, asked again in later passes (until it is found or ages out):
    /// the run waits for it only where its settling at its expectation would make room.
    Later,
    /// Not asked again by this run (given up on for now, or its figure refused).
    No,
}

/// What one more request asks of the dollar budget.
#[derive(Clone, Copy, Debug)]
pub(super) struct Claim {
    /// What it reserves while in flight: its expected cost, or under the hard budget its worst
    /// case (see [`reservation`]).
    pub(super) reserve: Usd,
    /// Its expected cost.
    pub(super) expected: Usd,
    /// When it starts a multi-turn row, what the row's later turns are expected to cost.
    pub(super) ahead: Usd,
    /// It is a later turn (or a retry) of a row already started: the money held for rows in
    /// progress is its own.
    pub(super) continues_row: bool,
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

impl Budget {
    /// A budget of `budget` with nothing in flight; `carried_over` is what earlier runs of
    /// the directory spent; `learn_inflight` lets the account's gate learn its ceiling.
    pub(super) fn new(budget: Usd, carried_over: Usd, learn_inflight: bool) -> Budget {
        Budget {
            budget_pico: budget.pico(),
            reserved_pico: 0,
            next_send_at: None,
            last_stretch: None,
            carried_over,
            account: super::account::AccountGate::new(learn_inflight),
            or_in_flight: 0,
            owed_pico: 0,
            stretch_narrowed: 0,
            stretch_worst: 0,
            open_bills: std::collections::HashMap::new(),
            waiting_for_room: false,
            open_bills_pico: 0,
            unpublished_pico: 0,
        }
    }

    /// The dollar budget, picodollars.
    pub(super) fn budget_pico(&self) -> i64 {
        self.budget_pico
    }

    /// What in-flight requests reserve, picodollars.
    #[cfg(test)]
    pub(super) fn reserved_pico(&self) -> i64 {
        self.reserved_pico
    }

    /// `pico` was booked in this event and is told to the live spend once it is decided.
    pub(super) fn unpublished(&mut self, pico: i64) {
        self.unpublished_pico += pico;
    }

    /// The live spend as it will be once this event's [`Effect::Spent`](super::Effect) are
    /// performed (the driver performs every event's effects before the next event).
    pub(super) fn with_unpublished(&self, mut live: Live) -> Live {
        live.spent_pico += self.unpublished_pico;
        live
    }

    /// A new event: the last one's effects are performed.
    pub(super) fn published(&mut self) {
        self.unpublished_pico = 0;
    }

    /// What earlier runs of the directory spent, and the crash look-ups booked since.
    pub(super) fn carried_over(&self) -> Usd {
        self.carried_over
    }

    /// A crash's leftover was booked at `usd`: carried like an earlier run's spend.
    pub(super) fn carry(&mut self, usd: Usd) {
        self.carried_over += usd;
    }

    /// A request left reserving `reserve` picodollars (through OpenRouter: `openrouter`).
    pub(super) fn dispatched(&mut self, reserve: i64, openrouter: bool) {
        self.reserved_pico += reserve;
        if openrouter {
            self.or_in_flight += 1;
        }
    }

    /// A request that reserved `reserved` came back: its cost is in the spend now.
    pub(super) fn returned(&mut self, reserved: i64, openrouter: bool) {
        self.reserved_pico -= reserved;
        if openrouter {
            self.or_in_flight = self.or_in_flight.saturating_sub(1);
        }
    }

    /// A request in flight now reserves `more` picodollars (its worst case, once a close is
    /// known not to stop its bill).
    pub(super) fn reserve_more(&mut self, more: i64) {
        self.reserved_pico += more;
    }

    /// OpenRouter streams in flight.
    pub(super) fn or_in_flight(&self) -> u32 {
        self.or_in_flight
    }

    /// The account's gate: its learned ceiling, its 402s, its pause.
    pub(super) fn account(&self) -> &super::account::AccountGate {
        &self.account
    }

    pub(super) fn account_mut(&mut self) -> &mut super::account::AccountGate {
        &mut self.account
    }

    /// A dispatch round begins: nothing waits for room yet.
    pub(super) fn round_begins(&mut self) {
        self.waiting_for_room = false;
    }

    /// The round ended for want of room: a queued request waits for money to settle.
    pub(super) fn waits_for_room(&mut self) {
        self.waiting_for_room = true;
    }

    /// Whether the last round ended for want of room.
    pub(super) fn waiting_for_room(&self) -> bool {
        self.waiting_for_room
    }

    /// Under a requests-per-second cap, the earliest time of the next request.
    pub(super) fn next_send_at(&self) -> Option<Instant> {
        self.next_send_at
    }

    /// Whether the run is in the budget's last stretch.
    pub(super) fn in_last_stretch(&self) -> bool {
        self.last_stretch.is_some()
    }

    /// How long the run has been in the last stretch, once it entered it.
    pub(super) fn last_stretch_for(&self, now: &Clock) -> Option<Duration> {
        (self.last_stretch).map(|t| now.mono.saturating_duration_since(t))
    }

    /// A request of the last stretch went where a close stops the bill (`narrowed`), or
    /// reserving its worst case.
    pub(super) fn sent_in_stretch(&mut self, narrowed: bool) {
        if narrowed {
            self.stretch_narrowed += 1;
        } else {
            self.stretch_worst += 1;
        }
    }

    /// Requests of the last stretch: narrowed, and at their worst case.
    pub(super) fn stretch_shares(&self) -> (u64, u64) {
        (self.stretch_narrowed, self.stretch_worst)
    }

    /// A multi-turn row began: `ahead` picodollars are held for its later turns.
    pub(super) fn row_owes(&mut self, ahead: i64) {
        self.owed_pico += ahead;
    }

    /// What the later turns of the rows in progress are expected to cost, picodollars.
    #[cfg(test)]
    pub(super) fn owed_pico(&self) -> i64 {
        self.owed_pico
    }

    /// Spent + accrued + what in-flight requests are still expected to cost, picodollars.
    pub(super) fn committed_pico(&self, live: &Live) -> i64 {
        live.spent_pico + live.accrued_pico + self.reserved_pico + self.open_bills_pico
    }

    /// The money held beside a claim: for new work, what rows in progress are owed and what
    /// the row it starts will need; nothing for a row's own later turn.
    fn held_for(&self, c: &Claim) -> i64 {
        if c.continues_row {
            0
        } else {
            self.owed_pico + c.ahead.pico()
        }
    }

    /// Whether the claim's reservation fits beside what is spent, accrued, reserved and held
    /// (no word said, nothing changed).
    pub(super) fn has_room(&self, c: &Claim, live: &Live) -> bool {
        self.committed_pico(live) + self.held_for(c) + c.reserve.pico() <= self.budget_pico
    }

    /// Holds `hold` for generation `g` until its look-up lands (it will likely come to
    /// `likely` past its booking), waited for near the cap; false when `g` was held already.
    pub(super) fn hold_open_bill(&mut self, g: String, hold: i64, likely: i64) -> bool {
        let bill = OpenBill {
            hold,
            likely: likely.clamp(0, hold.max(0)),
            look_up: LookUp::First,
        };
        if self.open_bills.insert(g, bill).is_some() {
            return false;
        }
        self.open_bills_pico += hold;
        true
    }

    /// A bill not known yet is settled (found, or booked at its expectation): what it held,
    /// now released.
    pub(super) fn release_open_bill(
        &mut self,
        e: &crate::store::output::SpendEntry,
    ) -> Option<i64> {
        let bill = self.open_bills.remove(e.generation_id.as_ref()?)?;
        self.open_bills_pico -= bill.hold;
        Some(bill.hold)
    }

    /// An open bill whose look-up found nothing now: still held; `asked_again` by later
    /// passes, or not by this run.
    pub(super) fn unsettled(&mut self, e: &crate::store::output::SpendEntry, asked_again: bool) {
        if let Some(b) = (e.generation_id.as_ref()).and_then(|g| self.open_bills.get_mut(g)) {
            b.look_up = if asked_again {
                LookUp::Later
            } else {
                LookUp::No
            };
        }
    }

    /// Whether the look-ups still out may make room for `c` (near the cap the run then waits
    /// rather than stop): one not answered yet, or bills asked again whose settling at their
    /// expectation would free enough of their holds. A crash's leftovers hold their worst
    /// cases while `/generation` lags behind the providers; stopping at "budget reached"
    /// then left a restarted run with its budget unspent (`scripts/crash-restart.sh`, 20 s
    /// after the kill: $0.0036 of $0.50 spent, $0.48 held, the bills came to $0.12).
    fn look_ups_may_make_room(&self, c: &Claim, live: &Live) -> bool {
        let bills = self.open_bills.values();
        if bills.clone().any(|b| b.look_up == LookUp::First) {
            return true;
        }
        let freed: i64 = (bills.filter(|b| b.look_up == LookUp::Later))
            .map(|b| b.hold - b.likely)
            .sum();
        freed > 0
            && self.committed_pico(live) + self.held_for(c) + c.reserve.pico() - freed
                <= self.budget_pico
    }

    /// Bills not known yet that later passes still ask about: how many, what they hold, and
    /// what they will likely come to.
    fn asked_later(&self) -> (usize, i64, i64) {
        (self.open_bills.values())
            .filter(|b| b.look_up == LookUp::Later)
            .fold((0, 0, 0), |(n, h, l), b| (n + 1, h + b.hold, l + b.likely))
    }

    /// Releases what a row in progress held for one later turn (it goes out now), or for all
    /// of them (`turns`: the row ends early, rejected).
    pub(super) fn release_owed(&mut self, job: &super::Job, turns: u64) {
        if let Some(each) = job.row_owed {
            let owed = each.pico().saturating_mul(turns as i64);
            self.owed_pico = (self.owed_pico - owed).max(0);
        }
    }

    /// Spaces requests out under `rps` requests per second (a burst of at most one second's
    /// worth).
    pub(super) fn note_sent(&mut self, rps: Option<f64>, now: &Clock) {
        let Some(rps) = rps.filter(|r| *r > 0.0) else {
            return;
        };
        let gap = Duration::from_secs_f64(1.0 / rps);
        // After an idle spell the next request may go at once and `rps` in all within this
        // second (one, when the gap is longer): the one sent now counts as the first of them.
        let window = gap.max(Duration::from_secs(1));
        let floor = now.mono.checked_sub(window).map_or(now.mono, |t| t + gap);
        let base = self.next_send_at.map_or(now.mono, |t| t.max(floor));
        self.next_send_at = Some(base + gap);
    }
}

impl Core {
    /// picodollars: what the budget counts as taken.
    pub(crate) fn committed_pico(&self, live: &Live) -> i64 {
        self.budget.committed_pico(live)
    }

    /// The most the spend can still come to, picodollars, from `live` (spent and accrued):
    /// each stream that may be billed in full when closed runs to its worst case (prompt, fee,
    /// `max_tokens`, from what it had streamed at the last tick), each bill not known yet comes
    /// at what it holds; the streams a close stops add at most what the dollar cap leaves them
    /// (it closes them when reached: under the hard budget the others' worst cases count
    /// against it, under the expected one only what is spent and accrued).
    pub(crate) fn worst_case_pico(&self, live: &Live) -> i64 {
        let so_far = live.spent_pico + live.accrued_pico.max(0);
        let (mut billed, mut stoppable) = (self.budget.open_bills_pico.max(0), 0);
        for f in self.in_flight.values() {
            let left = (f.worst_pico - f.accrued_pico).max(0);
            if f.billed_if_closed {
                billed += left;
            } else {
                stoppable += left;
            }
        }
        let room = match self.cfg.budget_mode {
            BudgetMode::Hard => self.budget.budget_pico - so_far - billed,
            BudgetMode::Expected => self.budget.budget_pico - so_far,
        };
        so_far + billed + stoppable.min(room.max(0))
    }

    /// What in-flight requests are still expected to cost, with today's expectations: the
    /// observed mean output length replaces the guess each was dispatched with.
    pub(super) fn recompute_reserved(&mut self, port: &dyn Port) {
        let expected: Vec<u64> = (0..self.admission.datasets().len())
            .map(|d| self.admission.expected_output_tokens(d))
            .collect();
        let mut total = 0;
        let mode = self.cfg.budget_mode;
        // The streams in flight share a few prices: each expected answer is priced once per
        // price and dataset (exact money is slow, and this runs every tick over thousands).
        let mut priced: Vec<(crate::domain::Price, usize, i64)> = Vec::new();
        for (&key, f) in self.in_flight.iter_mut() {
            let d = f.job.dataset;
            let out = match priced
                .iter()
                .find(|(p, pd, _)| *p == f.price_out && *pd == d)
            {
                Some(&(_, _, out)) => out,
                None => {
                    let out = f.price_out.cost(expected[d]).pico();
                    priced.push((f.price_out, d, out));
                    out
                }
            };
            f.expected_pico = f.fixed_pico + out;
            f.accrued_pico = port.accrued_pico(key);
            f.streamed_tokens = port.streamed_tokens(key);
            let x = Exposure {
                expected: f.expected_pico,
                worst: f.worst_pico,
                accrued: f.accrued_pico,
                tail: out / 2,
            };
            f.reserved_pico = reservation(mode, f.billed_if_closed, x);
            total += f.reserved_pico;
        }
        self.budget.reserved_pico = total;
    }

    /// Whether a request fits: what is spent, accrued and reserved must leave room for its
    /// reservation; new work must also leave the money held for the later turns of rows in
    /// progress, and a request that starts a row room for the row's later turns. Says so in
    /// the log, and stops the run when nothing more ever will. When its expected cost would
    /// fit and only the worst cases held it back, the run has entered the budget's last
    /// stretch (said once). `live` and `port`: the workers' counters and each attempt's
    /// running cost.
    pub(super) fn fits(&mut self, c: Claim, (live, port): (&Live, &dyn Port), now: &Clock) -> Fits {
        if self.budget.has_room(&c, live) {
            return Fits::Yes;
        }
        let committed = self.budget.committed_pico(live) + self.budget.held_for(&c);
        // Whether the last stretch begins: a walk of what is in flight, so only until it has.
        if self.cfg.budget_mode == crate::config::BudgetMode::Hard
            && self.budget.last_stretch.is_none()
        {
            let worst_held: i64 = (self.in_flight.iter())
                .filter(|(_, f)| f.billed_if_closed)
                .map(|(&key, f)| {
                    f.reserved_pico - (f.expected_pico - port.accrued_pico(key)).max(0)
                })
                .sum();
            if committed - worst_held.max(0) + c.expected.pico() <= self.budget.budget_pico {
                self.enter_last_stretch(live, now);
            }
        }
        // With nothing in flight, new work still waits for a row in progress whose next turn
        // is queued: that turn goes out first, and the row's money is its own.
        let looking_up = self.budget.look_ups_may_make_room(&c, live);
        if self.in_flight.is_empty()
            && !looking_up
            && (c.continues_row || self.admission.row_waits(None).is_none())
        {
            self.begin_stop(now, StopReason::DollarBudget);
            return Fits::Never;
        }
        let (n, held, likely) = self.budget.asked_later();
        if looking_up && n > 0 && self.journal.first(Once::BillsAskedLater) {
            self.event(
                now,
                format!(
                    "the budget's room is held by {n} bills /generation does not know yet \
                     ({} held, likely {}): waiting for their look-ups, asked again until each \
                     is found or 15 minutes old, rather than stop with the budget unspent",
                    Usd::from_pico(held),
                    Usd::from_pico(likely)
                ),
            );
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

    /// The hard budget's last stretch begins (said once): the streams' worst cases no longer
    /// all fit (`reserve::in_last_stretch`), so requests go where a close stops the bill, or
    /// wait for room for their worst case.
    pub(super) fn enter_last_stretch(&mut self, live: &Live, now: &Clock) {
        if self.budget.last_stretch.is_some() {
            return;
        }
        self.budget.last_stretch = Some(now.mono);
        let text = format!(
            "dollar budget: last stretch ({} of {} committed; the streams' worst cases, prompt + \
             max_tokens, cannot all fit): requests go where closing the stream stops the bill \
             and reserve their expected cost there; one that can only go where a close is \
             billed in full waits for room for its worst case, so spend stays under the budget",
            Usd::from_pico(self.committed_pico(live)),
            Usd::from_pico(self.budget.budget_pico)
        );
        self.event(now, text);
    }

    /// Whether the run may send another request now (stop, pause, concurrency, rate cap).
    pub(super) fn can_dispatch(&self, now: &Clock) -> bool {
        self.life.stopping.is_none()
            && !self.life.paused
            && (self.in_flight.len() as u64) < u64::from(self.concurrency)
            && self.budget.next_send_at.is_none_or(|t| t <= now.mono)
    }
}

/// What this run spent past the budget: its spend over the budget, or over what earlier runs
/// of the directory had already spent when that was more (a run that starts past its budget
/// sends nothing; the earlier runs' spend is not its overshoot).
pub(crate) fn overshoot(spent: Usd, budget: Usd, carried_over: Usd) -> Usd {
    spent
        .saturating_sub(budget.max(carried_over))
        .max(Usd::ZERO)
}
