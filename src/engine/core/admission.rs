//! Admission: which prompt goes next (a due retry first, then a fresh prompt by the schedule),
//! and when a dataset stops taking prompts (its output-token budget, counting the answers in
//! flight at their expected length, or its sample cap).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::config::Schedule;
use crate::store::output::RejectRecord;
use crate::store::prompts::shard_of;

use super::super::reason::StopReason;
use super::{Clock, Core, DatasetBook, Effect, Job, Pending, Port};

/// Which prompt goes next: each dataset's book, the retries waiting, the schedule's place.
/// Its fields are its own: the rest of the core asks and tells it through the methods below
/// (issue #52 item 2).
pub(super) struct Admission {
    datasets: Vec<DatasetBook>,
    /// How long each dataset's answers run (what a closed stream is expected to go on for).
    lengths: Vec<super::answer_lengths::AnswerLengths>,
    /// Jobs waiting for another attempt, the earliest due first.
    retry: BinaryHeap<Reverse<Pending>>,
    /// Where the interleaved schedule takes the next fresh prompt.
    next_dataset: usize,
    /// This process's shard of the prompts (`--shard K/N`).
    shard: Option<(u32, u32)>,
    /// Retries scheduled so far.
    retries: u64,
}

impl Admission {
    /// Over `datasets`, nothing sent yet; `shard` is this process's share of the prompts.
    pub(super) fn new(datasets: Vec<DatasetBook>, shard: Option<(u32, u32)>) -> Admission {
        let lengths = (datasets.iter())
            .map(|d| super::answer_lengths::AnswerLengths::new(d.params.max_tokens))
            .collect();
        Admission {
            datasets,
            lengths,
            retry: BinaryHeap::new(),
            next_dataset: 0,
            shard,
            retries: 0,
        }
    }

    /// Every dataset's book, in the config's order.
    pub(super) fn datasets(&self) -> &[DatasetBook] {
        &self.datasets
    }

    /// Dataset `d`'s book.
    pub(super) fn dataset(&self, d: usize) -> &DatasetBook {
        &self.datasets[d]
    }

    /// Which dataset is named `name`.
    pub(super) fn dataset_named(&self, name: &str) -> Option<usize> {
        self.datasets.iter().position(|d| d.name == name)
    }

    /// How long dataset `d`'s answers have run this run.
    pub(super) fn lengths(&self, d: usize) -> &super::answer_lengths::AnswerLengths {
        &self.lengths[d]
    }

    /// A request of dataset `d` left.
    pub(super) fn sent(&mut self, d: usize) {
        self.datasets[d].in_flight += 1;
    }

    /// A request of dataset `d` came back, whatever it brought.
    pub(super) fn came_back(&mut self, d: usize) {
        self.datasets[d].in_flight -= 1;
    }

    /// An answer of dataset `d` ended after `tokens` completion tokens (its life table's
    /// record, [`AnswerLengths::ended`](super::answer_lengths::AnswerLengths::ended)).
    pub(super) fn ended(&mut self, d: usize, tokens: u64) {
        self.lengths[d].ended(tokens);
    }

    /// A stream of dataset `d` was closed (or cut) after `tokens`: it ran at least that long.
    pub(super) fn closed(&mut self, d: usize, tokens: u64) {
        self.lengths[d].closed(tokens);
    }

    /// An answer of dataset `d` was kept (a row, or a turn of one): `tokens` of output.
    pub(super) fn answered(&mut self, d: usize, tokens: u64) {
        let ds = &mut self.datasets[d];
        ds.output_tokens += tokens;
        ds.finished_here += 1;
        ds.output_tokens_here += tokens;
    }

    /// A row of dataset `d` was written.
    pub(super) fn row_written(&mut self, d: usize) {
        let ds = &mut self.datasets[d];
        ds.done += 1;
        ds.rows_here += 1;
    }

    /// A prompt of dataset `d` ended in a reject.
    pub(super) fn rejected(&mut self, d: usize) {
        self.datasets[d].rejected += 1;
    }

    /// Another attempt was scheduled.
    pub(super) fn retry_scheduled(&mut self) {
        self.retries += 1;
    }

    /// Retries scheduled so far.
    pub(super) fn retries(&self) -> u64 {
        self.retries
    }

