//! How the answer of one look-up at `GET /generation` is booked: a crash's open attempt, a
//! stream a run closed, or a line `--repair` rebuilt, each by its own rule, every figure
//! checked before it is booked ([`crate::booked_cost`]).

use crate::booked_cost::CostRefused;
use crate::domain::Usd;
use crate::engine::reconcile::{Settle, settle};
use crate::store::output::{SpendEntry, SpendKind};
use crate::store::scan::REBUILT;

use super::super::{Clock, Core, Effect};

/// What a look-up's answer books.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Landing {
    /// A crash's open attempt the API knows: closed by a `recovered` line at its cost.
    Found(Usd),
    /// A crash's open attempt the API will not learn of now (older than
    /// [`UNKNOWN_AFTER`](crate::engine::reconcile::UNKNOWN_AFTER)): closed by an estimated
    /// `unknown` line at what the core says a lost attempt costs ([`Core::lost_cost`]).
    Lost(Usd),
    /// A closed (or cut) stream's bill, found or (unknown for good) what a lost close costs:
    /// an adjustment from its booking to this, which releases its hold.
    Closed(Usd),
    /// A rebuilt line's cost at the API: an adjustment from the output's cost to this.
    Rebuilt(Usd),
    /// Not settled now: unknown to the API yet, or (`refused`) a figure that cannot be a bill.
    /// An attempt that holds money (`held`) keeps its hold; `asked_again` by the look-ups'
    /// later passes (unknown on its first ask), or not by this run (the next start asks). A
    /// closed stream still unknown has its expected cost `reckoned` again from how long it
    /// has been unknown ([`Core::reckon_unknown_close`]), when that says more.
    Open {
        refused: Option<CostRefused>,
        held: bool,
        asked_again: bool,
        reckoned: Option<Usd>,
    },
}

impl Core {
    /// How `entry`'s look-up, which found `cost` (`None`: the API does not know it), is
    /// booked at `now`.
    pub(crate) fn landing(
        &self,
        entry: &SpendEntry,
        cost: Option<f64>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Landing {
        if entry.kind == SpendKind::Complete && entry.attempt.as_deref() == Some(REBUILT) {
            // A rebuilt line keeps the output's cost until the API says; it holds nothing.
            return match cost.map(|c| crate::booked_cost::check(c, entry.worst_usd)) {
                Some(Ok(usd)) => Landing::Rebuilt(usd),
                Some(Err(why)) => Landing::Open {
                    refused: Some(why),
                    held: false,
                    asked_again: false,
                    reckoned: None,
                },
                None => Landing::Open {
                    refused: None,
                    held: false,
                    asked_again: false,
                    reckoned: None,
                },
            };
        }
        // A crash's open attempt (`started`: nothing booked yet) is closed by its look-up; any
        // other line (a stream closed or cut, booked at an estimate) is adjusted to the bill.
        let closed = !matches!(entry.kind, SpendKind::Started | SpendKind::Dispatched);
        match settle(entry, cost, now) {
            Settle::Found(usd) if closed => Landing::Closed(usd),
            Settle::Found(usd) => Landing::Found(usd),
            Settle::Lost if closed => Landing::Closed(self.lost_cost(entry)),
            Settle::Lost => Landing::Lost(self.lost_cost(entry)),
            Settle::Wait => Landing::Open {
                refused: None,
                held: true,
                asked_again: false,
                reckoned: self.reckon_unknown_close(entry, now),
            },
            Settle::Refused(why) => Landing::Open {
                refused: Some(why),
                held: true,
                asked_again: false,
                reckoned: None,
            },
        }
    }
}

impl Landing {
    /// What booking it adds to the live spend the workers' dollar cap reads (added before the
    /// core books it, so that nothing dispatched meanwhile counts on money already spent).
    pub(crate) fn live_delta(&self, entry: &SpendEntry) -> Usd {
        match self {
            Landing::Found(usd) | Landing::Lost(usd) => *usd,
            Landing::Closed(actual) | Landing::Rebuilt(actual) => *actual - entry.usd,
            Landing::Open { .. } => Usd::ZERO,
        }
    }
}

impl Core {
    /// Tells the live spend the workers' dollar cap reads of `usd` booked that no worker
    /// accrued ([`Effect::Spent`]); what this event starts counts it already.
    pub(in crate::engine::core) fn spend_live(&mut self, usd: Usd) {
        self.budget.unpublished(usd.pico());
        self.effects.push(Effect::Spent(usd));
    }

    /// Books `landing` as [`Core::land`] does, and adds what it books to the live spend the
    /// workers' dollar cap reads ([`Effect::Spent`], performed before any request this event
    /// starts: the core starts what fits only after it decided). Returns what it added.
    pub(in crate::engine::core) fn land_live(
        &mut self,
        entry: SpendEntry,
        landing: Landing,
        completion_tokens: Option<u64>,
        now: &Clock,
    ) -> Usd {
        let delta = landing.live_delta(&entry);
        self.close_landed(&entry, &landing);
        self.land(entry, landing, completion_tokens, now);
        if delta != Usd::ZERO {
            self.spend_live(delta);
        }
        delta
    }

    /// Books `landing` of `entry`'s look-up (the API billed `completion_tokens`, when it said):
    /// its ledger line, its hold released or kept ([`super::super::Event::LookedUp`]).
    pub(in crate::engine::core) fn land(
        &mut self,
        entry: SpendEntry,
        landing: Landing,
        completion_tokens: Option<u64>,
        now: &Clock,
    ) {
        match landing {
            Landing::Found(usd) => {
                self.release_open_bill(&entry);
                self.book_carried(entry, SpendKind::Recovered, usd, false, now);
            }
            Landing::Lost(usd) => {
                self.settle.key.estimated(usd);
                self.release_open_bill(&entry);
                self.book_carried(entry, SpendKind::Unknown, usd, true, now);
            }
            Landing::Closed(actual) => self.book_adjustment(entry, actual, completion_tokens, now),
            Landing::Rebuilt(actual) => {
                // One line even when the output's cost was right: it marks the line confirmed
                // for later starts.
                self.ledger(SpendEntry {
                    note: Some("a rebuilt line confirmed at /generation".into()),
                    ..entry.adjusted_to(actual, now.rfc3339())
                });
            }
            Landing::Open {
                refused,
                held,
                asked_again,
                reckoned,
            } => {
                if let Some(expected) = reckoned {
                    let why = "still unknown at /generation when the run stopped asking";
                    self.ledger(entry.clone().reckoned(expected, now.rfc3339(), why));
                }
                if let Some(why) = refused {
                    let g = entry.generation_id.as_deref().unwrap_or("?");
                    let text = format!(
                        "/generation answered {why} for generation {g} (prompt {:?} of {}): \
                         not booked, its money held until the API says what it cost",
                        entry.id, entry.dataset
                    );
                    tracing::warn!("{text}");
                    self.event(now, text);
                }
                if held {
                    self.budget.unsettled(&entry, asked_again);
                }
            }
        }
    }
}
