//! Failures: what an attempt that did not answer means. Booked (a stream we closed, or one cut
//! after tokens, at our estimate and looked up later; the rest free per OpenRouter's zero
//! completion insurance), counted against its endpoint's health, then retried elsewhere after
//! a back-off, rejected for good, or, when the API refuses the key or the account, the run
//! stops. The account's in-flight 402s wait without counting as attempts.

use std::time::Duration;

use rand::Rng;

use crate::config::Turns;
use crate::domain::Usd;
use crate::openrouter::{ApiError, ErrorKind};
use crate::store::output::{FailureCause, RejectRecord, SpendEntry, SpendKind};

use super::super::health::{HealthEvent, backoff};
use super::super::reason::StopReason;
use super::attempt::AttemptResult;
use super::attempt_money::cut_after_tokens;
use super::{Clock, Core, Effect, InFlight, Job, turns};

impl Core {
    pub(super) fn on_failure(
        &mut self,
        mut job: Job,
        f: &InFlight,
        r: &AttemptResult,
        err: ApiError,
        now: &Clock,
    ) {
        let kind = err.kind();
        tracing::debug!(prompt = %job.prompt.id, attempt = %f.attempt, "attempt failed: {err}");
        // Failed before any token, a routed request is blamed on the provider OpenRouter names.
        let endpoint = r.endpoint.or_else(|| self.blamed(f, &err));
        if kind == ErrorKind::InFlightBudget && err.is_retryable() {
            return self.on_budget_402(job, f, r, &err, now);
        }
        if let Some(e) = endpoint {
            if kind == ErrorKind::RateLimited {
                let wait = err.retry_after().unwrap_or(Duration::from_secs(2));
                self.fleet.health_mut(e).on_rate_limited(now.mono, wait);
                // Sent to it alone (pinned, or `only` of one), the request tells how many it
                // took at once: that many, for now. Routed over several, it does not.
                let alone = f.endpoint.is_some() || f.over.len() == 1;
                if alone {
                    let there = self.fleet.load_at(e);
                    self.fleet.health_mut(e).learn_ceiling(there);
                }
            } else if err.is_retryable() {
                self.endpoint_failed(e, kind.label(), now);
            }
        }
        if kind == ErrorKind::RateLimited && job.rate_limited < super::MAX_RATE_LIMITED {
            // Turned away, not tried: the prompt keeps its attempts.
            job.rate_limited += 1;
            job.attempts = job.attempts.saturating_sub(1);
        }
        // A timeout is our own close, and a stream cut after tokens (a reset, a clean
        // truncation) is billed like one: OpenRouter's zero completion insurance covers only
        // "zero completion tokens AND a blank/null finish reason" and "an error finish reason"
        // (docs: guides/features/zero-completion-insurance). Booked at our estimate, looked up.
        if kind == ErrorKind::Timeout || (r.streamed_tokens > 0 && cut_after_tokens(kind)) {
            self.book_closed(&job, f, r, Some(kind), now);
        } else {
            // Anything else is free per the insurance, but an attempt that received tokens and
            // has a generation id is looked up all the same: the API's figure is the last word.
            let line = self.failed_line(&job, f, r, kind, now);
            if r.streamed_tokens > 0
                && let Some(g) = &r.generation_id
                && self.settle.may_ask()
            {
                self.look_up(g.clone(), line.clone());
            }
            self.ledger(line);
        }
        let own_server = endpoint.filter(|&e| self.fleet.endpoint(e).custom.is_some());
        if let (Some(e), true) = (own_server, err.stops_dispatch()) {
            // One of the operator's own servers refused us: take it out, go on.
            let tag = self.fleet.endpoint(e).tag.clone();
            self.fleet.set_operator(e, Some(false));
            self.event(
                now,
                format!("{tag} refused the request ({err}): excluded; check its api_key_env"),
            );
            job.failed_at = endpoint;
            self.schedule_retry(job, &err, now);
        } else if let (Some(e), ErrorKind::NotFound) = (f.endpoint, kind)
            && self.fleet.endpoint(e).custom.is_none()
            && !err.is_account_restriction()
            && job.attempts < self.cfg.retry.max_attempts
        {
            // A pinned endpoint OpenRouter no longer has: out of routing until the listing
            // shows it again; the prompt goes elsewhere.
            if self.fleet.listed(e).present {
                let tag = self.fleet.endpoint(e).tag.clone();
                self.fleet.listed_mut(e).present = false;
                self.event(
                    now,
                    format!("{tag} is not served any more ({err}): taken out of routing"),
                );
            }
            job.failed_at = endpoint;
            self.schedule_retry(job, &err, now);
        } else if kind == ErrorKind::NotFound
            && !err.is_retryable()
            && job.attempts < self.cfg.retry.max_attempts
            && let Some(gone) = self.narrowed_away(f)
        {
            // A 404 to a request harvest narrowed (the last stretch's stoppable endpoints, a
            // check of one endpoint's close, others cooling down) says those endpoints are not
            // the account's to use now (its privacy or provider settings, or gone from the
            // model): never the prompt's failure, nor the account's as a whole (issue #35).
            // They leave routing until the listing shows them again, and the prompt goes
            // wider; when the wide request meets the same 404, that one is systematic.
            self.note_narrowed_restriction(&err, gone.len());
            for e in gone {
                let tag = self.fleet.endpoint(e).tag.clone();
                self.fleet.listed_mut(e).present = false;
                self.event(
                    now,
                    format!(
                        "{tag}: OpenRouter found no endpoint for a request sent to it alone or \
                         with a few others ({err}): taken out of routing, the prompt goes to \
                         the rest"
                    ),
                );
            }
            job.failed_at = None;
            self.schedule_retry(job, &err, now);
        } else if err.stops_dispatch() {
            let reason = self.stop_reason(&job, f, &err);
            self.event(now, reason.to_string());
            self.begin_stop(now, reason);
            self.requeue_front(job, now);
        } else if err.is_retryable() && job.attempts < self.cfg.retry.max_attempts {
            job.failed_at = endpoint;
            self.schedule_retry(job, &err, now);
        } else if err.is_retryable() {
            self.streak_met(f.sent, now);
            let why = match job.rate_limited {
                0 => format!("{err} (after {} attempts)", job.attempts),
                n => format!(
                    "{err} (after {} attempts, and {n} turned away by 429s)",
                    job.attempts
                ),
            };
            self.reject(job, why, kind.label(), cause_of(&err), now);
        } else {
            self.reject_or_hold((job, f.sent), &err, err.to_string(), kind.label(), now);
        }
    }

