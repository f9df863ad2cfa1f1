//! The core's one door: every [`Event`] the driver sees goes through [`Core::handle`], which
//! decides, then starts what fits, and returns the [`Effect`]s for the driver to perform.
//! Events come from the operator, the attempts, the clock, the listing, the dollar cap and
//! the settling of money with the API; some answer an effect (a new endpoint joining the
//! pool answers [`Effect::Join`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::store::output::{OutputRecord, RejectRecord, SpendEntry};
use crate::store::turns_file::TurnLine;

use super::super::control::Command;
use super::super::endpoint::RunEndpoint;
use super::super::quality::Finding;
use super::attempt::{AttemptResult, Dispatch};
use crate::engine::look_ups::LookedUp;

use super::settle::Asked;
use super::{Clock, Core, Port};

/// What happened, for the core to decide on.
#[derive(Debug)]
pub(crate) enum Event {
    // The driver.
    /// Before the first request: the key's checkpoint, and what earlier runs left booked,
    /// held and asked about (none asked when `can_look_up` is false: no key to ask with);
    /// see [`Core::open_leftovers`].
    Open {
        can_look_up: bool,
    },
    /// What an earlier run's crash left is booked: requests may start.
    Begin,
    /// Time passed (a retry fell due, the request-rate cap opened): only start what fits.
    Wake,
    /// The periodic tick: reservations follow the observed mean, datasets their budgets.
    Tick,
    /// harvest itself cannot go on (a write failed, a task died).
    Failed(String),
    /// A line of the driver's own for the event log (look-ups, the end's overshoot).
    Said(String),

    // The operator.
    Command(Command),

    // The attempts.
    Result(Box<AttemptResult>),
    /// The dollar cap tripped in a worker.
    BudgetHit,

    // The listing and the probe.
    /// A refreshed listing's endpoints, as the run knows them.
    Listing(Vec<RunEndpoint>),
    /// Answers [`Effect::Join`]: the pool with the endpoint when a slot was free.
    Joined {
        endpoint: Box<RunEndpoint>,
        pool: Option<Arc<Vec<RunEndpoint>>>,
    },
    /// `harvest probe`'s agreement with the reference per endpoint tag.
    Probe(HashMap<String, f64>),
    /// Answers that stand out from the others' (from the run's statistics).
    Quality(Vec<Finding>),

    // Settling money with the API.
    /// A look-up at `GET /generation` that [`Effect::LookUp`] asked for `of` came back:
    /// booked as [`Core::landing`] decides. A crash's open attempt is closed, a stream's
    /// booking adjusted to its bill, or its hold kept while nothing waits for it.
    LookedUp {
        of: Asked,
        answer: Box<LookedUp>,
    },
    /// The look-ups of what earlier runs left are all in (`all_in`), or the driver stopped
    /// waiting for them once the work was over ([`Core::leftovers_ended`]).
    LeftoversEnded {
        all_in: bool,
    },
    /// The run's work is over: the streams closed last are asked about
    /// ([`Core::end_look_ups`]).
    EndLookUps,
    /// The end stopped waiting for its look-ups of closed streams, as it says
    /// ([`Core::look_ups_ended`]).
    LookUpsEnded(super::settle::LookUpsEnd),
    /// `GET /key` said the key's usage was `usage` USD when the live spend was `spent`: a
    /// checkpoint, and at the end the true-up of crash estimates ([`Core::key_usage`]).
    KeyUsage {
        usage: f64,
        spent: crate::domain::Usd,
        moment: super::settle::KeyMoment,
    },
}

/// What the driver must do.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Write the attempt's `dispatched` ledger line, then start it.
    Spawn(Box<Dispatch>),
    /// Append a ledger line.
    Ledger(SpendEntry),
    /// Append a kept answer's `complete` line, on disk after the records sent before it (its
    /// row or turn): a crash between them leaves an answer the next start books from its
    /// record, never one booked and kept nowhere.
    BookKept(SpendEntry),
    /// Append an answer to the dataset's outputs (it counts as done at `endpoint`).
    Output {
        dataset: usize,
        endpoint: Option<usize>,
        record: Box<OutputRecord>,
    },
    /// Append a final reject to the dataset's rejects file.
    Reject {
        dataset: usize,
        record: RejectRecord,
    },
    /// Append a finished turn of a multi-turn row in progress to the turns file, for a later
    /// run to continue the row from.
    Turn(Box<TurnLine>),
    /// Close every attempt in flight (stop now).
    CancelInFlight,
    /// Ask `GET /generation` what these generations (by id; streams closed, or what earlier
    /// runs left, as `of` says) really cost, in the background until `until`; each answer
    /// comes back as [`Event::LookedUp`].
    LookUp {
        items: Vec<(String, SpendEntry)>,
        until: crate::engine::reconcile::Until,
        of: Asked,
    },
    /// Endpoint `index` has new prices: put its new entry in the pool the workers read.
    Repriced {
        index: usize,
        endpoint: Box<RunEndpoint>,
    },
    /// The listing shows a new endpoint: add it to the pool if a slot is free, and answer
    /// with [`Event::Joined`].
    Join(Box<RunEndpoint>),
    /// Add this many picodollars (or take them away) to what the dollar cap holds for streams
    /// that run to their end whatever happens: a crash's open attempts.
    Hold(i64),
    /// Add this to the live spend the workers' dollar cap reads: money the core booked that no
    /// worker accrued (a key true-up; the answer a provider goes on to bill for a stream closed
    /// before it named its generation).
    Spent(crate::domain::Usd),
}

impl Core {
    /// Decides on `event` at `now`, then (once begun) starts what fits; returns what the
    /// driver must do. The core's only door that changes it.
    pub(crate) fn handle(&mut self, event: Event, port: &mut dyn Port, now: &Clock) -> Vec<Effect> {
        self.budget.published();
        if self.fleet.has_closes_before() {
            self.carry_closes(now);
        }
        match event {
            Event::Open { can_look_up } => self.open_leftovers(can_look_up, now),
            Event::Begin => self.life.begun = true,
            Event::Wake => {}
            Event::Tick => self.tick(&*port, now),
            Event::Failed(detail) => self.fail(now, detail),
            Event::Said(text) => self.event(now, text),
            Event::Command(c) => self.apply(c, None, now),
            Event::Result(r) => self.on_result(*r, now),
            Event::BudgetHit => self.budget_hit(now),
            Event::Listing(endpoints) => self.listing(endpoints, now),
            Event::Joined { endpoint, pool } => self.endpoint_added(&endpoint, pool, now),
            Event::Probe(agreement) => {
                self.fleet.set_probe(agreement);
                self.fleet.refresh_verdicts();
            }
            Event::Quality(findings) => self.note_quality(findings, now),
            Event::LookedUp { of, answer } => self.looked_up(of, *answer, now),
            Event::LeftoversEnded { all_in } => self.leftovers_ended(all_in, now),
            Event::EndLookUps => self.end_look_ups(now),
            Event::LookUpsEnded(how) => self.look_ups_ended(how, now),
            Event::KeyUsage {
                usage,
                spent,
                moment,
            } => self.key_usage(usage, spent, moment, now),
        }
        if self.life.begun {
            self.doubt_documented_closes(now);
            self.dispatch(port, now);
        }
        self.ask_closed();
        std::mem::take(&mut self.effects)
    }
}
