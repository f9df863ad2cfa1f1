//! Outcomes: what an attempt's result means. An answer is booked at its reported cost and
//! kept (or, cut at `max_tokens`, retried or rejected per `retry.on_length`); a stream we
//! closed is booked at our estimate and looked up later; a failure is booked, counted against
//! its endpoint's health, and retried elsewhere after a back-off, rejected for good, or, when
//! the API refuses the key or the account, stops the run.

use std::time::Duration;

use rand::Rng;

use crate::config::{SplitThink, Turns};
use crate::domain::Usd;
use crate::openrouter::{ApiError, Completion, ErrorKind};
use crate::store::output::{FailureCause, RejectRecord, SpendEntry, SpendKind};

use super::super::endpoint::RunEndpoint;
use super::super::health::{HealthEvent, backoff};
use super::super::reason::StopReason;
use super::attempt::{AttemptOutcome, AttemptResult};
use super::attempt_money::cut_after_tokens;
use super::cut_watch::CutNews;
use super::journal::Once;
use super::verdict::{AnswerRules, Shape, Verdict, verdict};
use super::{Clock, Core, Effect, InFlight, Job, RECONCILE_CAPACITY, row, turns};

/// What an attempt sent: its ledger name and its parameters.
struct Sent<'a> {
    attempt: &'a str,
    params: &'a serde_json::Value,
}

impl Core {
    /// Takes an attempt's result; returns what to write.
    pub(super) fn on_result(&mut self, mut r: AttemptResult, now: &Clock) {
        let Some(f) = self.in_flight.remove(&r.key) else {
            return;
        };
        // Its cost is in the spend now (the worker booked it): none of it stays reserved.
        self.budget.reserved_pico -= f.reserved_pico;
        if f.openrouter {
            self.budget.or_in_flight = self.budget.or_in_flight.saturating_sub(1);
        }
        let mut job = f.job.clone();
        job.attempts += 1;
        self.admission.datasets[job.dataset].in_flight -= 1;
        match std::mem::replace(&mut r.outcome, AttemptOutcome::Cancelled) {
            AttemptOutcome::Done(mut c) => {
                // An answer: whatever failed before it was the prompts' own.
                self.write_held(now);
                if r.generation_id.is_some() {
                    c.id = r.generation_id.clone();
                }
                let cost = Usd::from_pico(r.booked_pico);
                let sent = Sent {
                    attempt: &f.attempt,
                    params: &f.params,
                };
                self.on_answer(job, *c, r.endpoint, r.elapsed, cost, sent, now);
            }
            // We closed it; the provider may bill what it generated: book our estimate,
            // corrected from `GET /generation` at the end of the run. Not done and not
            // rejected: a resume takes it again.
            AttemptOutcome::Cancelled => self.book_closed(&job, &f, &r, None, now),
            AttemptOutcome::Failed(err) => self.on_failure(job, &f, &r, err, now),
        }
    }