    /// When a routed request went to fewer endpoints than could take it (harvest narrowed
    /// it), those it went to that are still in routing (none when an earlier 404 of the same
    /// narrowing took them out); `None` when it went to every one.
    fn narrowed_away(&self, f: &InFlight) -> Option<Vec<usize>> {
        if f.over.is_empty() {
            return None;
        }
        let sends = &self.admission.dataset(f.job.dataset).sends;
        // The endpoint its last attempt failed at is left out by the retry rule, not by a
        // narrowing: it does not make a request narrowed.
        let wider = (0..self.fleet.endpoints().len()).any(|i| {
            !f.over.contains(&i)
                && f.job.failed_at != Some(i)
                && self.fleet.listed(i).present
                && self.fleet.permitted(i)
                && self.fleet.endpoint(i).custom.is_none()
                && self.takes(i, sends)
        });
        let gone: Vec<usize> = (f.over.iter().copied())
            .filter(|&i| self.fleet.listed(i).present)
            .collect();
        wider.then_some(gone)
    }

    /// The endpoint among those a routed request could reach whose provider the error names,
    /// when exactly one is.
    fn blamed(&self, f: &InFlight, err: &ApiError) -> Option<usize> {
        let name = err.provider_name()?;
        let mut named = (f.over.iter().copied())
            .filter(|&i| self.fleet.endpoint(i).provider.eq_ignore_ascii_case(name));
        let one = named.next()?;
        named.next().is_none().then_some(one)
    }

    /// The ledger line of a failed attempt: free per the insurance unless looked up.
    fn failed_line(
        &self,
        job: &Job,
        f: &InFlight,
        r: &AttemptResult,
        kind: ErrorKind,
        now: &Clock,
    ) -> SpendEntry {
        SpendEntry {
            endpoint: r.endpoint.map(|e| self.fleet.endpoint(e).tag.clone()),
            completion_tokens: r.streamed_tokens,
            generation_id: r.generation_id.clone(),
            attempt: Some(f.attempt.clone()),
            worst_usd: Some(f.bill_bound),
            error: Some(kind.to_string()),
            ..SpendEntry::new(
                SpendKind::Failed,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.dataset(job.dataset).name.clone(),
            )
        }
    }

