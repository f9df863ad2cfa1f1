//! Settling money with the API: what an earlier run's crash left open (booked beside the new
//! work as look-ups land), what closed streams really cost (`GET /generation` at the end), and
//! the key's own count (checkpoints, and the true-up of crash estimates).

use std::time::Duration;

use crate::domain::Usd;
use crate::store::output::SpendEntry;

use super::super::core::Event;
use super::super::core::settle::{KeyMoment, Landing};
use super::super::reconcile::Recovery;
use super::Supervisor;

impl Supervisor {
    /// At the end of a run: the key's usage, for the core's true-up of crash estimates and
    /// the end's checkpoint ([`Event::KeyUsage`]). Returns the key's usage now.
    pub(super) async fn settle_with_key(&mut self) -> Option<f64> {
        if !self.shared.client.has_key() || self.key_usage_start.is_none() {
            return None;
        }
        let wait = if self.stopping_now() { 2 } else { 10 };
        let end_now = self.end_now.clone();
        let asked = tokio::time::timeout(Duration::from_secs(wait), self.shared.client.key_info());
        let key_now = tokio::select! {
            r = asked => match r {
                Ok(Ok(k)) => k.usage,
                _ => return None,
            },
            // A stop-now while the key is asked: the true-up waits for the next run.
            () = end_now.cancelled() => return None,
        };
        let moment = KeyMoment::End {
            look_ups_open: self.unsettled + self.closed.out + self.recovery_open,
            stopping_now: self.stopping_now(),
        };
        self.key_usage(key_now, moment).await;
        Some(key_now)
    }

    /// The key's usage `usage` now, through the core's door.
    pub(super) async fn key_usage(&mut self, usage: f64, moment: KeyMoment) {
        let spent = Usd::from_pico(self.shared.money.spent_pico());
        self.step(Event::KeyUsage {
            usage,
            spent,
            moment,
        })
        .await;
    }

    /// Books a look-up's landing (or an estimate given up to): its money joins the live
    /// spend the workers' dollar cap reads first, then the core books it
    /// ([`Event::Landed`]). Returns what it added.
    async fn land(
        &mut self,
        entry: SpendEntry,
        landing: Landing,
        completion_tokens: Option<u64>,
    ) -> Usd {
        let delta = landing.live_delta(&entry);
        self.shared.money.book(delta.pico());
        self.step(Event::Landed {
            entry: Box::new(entry),
            landing,
            completion_tokens,
        })
        .await;
        delta
    }

    /// Books requests an earlier run's crash left before any answer as lost attempts (the API
    /// cannot be asked about them, and the budget must not assume they were free),
    /// and starts looking up the generations it left open: those run beside the new work, and
    /// each is booked as its answer lands (see [`Recovery`]). What is booked, held and asked,
    /// in what order, the core decides ([`Core::opening`](super::super::core::Core)).
    pub(super) async fn settle_crash(&mut self) -> Recovery {
        let left = std::mem::take(&mut self.leftovers);
        let opening = self.core.opening(left, self.shared.client.has_key());
        if !opening.estimates.is_empty() {
            let n = opening.estimates.len();
            let mut total = Usd::ZERO;
            for (e, usd) in opening.estimates {
                total += usd;
                // Never started: the API cannot be asked, and it is booked as lost.
                self.land(e, Landing::Lost(usd), None).await;
            }
            self.say(
                format!(
                    "an earlier run stopped with {n} requests sent but unanswered: booked as lost attempts, {:.6} USD, until the key's true-up corrects them",
                    total.as_f64()
                ),
            ).await;
        }
        if !opening.held.is_empty() {
            // Until each look-up lands, its attempt holds money as a live stream does.
            self.step(Event::CrashOpen(opening.held)).await;
        }
        let (n, c, r) = opening.kinds;
        if opening.look_ups.is_empty() {
            return Recovery::default();
        }
        if n > 0 {
            self.say(format!(
                "an earlier run stopped with {n} requests in flight: looking up what they cost"
            ))
            .await;
        }
        if c > 0 {
            self.say(format!(
                "an earlier run closed {c} streams that no look-up confirmed: asking \
                 /generation what each cost (where closing did not stop the bill, each holds \
                 money until then)"
            ))
            .await;
        }
        if r > 0 {
            self.say(
                format!(
                    "{r} ledger lines rebuilt from the outputs by --repair: confirming each at /generation"
                ),
            ).await;
        }
        Recovery::start(self.shared.client.clone(), opening.look_ups, c, r)
    }

