//! The streams this run closed, settled with `GET /generation` while it runs and at its end:
//! each is asked about once the event that closed it is decided ([`Effect::LookUp`]), is
//! unconfirmed until its look-up
//! lands, and at the end, once the driver stops asking ([`LookUpsEnd`]), one still unknown is
//! reckoned again by how long it has gone unknown and what is left is said and counted for the
//! next start. The driver only performs the GETs and says when it stopped waiting; the seeded
//! simulation runs the same decisions (issue #52 item 1).
//!
//! [`Effect::LookUp`]: super::super::Effect::LookUp

use std::collections::HashMap;

use crate::domain::Usd;
use crate::engine::reconcile::{CLOSED_DEADLINE, Until, open_part};
use crate::store::output::SpendEntry;

use super::super::{Clock, Core, Effect};
use super::{Asked, Landing};

/// How the end of a run stopped asking about its closed streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LookUpsEnd {
    /// Nothing was asked at the end (a stop-now first, or no key to ask with): what waited is
    /// unconfirmed as it stands.
    NotAsked,
    /// A stop-now came while the end waited for its look-ups.
    StoppedNow,
    /// Every look-up came back, or [`CLOSED_DEADLINE`] passed.
    Deadline,
}

/// The closed streams' look-ups as the core keeps them.
#[derive(Debug, Default)]
pub(crate) struct Closes {
    /// Closed since the last batch was asked.
    waiting: Vec<(String, SpendEntry)>,
    /// Asked and not confirmed yet (out, or unknown when asked), by generation id: each may
    /// still add to the ledger ([`open_part`]: where a close is billed in full, the rest of
    /// its answer).
    unconfirmed: HashMap<String, Unconfirmed>,
    /// Found at the API, and what their costs changed against the estimates.
    fixed: u64,
    delta: Usd,
    /// The end stopped asking: what is unconfirmed now stays so for this run.
    ended: bool,
}

/// A closed stream asked about and not confirmed.
#[derive(Debug)]
struct Unconfirmed {
    entry: SpendEntry,
    /// Its look-up came back unknown (and its expectation was reckoned again then), rather
    /// than being ended still out.
    heard: bool,
}

impl Closes {
    /// Stream `g` was closed and booked at `entry`: asked about with the next batch.
    pub(super) fn wait(&mut self, g: String, entry: SpendEntry) {
        self.waiting.push((g, entry));
    }

    /// Closed streams to ask about now (unconfirmed from here on).
    fn batch(&mut self) -> Vec<(String, SpendEntry)> {
        let items = std::mem::take(&mut self.waiting);
        for (g, entry) in &items {
            let u = Unconfirmed {
                entry: entry.clone(),
                heard: false,
            };
            self.unconfirmed.insert(g.clone(), u);
        }
        items
    }

    /// Waiting to be asked, or asked and not confirmed.
    fn pending(&self) -> usize {
        self.waiting.len() + self.unconfirmed.len()
    }

    /// `entry`'s look-up landed as `landing` (`false`: not one of this run's closes).
    fn landed(&mut self, entry: &SpendEntry, landing: &Landing) -> bool {
        let Some(g) = entry.generation_id.as_ref() else {
            return false;
        };
        let Some(u) = self.unconfirmed.get_mut(g) else {
            return false;
        };
        match landing {
            Landing::Open { reckoned, .. } => {
                u.heard = true;
                if reckoned.is_some() {
                    u.entry.expected_usd = *reckoned;
                }
            }
            _ => {
                self.fixed += 1;
                self.delta += landing.live_delta(entry);
                self.unconfirmed.remove(g);
            }
        }
        true
    }

    /// Those whose look-ups were ended still out, in the order they were closed: nothing came
    /// back to reckon them by.
    fn not_heard(&self) -> Vec<SpendEntry> {
        let mut v: Vec<SpendEntry> = (self.unconfirmed.values())
            .filter(|u| !u.heard)
            .map(|u| u.entry.clone())
            .collect();
        v.sort_by(|a, b| (&a.at, &a.attempt).cmp(&(&b.at, &b.attempt)));
        v
    }