    /// A job of dataset `d` waits for its systematic failure's verdict (`waits`), or no
    /// longer does.
    pub(super) fn waits_for_verdict(&mut self, d: usize, waits: bool) {
        let n = &mut self.datasets[d].retries_pending;
        if waits {
            *n += 1;
        } else {
            *n -= 1;
        }
    }

    /// When the earliest job waiting for another attempt is due.
    pub(super) fn next_retry_due(&self) -> Option<std::time::Instant> {
        self.retry.peek().map(|Reverse(p)| p.not_before)
    }

    /// No job waits for another attempt.
    pub(super) fn no_retry_waiting(&self) -> bool {
        self.retry.is_empty()
    }

    /// Books `usd` to the dataset named `name`; false when the run has none of that name.
    pub(super) fn book(&mut self, name: &str, usd: crate::domain::Usd) -> bool {
        match self.datasets.iter_mut().find(|d| d.name == name) {
            Some(d) => {
                d.spent += usd;
                true
            }
            None => false,
        }
    }

    /// The order dataset `d` is sent in ([`DatasetBook::sends`]), taken while a route is
    /// chosen for it (the router borrows the whole core) and given back after.
    pub(super) fn take_sends(&mut self, d: usize) -> Vec<&'static str> {
        std::mem::take(&mut self.datasets[d].sends)
    }

    pub(super) fn give_back_sends(&mut self, d: usize, sends: Vec<&'static str>) {
        self.datasets[d].sends = sends;
    }

    /// Output tokens a request of dataset `d` is expected to produce. Short answers finish
    /// first, so the mean of the first finishers is biased low: until as many have finished as
    /// are in flight (a whole wave), the estimate is never below a prior of
    /// min(max_tokens, 2048).
    pub(super) fn expected_output_tokens(&self, d: usize) -> u64 {
        let ds = &self.datasets[d];
        let prior = u64::from(ds.params.max_tokens).min(2048);
        let mean = (ds.finished_here > 0).then(|| ds.output_tokens_here / ds.finished_here);
        match mean {
            Some(m) if ds.finished_here >= ds.in_flight.max(30) => m.max(1),
            Some(m) => m.max(prior),
            None => prior,
        }
    }

    /// Whether dataset `d` takes another fresh prompt.
    pub(super) fn admitting(&self, d: usize) -> bool {
        let ds = &self.datasets[d];
        if ds.exhausted {
            return false;
        }
        if let Some(cap) = ds.max_samples
            && ds.done + ds.in_flight + ds.retries_pending >= cap
        {
            return false;
        }
        if let Some(b) = ds.budget {
            let expected = ds.output_tokens + ds.in_flight * self.expected_output_tokens(d);
            if expected >= b {
                return false;
            }
        }
        true
    }

    /// Nothing in flight or waiting, and nothing more to take.
    pub(super) fn dataset_finished(&self, d: usize) -> bool {
        let ds = &self.datasets[d];
        ds.in_flight == 0 && ds.retries_pending == 0 && (ds.exhausted || !self.admitting(d))
    }

    pub(super) fn all_finished(&self) -> bool {
        (0..self.datasets.len()).all(|d| self.dataset_finished(d))
    }

    /// The earliest time a later turn of a row in progress is queued for (its next turn, or a
    /// retry's back-off), among those due by `by` (all, with `None`).
    pub(super) fn row_waits(&self, by: Option<&Clock>) -> Option<std::time::Instant> {
        (self.retry.iter())
            .filter(|Reverse(p)| p.job.row_owed.is_some())
            .map(|Reverse(p)| p.not_before)
            .filter(|t| by.is_none_or(|now| *t <= now.mono))
            .min()
    }
}

impl Core {
    /// The run's tail: every dataset sends nothing more (its file read to the end, or its
    /// cap or token budget reached by what is done and in flight; no retry or later turn
    /// waiting), and streams are in flight: each, with what it is expected to stream still
    /// (as of the last tick). `None` while there is more to send, or nothing in flight.
    pub(crate) fn tail_streams(&self) -> Option<Vec<crate::engine::outlook::Stream>> {
        let a = &self.admission;
        let sending =
            (0..a.datasets.len()).any(|d| a.datasets[d].retries_pending > 0 || a.admitting(d));
        if sending || self.in_flight.is_empty() {
            return None;
        }
        Some(self.streams())
    }

