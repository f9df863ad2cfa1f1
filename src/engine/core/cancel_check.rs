//! Checking on purpose that closing a stream stops an endpoint's bill, before the hard budget
//! relies on it. An endpoint documented to stop billing at a close would let
//! the run reserve only the expected cost of its streams and close them at the dollar cap; if
//! it bills the close in full after all, each of those streams costs its whole answer, and the
//! run would learn it only from the closes at the cap: too late (+3.9% on a $0.40 budget
//! through the binary; up to +33% in the seeded simulation's worlds where the documentation is
//! wrong). So under the hard budget the documented word is not taken until the run's own
//! closes there show it: until then the endpoint's streams reserve their worst case, and when
//! those will not all fit (the budget's last stretch, begun or coming), first
//! [`cancel_billing::STOPS_NEEDED_HARD`] requests are sent there alone and closed
//! after [`CHECK_AFTER_TOKENS`] tokens each, looked up, and their prompts sent again (a few
//! more while a bill says nothing clear; five, because a close near an answer's natural end
//! reads as stopped whatever the endpoint does). One close billed past is enough to doubt it.
//! Other requests go while checks are out, at their worst case where a close is not known
//! to stop the bill, if it fits (reliability-probe-5 P9: waiting for the checks' look-ups left
//! the run with nothing in flight for as long as `/generation` lagged, 69 s at a 20 s lag).
//! A check costs a prompt and 64 tokens where the close stops the bill, one answer where it does not. The expected budget
//! mode takes the documented word.

use std::time::{Duration, Instant};

use crate::config::BudgetMode;

use super::cancel_billing::{self, Evidence};
use super::journal::Once;
use super::{Clock, Core, InFlight, Job};

/// Stream events (a token each at least) a checked stream receives before it is closed:
/// enough that a bill of the whole answer reads as billed past the close
/// ([`read_close`](super::close_read::read_close)), few enough to cost little.
pub(crate) const CHECK_AFTER_TOKENS: u64 = 64;

/// The checks of one endpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Checks {
    /// Checks sent so far (those that ended before the close not counted).
    pub asked: u32,
    /// Checks sent and not yet answered: in flight, or closed and looked up.
    pub pending: u32,
    /// The checked streams whose look-ups are out: their generation ids, and when each was
    /// closed.
    pub looking_up: Vec<(String, Instant)>,
    /// When the last check left.
    pub last_sent: Option<Instant>,
    /// The longest a check here took to be found at `/generation` after its close.
    pub found_within: Option<Duration>,
    /// The endpoint's trust is suspended: a check was not found in time (see
    /// [`overdue_after`]), or its bill said nothing clear. A later check that reads stopped,
    /// with none overdue, lifts it.
    pub suspended: bool,
}

/// How long a check's look-up may stay unanswered before the endpoint's trust is suspended:
/// twice the longest its earlier checks took, and at least [`OVERDUE_FLOOR`]. A close that
/// stopped the bill shows at `/generation` within the API's lag; one billed in full only once
/// the provider has finished the whole answer (the real API's records appear when a generation
/// ends; `harvest sim` does the same), often a minute later: its absence is the first sign.
pub(crate) fn overdue_after(found_within: Option<Duration>) -> Duration {
    found_within.map_or(OVERDUE_FLOOR, |d| (2 * d).max(OVERDUE_FLOOR))
}

/// Whether an endpoint's trust is suspended after one of its checks read `close` (`overdue`:
/// another check of it is not found in time; `was`: suspended before): a check that says
/// nothing clear suspends it, one that stops the bill lifts it unless another is overdue, and
/// one billed past leaves it (the evidence doubts the endpoint for good anyway).
pub(crate) fn suspended_after(close: super::close_read::Close, overdue: bool, was: bool) -> bool {
    use super::close_read::Close;
    match close {
        Close::Stopped => overdue,
        Close::Unclear => true,
        Close::BilledPast => was,
    }
}

