//! What earlier runs of the directory left open with the API, settled by this start beside its
//! new work: the key's checkpoint at the start, the requests booked at once, the holds, the
//! look-ups asked ([`Effect::LookUp`] of [`Asked::Leftovers`]), each answer booked as it lands
//! and counted, and what the log says of them when they are in or the work is over. The driver
//! only performs the GETs and hands each answer back ([`Event::LookedUp`]); the seeded
//! simulation's crash worlds run the same decisions (issue #52 item 1).
//!
//! [`Effect::LookUp`]: super::super::Effect::LookUp
//! [`Event::LookedUp`]: super::super::Event::LookedUp

use crate::domain::Usd;
use crate::engine::look_ups::{LookedUp, Until};
use crate::engine::reconcile::{UNKNOWN_AFTER, open_part};
use crate::store::output::SpendEntry;

use super::super::{Clock, Core, Effect};
use super::{KeyMoment, Landing, Leftovers};

/// Whose generations a look-up asks about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Streams this run closed ([`super::Closes`]).
    Closes,
    /// What earlier runs left open ([`Recovery`]).
    Leftovers,
}

/// The look-ups of what earlier runs left, as this start settles them.
#[derive(Debug, Default)]
pub(crate) struct Recovery {
    /// What the directory's scan left, until the start opens it.
    left: Option<Leftovers>,
    /// Look-ups of a crash's open attempts, of closed streams no look-up confirmed, and of
    /// lines `--repair` rebuilt.
    asked: usize,
    closed_asked: usize,
    rebuilt_asked: usize,
    /// Open attempts found at the API, and those booked as lost (unknown past
    /// [`UNKNOWN_AFTER`]), with what both cost.
    found: usize,
    lost: usize,
    total: Usd,
    /// What the requests looked up were expected to cost when sent, and of it, that of those
    /// whose look-up came back.
    expected: Usd,
    expected_back: Usd,
    /// Look-ups that came back (found, lost, or still unknown and left open).
    back: usize,
    /// Ids whose first ask is answered: the first pass is over when every id's is.
    first_answers: usize,
    /// The open attempts and closed streams not settled yet, and what they may still add.
    open: (usize, Usd),
    /// Closed streams the API answered (or that aged out keeping their estimates), and what
    /// its costs add to the estimates.
    closed_confirmed: usize,
    closed_delta: Usd,
    /// Rebuilt lines the API confirmed, and what its costs add to the outputs' costs.
    confirmed: usize,
    confirmed_delta: Usd,
    /// Look-ups still running when the work was over: left for the next start.
    left_running: usize,
}

/// How often each of a start's settlings happened, for the seeded simulation's coverage.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecoveryCounts {
    pub(crate) found: usize,
    pub(crate) lost: usize,
    pub(crate) closed_confirmed: usize,
    pub(crate) confirmed: usize,
}

impl Recovery {
    /// The look-ups `items` begin: `closed_asked` closed streams and `rebuilt_asked` rebuilt
    /// lines after the open attempts.
    fn asking(
        &mut self,
        items: &[(String, SpendEntry)],
        closed_asked: usize,
        rebuilt_asked: usize,
    ) {
        let asked = items.len() - closed_asked - rebuilt_asked;
        self.asked = asked;
        self.closed_asked = closed_asked;
        self.rebuilt_asked = rebuilt_asked;
        self.expected = items.iter().map(|(_, e)| open_part(e)).sum();
        let open = &items[..asked + closed_asked];
        self.open = (open.len(), open.iter().map(|(_, e)| open_part(e)).sum());
    }

    /// An open attempt was settled (found, or booked as lost), or a closed stream confirmed.
    fn settled(&mut self, e: &SpendEntry) {
        self.open.0 = self.open.0.saturating_sub(1);
        self.open.1 = self.open.1 - open_part(e);
    }

    fn all_asked(&self) -> usize {
        self.asked + self.closed_asked + self.rebuilt_asked
    }
}

/// "`what`: `n` of `asked` confirmed at /generation (`delta` against `against`)", and, when
/// some were not, what the others do (`others`) until the next start asks again.
fn confirmed_line(
    what: &str,
    (n, asked, delta): (usize, usize, Usd),
    (against, others): (&str, &str),
) -> String {
    let rest = if n < asked {
        format!("; the others {others} and the next start asks again")
    } else {
        String::new()
    };
    format!(
        "{what}: {n} of {asked} confirmed at /generation ({:+.6} USD against {against}){rest}",
        delta.as_f64()
    )
}

impl Core {
    /// What earlier runs of the directory left open (`Leftovers::from_scan`), settled at
    /// [`Event::Open`](super::super::Event::Open).
    pub(crate) fn with_leftovers(mut self, left: Leftovers) -> Self {
        self.settle.recovery.left = Some(left);
        self
    }