    /// How many are unconfirmed, and what they may still add to the ledger.
    pub(crate) fn unconfirmed(&self) -> (usize, Usd) {
        let more = (self.unconfirmed.values())
            .map(|u| open_part(&u.entry))
            .sum();
        (self.unconfirmed.len(), more)
    }
}

impl Core {
    /// After each event: the streams it closed are asked about at once, in the background,
    /// until each is found or ages out. (Asked at the next tick, as the driver did, the seeded
    /// world 1703 passed its hard budget by 4.25%, with a stopper trusted 3.5 s before its cap
    /// on checks whose look-ups landed late, and world 872's true-up was refused; asked at
    /// once, both hold.)
    pub(in crate::engine::core) fn ask_closed(&mut self) {
        if self.settle.closes.waiting.is_empty() {
            return;
        }
        let items = self.settle.closes.batch();
        let until = Until::AgedOut;
        self.effects.push(Effect::LookUp {
            items,
            until,
            of: Asked::Closes,
        });
    }

    /// A look-up landed as `landing`: if it was of one of this run's closes, it is confirmed,
    /// or known to be unknown still.
    pub(in crate::engine::core) fn close_landed(&mut self, entry: &SpendEntry, landing: &Landing) {
        self.settle.closes.landed(entry, landing);
    }

    /// The run's work is over: every close was asked about when it was decided, and the
    /// driver now waits for the look-ups still out, for at most [`CLOSED_DEADLINE`]; the log
    /// says so (the views would otherwise sit still while it lasts). Then the driver says how
    /// it stopped ([`Core::look_ups_ended`]).
    pub(in crate::engine::core) fn end_look_ups(&mut self, now: &Clock) {
        let n = self.settle.closes.pending();
        if n == 0 {
            return;
        }
        self.event(
            now,
            format!(
                "looking up what {n} closed streams cost at /generation (up to {}s; stop now to \
                 leave them at their estimates)",
                CLOSED_DEADLINE.as_secs()
            ),
        );
    }

    /// The end stopped asking, as `how` says: the closes whose look-ups were still out are
    /// reckoned again by how long they have gone unknown ([`Landing::Open`]'s `reckoned`; they
    /// hold nothing more at the end), what was found is said, and what is left unconfirmed
    /// is said with what it may still add, until the next start (or `harvest status
    /// --reconcile`) asks again ([`Closes::unconfirmed`], for the run's summary). A drain
    /// after 25 s whose closes were still unknown ended with its ledger 24% under the bill and
    /// said nothing of it.
    pub(in crate::engine::core) fn look_ups_ended(&mut self, how: LookUpsEnd, now: &Clock) {
        self.settle.closes.ended = true;
        if how != LookUpsEnd::NotAsked {
            for entry in self.settle.closes.not_heard() {
                let reckoned = self.reckon_unknown_close(&entry, now.wall);
                if reckoned.is_none() {
                    continue;
                }
                let landing = Landing::Open {
                    refused: None,
                    held: false,
                    asked_again: false,
                    reckoned,
                };
                self.settle.closes.landed(&entry, &landing);
                self.land(entry, landing, None, now);
            }
        }
        if self.settle.closes.fixed > 0 {
            let text = format!(
                "reconciled {} closed streams with /generation: {:+.6} USD",
                self.settle.closes.fixed,
                self.settle.closes.delta.as_f64()
            );
            self.event(now, text);
        }
        let (n, more) = self.settle.closes.unconfirmed();
        if n == 0 {
            return;
        }
        let why = match how {
            LookUpsEnd::Deadline => format!("not known within {}s", CLOSED_DEADLINE.as_secs()),
            LookUpsEnd::NotAsked | LookUpsEnd::StoppedNow => "stopped now".to_string(),
        };
        let text = format!(
            "{n} closed streams not confirmed at /generation ({why}): booked at their \
             estimates, expected {:.4} USD more than that, until the next start (or `harvest \
             status --reconcile`) asks again",
            more.as_f64()
        );
        self.event(now, text);
    }
}

impl Closes {
    /// The end stopped asking about this run's closes.
    pub(super) fn ended(&self) -> bool {
        self.ended
    }
}