    /// One look-up of a crash's leftover came back: booked at what the API says, or counted
    /// as unknown (its line stays open for the next start). Unknown on its first ask, it is
    /// waited for no more (its hold stays) while later passes ask again.
    pub(super) async fn recovered(
        &mut self,
        rec: &mut Recovery,
        looked_up: super::super::reconcile::LookedUp,
    ) {
        self.recovered_one(rec, looked_up).await;
        let (count, expected) = rec.open;
        self.publisher.open_look_ups = crate::engine::snapshot::OpenLookUps {
            count: count as u64,
            expected,
        };
    }

    async fn recovered_one(
        &mut self,
        rec: &mut Recovery,
        looked_up: super::super::reconcile::LookedUp,
    ) {
        use super::super::reconcile::LookedUp;
        let (entry, cost, completion) = match looked_up {
            LookedUp::NotOnFirstPass(entry) => {
                rec.first_answers += 1;
                // Its hold stays while later passes ask again; near the cap the run waits for
                // it only where its settling would make room (`Budget::look_ups_may_make_room`).
                let landing = Landing::Open {
                    refused: None,
                    held: true,
                    asked_again: true,
                    reckoned: None,
                };
                self.land(entry, landing, None).await;
                return;
            }
            LookedUp::Done {
                entry,
                cost,
                said_before,
                completion_tokens,
                ..
            } => {
                if !said_before {
                    rec.first_answers += 1;
                }
                (entry, cost, completion_tokens)
            }
        };
        rec.back += 1;
        rec.expected_back += super::super::reconcile::open_part(&entry);
        let landing = self.core.landing(&entry, cost, chrono::Utc::now());
        match &landing {
            Landing::Found(usd) | Landing::Lost(usd) => {
                rec.settled(&entry);
                rec.total += *usd;
                if matches!(landing, Landing::Lost(_)) {
                    rec.lost += 1;
                } else {
                    rec.booked += 1;
                }
            }
            Landing::Closed(_) => {
                rec.settled(&entry);
                rec.closed_confirmed += 1;
            }
            Landing::Rebuilt(_) => rec.confirmed += 1,
            Landing::Open { held, .. } => self.unsettled += usize::from(*held),
        }
        let (closed, rebuilt) = (
            matches!(landing, Landing::Closed(_)),
            matches!(landing, Landing::Rebuilt(_)),
        );
        let delta = self.land(entry, landing, completion).await;
        if closed {
            rec.closed_delta += delta;
        } else if rebuilt {
            rec.confirmed_delta += delta;
        }
    }

    /// The run ended with look-ups of a crash's leftovers still running: they are left open
    /// for the next start (or `harvest status --reconcile`), in one line.
    pub(super) async fn recovery_left(&mut self, rec: &super::super::reconcile::Recovery) {
        let left = (rec.asked + rec.closed_asked + rec.rebuilt_asked).saturating_sub(rec.back);
        self.recovery_open = left;
        if left == 0 {
            return;
        }
        self.say(format!(
            "{left} look-ups of requests an earlier run left open were still running when \
                 the work was done: left open for the next start or `harvest status \
                 --reconcile` (expected cost {:.6} USD, not booked until the API says)",
            (rec.expected - rec.expected_back).as_f64()
        ))
        .await;
    }