    /// Every stream in flight, with what it is expected to stream still (as of the last
    /// tick): a drain's projection adds them up, as the tail's does.
    pub(crate) fn streams(&self) -> Vec<crate::engine::outlook::Stream> {
        let a = &self.admission;
        (self.in_flight.values())
            .map(|f| {
                let d = f.job.dataset;
                crate::engine::outlook::Stream::new(
                    d,
                    a.expected_output_tokens(d),
                    f.accrued_pico,
                    f.price_out.pico_per_token(),
                )
            })
            .collect()
    }

    /// Reads the next fresh prompt of dataset `d`: skips other shards and ids finished by
    /// earlier runs, adds the dataset's system prompt, and (in skip mode: the start refused bad
    /// lines in error mode) turns a bad line into a reject.
    fn fresh_prompt(
        &mut self,
        d: usize,
        source: &mut dyn Port,
        now: &Clock,
    ) -> Option<crate::store::prompts::Prompt> {
        loop {
            let Some(item) = source.next_prompt(d) else {
                self.admission.datasets[d].exhausted = true;
                return None;
            };
            match item {
                Ok(mut p) => {
                    if self
                        .admission
                        .shard
                        .is_some_and(|(k, n)| shard_of(&p.id, n) != k)
                    {
                        continue;
                    }
                    if self.admission.datasets[d].done_ids.contains(&p.id) {
                        continue;
                    }
                    let system = self.admission.datasets[d].system_prompt.as_deref();
                    super::turns::with_system_prompt(&mut p, system);
                    if let Some((why, kind)) = self.unsendable(d, &p) {
                        // Not sendable as asked: a reject of the input, before anything is paid.
                        let error = format!("line {}: {why}", p.line);
                        self.reject_unsent(d, p.id, p.line, error, kind, now);
                        continue;
                    }
                    return Some(p);
                }
                // The file cannot be read to where the start counted: the run stops, the
                // dataset is not done, no prompt is rejected for it.
                Err(e) if e.is_io() => {
                    let detail = e.to_string();
                    self.event(
                        now,
                        format!("dataset {}: {detail}", self.admission.datasets[d].name),
                    );
                    self.begin_stop(now, StopReason::InputChanged { detail });
                    return None;
                }
                // A bad line belongs to shard 0 alone, so that it is rejected once.
                Err(_) if self.admission.shard.is_some_and(|(k, _)| k != 0) => continue,
                Err(e) => {
                    let id = format!("{}{}", crate::store::prompts::BAD_LINE_ID, e.line);
                    if !self.admission.datasets[d].done_ids.contains(&id) {
                        self.reject_unsent(d, id, e.line, e.to_string(), "input", now);
                    }
                }
            }
        }
    }

    /// Why prompt `p` of dataset `d` is not sent at all, with its reject kind: a conversation
    /// whose turns cannot each be regenerated, or one far past every endpoint's context.
    fn unsendable(
        &self,
        d: usize,
        p: &crate::store::prompts::Prompt,
    ) -> Option<(String, &'static str)> {
        if self.admission.datasets[d].turns == crate::config::Turns::All
            && let Some(why) = super::turns::shape_error(p)
        {
            return Some((why, "input"));
        }
        let estimate = super::dispatch::estimate_prompt_tokens(&p.messages);
        let contexts = self.fleet.endpoints().iter().map(|e| e.context_length);
        let largest = super::context::beyond_every_context(estimate, contexts)?;
        Some((
            format!(
                "about {estimate} tokens (characters / 4), more than {}x the largest context \
                 of the model's endpoints ({largest}): refused without sending it",
                super::context::MARGIN
            ),
            "too-long",
        ))
    }

    /// A prompt rejected before anything is sent or paid: its reject line, counted.
    fn reject_unsent(
        &mut self,
        d: usize,
        id: String,
        line: u64,
        error: String,
        kind: &str,
        now: &Clock,
    ) {
        self.admission.datasets[d].rejected += 1;
        self.effects.push(Effect::Reject {
            dataset: d,
            record: RejectRecord {
                id,
                line: Some(line),
                error,
                error_kind: kind.into(),
                attempts: 0,
                created_at: now.rfc3339(),
                cause: Default::default(),
            },
        });
    }

