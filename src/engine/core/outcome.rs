//! Outcomes: what an attempt's result means. An answer is booked at its reported cost and
//! kept (or, cut at `max_tokens`, retried or rejected per `retry.on_length`); a stream we
//! closed and a failure are `failure.rs`'s.

use std::time::Duration;

use crate::config::{SplitThink, Turns};
use crate::domain::Usd;
use crate::openrouter::{ApiError, Completion, ErrorKind};
use crate::store::output::{FailureCause, SpendEntry, SpendKind};

use super::super::endpoint::RunEndpoint;
use super::super::health::HealthEvent;
use super::attempt::{AttemptOutcome, AttemptResult};
use super::cut_watch::CutNews;
use super::journal::Once;
use super::verdict::{AnswerRules, Verdict, verdict};
use super::{Clock, Core, Effect, Job, row, turns};
use crate::answer_shape::Shape;

/// What an attempt sent: its ledger name and its parameters.
struct Sent<'a> {
    attempt: &'a str,
    params: &'a serde_json::Value,
    at: std::time::Instant,
}

impl Core {
    /// Takes an attempt's result; returns what to write.
    pub(super) fn on_result(&mut self, mut r: AttemptResult, now: &Clock) {
        let Some(f) = self.in_flight.remove(&r.key) else {
            return;
        };
        if f.endpoint.is_none()
            && let [only] = f.over[..]
        {
            self.fleet.count_sole(only, false);
        }
        // Its cost is in the spend now (the worker booked it): none of it stays reserved.
        self.budget.returned(f.reserved_pico, f.openrouter);
        let mut job = f.job.clone();
        job.attempts += 1;
        self.admission.came_back(job.dataset);
        if let Some(e) = f.check
            && !matches!(r.outcome, AttemptOutcome::Checked)
        {
            // In the log: where answers are short, most checks end before their close (the
            // slow tier's world, 100 tokens on average: 88 of 90).
            let how = match &r.outcome {
                AttemptOutcome::Done(c) => {
                    format!("answered in {} tokens", c.usage.completion_tokens)
                }
                AttemptOutcome::Failed(err) => format!("failed: {err}"),
                _ => "closed for another reason".to_string(),
            };
            tracing::debug!(
                events = r.streamed_tokens,
                "a check ended before its close: {how}"
            );
            self.check_ended(e);
        }
        match std::mem::replace(&mut r.outcome, AttemptOutcome::Cancelled) {
            AttemptOutcome::Done(mut c) => {
                self.admission.ended(job.dataset, c.usage.completion_tokens);
                // An answer to a request sent since the failures began: they were the prompts'
                // own.
                self.streak_met(f.sent, now);
                if r.generation_id.is_some() {
                    c.id = r.generation_id.clone();
                }
                let cost = Usd::from_pico(r.booked_pico);
                let sent = Sent {
                    attempt: &f.attempt,
                    params: &f.params,
                    at: f.sent,
                };
                self.on_answer(job, *c, r.endpoint, r.elapsed, cost, sent, now);
            }
            // We closed it; the provider may bill what it generated: book our estimate,
            // corrected from `GET /generation` at the end of the run. Not done and not
            // rejected: a resume takes it again.
            AttemptOutcome::Cancelled => self.book_closed(&job, &f, &r, None, now),
            AttemptOutcome::Checked => self.on_checked(job, &f, &r, now),
            AttemptOutcome::Failed(err) => self.on_failure(job, &f, &r, err, now),
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
            if shape != Shape::Empty {
                // An answer: a ceiling its 429s taught rises by one.
                self.fleet.health_mut(e).raise_ceiling();
            }
            if shape == Shape::Empty {
                self.endpoint_failed(e, ErrorKind::Empty.label(), now);
            } else if let Some(HealthEvent::Closed) = self.fleet.health_mut(e).on_success() {
                let tag = self.fleet.endpoint(e).tag.clone();
                self.event(now, format!("breaker closed: {tag} answered again"));
            }
        }
        let cut = matches!(shape, Shape::CutThinking { .. });
        if let CutNews::Rising(share) = self.cut_watch.note(cut) {
            let max_tokens = self.admission.dataset(dataset).params.max_tokens;
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

    /// A completed stream's usage against the events harvest counted: how many tokens an
    /// event carries at its endpoint (`wire_rate`). Reasoning the endpoint did not stream is
    /// not in the events, so not in the count either. Once learned, and whenever it moves by
    /// more than a tenth, the workers' pool hears it: they accrue streams' costs by it.
    fn learn_wire_rate(
        &mut self,
        endpoint: Option<usize>,
        c: &Completion,
        wire: Option<crate::store::output::Streamed>,
        now: &Clock,
    ) {
        let Some(i) = endpoint else { return };
        let Some(s) = wire else { return };
        let (text, streamed) = (s.text_bytes, s.tokens);
        self.learn_text_rate(text, streamed);
        let tag = self.fleet.endpoint(i).tag.clone();
        if let Some(ttft) = c.ttft {
            self.fleet
                .transit_of(tag.clone())
                .add_stream(streamed, c.latency.saturating_sub(ttft));
        }
        let rate = self.fleet.wire_of(tag);
        let was_learned = rate.learned();
        rate.add(streamed, c.events);
        let learned_now = !was_learned && rate.learned();
        self.publish_wire(i);
        if learned_now {
            self.reread_closes(i, now);
        }
    }

    /// What the latest completed streams of earlier runs of the output directory carried, by
    /// endpoint tag (`LedgerScan::streamed`), learned before the run's own complete: the
    /// text's bytes a token, and each endpoint's tokens an event. Without them a start counts
    /// every stream at the prior's byte a token until three of its own complete, and a resumed
    /// run with a small budget left tripped its dollar cap at a fifth of what it could spend
    /// (the simulator's prose: five bytes a token).
    pub(crate) fn with_streams_before(
        mut self,
        streams: &std::collections::HashMap<
            String,
            std::collections::VecDeque<crate::store::output::Streamed>,
        >,
    ) -> Self {
        let mut tags: Vec<&String> = streams.keys().collect();
        tags.sort();
        for tag in tags {
            let at = self.fleet.endpoints().iter().position(|e| &e.tag == tag);
            for s in &streams[tag] {
                self.fleet.text_mut().add(s.text_bytes, s.tokens);
                if at.is_some() {
                    let rate = self.fleet.wire_of(tag.clone());
                    rate.add(s.tokens, s.events);
                }
            }
            if let Some(i) = at {
                self.publish_wire(i);
            }
        }
        // Once, for all the streams read: the workers' pool hears the figure they give.
        self.publish_text_rate();
        self
    }

    /// A completed stream's text against its streamed tokens: the run's bytes a token
    /// (`wire_rate::BytesPerToken`), which every endpoint's streams are counted by until their
    /// own tokens an event are learned. When it moves by more than a tenth, the workers' pool
    /// hears it, for every endpoint.
    fn learn_text_rate(&mut self, bytes: u64, tokens: u64) {
        self.fleet.text_mut().add(bytes, tokens);
        self.publish_text_rate();
    }

    /// The run's bytes a token to every endpoint's pool entry, when it moved by more than a
    /// tenth since the workers last heard it.
    fn publish_text_rate(&mut self) {
        let now = self.fleet.text().estimate();
        let Some(was) = self.fleet.endpoints().first().map(|e| e.bytes_per_token) else {
            return;
        };
        if (now - was).abs() <= 0.1 * was {
            return;
        }
        let mut pool = self.fleet.endpoints().as_ref().clone();
        for (index, e) in pool.iter_mut().enumerate() {
            e.bytes_per_token = now;
            self.effects.push(super::Effect::Repriced {
                index,
                endpoint: Box::new(e.clone()),
            });
        }
        self.fleet.set_endpoints(std::sync::Arc::new(pool));
    }

    /// What the run knows of endpoint `i`'s wire, for the workers: the tokens an event carries
    /// (once learned) and the tokens in transit the cap holds for a stream it would close.
    /// Published when either moves by more than a tenth.
    pub(super) fn publish_wire(&mut self, i: usize) {
        let tag = &self.fleet.endpoint(i).tag;
        let per_event = self.fleet.wire(tag).and_then(|r| r.estimate());
        let transit = self
            .fleet
            .transit(tag)
            .map(|t| t.allowance(per_event.unwrap_or(1.0)));
        let e = self.fleet.endpoint(i);
        let moved = |now: Option<f64>, was: f64| now.is_some_and(|k| (k - was).abs() > 0.1 * was);
        let rate_moved = match (per_event, e.tokens_per_event) {
            (Some(k), Some(was)) => moved(Some(k), was),
            (now, was) => now.is_some() && was.is_none(),
        };
        if !rate_moved && !moved(transit, e.transit_tokens) {
            return;
        }
        let mut pool = self.fleet.endpoints().as_ref().clone();
        if per_event.is_some() {
            pool[i].tokens_per_event = per_event;
        }
        pool[i].transit_tokens = transit.unwrap_or(super::close_transit::prior(
            pool[i].tokens_per_event.unwrap_or(1.0),
            None,
        ));
        self.effects.push(super::Effect::Repriced {
            index: i,
            endpoint: Box::new(pool[i].clone()),
        });
        self.fleet.set_endpoints(std::sync::Arc::new(pool));
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
        let ep = endpoint.map(|e| self.fleet.endpoint(e).clone());
        self.check_price(&ep, &c, now);
        // Read before the answer's text goes to its row: the ledger line keeps it too.
        let wire = super::wire_rate::streamed(&c);
        self.learn_wire_rate(endpoint, &c, wire, now);
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
        let calls = std::mem::take(&mut c.tool_calls);
        let shape = Shape::of(&c.finish_reason, &content, reasoning.as_deref(), &calls);
        let mark = self.effects.len();
        self.book_answer(
            &job,
            &c,
            (ep.as_ref(), cost, shape, wire),
            sent.attempt,
            now,
        );
        let booked = self.effects.len() - mark;
        let kept = row::Kept {
            content,
            reasoning,
            calls,
            split,
            shape,
        };
        let served = row::Served {
            endpoint: ep.as_ref(),
            cost,
            elapsed,
        };
        if self.judge_answer(job, c, kept, (&served, endpoint), &sent, now) {
            // A kept answer's row or turn goes to the writer before its `complete` ledger line,
            // which the writer puts on disk after the records sent before it: a kill between
            // them leaves the answer kept and its attempt open, which the next start books from
            // the record (`kept_booking::book_kept_answers`), never a paid answer booked and kept
            // nowhere (the #35 runs in a row caught one,
            // `kill_9_mid_row_then_resume_leaves_one_row_per_id`). A reject keeps its line
            // first: it carries no generation or cost to book from.
            let lines: Vec<Effect> = self.effects.drain(mark..mark + booked).collect();
            self.effects.extend(lines.into_iter().map(|e| match e {
                Effect::Ledger(line) => Effect::BookKept(line),
                other => other,
            }));
        }
    }

    /// What is done with a paid answer: kept (true), retried or rejected.
    fn judge_answer(
        &mut self,
        job: Job,
        c: Completion,
        kept: row::Kept,
        (served, endpoint): (&row::Served<'_>, Option<usize>),
        sent: &Sent<'_>,
        now: &Clock,
    ) -> bool {
        let shape = kept.shape;
        self.note_answer_shape(shape, job.dataset, endpoint, now);
        match self.answer_verdict(&job, shape, !kept.calls.is_empty()) {
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
                self.schedule_retry(job, &err, now);
                return false;
            }
            Verdict::Reject { kind, why } => {
                if shape == Shape::Empty {
                    // The prompt's own, not the run's: what was held before it is too.
                    self.streak_met(sent.at, now);
                }
                self.reject(job, why, kind, FailureCause::default(), now);
                return false;
            }
        }
        self.keep_answer(job, c, kept, served, (endpoint, sent.params), now);
        true
    }

    /// The answer's ledger line: what it cost (a paid answer with nothing in it counts among
    /// the failures by kind).
    fn book_answer(
        &mut self,
        job: &Job,
        c: &Completion,
        (ep, cost, shape, wire): (
            Option<&RunEndpoint>,
            Usd,
            Shape,
            Option<crate::store::output::Streamed>,
        ),
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
            streamed: wire,
            ..SpendEntry::new(
                SpendKind::Complete,
                now.rfc3339(),
                job.prompt.id.clone(),
                self.admission.dataset(job.dataset).name.clone(),
            )
        });
    }

