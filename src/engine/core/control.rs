//! Control: operator commands, the periodic tick, listing refreshes (endpoints that leave, come
//! back or appear), quality findings, and the booking of what a crash or a closed stream left
//! to settle.

use std::sync::Arc;

use crate::domain::Usd;
use crate::store::output::{SpendEntry, SpendKind};

use super::super::control::{Command, ShutdownMode, Viewer};
use super::super::endpoint::RunEndpoint;
use super::super::health::Health;
use super::super::quality::Finding;
use super::super::reason::StopReason;
use super::journal::Once;
use super::{Clock, Core, Effect, Listed, Port};
use crate::policy::PolicyMode;

impl Core {
    /// Applies an operator command; it acts on the next request dispatched. `by`: the viewer that sent it over the control socket (named in the event log, so that
    /// every viewer sees who did what), `None` for the run's own terminal and signals.
    pub(super) fn apply(&mut self, cmd: Command, by: Option<Viewer>, now: &Clock) {
        let suffix = by.map_or(String::new(), |v| format!(" by {v}"));
        match cmd {
            Command::By(viewer, cmd) => self.apply(*cmd, Some(viewer), now),
            Command::Pause => {
                self.life.paused = true;
                self.event(now, format!("paused{suffix}: no new requests"));
            }
            Command::Resume => {
                self.life.paused = false;
                self.event(now, format!("resumed{suffix}"));
            }
            Command::SetConcurrency(n) => self.set_concurrency(i64::from(n), &suffix, now),
            Command::AdjustConcurrency(delta) => {
                // Saturating: a delta of i64::MAX from a viewer is "as many as allowed", not a
                // wrap to 1 (reliability probe 3, D16).
                let n = i64::from(self.concurrency).saturating_add(delta);
                self.set_concurrency(n, &suffix, now)
            }
            Command::SetEndpoint { tag, allowed } => {
                for i in self.endpoint_indices(&tag) {
                    self.fleet.set_operator(i, allowed);
                }
                let who = by.map_or("operator".to_string(), |v| v.to_string());
                let text = match allowed {
                    Some(true) => format!("{who} included {tag} (applies to the next request)"),
                    Some(false) => format!("{who} excluded {tag} (applies to the next request)"),
                    None => format!("{tag} follows the policy again{suffix}"),
                };
                self.event(now, text);
            }
            Command::ToggleEndpoint(tag) => {
                if let Some(&first) = self.endpoint_indices(&tag).first() {
                    let allowed = Some(!self.fleet.permitted(first));
                    self.apply(Command::SetEndpoint { tag, allowed }, by, now);
                }
            }
            Command::Preset(mode) => {
                let undone = self.fleet.set_mode(mode);
                let text = match mode {
                    PolicyMode::Faithful => {
                        format!("policy: faithful (native {})", self.fleet.native())
                    }
                    PolicyMode::Any => "policy: any quantization".to_string(),
                };
                let undone = match undone {
                    0 => String::new(),
                    1 => "; the operator's inclusion of an endpoint it excludes undone".into(),
                    n => format!("; the operator's {n} inclusions of endpoints it excludes undone"),
                };
                self.event(now, format!("{text}{suffix}{undone}"));
            }
            Command::Shutdown(ShutdownMode::Drain) => {
                if let Some(v) = by {
                    self.event(now, format!("{v} asked for a drain"));
                }
                self.begin_stop(now, StopReason::OperatorDrain);
                self.start_grace(now);
            }
            Command::OutputLost => {
                self.begin_stop(now, StopReason::OutputLost);
                self.start_grace(now);
            }
            Command::SchedulerStop(by) => {
                self.begin_stop(now, StopReason::SchedulerStop { by });
                self.start_grace(now);
            }
            Command::Shutdown(ShutdownMode::Now) => {
                if let Some(v) = by {
                    self.event(now, format!("{v} asked to stop now"));
                }
                // A drain under way becomes a stop now (the summary says so); a stop for another
                // reason keeps it, and what is in flight is closed either way.
                if self.life.stopping == Some(StopReason::OperatorDrain) {
                    self.life.stopping = None;
                }
                if self.life.stopping.is_none() {
                    self.begin_stop(now, StopReason::OperatorStopNow);
                } else {
                    self.event(now, "stopping now: closing what is in flight");
                }
                self.life.stopped_now = true;
                self.effects.push(Effect::CancelInFlight);
            }
        }
    }