    /// Before the first request: the key's checkpoint (`GET /key` at the start, when asked),
    /// then what earlier runs left: requests that never started booked as lost attempts (the
    /// API cannot be asked about them, and the budget must not assume they were free); the
    /// open attempts and closed streams held until their look-ups land; the look-ups asked
    /// (none when `can_look_up` is false: no key), each booked as it lands beside the new
    /// work. What is booked, held and asked, in what order: [`Core::opening`].
    pub(in crate::engine::core) fn open_leftovers(&mut self, can_look_up: bool, now: &Clock) {
        let left = self.settle.recovery.left.take().unwrap_or_default();
        if let Some(usage) = self.settle.key.take_start() {
            let left_open = !left.is_empty();
            let spent = self.carried_over();
            self.key_usage(usage, spent, KeyMoment::Start { left_open }, now);
        }
        let opening = self.opening(left, can_look_up);
        if !opening.estimates.is_empty() {
            let n = opening.estimates.len();
            let mut total = Usd::ZERO;
            for (e, usd) in opening.estimates {
                total += usd;
                self.land_live(e, Landing::Lost(usd), None, now);
            }
            self.event(
                now,
                format!(
                    "an earlier run stopped with {n} requests sent but unanswered: booked as \
                     lost attempts, {:.6} USD, until the key's true-up corrects them",
                    total.as_f64()
                ),
            );
        }
        if !opening.held.is_empty() {
            // An endpoint's documented close is not taken before it is checked, for what an
            // earlier run left as for new streams (that run held their worst case). Until
            // each look-up lands, its attempt holds money as a live stream does.
            self.doubt_documented_closes(now);
            self.hold_crash(opening.held);
        }
        let (n, c, r) = opening.kinds;
        if opening.look_ups.is_empty() {
            return;
        }
        if n > 0 {
            let text = format!(
                "an earlier run stopped with {n} requests in flight: looking up what they cost"
            );
            self.event(now, text);
        }
        if c > 0 {
            let text = format!(
                "an earlier run closed {c} streams that no look-up confirmed: asking \
                 /generation what each cost (where closing did not stop the bill, each holds \
                 money until then)"
            );
            self.event(now, text);
        }
        if r > 0 {
            let text = format!(
                "{r} ledger lines rebuilt from the outputs by --repair: confirming each at \
                 /generation"
            );
            self.event(now, text);
        }
        self.settle.recovery.asking(&opening.look_ups, c, r);
        self.effects.push(Effect::LookUp {
            items: opening.look_ups,
            until: Until::AgedOut,
            of: Asked::Leftovers,
        });
    }

    /// A look-up of what `of` asked about came back as `answer`, at `now`.
    pub(in crate::engine::core) fn looked_up(&mut self, of: Asked, answer: LookedUp, now: &Clock) {
        match of {
            Asked::Closes => self.close_looked_up(answer, now),
            Asked::Leftovers => self.leftover_looked_up(answer, now),
        }
    }

    /// A closed stream's look-up landed: the API's cost replaces the estimate (an adjustment
    /// line), and what it billed against what was received teaches whether closing there stops
    /// the bill. Not known (the run stops waiting for it) or a figure that cannot be a bill:
    /// its hold stays, and the next start asks again.
    fn close_looked_up(&mut self, answer: LookedUp, now: &Clock) {
        let LookedUp::Done {
            entry,
            cost,
            completion_tokens,
            ..
        } = answer
        else {
            return;
        };
        let landing = self.landing(&entry, cost, now.wall);
        if let Landing::Open { held: true, .. } = landing {
            self.settle.unsettled += 1;
        }
        self.land_live(entry, landing, completion_tokens, now);
    }

