//! Admission: which prompt goes next (a due retry first, then a fresh prompt by the schedule),
//! and when a dataset stops taking prompts (its output-token budget, counting the answers in
//! flight at their expected length, or its sample cap).

use std::cmp::Reverse;

use crate::config::Schedule;
use crate::openrouter::Message;
use crate::store::output::RejectRecord;
use crate::store::prompts::shard_of;

use super::{Clock, Core, Effect, Job, Pending, Port};

impl Core {
    /// Output tokens a request of dataset `d` is expected to produce. Short answers finish
    /// first, so the mean of the first finishers is biased low: until as many have finished as
    /// are in flight (a whole wave), the estimate is never below a prior of
    /// min(max_tokens, 2048).
    pub fn expected_output_tokens(&self, d: usize) -> u64 {
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
    pub fn admitting(&self, d: usize) -> bool {
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
    pub fn dataset_finished(&self, d: usize) -> bool {
        let ds = &self.datasets[d];
        ds.in_flight == 0 && ds.retries_pending == 0 && (ds.exhausted || !self.admitting(d))
    }

    pub fn all_finished(&self) -> bool {
        (0..self.datasets.len()).all(|d| self.dataset_finished(d))
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
                self.datasets[d].exhausted = true;
                return None;
            };
            match item {
                Ok(mut p) => {
                    if self.shard.is_some_and(|(k, n)| shard_of(&p.id, n) != k) {
                        continue;
                    }
                    if self.datasets[d].done_ids.contains(&p.id) {
                        continue;
                    }
                    if let Some(sys) = &self.datasets[d].system_prompt
                        && p.messages.first().is_none_or(|m| m.role != "system")
                    {
                        p.messages.insert(0, Message::system(sys.clone()));
                    }
                    if self.datasets[d].turns == crate::config::Turns::All
                        && let Some(why) = super::turns::shape_error(&p)
                    {
                        // Not sendable as asked: a reject of the input, before anything is paid.
                        self.datasets[d].rejected += 1;
                        self.effects.push(Effect::Reject {
                            dataset: d,
                            record: RejectRecord {
                                id: p.id,
                                line: Some(p.line),
                                error: format!("line {}: {why}", p.line),
                                error_kind: "input".into(),
                                attempts: 0,
                                created_at: now.rfc3339(),
                                cause: Default::default(),
                            },
                        });
                        continue;
                    }
                    return Some(p);
                }
                // A bad line belongs to shard 0 alone, so that it is rejected once.
                Err(_) if self.shard.is_some_and(|(k, _)| k != 0) => continue,
                Err(e) => {
                    let id = format!("@line:{}", e.line);
                    if !self.datasets[d].done_ids.contains(&id) {
                        self.datasets[d].rejected += 1;
                        self.effects.push(Effect::Reject {
                            dataset: d,
                            record: RejectRecord {
                                id,
                                line: Some(e.line),
                                error: e.to_string(),
                                error_kind: "input".into(),
                                attempts: 0,
                                created_at: now.rfc3339(),
                                cause: Default::default(),
                            },
                        });
                    }
                }
            }
        }
    }

    /// The next job to dispatch: a due retry first, then a fresh prompt by the schedule.
    pub(super) fn next_job(&mut self, source: &mut dyn Port, now: &Clock) -> Option<Job> {
        if let Some(Reverse(p)) = self.retry.peek()
            && p.not_before <= now.mono
        {
            let Reverse(p) = self.retry.pop()?;
            self.datasets[p.job.dataset].retries_pending -= 1;
            return Some(p.job);
        }
        let n = self.datasets.len();
        for k in 0..n {
            let d = match self.cfg.schedule {
                Schedule::Interleaved => (self.next_dataset + k) % n,
                Schedule::Sequential => k,
            };
            if self.cfg.schedule == Schedule::Sequential
                && !self.dataset_finished(d)
                && !self.admitting(d)
            {
                // In sequence, a dataset that is still running holds the line.
                if self.datasets[d].in_flight > 0 || self.datasets[d].retries_pending > 0 {
                    return None;
                }
                continue;
            }
            if !self.admitting(d) {
                continue;
            }
            if let Some(p) = self.fresh_prompt(d, source, now) {
                self.next_dataset = (d + 1) % n;
                return Some(Job {
                    dataset: d,
                    prompt: p,
                    attempts: 0,
                    failed_at: None,
                    done_turns: Vec::new(),
                });
            }
            // In sequence, a dataset whose file just ended still holds the line while its
            // answers are in flight or its retries wait.
            if self.cfg.schedule == Schedule::Sequential
                && (self.datasets[d].in_flight > 0 || self.datasets[d].retries_pending > 0)
            {
                return None;
            }
        }
        None
    }

    /// Puts a job back for the next dispatch (or the next run), without counting an attempt.
    pub(super) fn requeue_front(&mut self, job: Job, now: &Clock) {
        self.push_retry(job, now.mono);
    }

    pub(super) fn push_retry(&mut self, job: Job, not_before: std::time::Instant) {
        self.datasets[job.dataset].retries_pending += 1;
        self.seq += 1;
        self.retry.push(Reverse(Pending {
            not_before,
            seq: self.seq,
            job,
        }));
    }

    /// Updates dataset states and says the first time a budget is reached. Not sticky: if
    /// in-flight answers come in shorter than expected, the dataset takes prompts again until
    /// its budget is met.
    pub(super) fn update_datasets(&mut self, now: &Clock) {
        for d in 0..self.datasets.len() {
            let ds = &self.datasets[d];
            let over_tokens = ds.budget.is_some_and(|b| {
                ds.output_tokens + ds.in_flight * self.expected_output_tokens(d) >= b
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
                self.datasets[d].budget_event_sent = true;
                self.event(now, text);
            }
            self.datasets[d].budget_reached = reached;
        }
    }
}