    /// A drain's grace runs from the first drain asked; a second drain does not extend it.
    fn start_grace(&mut self, now: &Clock) {
        if self.life.drain_deadline.is_none() {
            self.life.drain_deadline = Some(now.mono + self.life.drain_grace);
        }
    }

    /// At the end of a drain's grace, what is still in flight is closed. Not a stop now: the
    /// operator asked to drain, so the closed streams are still looked up at the end (bounded,
    /// as every close's look-ups are) and the ledger keeps what the provider billed.
    fn drain_grace_over(&mut self, now: &Clock) {
        if self.drain_deadline().is_some_and(|d| now.mono >= d) && !self.in_flight.is_empty() {
            self.life.grace_over = true;
            let grace = self.life.drain_grace.as_secs_f64();
            self.event(
                now,
                format!("the drain's grace ({grace:.0} s) is over: closing what is in flight"),
            );
            self.effects.push(Effect::CancelInFlight);
        }
    }

    fn set_concurrency(&mut self, n: i64, suffix: &str, now: &Clock) {
        self.concurrency = n.clamp(1, 100_000) as u32;
        self.event(
            now,
            format!("concurrency set to {}{suffix}", self.concurrency),
        );
    }

    fn endpoint_indices(&self, tag: &str) -> Vec<usize> {
        self.fleet
            .endpoints()
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tag == tag)
            .map(|(i, _)| i)
            .collect()
    }

    /// The periodic tick: reservations follow the observed mean, datasets their budgets.
    pub(super) fn tick(&mut self, port: &dyn Port, now: &Clock) {
        self.drain_grace_over(now);
        self.suspend_overdue_trust(now);
        self.recompute_reserved(port);
        self.update_datasets(now);
        if let Some(change) = self.budget.account_mut().tick(self.concurrency, now.mono) {
            self.event(now, change.to_string());
        }
    }

    /// Says once per endpoint and kind when its answers stand out from the others'.
    pub(super) fn note_quality(&mut self, findings: Vec<Finding>, now: &Clock) {
        for f in findings {
            if self.journal.first(Once::Quality(f.tag.clone(), f.kind)) {
                self.event(now, f.text);
            }
        }
    }

    /// Folds a fresh listing in (its endpoints as the run knows them): status and uptime of
    /// known endpoints, new prices (from the next request; [`Effect::Repriced`] for the
    /// workers' pool), endpoints that left (no longer routed to) and came back. An endpoint it
    /// shows for the first time goes to the driver to join the pool ([`Effect::Join`]).
    pub(super) fn listing(&mut self, listing: Vec<RunEndpoint>, now: &Clock) {
        let eps = self.fleet.endpoints().clone();
        for (i, e) in eps.iter().enumerate().filter(|(_, e)| e.custom.is_none()) {
            let found = listing
                .iter()
                .find(|l| l.tag == e.tag && l.provider == e.provider);
            match found {
                Some(l) => {
                    if !self.fleet.listed(i).present {
                        self.event(now, format!("{} is listed again", e.tag));
                    }
                    if l.tariff != e.tariff {
                        let text = format!(
                            "{}'s prices changed: {} in / {} out, were {} / {}; from the next \
                             request",
                            e.tag, l.price_in, l.price_out, e.price_in, e.price_out
                        );
                        self.event(now, text);
                        let mut pool = self.fleet.endpoints().as_ref().clone();
                        pool[i].price_in = l.price_in;
                        pool[i].price_out = l.price_out;
                        pool[i].tariff = l.tariff.clone();
                        self.effects.push(Effect::Repriced {
                            index: i,
                            endpoint: Box::new(pool[i].clone()),
                        });
                        self.fleet.set_endpoints(Arc::new(pool));
                    }
                    *self.fleet.listed_mut(i) = Listed {
                        status: l.status,
                        uptime_30m: l.uptime_30m,
                        present: true,
                    };
                }
                None if self.fleet.listed(i).present => {
                    self.fleet.listed_mut(i).present = false;
                    self.event(
                        now,
                        format!(
                            "{} left the model's listing: no more requests go there",
                            e.tag
                        ),
                    );
                }
                None => {}
            }
        }
        for mut l in listing {
            let known = eps.iter().any(|e| e.tag == l.tag);
            if !known && self.journal.first(Once::NewEndpoint(l.tag.clone())) {
                // The run's text already says what a token of it holds, whoever serves it.
                l.bytes_per_token = self.fleet.text().estimate();
                self.effects.push(Effect::Join(Box::new(l)));
            }
        }
        self.fleet.refresh_verdicts();
    }

    /// A new endpoint of the listing: `endpoints` is the pool with it when it could join (a
    /// free statistics slot), `None` when not.
    pub(super) fn endpoint_added(
        &mut self,
        e: &RunEndpoint,
        endpoints: Option<Arc<Vec<RunEndpoint>>>,
        now: &Clock,
    ) {
        let what = format!(
            "{} {} ({}, {} out)",
            e.provider, e.tag, e.quantization, e.price_out
        );
        let Some(endpoints) = endpoints else {
            self.event(
                now,
                format!("new endpoint listed: {what}; restart the run to consider it"),
            );
            return;
        };
        self.fleet.set_endpoints(endpoints);
        let breaker = (self.cfg.breaker.failures, self.cfg.breaker.cooldown());
        self.fleet.grow(
            || Health::new(breaker.0, breaker.1),
            || Listed {
                status: e.status,
                uptime_30m: e.uptime_30m,
                present: true,
            },
        );
        self.fleet.refresh_verdicts();
        let i = self.fleet.endpoints().len() - 1;
        let verdict = match self.fleet.verdict(i) {
            None => "allowed by the policy".to_string(),
            Some(x) => format!("not used ({x}); space includes it"),
        };
        self.event(now, format!("new endpoint listed: {what}: {verdict}"));
    }

    /// Books what an earlier run left open (a crash): into the carried-over spend and the
    /// ledger, closing the open line. The driver adds `usd` to the live spend.
    pub(super) fn book_carried(
        &mut self,
        open: SpendEntry,
        kind: SpendKind,
        usd: Usd,
        estimated: bool,
        now: &Clock,
    ) {
        self.budget.carry(usd);
        self.ledger(open.closed_as(kind, usd, estimated, now.rfc3339()));
    }

    /// Books the difference between what a closed stream was booked at and what the API says
    /// it cost. The driver adds the difference to the live spend.
    pub(super) fn book_adjustment(
        &mut self,
        entry: SpendEntry,
        actual: Usd,
        completion_tokens: Option<u64>,
        now: &Clock,
    ) {
        self.release_open_bill(&entry);
        let found_after = self.check_looked_up(entry.generation_id.as_deref(), now);
        let check = found_after.is_some();
        // A stream harvest closed: what it was billed says whether closing stopped the bill,
        // and its line keeps the reading for later starts (`close_reading`).
        let close = match (entry.kind, entry.endpoint.as_deref(), completion_tokens) {
            (SpendKind::Cancelled, Some(tag), Some(billed)) => {
                self.learn_cancel_billing(tag, (entry.completion_tokens, billed), check, now)
            }
            _ => None,
        };
        let delta = actual - entry.usd;
        // A closed stream's line is written even when its estimate was right: it marks the
        // stream confirmed, so that a later start does not ask again (`closed_unconfirmed`).
        if delta != Usd::ZERO || entry.kind == SpendKind::Cancelled {
            // A correction, not another failed attempt (the report counts errors by line).
            self.ledger(SpendEntry {
                close,
                found_after_ms: found_after.map(|d| d.as_millis() as u64),
                ..entry.adjusted_to(actual, now.rfc3339())
            });
        }
    }
}
