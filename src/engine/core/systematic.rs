//! Failures that repeat for every prompt: a 404 `privacy_restricted` (the account's privacy
//! settings exclude every allowed endpoint), a 400 from a bad `extra` field, a 403. Rejecting
//! the prompts one by one would empty the datasets, and a resume treats rejected ids as
//! finished. So a non-retryable failure's reject is held while the failures before it are the
//! same (same [`ApiError::signature`]); when `[retry] stop_after_same_error` of them come in a
//! row, the run stops (exit 1) with the prompts kept pending, not rejected; any other outcome
//! of a request sent after the streak began writes the held rejects, which were then the
//! prompts' own. An outcome of a request sent before says nothing of the world now: an answer
//! that was already streaming when the account's settings changed finishes between the
//! failures, and must not turn them into rejects (issue #35).

use crate::openrouter::ApiError;
use crate::store::output::FailureCause;

use super::super::reason::StopReason;
use super::{Clock, Core, Job};

/// Rejects held while a run of same failures might be systematic.
#[derive(Debug, Default)]
pub(super) struct Streak {
    signature: String,
    /// The first failure's text (the key is scrubbed by the client).
    sample: String,
    held: Vec<Held>,
    /// When its first failure came in: only outcomes of requests sent since break it.
    since: Option<std::time::Instant>,
    /// Its failure says the account's settings leave no endpoint (privacy, constraints,
    /// region): a failure of the account, never of a prompt.
    account_wide: bool,
    /// The last account-settings 404 (`privacy_restricted`, …) to a request harvest narrowed,
    /// which took its endpoints out of routing (issue #35), and how many it took out in all:
    /// a stop later on another 404 names the settings too (reliability-probe-5 P17).
    narrowed_restriction: Option<(String, usize)>,
}

#[derive(Debug)]
struct Held {
    job: Job,
    why: String,
    label: &'static str,
    cause: FailureCause,
}

/// What to check, by the failure's signature.
fn advice(signature: &str) -> &'static str {
    if signature.contains("privacy_restricted") || signature.contains("constraint_filtered") {
        "the account's privacy and provider settings (openrouter.ai/settings/privacy) exclude \
         every endpoint the policy allows"
    } else if signature.starts_with("400") {
        "a request field the API refuses: the dataset's `extra`, `[request]` parameters"
    } else if signature.starts_with("403") {
        "the key's permissions, or a guardrail on the key or the account"
    } else if signature.starts_with("404") {
        "the model id and the endpoints the policy allows"
    } else {
        "the error above"
    }
}

impl Core {
    /// A prompt failed for good with `err`: its reject is held while the failures before it
    /// were the same; at `stop_after_same_error` in a row the run stops with them pending.
    pub(super) fn reject_or_hold(
        &mut self,
        (job, sent): (Job, std::time::Instant),
        err: &ApiError,
        why: String,
        label: &'static str,
        now: &Clock,
    ) {
        let n = self.cfg.retry.stop_after_same_error;
        let cause = super::failure::cause_of(err);
        if n == 0 {
            return self.reject(job, why, label, cause, now);
        }
        let signature = err.signature();
        if let Some(StopReason::Systematic { signature: s, .. }) = &self.life.stopping
            && *s == signature
        {
            // The run is stopping for this very failure: the prompts still in flight when it
            // tripped meet it too, and stay pending with the others.
            return self.requeue_front(job, now);
        }
        if self.streak.signature != signature {
            if self.streak.since.is_some_and(|s| sent < s) && !err.is_account_restriction() {
                // Another failure of the world before the streak: this prompt's own.
                return self.reject(job, why, label, cause, now);
            }
            self.write_held(now);
            self.streak.signature = signature;
            self.streak.sample = err.to_string();
            self.streak.since = Some(now.mono);
            self.streak.account_wide = err.is_account_restriction();
        }
        self.admission.waits_for_verdict(job.dataset, true);
        self.streak.held.push(Held {
            job,
            why,
            label,
            cause,
        });
        if self.streak.held.len() >= n as usize {
            self.stop_systematic(now);
        }
    }