    fn on_failure(
        &mut self,
        mut job: Job,
        f: &InFlight,
        r: &AttemptResult,
        err: ApiError,
        now: &Clock,
    ) {
        let kind = err.kind();
        tracing::debug!(prompt = %job.prompt.id, attempt = %f.attempt, "attempt failed: {err}");
        let endpoint = r.endpoint;
        if kind == ErrorKind::InFlightBudget && err.is_retryable() {
            return self.on_budget_402(job, f, r, &err, now);
        }
        if let Some(e) = endpoint {
            if kind == ErrorKind::RateLimited {
                let wait = err.retry_after().unwrap_or(Duration::from_secs(2));
                self.fleet.health[e].on_rate_limited(now.mono, wait);
            } else if err.is_retryable() {
                self.endpoint_failed(e, kind.label(), now);
            }
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
            if r.streamed_tokens > 0
                && let Some(g) = &r.generation_id
                && self.reconcile_asked < RECONCILE_CAPACITY
            {
                let entry = SpendEntry {
                    endpoint: endpoint.map(|e| self.fleet.endpoints[e].tag.clone()),
                    completion_tokens: r.streamed_tokens,
                    generation_id: Some(g.clone()),
                    attempt: Some(f.attempt.clone()),
                    error: Some(kind.to_string()),
                    ..SpendEntry::new(
                        SpendKind::Failed,
                        now.rfc3339(),
                        job.prompt.id.clone(),
                        self.admission.datasets[job.dataset].name.clone(),
                    )
                };
                self.look_up(g.clone(), entry);
            }
            self.ledger(SpendEntry {
                endpoint: endpoint.map(|e| self.fleet.endpoints[e].tag.clone()),
                completion_tokens: r.streamed_tokens,
                generation_id: r.generation_id.clone(),
                attempt: Some(f.attempt.clone()),
                error: Some(kind.to_string()),
                ..SpendEntry::new(
                    SpendKind::Failed,
                    now.rfc3339(),
                    job.prompt.id.clone(),
                    self.admission.datasets[job.dataset].name.clone(),
                )
            });
        }
        let own_server = endpoint.filter(|&e| self.fleet.endpoints[e].custom.is_some());
        if let (Some(e), true) = (own_server, err.stops_dispatch()) {
            // One of the operator's own servers refused us: take it out, go on.
            let tag = self.fleet.endpoints[e].tag.clone();
            self.fleet.operator[e] = Some(false);
            self.event(
                now,
                format!("{tag} refused the request ({err}): excluded; check its api_key_env"),
            );
            job.failed_at = endpoint;
            self.schedule_retry(job, &err, now);
        } else if let (Some(e), ErrorKind::NotFound) = (f.endpoint, kind)
            && self.fleet.endpoints[e].custom.is_none()
            && !err.is_account_restriction()
            && job.attempts < self.cfg.retry.max_attempts
        {
            // A pinned endpoint OpenRouter no longer has: out of routing until the listing
            // shows it again; the prompt goes elsewhere.
            if self.fleet.listed[e].present {
                let tag = self.fleet.endpoints[e].tag.clone();
                self.fleet.listed[e].present = false;
                self.event(
                    now,
                    format!("{tag} is not served any more ({err}): taken out of routing"),
                );
            }
            job.failed_at = endpoint;
            self.schedule_retry(job, &err, now);
        } else if err.stops_dispatch() {
            let max_tokens = self.admission.datasets[job.dataset].params.max_tokens;
            let reason = match kind {
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
            };
            self.event(now, reason.to_string());
            self.begin_stop(now, reason);
            self.requeue_front(job, now);
        } else if err.is_retryable() && job.attempts < self.cfg.retry.max_attempts {
            job.failed_at = endpoint;
            self.schedule_retry(job, &err, now);
        } else if err.is_retryable() {
            self.write_held(now);
            let why = format!("{err} (after {} attempts)", job.attempts);
            self.reject(job, why, kind.label(), cause_of(&err), now);
        } else {
            self.reject_or_hold(job, &err, err.to_string(), kind.label(), now);
        }
    }

    /// A 402 of the account's in-flight budget: the account's condition, not the prompt's. Not
    /// an attempt of the prompt and not a failure of the endpoint; the prompt goes back to the
    /// front of the queue; the gate pauses OpenRouter until the `Retry-After` and, on a new
    /// wave, lowers its ceiling.
    fn on_budget_402(
        &mut self,
        mut job: Job,
        f: &InFlight,
        r: &AttemptResult,
        err: &ApiError,
        now: &Clock,
    ) {
        job.attempts -= 1;
        self.ledger(SpendEntry {
            endpoint: r.endpoint.map(|e| self.fleet.endpoints[e].tag.clone()),
            attempt: Some(f.attempt.clone()),
            error: Some(ErrorKind::InFlightBudget.to_string()),
            ..SpendEntry::new(
                SpendKind::Failed,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.datasets[job.dataset].name.clone(),
            )
        });
        let wait = err.retry_after().unwrap_or(Duration::from_secs(2));
        // The refused one was running too when the account counted.
        let running = self.budget.or_in_flight + 1;
        if let Some(change) = self.budget.account.on_budget_402(running, wait, now.mono) {
            self.event(now, change.to_string());
        }
        // Due when OpenRouter may be asked again (an own server may take it sooner as a
        // fresh prompt would not: it waits its turn at the head of the retries).
        let due = now.mono + self.budget.account.paused_for(now.mono).unwrap_or_default();
        self.push_retry(job, due);
    }