/// See [`overdue_after`]: below this a look-up's own retry pace decides, not the endpoint.
const OVERDUE_FLOOR: Duration = Duration::from_secs(10);

/// How often an endpoint trusted by its checks is checked again while the budget's last
/// stretch sends requests there at their expectation: a provider that starts billing closes
/// in full after it was checked is doubted within this (and a look-up's lag), before the cap's
/// closes there pass the budget (reliability-probe-5 P16: +4.3% with trust never rechecked).
/// A check costs a prompt and 64 tokens where a close stops the bill.
pub(crate) const RECHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The most checks asked of one endpoint: enough closes to trust it
/// ([`cancel_billing::STOPS_NEEDED_HARD`]) and as many again for closes whose bill says nothing
/// clear.
const MOST_CHECKS: u32 = 2 * cancel_billing::STOPS_NEEDED_HARD;

/// How many more checks of an endpoint's close to ask for now: under the hard budget, where the
/// endpoint is documented to stop the bill at a close and the run's own closes have not yet
/// proven it nor shown it billed, as many at once as it takes to trust it; once trusted, one
/// every [`RECHECK_EVERY`] (`since_last`: since the last check left).
pub(crate) fn checks_wanted(
    mode: BudgetMode,
    documented_stops: bool,
    evidence: Option<&Evidence>,
    checks: &Checks,
    since_last: Option<std::time::Duration>,
) -> u32 {
    let (stopped, past) = evidence.map_or((0, 0), |e| (e.stopped, e.billed_past));
    if mode != BudgetMode::Hard || !documented_stops || past > 0 {
        return 0;
    }
    let needed = evidence.map_or(cancel_billing::STOPS_NEEDED_HARD, Evidence::stops_needed);
    if stopped >= needed {
        // Whatever else is still out: the checks that made it trusted may still be looked up
        // (an unclear one, one more than needed), and a recheck must not wait for them.
        return u32::from(since_last.is_none_or(|d| d >= RECHECK_EVERY));
    }
    let short = needed.saturating_sub(stopped + checks.pending);
    short.min(MOST_CHECKS.saturating_sub(checks.asked))
}

impl Core {
    /// Under the hard budget, at the first sight of an endpoint documented to stop the bill at
    /// a close: its word is not taken until checked (the workers' pool hears it, and the log
    /// says so once). The operator's own list (`cancel_stops_billing`, perhaps from `harvest
    /// probe`) is taken as given.
    pub(super) fn doubt_documented_closes(&mut self, now: &Clock) {
        // Called on every event: nothing to look at outside the hard budget's own checks.
        if self.cfg.budget_mode != BudgetMode::Hard || self.cfg.cancel_stops_billing.is_some() {
            return;
        }
        for i in 0..self.fleet.endpoints().len() {
            let e = self.fleet.endpoint(i);
            if !self.doubts_documented(i) || self.fleet.cancel(&e.tag).is_some() {
                continue;
            }
            let (tag, documented) = (e.tag.clone(), e.cancel_stops_billing);
            let fresh = self.new_evidence(i);
            self.fleet.set_cancel(tag.clone(), fresh);
            if documented {
                self.set_cancel_belief(i, false);
                // Said of the endpoints the run may use; one the operator includes later is
                // named when its first check leaves (`check_sent`).
                if self.fleet.permitted(i) {
                    self.announce_checks(&tag, now);
                }
            }
        }
    }

    /// The log says once that endpoint `tag`'s documented close is checked before the hard
    /// budget relies on it.
    fn announce_checks(&mut self, tag: &str, now: &Clock) {
        if self.journal.first(Once::CancelCheck(tag.to_string())) {
            let text = format!(
                "checking that closing a stream stops {tag}'s bill, as documented, before the \
                 hard budget relies on it: a few streams sent there are closed after \
                 {CHECK_AFTER_TOKENS} tokens and looked up (their prompts go again); until then \
                 its streams reserve their worst case"
            );
            self.event(now, text);
        }
    }

