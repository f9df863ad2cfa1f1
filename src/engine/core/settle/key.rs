//! The key's own count against the ledger: `GET /key`'s usage, asked by the driver at a
//! run's start and end, is written as a checkpoint, and the crash estimates booked since the
//! last quiet checkpoint (requests a crash left whose cost no look-up could learn) are trued
//! up to what the key's count explains. The driver only asks the key ([`Event::KeyUsage`]);
//! what is booked, and whether a checkpoint can be a later true-up's base, is decided here,
//! so that the seeded simulation's crash worlds run the same decisions (issue #52 item 1).
//!
//! [`Event::KeyUsage`]: super::super::Event::KeyUsage

use crate::domain::Usd;
use crate::engine::reconcile::{KeyVerdict, key_verdict, start_is_quiet};
use crate::store::output::{KeyCheckpoint, SpendEntry, SpendKind};
use crate::store::scan::KeyBase;

use super::super::{Clock, Core};

/// When the key's usage was asked, with what only the driver knows then.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum KeyMoment {
    /// Before the first request; `left_open`: an earlier run's crash left attempts open.
    Start { left_open: bool },
    /// At the end: `look_ups_out` of the driver's look-ups of closed streams are still out
    /// (the core adds those of earlier runs' leftovers it left, [`Core::look_ups_left`]), and
    /// whether the run is stopping now.
    End {
        look_ups_out: usize,
        stopping_now: bool,
    },
}

/// The base a true-up is made against: the last quiet checkpoint (nothing in flight or open
/// then) and the crash estimates booked since. `None` until a quiet checkpoint is known.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyAccount {
    base: Option<KeyBase>,
    /// When the last stream closed before it named its generation was closed (booked at an
    /// estimate): until [`UNKNOWN_AFTER`](crate::engine::reconcile::UNKNOWN_AFTER) past it,
    /// the provider may still be answering it, so the key's count does not yet hold its bill.
    last_unseen: Option<std::time::Instant>,
    /// The key's usage at the start (`GET /key`), until the start's checkpoint is written;
    /// and whether there was one (without it, the end asks nothing: no true-up, no checkpoint).
    at_start: Option<f64>,
    asked_at_start: bool,
}

impl KeyAccount {
    /// A crash estimate booked now counts in the next true-up.
    pub(super) fn estimated(&mut self, usd: Usd) {
        if let Some(b) = self.base.as_mut() {
            b.estimated += usd;
            b.estimated_lines += 1;
        }
    }

    /// A stream closed before it named its generation was booked at an estimate now.
    pub(super) fn unseen_close(&mut self, now: &Clock) {
        self.last_unseen = Some(now.mono);
    }

    /// Whether such an estimate is young enough that its bill may still be on its way: a
    /// true-up now would take it back, and the provider's bill, landing later, would be
    /// booked nowhere.
    fn unseen_pending(&self, now: &Clock) -> bool {
        let after = crate::engine::reconcile::UNKNOWN_AFTER;
        (self.last_unseen).is_some_and(|t| now.mono.saturating_duration_since(t) < after)
    }

    /// The key's usage at the start, once (for the start's checkpoint).
    pub(super) fn take_start(&mut self) -> Option<f64> {
        self.at_start.take()
    }

    /// Crash estimates booked since the base, waiting for a true-up.
    fn waiting(&self) -> Usd {
        self.base.as_ref().map_or(Usd::ZERO, |b| b.estimated)
    }
}

impl Core {
    /// The output directory's last quiet key checkpoint and the crash estimates booked since
    /// (`LedgerScan::key_base`).
    pub(crate) fn with_key_base(mut self, base: Option<KeyBase>) -> Self {
        self.settle.key.base = base;
        self
    }

    /// The key's usage at the start (`GET /key`, `None` when it was not asked or not
    /// answered): the start's checkpoint ([`Event::Open`](super::super::Event::Open)).
    pub(crate) fn with_key_at_start(mut self, usage: Option<f64>) -> Self {
        self.settle.key.at_start = usage;
        self.settle.key.asked_at_start = usage.is_some();
        self
    }

    /// The end of the run asks the key's usage (for the true-up and the end's checkpoint):
    /// only where the start had it.
    pub(crate) fn asks_key_at_end(&self) -> bool {
        self.settle.key.asked_at_start
    }

    /// The key's usage was `usage` USD when the live spend was `spent`. At the start, a
    /// checkpoint, quiet when nothing an earlier run left is open and no crash estimate
    /// waits for a true-up (a base after them would leave them out of every true-up). At the
    /// end, with no look-up out (one still out would book what the key may already count, and
    /// a true-up now would book it twice): the crash estimates the key's count explains are
    /// trued up in one adjustment line ([`Effect::Spent`] adds it to the live spend), what
    /// it cannot explain (a shared key) is said and the estimates stay; then the end's
    /// checkpoint, quiet when nothing is in flight or out.
    pub(in crate::engine::core) fn key_usage(
        &mut self,
        usage: f64,
        spent: Usd,
        moment: KeyMoment,
        now: &Clock,
    ) {
        match moment {
            KeyMoment::Start { left_open } => {
                let quiet = start_is_quiet(left_open, self.settle.key.waiting());
                self.key_checkpoint(usage, spent, quiet, "start", now);
            }
            KeyMoment::End {
                look_ups_out,
                stopping_now,
            } => {
                let mut spent = spent;
                // A close whose bill may still come counts as a look-up still out.
                let open = look_ups_out
                    + self.look_ups_left()
                    + usize::from(self.settle.key.unseen_pending(now));
                if let Some(base) = self.settle.key.base.filter(|_| open == 0) {
                    match key_verdict(&base, usage, spent) {
                        KeyVerdict::Agrees => {}
                        KeyVerdict::TrueUp { usd, note } => {
                            spent += usd;
                            self.spend_live(usd);
                            self.event(now, format!("{note}: {:+.6} USD booked", usd.as_f64()));
                            self.ledger(SpendEntry {
                                usd,
                                note: Some(note),
                                ..SpendEntry::new(
                                    SpendKind::Adjustment,
                                    now.rfc3339(),
                                    "key-true-up",
                                    "",
                                )
                            });
                        }
                        KeyVerdict::Unexplained { usd } => self.event(
                            now,
                            format!(
                                "the key's usage and the ledger differ by {:+.6} USD since the \
                                 last quiet checkpoint, more than crash estimates explain (a \
                                 key shared with other work, or usage not counted yet): the \
                                 estimates stay",
                                usd.as_f64()
                            ),
                        ),
                    }
                }
                let quiet = !stopping_now && self.in_flight() == 0 && open == 0;
                self.key_checkpoint(usage, spent, quiet, "end", now);
            }
        }
    }

    /// A `key_usage` line: the key's usage and the ledger's total now; a quiet one is the
    /// next true-up's base.
    fn key_checkpoint(&mut self, usage: f64, spent: Usd, quiet: bool, what: &str, now: &Clock) {
        let checkpoint = KeyCheckpoint {
            key_usage_usd: usage,
            ledger_usd: spent,
            quiet,
        };
        if quiet {
            self.settle.key.base = Some(KeyBase {
                checkpoint,
                estimated: Usd::ZERO,
                estimated_lines: 0,
            });
        }
        self.ledger(SpendEntry {
            checkpoint: Some(checkpoint),
            ..SpendEntry::new(SpendKind::KeyUsage, now.rfc3339(), what, "")
        });
    }
}