    /// A failure the endpoint is to blame for, of kind `label`: counted by its breaker.
    fn endpoint_failed(&mut self, e: usize, label: &str, now: &Clock) {
        if let Some(HealthEvent::Opened { failures, cooldown }) =
            self.fleet.health[e].on_failure(now.mono)
        {
            let tag = self.fleet.endpoints[e].tag.clone();
            self.event(
                now,
                format!(
                    "breaker opened: {tag} after {failures} failures in a row ({label}); probe in {}s",
                    cooldown.as_secs()
                ),
            );
        }
    }

    /// Counts a paid answer's shape: an empty one is its endpoint's failure (the breaker
    /// counts it), any other its success; the recent share cut while thinking is watched.
    fn note_answer_shape(
        &mut self,
        shape: Shape,
        dataset: usize,
        endpoint: Option<usize>,
        now: &Clock,
    ) {
        if let Some(e) = endpoint {
            if shape == Shape::Empty {
                self.endpoint_failed(e, ErrorKind::Empty.label(), now);
            } else if let Some(HealthEvent::Closed) = self.fleet.health[e].on_success() {
                let tag = self.fleet.endpoints[e].tag.clone();
                self.event(now, format!("breaker closed: {tag} answered again"));
            }
        }
        let cut = matches!(shape, Shape::CutThinking { .. });
        if let CutNews::Rising(share) = self.cut_watch.note(cut) {
            let max_tokens = self.admission.datasets[dataset].params.max_tokens;
            self.event(
                now,
                format!(
                    "{:.0}% of recent answers were cut while thinking (max_tokens {max_tokens} \
                     is below the model's reasoning): raise max_tokens; the cut rows are kept \
                     as truncated, and `harvest run --retry-truncated` sends them again",
                    share * 100.0
                ),
            );
        }
    }

    /// Retries `job` after a back-off (at least what the server asked for).
    fn schedule_retry(&mut self, job: Job, err: &ApiError, now: &Clock) {
        let unit: f64 = self.rng.random();
        let wait = backoff(
            job.attempts,
            self.cfg.retry.base_delay(),
            self.cfg.retry.max_delay(),
            err.retry_after(),
            unit,
        );
        self.admission.retries += 1;
        self.push_retry(job, now.mono + wait);
    }