    /// Whether endpoint `i`'s documented word on closes waits for the run's own: under the
    /// hard budget, with no list of the operator's, at an endpoint reached through OpenRouter.
    pub(super) fn doubts_documented(&self, i: usize) -> bool {
        self.cfg.budget_mode == BudgetMode::Hard
            && self.cfg.cancel_stops_billing.is_none()
            && self.fleet.endpoint(i).custom.is_none()
    }

    /// Endpoint `i`'s evidence before any close there is read: its documented word (or the
    /// operator's), taken or, where [`doubts_documented`](Self::doubts_documented), waiting
    /// for checks.
    pub(super) fn new_evidence(&self, i: usize) -> Evidence {
        let mut ev = Evidence::new(self.fleet.endpoint(i).cancel_stops_billing);
        ev.trust_documented = !self.doubts_documented(i);
        ev
    }

    /// Where `job` goes to check an endpoint's close, when a check is wanted and the endpoint
    /// may take it now: that endpoint alone. Asked only when the streams' worst cases will not
    /// all fit (`dispatch`): before, trusting a close changes nothing, so a run with room to
    /// spare sends no check and closes nothing.
    pub(super) fn check_route(&mut self, now: &Clock, job: &Job) -> Option<(usize, super::Route)> {
        let mode = self.cfg.budget_mode;
        let wanted: Vec<usize> = (0..self.fleet.endpoints().len())
            .filter(|&i| {
                let tag = &self.fleet.endpoint(i).tag;
                let ev = self.fleet.cancel(tag);
                let documented = ev.is_some_and(|e| e.documented);
                let checks = self.fleet.checks(tag).cloned().unwrap_or_default();
                let since = checks
                    .last_sent
                    .map(|t| now.mono.saturating_duration_since(t));
                checks_wanted(mode, documented, ev, &checks, since) > 0
            })
            .collect();
        wanted
            .into_iter()
            .find_map(|i| self.route_job_to(now, job, i).map(|r| (i, r)))
    }

    /// A check of endpoint `i`'s close leaves.
    pub(super) fn check_sent(&mut self, i: usize, now: &Clock) {
        let tag = self.fleet.endpoint(i).tag.clone();
        // A recheck of a trusted endpoint is not this news.
        if !self.fleet.endpoint(i).cancel_stops_billing {
            self.announce_checks(&tag, now);
        }
        tracing::debug!(endpoint = tag, "a check of the close leaves");
        let checks = self.fleet.checks_of(tag);
        checks.asked += 1;
        checks.pending += 1;
        checks.last_sent = Some(now.mono);
    }

    /// A check at endpoint `i` ended without being closed for it (an answer shorter than the
    /// check's tokens, a failure, a stop): it did not count, and another may go.
    pub(super) fn check_ended(&mut self, i: usize) {
        let tag = self.fleet.endpoint(i).tag.clone();
        let checks = self.fleet.checks_of(tag);
        checks.pending = checks.pending.saturating_sub(1);
        checks.asked = checks.asked.saturating_sub(1);
    }

    /// A stream closed to check its endpoint: booked and looked up as any close, its prompt
    /// sent again without counting an attempt.
    pub(super) fn on_checked(
        &mut self,
        mut job: Job,
        f: &InFlight,
        r: &super::attempt::AttemptResult,
        now: &Clock,
    ) {
        let looked_up = r.generation_id.is_some() && self.settle.may_ask();
        self.book_closed(&job, f, r, None, now);
        if let Some(e) = f.check {
            let tag = self.fleet.endpoint(e).tag.clone();
            let checks = self.fleet.checks_of(tag);
            match r.generation_id.clone().filter(|_| looked_up) {
                Some(g) => checks.looking_up.push((g, now.mono)),
                None => checks.pending = checks.pending.saturating_sub(1),
            }
        }
        job.attempts = job.attempts.saturating_sub(1);
        self.requeue_front(job, now);
    }