    /// Why an error that stops dispatch stops the run: the key refused, a request the key's
    /// limit cannot cover, or the account out of credit.
    fn stop_reason(&self, job: &Job, f: &InFlight, err: &ApiError) -> StopReason {
        let max_tokens = self.admission.dataset(job.dataset).params.max_tokens;
        match err.kind() {
            ErrorKind::Auth => StopReason::KeyRefused {
                variable: self.cfg.api_key_env.clone(),
                detail: err.to_string(),
            },
            _ if err.is_request_over_budget() => StopReason::RequestOverBudget {
                max_tokens,
                estimate: f.price_in.cost(f.prompt_tokens)
                    + f.price_out.cost(u64::from(max_tokens)),
                detail: err.to_string(),
            },
            _ => StopReason::OutOfCredit {
                detail: err.to_string(),
            },
        }
    }

    /// A 402 of the account's in-flight budget: the account's condition, not the prompt's. Not
    /// an attempt of the prompt and not a failure of the endpoint; the prompt goes back to the
    /// front of the queue; the gate pauses OpenRouter until the `Retry-After` and, on a new
    /// wave, lowers its ceiling.
    pub(super) fn on_budget_402(
        &mut self,
        mut job: Job,
        f: &InFlight,
        r: &AttemptResult,
        err: &ApiError,
        now: &Clock,
    ) {
        job.attempts -= 1;
        self.ledger(SpendEntry {
            endpoint: r.endpoint.map(|e| self.fleet.endpoint(e).tag.clone()),
            attempt: Some(f.attempt.clone()),
            error: Some(ErrorKind::InFlightBudget.to_string()),
            ..SpendEntry::new(
                SpendKind::Failed,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.dataset(job.dataset).name.clone(),
            )
        });
        let wait = err.retry_after().unwrap_or(Duration::from_secs(2));
        // The refused one was running too when the account counted.
        let running = self.budget.or_in_flight() + 1;
        if let Some(change) = self
            .budget
            .account_mut()
            .on_budget_402(running, wait, now.mono)
        {
            self.event(now, change.to_string());
        }
        // Due when OpenRouter may be asked again (an own server may take it sooner as a
        // fresh prompt would not: it waits its turn at the head of the retries).
        let due = now.mono
            + self
                .budget
                .account()
                .paused_for(now.mono)
                .unwrap_or_default();
        self.push_retry(job, due);
    }

    /// A failure the endpoint is to blame for, of kind `label`: counted by its breaker.
    pub(super) fn endpoint_failed(&mut self, e: usize, label: &str, now: &Clock) {
        if let Some(HealthEvent::Opened { failures, cooldown }) =
            self.fleet.health_mut(e).on_failure(now.mono)
        {
            let tag = self.fleet.endpoint(e).tag.clone();
            self.event(
                now,
                format!(
                    "breaker opened: {tag} after {failures} failures in a row ({label}); probe in {}s",
                    cooldown.as_secs()
                ),
            );
        }
    }

    /// Retries `job` after a back-off (at least what the server asked for).
    pub(super) fn schedule_retry(&mut self, job: Job, err: &ApiError, now: &Clock) {
        let unit: f64 = self.rng.random();
        // 429s that were not counted as attempts still lengthen the wait.
        let wait = backoff(
            job.attempts + job.rate_limited,
            self.cfg.retry.base_delay(),
            self.cfg.retry.max_delay(),
            err.retry_after(),
            unit,
        );
        self.admission.retry_scheduled();
        self.push_retry(job, now.mono + wait);
    }

    pub(super) fn reject(
        &mut self,
        job: Job,
        error: String,
        kind: &str,
        cause: FailureCause,
        now: &Clock,
    ) {
        let d = job.dataset;
        self.admission.rejected(d);
        // A row of several turns says which one failed; the turns before it were paid for.
        let n = turns::turns_to_generate(&job.prompt);
        let later = n.saturating_sub(job.done_turns.len() + 1);
        self.budget.release_owed(&job, later as u64);
        let error = if self.admission.dataset(d).turns == Turns::All && n > 1 {
            format!("turn {} of {n}: {error}", job.done_turns.len() + 1)
        } else {
            error
        };
        let attempts = job.attempts
            + job
                .done_turns
                .iter()
                .map(|t| t.record.attempts)
                .sum::<u32>();
        self.effects.push(Effect::Reject {
            dataset: d,
            record: RejectRecord {
                id: job.prompt.id,
                line: Some(job.prompt.line),
                error,
                error_kind: kind.to_string(),
                attempts,
                created_at: now.rfc3339(),
                cause,
            },
        });
    }

