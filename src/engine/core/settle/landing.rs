//! How the answer of one look-up at `GET /generation` is booked: a crash's open attempt, a
//! stream a run closed, or a line `--repair` rebuilt, each by its own rule, every figure
//! checked before it is booked ([`crate::booked_cost`]).

use crate::booked_cost::CostRefused;
use crate::domain::Usd;
use crate::engine::reconcile::{Settle, settle};
use crate::store::output::{SpendEntry, SpendKind};
use crate::store::scan::REBUILT;

use super::super::Core;

/// What a look-up's answer books.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Landing {
    /// A crash's open attempt the API knows: closed by a `recovered` line at its cost.
    Found(Usd),
    /// A crash's open attempt the API will not learn of now (older than
    /// [`UNKNOWN_AFTER`](crate::engine::reconcile::UNKNOWN_AFTER)): closed by an estimated
    /// `unknown` line at what the core says a lost attempt costs ([`Core::lost_cost`]).
    Lost(Usd),
    /// A closed stream's bill, found or (unknown for good) what a lost close costs: an
    /// adjustment from its booking to this, which releases its hold.
    Closed(Usd),
    /// A rebuilt line's cost at the API: an adjustment from the output's cost to this.
    Rebuilt(Usd),
    /// Not settled now: unknown to the API yet, or (`refused`) a figure that cannot be a bill.
    /// An attempt that holds money (`held`) keeps its hold, waited for no more; the next
    /// start asks again.
    Open {
        refused: Option<CostRefused>,
        held: bool,
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
                },
                None => Landing::Open {
                    refused: None,
                    held: false,
                },
            };
        }
        let closed = entry.kind == SpendKind::Cancelled;
        match settle(entry, cost, now) {
            Settle::Found(usd) if closed => Landing::Closed(usd),
            Settle::Found(usd) => Landing::Found(usd),
            Settle::Lost if closed => Landing::Closed(self.lost_cost(entry)),
            Settle::Lost => Landing::Lost(self.lost_cost(entry)),
            Settle::Wait => Landing::Open {
                refused: None,
                held: true,
            },
            Settle::Refused(why) => Landing::Open {
                refused: Some(why),
                held: true,
            },
        }
    }
}