    /// A look-up landed: if it was a check's, how long after its close it was found. The
    /// check is answered, and the longest such wait kept.
    pub(super) fn check_looked_up(
        &mut self,
        generation_id: Option<&str>,
        now: &Clock,
    ) -> Option<Duration> {
        let g = generation_id?;
        let mut was = None;
        for checks in self.fleet.all_checks_mut() {
            if let Some(at) = checks.looking_up.iter().position(|(x, _)| x == g) {
                let (_, closed) = checks.looking_up.swap_remove(at);
                checks.pending = checks.pending.saturating_sub(1);
                let took = now.mono.saturating_duration_since(closed);
                checks.found_within = Some(checks.found_within.map_or(took, |d| d.max(took)));
                was = Some(took);
            }
        }
        was
    }

    /// A check at endpoint `i` read `close`: under the hard budget, a trusted endpoint's check
    /// that says nothing clear suspends its trust (a short answer billed in full reads so: its
    /// bill is no proof the close stopped it); one that reads stopped, with no other check
    /// overdue, lifts the suspension. The caller settles the belief.
    pub(super) fn checked(&mut self, i: usize, close: super::close_read::Close, now: &Clock) {
        let tag = self.fleet.endpoint(i).tag.clone();
        let Some(checks) = self.fleet.checks_mut(&tag) else {
            return;
        };
        let limit = overdue_after(checks.found_within);
        let overdue = (checks.looking_up.iter())
            .any(|&(_, c)| now.mono.saturating_duration_since(c) >= limit);
        checks.suspended = suspended_after(close, overdue, checks.suspended);
    }