    /// All look-ups of a crash's leftovers are in: says what they found.
    pub(super) async fn recovery_done(&mut self, rec: &Recovery) {
        if rec.closed_asked > 0 {
            self.say(format!(
                "streams an earlier run closed: {} of {} confirmed at /generation ({:+.6} USD \
                 against their estimates){}",
                rec.closed_confirmed,
                rec.closed_asked,
                rec.closed_delta.as_f64(),
                if rec.closed_confirmed < rec.closed_asked {
                    "; the others hold their money and the next start asks again"
                } else {
                    ""
                }
            ))
            .await;
        }
        if rec.rebuilt_asked > 0 {
            self.say(
                format!(
                    "rebuilt ledger lines: {} of {} confirmed at /generation ({:+.6} USD against the outputs' costs){}",
                    rec.confirmed,
                    rec.rebuilt_asked,
                    rec.confirmed_delta.as_f64(),
                    if rec.confirmed < rec.rebuilt_asked {
                        "; the others keep the outputs' costs and the next start asks again"
                    } else {
                        ""
                    }
                ),
            ).await;
        }
        if rec.asked == 0 {
            return;
        }
        self.say(
            format!(
                "looked up {} requests an earlier run left in flight: {} found at the API, {} unknown for {} min and booked at what each held against the budget (under the hard budget, its worst case where a close is billed in full; the key's true-up at the end of a run with nothing open corrects it), {:.6} USD in all{}",
                rec.asked,
                rec.booked,
                rec.lost,
                super::super::reconcile::UNKNOWN_AFTER.as_secs() / 60,
                rec.total.as_f64(),
                if rec.booked + rec.lost < rec.asked {
                    "; the others are too recent to give up on: the next start asks again"
                } else {
                    ""
                }
            ),
        ).await;
    }

    /// A closed stream's look-up landed: the API's cost replaces the estimate (an adjustment
    /// line), and what it billed against what was received teaches whether closing there
    /// stops the bill. Not known (the run stops waiting for it) or a figure that cannot be a
    /// bill: its hold stays, and the next start asks again.
    pub(super) async fn closed_landed(&mut self, looked_up: super::super::reconcile::LookedUp) {
        let super::super::reconcile::LookedUp::Done {
            entry,
            cost,
            completion_tokens,
            ..
        } = looked_up
        else {
            return;
        };
        self.closed.out = self.closed.out.saturating_sub(1);
        let landing = self.core.landing(&entry, cost, chrono::Utc::now());
        if let Landing::Open { held, .. } = &landing {
            self.unsettled += usize::from(*held);
        }
        self.land(entry, landing, completion_tokens).await;
    }

    /// At the end: the core asks about the streams closed last, and the driver waits for the
    /// look-ups still running, so the ledger matches the bill and not our estimate. Bounded: a
    /// look-up the API is slow to answer keeps its estimate rather than hold the end of the
    /// run; skipped after a stop-now (the operator wants out, and the estimates stand), and a
    /// stop-now during it ends it. What is left unconfirmed joins the summary's open look-ups.
    pub(super) async fn reconcile_closed(
        &mut self,
        publish: &tokio::sync::watch::Sender<std::sync::Arc<crate::engine::snapshot::Snapshot>>,
    ) {
        use super::super::core::settle::LookUpsEnd;
        use super::super::reconcile::CLOSED_DEADLINE;
        let how = if !self.shared.client.has_key() || self.stopping_now() {
            self.closed.abort();
            LookUpsEnd::NotAsked
        } else {
            let said = self.core.events_total();
            self.step(Event::EndLookUps).await;
            if self.core.events_total() > said {
                // Shown at once: the views would otherwise sit still while it lasts.
                publish.send_replace(std::sync::Arc::new(self.snapshot()));
            }
            let until = tokio::time::Instant::now() + CLOSED_DEADLINE;
            let end_now = self.end_now.clone();
            while self.closed.out > 0 {
                let next = tokio::select! {
                    next = tokio::time::timeout_at(until, self.closed.rx.recv()) => next,
                    () = end_now.cancelled() => break,
                };
                let Ok(Some(l)) = next else { break };
                self.closed_landed(l).await;
            }
            self.closed.abort();
            if self.end_now.is_cancelled() {
                LookUpsEnd::StoppedNow
            } else {
                LookUpsEnd::Deadline
            }
        };
        self.step(Event::LookUpsEnded(how)).await;
        let (n, more) = self.core.closes_unconfirmed();
        let open = &mut self.publisher.open_look_ups;
        open.count += n as u64;
        open.expected += more;
    }
}
