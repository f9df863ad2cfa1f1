//! The driver's side of settling money with the API: the GETs the core asks for
//! ([`Effect::LookUp`](super::super::core::Effect)) handed back as they land, and at the end of
//! the work how long it waits for them and for `GET /key`. What each answer books, holds or
//! says is the core's ([`core::settle`](super::super::core::settle)).

use std::time::Duration;

use crate::domain::Usd;

use super::super::core::Event;
use super::super::core::settle::{Asked, KeyMoment, LookUpsEnd};
use super::super::reconcile::{CLOSED_DEADLINE, END_GRACE, FIRST_PASS_GRACE, LookedUp};
use super::Supervisor;

impl Supervisor {
    /// One of this run's closed streams' look-ups came back.
    pub(super) async fn close_looked_up(&mut self, answer: LookedUp) {
        if matches!(answer, LookedUp::Done { .. }) {
            let closes = &mut self.look_ups.closes;
            closes.out = closes.out.saturating_sub(1);
        }
        self.step(Event::LookedUp {
            of: Asked::Closes,
            answer: Box::new(answer),
        })
        .await;
    }

    /// One look-up of what earlier runs left came back (`None`: all are in).
    pub(super) async fn leftover_looked_up(&mut self, answer: Option<LookedUp>) {
        match answer {
            Some(answer) => {
                self.step(Event::LookedUp {
                    of: Asked::Leftovers,
                    answer: Box::new(answer),
                })
                .await;
            }
            None => {
                self.look_ups.leftovers = None;
                self.step(Event::LeftoversEnded { all_in: true }).await;
            }
        }
    }

    /// The look-ups of what earlier runs left still running when the work is over. They never
    /// hold the run: those that land within a short grace are booked, the rest stay open
    /// (their `started` lines) for the next start or `harvest status --reconcile`. Every id
    /// gets its first ask (the billed ones are found then) unless that takes longer than the
    /// first pass's grace. A stop-now takes no grace, and one that comes during it ends it.
    pub(super) async fn finish_leftovers(&mut self) {
        let Some(mut asking) = self.look_ups.leftovers.take() else {
            return;
        };
        let (grace, first_pass) = if self.stopping_now() {
            (Duration::ZERO, Duration::ZERO)
        } else {
            (END_GRACE, FIRST_PASS_GRACE)
        };
        let began = tokio::time::Instant::now();
        let end_now = self.end_now.clone();
        let mut all_in = false;
        loop {
            let until = began
                + if self.core.leftovers_first_pass_done() {
                    grace
                } else {
                    first_pass
                };
            let next = tokio::select! {
                next = tokio::time::timeout_at(until, asking.rx.recv()) => next,
                () = end_now.cancelled() => break,
            };
            match next {
                Ok(Some(answer)) => {
                    self.step(Event::LookedUp {
                        of: Asked::Leftovers,
                        answer: Box::new(answer),
                    })
                    .await;
                }
                Ok(None) => {
                    all_in = true;
                    break;
                }
                Err(_) => break,
            }
        }
        asking.abort();
        self.step(Event::LeftoversEnded { all_in }).await;
    }

    /// At the end: the core asks about the streams closed last, and the driver waits for the
    /// look-ups still running, so the ledger matches the bill and not our estimate. Bounded: a
    /// look-up the API is slow to answer keeps its estimate rather than hold the end of the
    /// run; skipped after a stop-now (the operator wants out, and the estimates stand), and a
    /// stop-now during it ends it. The core then says what is left unconfirmed.
    pub(super) async fn finish_closes(
        &mut self,
        publish: &tokio::sync::watch::Sender<std::sync::Arc<crate::engine::snapshot::Snapshot>>,
    ) {
        let how = if !self.shared.client.has_key() || self.stopping_now() {
            self.look_ups.closes.abort();
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
            while self.look_ups.closes.out > 0 {
                let next = tokio::select! {
                    next = tokio::time::timeout_at(until, self.look_ups.closes.rx.recv()) => next,
                    () = end_now.cancelled() => break,
                };
                let Ok(Some(answer)) = next else { break };
                self.close_looked_up(answer).await;
            }
            self.look_ups.closes.abort();
            if self.end_now.is_cancelled() {
                LookUpsEnd::StoppedNow
            } else {
                LookUpsEnd::Deadline
            }
        };
        self.step(Event::LookUpsEnded(how)).await;
    }

    /// At the end of a run: the key's usage, for the core's true-up of crash estimates and
    /// the end's checkpoint ([`Event::KeyUsage`]); asked only where the start had it. Returns
    /// the key's usage now.
    pub(super) async fn settle_with_key(&mut self) -> Option<f64> {
        if !self.shared.client.has_key() || !self.core.asks_key_at_end() {
            return None;
        }
        let wait = if self.stopping_now() { 2 } else { 10 };
        let end_now = self.end_now.clone();
        let asked = tokio::time::timeout(Duration::from_secs(wait), self.shared.client.key_info());
        let usage = tokio::select! {
            r = asked => match r {
                Ok(Ok(k)) => k.usage,
                _ => return None,
            },
            // A stop-now while the key is asked: the true-up waits for the next run.
            () = end_now.cancelled() => return None,
        };
        let moment = KeyMoment::End {
            look_ups_out: self.look_ups.closes.out,
            stopping_now: self.stopping_now(),
        };
        let spent = Usd::from_pico(self.shared.money.spent_pico());
        self.step(Event::KeyUsage {
            usage,
            spent,
            moment,
        })
        .await;
        Some(usage)
    }
}