    /// Compares what the API billed with what the endpoint's listed prices give for the same
    /// tokens; says once per endpoint when they part by more than 1%: prices changed, or the
    /// listing prices something harvest does not model. BYOK answers are said once too.
    fn check_price(
        &mut self,
        ep: &Option<super::super::endpoint::RunEndpoint>,
        c: &Completion,
        now: &Clock,
    ) {
        let Some(e) = ep.as_ref().filter(|e| e.custom.is_none()) else {
            return;
        };
        if c.usage.is_byok == Some(true) && self.journal.first(Once::Byok(e.tag.clone())) {
            let text = format!(
                "{} answers on your own provider key (BYOK): booking the provider's charge \
                 (cost_details.upstream_inference_cost) plus OpenRouter's fee",
                e.tag
            );
            self.event(now, text);
        }
        let Some(billed) = c.cost() else {
            return;
        };
        if c.usage.completion_tokens == 0 && billed == Usd::ZERO {
            // Nothing generated, nothing billed: zero completion insurance, not a price.
            return;
        }
        let listed = e
            .tariff
            .cost(c.usage.token_use(), crate::pricing::hhmm(&now.wall));
        let gap = (billed.as_f64() - listed.as_f64()).abs();
        if gap > 1e-6
            && gap > 0.01 * listed.as_f64()
            && self.journal.first(Once::PriceGap(e.tag.clone()))
        {
            let text = format!(
                "{} billed ${:.6} for an answer its listed prices put at ${:.6}: prices changed, \
                 or it charges what the listing does not say (the ledger keeps the bill)",
                e.tag,
                billed.as_f64(),
                listed.as_f64()
            );
            self.event(now, text);
        }
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
        self.admission.datasets[d].rejected += 1;
        // A row of several turns says which one failed; the turns before it were paid for.
        let n = turns::turns_to_generate(&job.prompt);
        let error = if self.admission.datasets[d].turns == Turns::All && n > 1 {
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
    fn book_closed(
        &mut self,
        job: &Job,
        f: &InFlight,
        r: &AttemptResult,
        error: Option<ErrorKind>,
        now: &Clock,
    ) {
        let entry = SpendEntry {
            endpoint: r.endpoint.map(|e| self.fleet.endpoints[e].tag.clone()),
            usd: Usd::from_pico(r.booked_pico),
            prompt_tokens: f.prompt_tokens,
            completion_tokens: r.streamed_tokens,
            estimated: true,
            generation_id: r.generation_id.clone(),
            attempt: Some(f.attempt.clone()),
            error: error.map(|k| k.to_string()),
            ..SpendEntry::new(
                SpendKind::Cancelled,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.datasets[job.dataset].name.clone(),
            )
        };
        if let Some(g) = &r.generation_id
            && self.reconcile_asked < RECONCILE_CAPACITY
        {
            self.look_up(g.clone(), entry.clone());
        }
        self.ledger(entry);
    }

    /// An answer: paid for whatever happens to its text; kept, or (cut at `max_tokens`)
    /// retried or rejected per `retry.on_length`.
    #[allow(clippy::too_many_arguments)]
    fn on_answer(
        &mut self,
        job: Job,
        mut c: Completion,
        endpoint: Option<usize>,
        elapsed: Duration,
        cost: Usd,
        sent: Sent<'_>,
        now: &Clock,
    ) {
        let ep = endpoint.map(|e| self.fleet.endpoints[e].clone());
        self.check_price(&ep, &c, now);
        // Paid for; now, is it an answer to keep? (Its text moves to the row.)
        let (text, thought) = (std::mem::take(&mut c.content), c.reasoning.take());
        let (content, reasoning, split) = match self.cfg.split_think {
            SplitThink::Auto => super::think::clean(text, thought),
            SplitThink::Off => (text, thought, false),
        };
        if split
            && let Some(e) = &ep
            && self.journal.first(Once::InlineThink(e.tag.clone()))
        {
            let text = format!(
                "{} returns its thinking inline in the answer (<think>...</think>): moved to \
                 reasoning_content",
                e.tag
            );
            self.event(now, text);
        }
        let shape = Shape::of(&c.finish_reason, &content, reasoning.as_deref());
        self.book_answer(&job, &c, (ep.as_ref(), cost, shape), sent.attempt, now);
        self.note_answer_shape(shape, job.dataset, endpoint, now);
        match self.answer_verdict(&job, shape) {
            Verdict::Keep => {}
            Verdict::Retry => {
                let err = match shape {
                    Shape::Empty => ApiError::Empty {
                        provider: c.provider.clone().unwrap_or_else(|| "?".into()),
                    },
                    _ => ApiError::Truncated(
                        "finish_reason length (retrying per retry.on_length)".into(),
                    ),
                };
                return self.schedule_retry(job, &err, now);
            }
            Verdict::Reject { kind, why } => {
                if shape == Shape::Empty {
                    // The prompt's own, not the run's: what was held before it is too.
                    self.write_held(now);
                }
                return self.reject(job, why, kind, FailureCause::default(), now);
            }
        }
        let kept = row::Kept {
            content,
            reasoning,
            split,
            shape,
        };
        let served = row::Served {
            endpoint: ep.as_ref(),
            cost,
            elapsed,
        };
        self.keep_answer(job, c, kept, &served, (endpoint, sent.params), now);
    }

    /// The answer's ledger line: what it cost (a paid answer with nothing in it counts among
    /// the failures by kind).
    fn book_answer(
        &mut self,
        job: &Job,
        c: &Completion,
        (ep, cost, shape): (Option<&RunEndpoint>, Usd, Shape),
        attempt: &str,
        now: &Clock,
    ) {
        self.ledger(SpendEntry {
            endpoint: ep.map(|e| e.tag.clone()),
            usd: cost,
            prompt_tokens: c.usage.prompt_tokens,
            completion_tokens: c.usage.completion_tokens,
            estimated: c.cost().is_none(),
            generation_id: c.id.clone(),
            attempt: Some(attempt.to_string()),
            error: (shape == Shape::Empty).then(|| ErrorKind::Empty.to_string()),
            ..SpendEntry::new(
                SpendKind::Complete,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.datasets[job.dataset].name.clone(),
            )
        });
    }

    /// Whether an answer of `shape` is kept, retried or rejected: the rules of `[retry]` and
    /// `on_empty`, and (every turn regenerated) no turn cut while thinking before the last.
    fn answer_verdict(&self, job: &Job, shape: Shape) -> Verdict {
        let d = job.dataset;
        let rules = AnswerRules {
            on_length: self.cfg.retry.on_length,
            on_empty: self.cfg.on_empty,
            max_attempts: self.cfg.retry.max_attempts,
            max_tokens: self.admission.datasets[d].params.max_tokens,
        };
        let last_turn = !(self.admission.datasets[d].turns == Turns::All
            && job.done_turns.len() + 1 < turns::turns_to_generate(&job.prompt));
        if matches!(shape, Shape::CutThinking { .. }) && !last_turn {
            // An empty assistant turn is no history to answer the next user turn on.
            return Verdict::Reject {
                kind: super::verdict::CUT_THINKING,
                why: format!(
                    "cut while thinking at max_tokens {} before the last turn: raise \
                     max_tokens, then run with --retry-rejects",
                    rules.max_tokens
                ),
            };
        }
        verdict(shape, rules, job.attempts)
    }

    /// A kept answer counts against the budgets; a turn before the last goes to the turns
    /// file and the next turn goes out on it, first in line; the last writes the row.
    fn keep_answer(
        &mut self,
        mut job: Job,
        c: Completion,
        kept: row::Kept,
        served: &row::Served<'_>,
        (endpoint, params): (Option<usize>, &serde_json::Value),
        now: &Clock,
    ) {
        let d = job.dataset;
        let turn = row::turn_record(&c, served, job.attempts, kept.split);
        let completion_tokens = c.usage.completion_tokens;
        let ds = &mut self.admission.datasets[d];
        ds.output_tokens += completion_tokens;
        ds.finished_here += 1;
        ds.output_tokens_here += completion_tokens;
        let all_turns = ds.turns == Turns::All;
        if all_turns && job.done_turns.len() + 1 < turns::turns_to_generate(&job.prompt) {
            // Not the last turn: kept in the turns file (a run stopped now continues the row
            // from here), and the next goes out on this history, first in line.
            let done = turns::DoneTurn {
                content: kept.content,
                reasoning: kept.reasoning,
                record: turn,
            };
            let line = turns::line_of(&ds.name, &job.prompt, job.done_turns.len(), &done);
            self.effects.push(Effect::Turn(Box::new(line)));
            job.done_turns.push(done);
            job.attempts = 0;
            job.failed_at = None;
            self.push_retry(job, now.mono);
            return;
        }
        let record = row::record(
            job,
            c,
            kept,
            served,
            (all_turns, turn),
            (&self.cfg.model, now.rfc3339(), params.clone()),
        );
        let ds = &mut self.admission.datasets[d];
        ds.done += 1;
        ds.rows_here += 1;
        self.effects.push(Effect::Output {
            dataset: d,
            endpoint,
            record: Box::new(record),
        });
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