    /// A 404 of the account's settings to a narrowed request took `taken_out` endpoints out
    /// of routing.
    pub(super) fn note_narrowed_restriction(&mut self, err: &ApiError, taken_out: usize) {
        if err.is_account_restriction() && taken_out > 0 {
            let before = self
                .streak
                .narrowed_restriction
                .take()
                .map_or(0, |(_, n)| n);
            self.streak.narrowed_restriction = Some((err.signature(), before + taken_out));
        }
    }

    /// The held failures repeat for every prompt: the run stops with their prompts pending.
    fn stop_systematic(&mut self, now: &Clock) {
        let count = self.streak.held.len() as u32;
        let signature = std::mem::take(&mut self.streak.signature);
        self.requeue_held(now);
        let mut advice = advice(&signature).to_string();
        // Another 404 stops the run after the account's settings took endpoints out one
        // narrowed request at a time: the settings are the likelier cause (a proxy's or a
        // provider's 404 to what was left), and the stop says so.
        if signature.starts_with("404")
            && !signature.contains("privacy_restricted")
            && !signature.contains("constraint_filtered")
            && let Some((earlier, n)) = &self.streak.narrowed_restriction
        {
            advice.push_str(&format!(
                "; and the account's privacy and provider settings \
                 (openrouter.ai/settings/privacy): {earlier} took {n} endpoint{} out of routing \
                 earlier",
                if *n == 1 { "" } else { "s" }
            ));
        }
        let reason = StopReason::Systematic {
            advice,
            signature,
            count,
            sample: std::mem::take(&mut self.streak.sample),
        };
        self.event(now, reason.to_string());
        self.begin_stop(now, reason);
    }

    /// Nothing runs and nothing waits: no more failures can join the held ones. A failure of
    /// the account keeps its prompts pending however few came (a small job, or its last
    /// prompts, meet fewer than `stop_after_same_error`); any other was the prompts' own.
    pub(super) fn settle_streak(&mut self, now: &Clock) {
        if self.streak.account_wide && !self.streak.held.is_empty() {
            self.stop_systematic(now);
        } else {
            self.write_held(now);
        }
    }

    /// An outcome other than the streak's failure, of a request sent at `sent`: it breaks the
    /// streak when the request left after the streak began (see the module's doc).
    pub(super) fn streak_met(&mut self, sent: std::time::Instant, now: &Clock) {
        if self.streak.since.is_some_and(|s| sent < s) {
            return;
        }
        self.write_held(now);
    }

    /// The run stops for another reason while failures are held: a failure of the account
    /// leaves its prompts pending (a resume sends them again), any other was the prompts' own.
    pub(super) fn release_held(&mut self, now: &Clock) {
        if self.streak.account_wide {
            self.requeue_held(now);
        } else {
            self.write_held(now);
        }
    }

    /// The held failures were the account's: their prompts go back to the queue, pending.
    fn requeue_held(&mut self, now: &Clock) {
        for h in std::mem::take(&mut self.streak.held) {
            self.admission.waits_for_verdict(h.job.dataset, false);
            self.requeue_front(h.job, now);
        }
        self.end_streak();
    }

    /// The streak is over: the held failures were the prompts' own; rejected.
    pub(super) fn write_held(&mut self, now: &Clock) {
        for h in std::mem::take(&mut self.streak.held) {
            self.admission.waits_for_verdict(h.job.dataset, false);
            self.reject(h.job, h.why, h.label, h.cause, now);
        }
        self.end_streak();
    }

    /// No streak: the next failure starts one.
    fn end_streak(&mut self) {
        self.streak.signature.clear();
        self.streak.account_wide = false;
        self.streak.since = None;
    }

    /// Prompts whose rejects are held now.
    #[cfg(test)]
    pub(crate) fn held_rejects(&self) -> usize {
        self.streak.held.len()
    }
}