    /// One look-up of what an earlier run left came back: booked at what the API says, or
    /// counted as unknown (its line stays open for the next start). Unknown on its first ask,
    /// it is waited for no more (its hold stays) while later passes ask again.
    fn leftover_looked_up(&mut self, answer: LookedUp, now: &Clock) {
        let rec = &mut self.settle.recovery;
        let (entry, cost, completion) = match answer {
            LookedUp::NotOnFirstPass(entry) => {
                rec.first_answers += 1;
                // Near the cap the run waits for it only where its settling would make room
                // (`Budget::look_ups_may_make_room`).
                let landing = Landing::Open {
                    refused: None,
                    held: true,
                    asked_again: true,
                    reckoned: None,
                };
                self.land_live(entry, landing, None, now);
                return;
            }
            LookedUp::Done {
                entry,
                cost,
                said_before,
                completion_tokens,
                ..
            } => {
                rec.first_answers += usize::from(!said_before);
                (entry, cost, completion_tokens)
            }
        };
        rec.back += 1;
        rec.expected_back += open_part(&entry);
        let landing = self.landing(&entry, cost, now.wall);
        let rec = &mut self.settle.recovery;
        match &landing {
            Landing::Found(usd) | Landing::Lost(usd) => {
                rec.settled(&entry);
                rec.total += *usd;
                if matches!(landing, Landing::Lost(_)) {
                    rec.lost += 1;
                } else {
                    rec.found += 1;
                }
            }
            Landing::Closed(_) => {
                rec.settled(&entry);
                rec.closed_confirmed += 1;
            }
            Landing::Rebuilt(_) => rec.confirmed += 1,
            Landing::Open { held, .. } => self.settle.unsettled += usize::from(*held),
        }
        let kind = (
            matches!(landing, Landing::Closed(_)),
            matches!(landing, Landing::Rebuilt(_)),
        );
        let delta = self.land_live(entry, landing, completion, now);
        let rec = &mut self.settle.recovery;
        match kind {
            (true, _) => rec.closed_delta += delta,
            (_, true) => rec.confirmed_delta += delta,
            _ => {}
        }
    }

    /// Every look-up of what earlier runs left has had its first ask answered (or none was
    /// asked): the end of the work need wait only its short grace for the rest.
    pub(crate) fn leftovers_first_pass_done(&self) -> bool {
        let rec = &self.settle.recovery;
        rec.first_answers >= rec.all_asked()
    }

    /// The look-ups of what earlier runs left are over (`all_in`), or the work is and the
    /// driver stopped waiting for them: what they found is said, and those still running are
    /// left open for the next start or `harvest status --reconcile`, in one line.
    pub(in crate::engine::core) fn leftovers_ended(&mut self, all_in: bool, now: &Clock) {
        let rec = &self.settle.recovery;
        let mut said = Vec::new();
        if rec.closed_asked > 0 {
            said.push(confirmed_line(
                "streams an earlier run closed",
                (rec.closed_confirmed, rec.closed_asked, rec.closed_delta),
                ("their estimates", "hold their money"),
            ));
        }
        if rec.rebuilt_asked > 0 {
            said.push(confirmed_line(
                "rebuilt ledger lines",
                (rec.confirmed, rec.rebuilt_asked, rec.confirmed_delta),
                ("the outputs' costs", "keep the outputs' costs"),
            ));
        }
        if rec.asked > 0 {
            said.push(format!(
                "looked up {} requests an earlier run left in flight: {} found at the API, {} \
                 unknown for {} min and booked at what each held against the budget (under \
                 the hard budget, its worst case where a close is billed in full; the key's \
                 true-up at the end of a run with nothing open corrects it), {:.6} USD in \
                 all{}",
                rec.asked,
                rec.found,
                rec.lost,
                UNKNOWN_AFTER.as_secs() / 60,
                rec.total.as_f64(),
                if rec.found + rec.lost < rec.asked {
                    "; the others are too recent to give up on: the next start asks again"
                } else {
                    ""
                }
            ));
        }
        let left = if all_in {
            0
        } else {
            rec.all_asked().saturating_sub(rec.back)
        };
        if left > 0 {
            said.push(format!(
                "{left} look-ups of requests an earlier run left open were still running when \
                 the work was done: left open for the next start or `harvest status \
                 --reconcile` (expected cost {:.6} USD, not booked until the API says)",
                (rec.expected - rec.expected_back).as_f64()
            ));
        }
        self.settle.recovery.left_running = left;
        for text in said {
            self.event(now, text);
        }
    }

    /// Look-ups the key's true-up must wait for: those of earlier runs' leftovers still
    /// running when the work was over, and attempts whose look-up came back unknown (their
    /// holds kept).
    pub(in crate::engine::core) fn look_ups_left(&self) -> usize {
        self.settle.recovery.left_running + self.settle.unsettled
    }

    /// What earlier runs left that a look-up must still settle (open attempts and closed
    /// streams), and, once the end stopped asking, this run's closes not confirmed; with what
    /// they may still add to the ledger.
    pub(crate) fn open_look_ups(&self) -> crate::engine::snapshot::OpenLookUps {
        let (mut count, mut expected) = self.settle.recovery.open;
        if self.settle.closes.ended() {
            let (n, more) = self.settle.closes.unconfirmed();
            count += n;
            expected += more;
        }
        crate::engine::snapshot::OpenLookUps {
            count: count as u64,
            expected,
        }
    }

    /// How often this start's settlings happened.
    #[cfg(test)]
    pub(crate) fn recovery_counts(&self) -> RecoveryCounts {
        let rec = &self.settle.recovery;
        RecoveryCounts {
            found: rec.found,
            lost: rec.lost,
            closed_confirmed: rec.closed_confirmed,
            confirmed: rec.confirmed,
        }
    }
}