    /// The next job to dispatch: a due retry first, then a fresh prompt by the schedule.
    pub(super) fn next_job(&mut self, source: &mut dyn Port, now: &Clock) -> Option<Job> {
        if let Some(Reverse(p)) = self.admission.retry.peek()
            && p.not_before <= now.mono
        {
            let Reverse(p) = self.admission.retry.pop()?;
            self.admission.datasets[p.job.dataset].retries_pending -= 1;
            return Some(p.job);
        }
        let n = self.admission.datasets.len();
        for k in 0..n {
            let d = match self.cfg.schedule {
                Schedule::Interleaved => (self.admission.next_dataset + k) % n,
                Schedule::Sequential => k,
            };
            if self.cfg.schedule == Schedule::Sequential
                && !self.admission.dataset_finished(d)
                && !self.admission.admitting(d)
            {
                // In sequence, a dataset that is still running holds the line.
                if self.admission.datasets[d].in_flight > 0
                    || self.admission.datasets[d].retries_pending > 0
                {
                    return None;
                }
                continue;
            }
            if !self.admission.admitting(d) {
                continue;
            }
            if let Some(p) = self.fresh_prompt(d, source, now) {
                self.admission.next_dataset = (d + 1) % n;
                let done_turns = self.resumed_turns(d, &p);
                return Some(Job {
                    dataset: d,
                    prompt: p,
                    attempts: 0,
                    rate_limited: 0,
                    failed_at: None,
                    done_turns,
                    row_owed: None,
                });
            }
            // In sequence, a dataset whose file just ended still holds the line while its
            // answers are in flight or its retries wait.
            if self.cfg.schedule == Schedule::Sequential
                && (self.admission.datasets[d].in_flight > 0
                    || self.admission.datasets[d].retries_pending > 0)
            {
                return None;
            }
        }
        None
    }

    /// The turns an earlier run finished of `prompt`'s row, to continue from (see
    /// [`super::turns::resumed`]); none for a dataset that sends only the last turn.
    fn resumed_turns(
        &mut self,
        d: usize,
        prompt: &crate::store::prompts::Prompt,
    ) -> Vec<super::turns::DoneTurn> {
        let ds = &mut self.admission.datasets[d];
        if ds.turns != crate::config::Turns::All {
            return Vec::new();
        }
        let Some(chain) = ds.in_progress.remove(&prompt.id) else {
            return Vec::new();
        };
        super::turns::resumed(prompt, chain)
    }

    /// Puts a job back for the next dispatch (or the next run), without counting an attempt.
    pub(super) fn requeue_front(&mut self, job: Job, now: &Clock) {
        self.push_retry(job, now.mono);
    }

    pub(super) fn push_retry(&mut self, job: Job, not_before: std::time::Instant) {
        self.admission.datasets[job.dataset].retries_pending += 1;
        self.seq += 1;
        self.admission.retry.push(Reverse(Pending {
            not_before,
            seq: self.seq,
            job,
        }));
    }

    /// Updates dataset states and says the first time a budget is reached. Not sticky: if
    /// in-flight answers come in shorter than expected, the dataset takes prompts again until
    /// its budget is met.
    pub(super) fn update_datasets(&mut self, now: &Clock) {
        for d in 0..self.admission.datasets.len() {
            let ds = &self.admission.datasets[d];
            let over_tokens = ds.budget.is_some_and(|b| {
                ds.output_tokens + ds.in_flight * self.admission.expected_output_tokens(d) >= b
            });
            let over_samples = ds
                .max_samples
                .is_some_and(|m| ds.done + ds.in_flight + ds.retries_pending >= m);
            let reached = (over_tokens || over_samples) && !ds.exhausted;
            if reached && !ds.budget_event_sent {
                let what = if over_tokens {
                    "output-token budget"
                } else {
                    "sample cap"
                };
                let text = format!("{}: {what} reached; in-flight requests finish", ds.name);
                self.admission.datasets[d].budget_event_sent = true;
                self.event(now, text);
            }
            self.admission.datasets[d].budget_reached = reached;
        }
    }
}
