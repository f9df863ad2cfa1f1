//! Settling with the API the money that outlives a stream or a process, as pure decisions:
//! what a start books at once, holds and looks up of what earlier runs left ([`Leftovers`],
//! [`Core::opening`](super::Core), [`Recovery`]), how each look-up's answer is booked
//! ([`Landing`]; a closed stream still unknown reckoned again, `reckon`), this run's own closed
//! streams asked about and settled the same way ([`Closes`]), and the key's checkpoints and
//! true-up of crash estimates ([`KeyAccount`]). The driver performs them with its GETs to
//! `/generation` and `/key`; the seeded simulation's crash worlds run the same decisions
//! against a disk a crash left (issue #52).

use crate::domain::Usd;
use crate::store::output::SpendEntry;

use super::Clock;

mod closes;
mod key;
mod landing;
mod leftovers;
mod reckon;
mod recovery;

pub(crate) use closes::{Closes, LookUpsEnd};
pub(crate) use key::{KeyAccount, KeyMoment};
pub(crate) use landing::Landing;
pub(crate) use leftovers::Leftovers;
pub(crate) use recovery::{Asked, Recovery};

/// Most closed streams looked up for reconciliation (a cap hit closes at most `concurrency`).
const RECONCILE_CAPACITY: usize = 100_000;

/// The core's room for settling money with the API.
#[derive(Debug, Default)]
pub(crate) struct Settlement {
    /// This run's closed streams' look-ups: waiting for a batch, unconfirmed, reckoned at the
    /// end.
    closes: Closes,
    /// Streams this run closed and asked the driver to look up (bounded by
    /// `RECONCILE_CAPACITY`).
    asked: usize,
    /// What earlier runs left, and its look-ups as they land.
    recovery: Recovery,
    /// Attempts whose look-up came back unknown, their holds kept: the key's true-up waits
    /// for a run with none.
    unsettled: usize,
    /// The key's last quiet checkpoint and the crash estimates booked since.
    key: KeyAccount,
}

impl Settlement {
    /// Another closed stream may be asked about at `/generation` (they are bounded).
    pub(in crate::engine::core) fn may_ask(&self) -> bool {
        self.asked < RECONCILE_CAPACITY
    }

    /// Stream `g` was closed and booked at `entry`: asked about with the next batch.
    pub(in crate::engine::core) fn ask_about(&mut self, g: String, entry: SpendEntry) {
        self.asked += 1;
        self.closes.wait(g, entry);
    }

    /// A crash estimate of `usd` was booked now: it counts in the next key true-up.
    pub(in crate::engine::core) fn estimated(&mut self, usd: Usd) {
        self.key.estimated(usd);
    }

    /// A stream closed before it named its generation, where a close may be billed in full,
    /// was booked at an estimate now: the key's true-up waits for its bill.
    pub(in crate::engine::core) fn unseen_close(&mut self, now: &Clock) {
        self.key.unseen_close(now);
    }
}
