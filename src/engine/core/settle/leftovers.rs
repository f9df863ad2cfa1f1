//! What an earlier run left for a start to settle, read once from its directory's scan, and
//! what the start does with it first: books, holds, and the order of its look-ups.

use crate::domain::Usd;
use crate::store::output::SpendEntry;
use crate::store::scan::DirScan;

use super::super::Core;

/// What earlier runs of a directory left open with the API.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    /// Requests sent that never started (no generation to look up).
    unknown: Vec<SpendEntry>,
    /// Started and never closed, their answers not among the outputs: generations to look up.
    orphans: Vec<SpendEntry>,
    /// Streams a run closed (booked at its estimate) that no look-up confirmed.
    closed: Vec<SpendEntry>,
    /// Ledger lines `--repair` rebuilt from the outputs that no look-up confirmed.
    rebuilt: Vec<SpendEntry>,
}

/// What a start does with [`Leftovers`] before it sends anything.
#[derive(Debug, Default)]
pub(crate) struct Opening {
    /// Requests booked now at what a lost attempt costs (the API cannot be asked about them,
    /// and the budget must not assume they were free): the key's true-up corrects them.
    pub(crate) estimates: Vec<(SpendEntry, Usd)>,
    /// Attempts that hold money against the budget until their look-ups land.
    pub(crate) held: Vec<SpendEntry>,
    /// The look-ups, in the order asked: a crash's open attempts (likely billed past the
    /// crash first, then dearest), then closed streams, then rebuilt lines.
    pub(crate) look_ups: Vec<(String, SpendEntry)>,
    /// How many of the look-ups are of each kind: open attempts, closed streams, rebuilt.
    pub(crate) kinds: (usize, usize, usize),
}

impl Leftovers {
    /// What `scan` leaves open: the same for `run`, `run --check` and `status`.
    pub(crate) fn from_scan(scan: &DirScan) -> Leftovers {
        // In the order they were written (the scan keeps them by attempt, in no order): the
        // same directory is settled the same way every time.
        let in_order = |mut v: Vec<SpendEntry>| {
            v.sort_by(|a, b| (&a.at, &a.attempt, &a.id).cmp(&(&b.at, &b.attempt, &b.id)));
            v
        };
        Leftovers {
            unknown: in_order(scan.ledger.unknown.clone()),
            orphans: in_order(scan.orphans()),
            closed: in_order(scan.ledger.closed_unconfirmed.clone()),
            rebuilt: in_order(scan.ledger.rebuilt.clone()),
        }
    }

    /// Nothing is left to book or look up.
    pub(crate) fn is_empty(&self) -> bool {
        self.unknown.is_empty()
            && self.orphans.is_empty()
            && self.closed.is_empty()
            && self.rebuilt.is_empty()
    }

    /// The generations a look-up must still settle (open attempts and closed streams) and
    /// what they may still add to the ledger ([`open_part`](crate::engine::reconcile::open_part)).
    pub(crate) fn open_look_ups(&self) -> (usize, Usd) {
        let open = self.orphans.iter().chain(&self.closed);
        let usd = open.clone().map(crate::engine::reconcile::open_part).sum();
        (open.count(), usd)
    }

    /// The attempts whose generations a look-up settles: open ones, then closed streams.
    pub(crate) fn to_look_up(&self) -> impl Iterator<Item = &SpendEntry> {
        self.orphans.iter().chain(&self.closed)
    }
}

impl Core {
    /// What the start does with `left`: books the requests that never started at what a lost
    /// attempt costs, holds money for the open attempts and closed streams until their
    /// look-ups land, and orders the look-ups (none without a key: `can_look_up` false books
    /// the estimates only, and the rest waits for a start that can ask).
    pub(crate) fn opening(&self, left: Leftovers, can_look_up: bool) -> Opening {
        // As an open attempt the API never learns of ([`Core::lost_cost`]): a request that
        // left but never streamed may still have been generated and billed in full where a
        // close does not stop the bill (HARVEST_SIM_SEED=733: six such, booked at their
        // expectation under the hard budget, took its bill 0.61% past it).
        let estimates = (left.unknown.into_iter())
            .map(|e| {
                let usd = self.lost_cost(&e);
                (e, usd)
            })
            .collect();
        if !can_look_up {
            return Opening {
                estimates,
                ..Opening::default()
            };
        }
        let held: Vec<SpendEntry> = left.orphans.iter().chain(&left.closed).cloned().collect();
        let mut open: Vec<(String, SpendEntry)> = (left.orphans.into_iter())
            .filter_map(|e| Some((e.generation_id.clone()?, e)))
            .collect();
        // What was likely billed past the crash first (it is found on the first ask, and its
        // hold is the largest), dearest first.
        open.sort_by_key(|(_, e)| {
            (
                !self.likely_billed(e),
                std::cmp::Reverse(e.expected_usd.unwrap_or_default()),
            )
        });
        let with_generation = |v: Vec<SpendEntry>| {
            v.into_iter()
                .filter_map(|e| Some((e.generation_id.clone()?, e)))
        };
        let closed: Vec<_> = with_generation(left.closed).collect();
        let rebuilt: Vec<_> = with_generation(left.rebuilt).collect();
        let kinds = (open.len(), closed.len(), rebuilt.len());
        let mut look_ups = open;
        look_ups.extend(closed);
        look_ups.extend(rebuilt);
        Opening {
            estimates,
            held,
            look_ups,
            kinds,
        }
    }
}

#[cfg(test)]
impl Leftovers {
    /// Open attempts (`started` lines, their answers nowhere) and closed streams no look-up
    /// confirmed, as a directory's scan leaves them.
    pub(crate) fn of(orphans: Vec<SpendEntry>, closed: Vec<SpendEntry>) -> Leftovers {
        Leftovers {
            orphans,
            closed,
            ..Leftovers::default()
        }
    }

    /// Requests sent that never started: a start books each as a lost attempt.
    pub(crate) fn never_started(&self) -> usize {
        self.unknown.len()
    }
}