    /// Each tick: an endpoint the run trusts whose check is not found at `/generation` in
    /// time ([`overdue_after`]) is not trusted until it is: its streams reserve their worst
    /// case from now on (a provider that began billing closes in full after its checks:
    /// reliability-probe-5 P16).
    pub(super) fn suspend_overdue_trust(&mut self, now: &Clock) {
        for i in 0..self.fleet.endpoints().len() {
            let tag = self.fleet.endpoint(i).tag.clone();
            if !self.fleet.endpoint(i).cancel_stops_billing {
                continue;
            }
            let Some(checks) = self.fleet.checks_mut(&tag) else {
                continue;
            };
            let limit = overdue_after(checks.found_within);
            let late = (checks.looking_up.iter())
                .map(|&(_, c)| now.mono.saturating_duration_since(c))
                .max()
                .filter(|&d| d >= limit);
            let Some(late) = late.filter(|_| !checks.suspended) else {
                continue;
            };
            checks.suspended = true;
            let earlier = checks.found_within.map_or(String::new(), |d| {
                format!(
                    ", where its earlier checks were found within {:.1}s",
                    d.as_secs_f64()
                )
            });
            self.set_cancel_belief(i, false);
            let text = format!(
                "a check of {tag}'s close is not found at /generation {:.0}s after the close{earlier}: \
                 a close there may now be billed in full (the record shows once the provider \
                 has finished the answer); its streams reserve their worst case until it is found",
                late.as_secs_f64()
            );
            self.event(now, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_wanted_where_the_hard_budget_has_only_the_documents_word() {
        let ev = |stopped, billed_past| Evidence {
            documented: true,
            stopped,
            billed_past,
            trust_documented: false,
            unread: Vec::new(),
            unclear: Vec::new(),
        };
        let checks = |asked, pending| Checks {
            asked,
            pending,
            ..Checks::default()
        };
        use BudgetMode::{Expected, Hard};
        let s = std::time::Duration::from_secs;
        // (mode, documented to stop, evidence, checks, since the last check, wanted now)
        let cases = [
            (Hard, true, None, checks(0, 0), None, 5),
            (Hard, true, Some(ev(1, 0)), checks(5, 4), Some(s(1)), 0),
            (Hard, true, Some(ev(1, 0)), checks(5, 2), Some(s(1)), 2),
            (Hard, true, Some(ev(0, 1)), checks(1, 0), Some(s(60)), 0),
            (Hard, true, Some(ev(3, 0)), checks(9, 0), Some(s(1)), 1),
            (Hard, true, Some(ev(3, 0)), checks(10, 0), Some(s(1)), 0),
            (Hard, false, None, checks(0, 0), None, 0),
            (Expected, true, None, checks(0, 0), None, 0),
            // Trusted: checked again every RECHECK_EVERY (P16), however many were asked
            // before or are still out.
            (Hard, true, Some(ev(5, 0)), checks(5, 0), Some(s(1)), 0),
            (
                Hard,
                true,
                Some(ev(5, 0)),
                checks(5, 0),
                Some(RECHECK_EVERY),
                1,
            ),
            (Hard, true, Some(ev(5, 0)), checks(12, 3), Some(s(60)), 1),
            (Hard, true, Some(ev(9, 0)), checks(40, 0), Some(s(60)), 1),
            // Doubted by a recheck: for good.
            (Hard, true, Some(ev(9, 1)), checks(41, 0), Some(s(60)), 0),
        ];
        for (i, (mode, documented, evidence, c, since, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                checks_wanted(mode, documented, evidence.as_ref(), &c, since),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn a_checks_reading_suspends_or_lifts_its_endpoints_trust() {
        use super::super::close_read::Close::{BilledPast, Stopped, Unclear};
        #[rustfmt::skip]
        let cases = [
            // (the check read, another overdue, suspended before, suspended after)
            (Stopped, false, true, false),
            (Stopped, true, true, true),
            (Stopped, false, false, false),
            (Unclear, false, false, true),
            (Unclear, false, true, true),
            (BilledPast, false, false, false),
            (BilledPast, false, true, true),
        ];
        for (close, overdue, was, want) in cases {
            assert_eq!(
                suspended_after(close, overdue, was),
                want,
                "{close:?} {overdue} {was}"
            );
        }
    }

    #[test]
    fn a_check_is_overdue_at_twice_the_longest_its_earlier_ones_took() {
        let s = Duration::from_secs;
        #[rustfmt::skip]
        let cases = [
            // (the longest an earlier check took to be found, overdue after)
            (None, s(10)),
            (Some(Duration::from_millis(300)), s(10)),
            (Some(s(5)), s(10)),
            (Some(s(8)), s(16)),
            // `/generation` lagging 20 s (reliability-probe-5 P9): 40 s.
            (Some(s(20)), s(40)),
        ];
        for (found_within, want) in cases {
            assert_eq!(overdue_after(found_within), want, "{found_within:?}");
        }
    }

    #[test]
    fn under_the_hard_budget_five_closes_that_stop_the_bill_prove_the_documents_word() {
        use crate::engine::core::wire_rate::PRIOR;
        let mut ev = Evidence::new(true);
        ev.trust_documented = false;
        assert!(!ev.believed(), "not taken on the document's word");
        for _ in 0..4 {
            ev.add(64, 70, PRIOR, false);
        }
        assert!(
            !ev.believed(),
            "four closes that stopped the bill are not yet enough"
        );
        ev.add(64, 66, PRIOR, false);
        assert!(ev.believed(), "five are");
        for _ in 0..20 {
            ev.add(64, 64, PRIOR, false);
        }
        ev.add(64, 1_900, PRIOR, false);
        assert!(!ev.believed(), "one billed past in 26: not any more");
        let mut undocumented = Evidence::new(false);
        undocumented.trust_documented = false;
        for _ in 0..10 {
            undocumented.add(64, 64, PRIOR, false);
        }
        assert!(
            !undocumented.believed(),
            "no stop is learned where none is documented"
        );
        assert!(
            Evidence::new(true).believed(),
            "the expected mode takes the word"
        );
    }
}
