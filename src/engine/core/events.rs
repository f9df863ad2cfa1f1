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
use super::settle::Landing;
use super::{Clock, Core, Port};

/// What happened, for the core to decide on.
#[derive(Debug)]
pub(crate) enum Event {
    // The driver.
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
    /// The attempts an earlier run's crash left open, before their look-ups: each holds money
    /// against the budget until its look-up lands.
    CrashOpen(Vec<SpendEntry>),
    /// A look-up of `entry` at `GET /generation` landed, or what an earlier run left is given
    /// up on: booked as [`Core::landing`] decided (the driver adds
    /// [`Landing::live_delta`] to the live spend first). A crash's open attempt is closed, a
    /// stream's booking adjusted to its bill, or its hold kept while nothing waits for it.
    Landed {
        entry: Box<SpendEntry>,
        landing: Landing,
        /// The completion tokens the API billed, when it says.
        completion_tokens: Option<u64>,
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
    /// Ask `GET /generation` what these closed streams (by generation id) really cost, in the
    /// background until `until`; each answer comes back as [`Event::Landed`].
    LookUp {
        items: Vec<(String, SpendEntry)>,
        until: crate::engine::reconcile::Until,
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
        if self.fleet.has_closes_before() {
            self.carry_closes(now);
        }
        match event {
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
            Event::Landed {
                entry,
                landing,
                completion_tokens,
            } => {
                self.close_landed(&entry, &landing);
                self.land(*entry, landing, completion_tokens, now)
            }
            Event::EndLookUps => self.end_look_ups(now),
            Event::LookUpsEnded(how) => self.look_ups_ended(how, now),
            Event::CrashOpen(open) => {
                // An endpoint's documented close is not taken before it is checked, for what
                // an earlier run left as for new streams (that run held their worst case).
                self.doubt_documented_closes(now);
                self.hold_crash(open)
            }
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