    /// Books a stream we closed at our estimate and remembers it for reconciliation.
    pub(super) fn book_closed(
        &mut self,
        job: &Job,
        f: &InFlight,
        r: &AttemptResult,
        error: Option<ErrorKind>,
        now: &Clock,
    ) {
        // Counted before its own rest is reckoned: it ran at least this long, and a stream past
        // every answer that ended would otherwise find none at risk there.
        self.admission.closed(job.dataset, r.received_tokens);
        let expected = self.closed_expected(f, r, now);
        let entry = SpendEntry {
            endpoint: r.endpoint.map(|e| self.fleet.endpoint(e).tag.clone()),
            usd: Usd::from_pico(r.booked_pico),
            expected_usd: Some(Usd::from_pico(expected)),
            prompt_tokens: f.prompt_tokens,
            completion_tokens: r.streamed_tokens,
            received_tokens: Some(r.received_tokens),
            estimated: true,
            generation_id: r.generation_id.clone(),
            attempt: Some(f.attempt.clone()),
            worst_usd: Some(f.bill_bound),
            error: error.map(|k| k.to_string()),
            ..SpendEntry::new(
                SpendKind::Cancelled,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.dataset(job.dataset).name.clone(),
            )
        };
        if let Some(g) = &r.generation_id
            && self.settle.may_ask()
        {
            self.look_up(g.clone(), entry.clone());
            self.hold_closed(f, r, expected);
        }
        // Only a stream harvest closed itself (the cap, a stop, a drain's end): a timeout may
        // be an error answer or a connection never made, which no provider bills.
        let ours = error.is_none();
        let billed_in_full = self.close_billed(f, r);
        let unseen = (ours && r.generation_id.is_none()).then(|| {
            let (lost, note) = if billed_in_full {
                let lost =
                    super::reserve::crash_hold(self.cfg.budget_mode, true, expected, f.worst_pico);
                let note = "closed before it named its generation, where a close may be billed \
                            in full: nothing to look up; booked as a lost attempt until the \
                            key's true-up";
                (lost, note)
            } else {
                let note = "closed before it named its generation: nothing to look up; what its \
                            provider decoded before it noticed the close is booked at the \
                            endpoint's tokens in transit until the key's true-up";
                (expected, note)
            };
            let more = Usd::from_pico((lost - r.booked_pico).max(0));
            let line = SpendEntry {
                note: Some(note.into()),
                ..entry
                    .clone()
                    .closed_as(SpendKind::Unknown, entry.usd + more, true, now.rfc3339())
            };
            (line, more)
        });
        // A stream closed before its first chunk has no generation id (the API sends it with
        // the first chunk, no header), so no look-up can say what it cost; where the close
        // may be billed in full the provider answers on and bills it all (scripts/
        // stop-expected.sh --now --seed 23: AtlasCloud billed 628 tokens for a stream closed
        // 204 ms in, booked at nothing). Booked as a crash's lost attempt is: at its
        // expectation, its worst case under the hard budget. Where a close stops the bill,
        // the tokens decoded before the provider noticed are billed all the same (booked at
        // nothing, they were the key's usage that no estimate explained, and the seeded
        // world 1142 lost its true-up of every crash estimate to them); that bill is known
        // as soon as the provider stops, so it holds the key's true-up back no longer.
        // One line, whole: a crash between a `cancelled` line and an `unknown` line of the
        // rest once left the attempt closed at what it had streamed, with no estimate for the
        // key's true-up to correct.
        match unseen.filter(|(_, more)| *more > Usd::ZERO) {
            Some((line, more)) => {
                self.settle.estimated(line.usd);
                if billed_in_full {
                    self.settle.unseen_close(now);
                }
                // What it streamed the worker booked in the live spend; the rest is told.
                self.spend_live(more);
                self.ledger(line);
            }
            None => self.ledger(entry),
        }
    }
}

/// The typed cause of a failure, from what OpenRouter passed on of the provider's error.
pub(super) fn cause_of(err: &ApiError) -> FailureCause {
    match err.detail() {
        Some(d) => FailureCause {
            provider_name: d.provider_name(),
            error_type: d.error_type().map(str::to_string),
            upstream: d.upstream_message(),
        },
        None => FailureCause::default(),
    }
}
