//! The journal: the run's event log (the last lines, kept for the views, each also logged
//! through `tracing`), and the one set of things said once (a new endpoint, a price that
//! parted from the listing, the budget's first warning), so that each is said once and a
//! room cannot reach another room's flag.

use std::collections::{HashSet, VecDeque};
use std::time::Instant;

use super::super::quality::Deviation;
use super::super::snapshot::EventLine;
use super::Clock;

/// Most events kept for the snapshot's log.
const EVENT_CAPACITY: usize = 200;

/// Something the event log says once (per endpoint, where it names one).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Once {
    /// The dollar budget leaves room for too few requests.
    BudgetNearly,
    /// An endpoint's answers stand out from the others' (by kind).
    Quality(String, Deviation),
    /// A listing shows an endpoint the run did not start with.
    NewEndpoint(String),
    /// An endpoint returns its thinking inline, in the answer's text.
    InlineThink(String),
    /// The allowed set cannot be named to OpenRouter.
    Inexpressible,
    /// An endpoint's bill parted from its listed prices.
    PriceGap(String),
    /// An endpoint answered on the operator's own provider key (BYOK).
    Byok(String),
    /// No endpoint can take a request (said again once one could and then none can).
    Stuck,
    /// No endpoint that may serve takes a dataset's parameters (by dataset).
    NoEligible(String),
    /// A close is checked at an endpoint (by tag).
    CancelCheck(String),
    /// The run waits near the cap for bills its look-ups ask about again.
    BillsAskedLater,
}

/// The event log and what it has said once.
pub(super) struct Journal {
    started: Instant,
    events: VecDeque<EventLine>,
    total: u64,
    said: HashSet<Once>,
}

impl Journal {
    pub(super) fn new(started: Instant) -> Journal {
        Journal {
            started,
            events: VecDeque::new(),
            total: 0,
            said: HashSet::new(),
        }
    }

    /// Adds a line to the log (and to the log file, through `tracing`).
    pub(super) fn push(&mut self, now: &Clock, text: String) {
        tracing::info!("{text}");
        self.total += 1;
        if self.events.len() >= EVENT_CAPACITY {
            self.events.pop_front();
        }
        self.events.push_back(EventLine {
            at_s: self.elapsed_s(now),
            text,
        });
    }

    /// True the first time `what` is asked about (it is to be said now), false after.
    pub(super) fn first(&mut self, what: Once) -> bool {
        self.said.insert(what)
    }

    /// `what` may be said again (the condition it named has passed).
    pub(super) fn forget(&mut self, what: &Once) {
        self.said.remove(what);
    }

    pub(super) fn elapsed_s(&self, now: &Clock) -> f64 {
        now.mono
            .saturating_duration_since(self.started)
            .as_secs_f64()
    }

    pub(super) fn events(&self) -> &VecDeque<EventLine> {
        &self.events
    }

    /// Lines logged since the start (the log keeps the last ones).
    pub(super) fn total(&self) -> u64 {
        self.total
    }
}