    /// Whether an answer of `shape` (with tool calls or not) is kept, retried or rejected: the
    /// rules of `[retry]` and `on_empty`, and (every turn regenerated) no turn cut while
    /// thinking, and none with calls, before the last.
    fn answer_verdict(&self, job: &Job, shape: Shape, calls: bool) -> Verdict {
        let d = job.dataset;
        let rules = AnswerRules {
            on_length: self.cfg.retry.on_length,
            on_empty: self.cfg.on_empty,
            max_attempts: self.cfg.retry.max_attempts,
            max_tokens: self.admission.dataset(d).params.max_tokens,
        };
        let last_turn = !(self.admission.dataset(d).turns == Turns::All
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
        if calls && !last_turn && shape != Shape::Filtered {
            // The next request would send the calls with no tool's answer after them, which
            // the API refuses (or, without them, an answer that is not what the model wrote):
            // the prompt's next turn is the user's. A call cut at max_tokens too.
            return Verdict::Reject {
                kind: super::verdict::TOOL_CALL_MID,
                why: format!(
                    "the model answered turn {} of {} with a tool call, and the prompt's next \
                     turn is the user's, not the tool's answer: turns = \"all\" cannot go on \
                     from it (turns = \"last\" keeps the prompt's own turns)",
                    job.done_turns.len() + 1,
                    turns::turns_to_generate(&job.prompt)
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
        self.admission.answered(d, completion_tokens);
        let ds = self.admission.dataset(d);
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
            self.budget.release_owed(&job, 1);
            job.done_turns.push(done);
            job.attempts = 0;
            job.rate_limited = 0;
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
        self.admission.row_written(d);
        self.effects.push(Effect::Output {
            dataset: d,
            endpoint,
            record: Box::new(record),
        });
    }
}
