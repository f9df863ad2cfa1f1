//! Failures that repeat for every prompt: a 404 `privacy_restricted` (the account's privacy
//! settings exclude every allowed endpoint), a 400 from a bad `extra` field, a 403. Rejecting
//! the prompts one by one would empty the datasets, and a resume treats rejected ids as
//! finished. So a non-retryable failure's reject is held while the failures before it are the
//! same (same [`ApiError::signature`]); when `[retry] stop_after_same_error` of them come in a
//! row, the run stops (exit 1) with the prompts kept pending, not rejected; any other outcome
//! writes the held rejects, which were then the prompts' own.

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
        job: Job,
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
            self.write_held(now);
            self.streak.signature = signature;
            self.streak.sample = err.to_string();
        }
        self.admission.datasets[job.dataset].retries_pending += 1;
        self.streak.held.push(Held {
            job,
            why,
            label,
            cause,
        });
        if self.streak.held.len() >= n as usize {
            let held = std::mem::take(&mut self.streak.held);
            let count = held.len() as u32;
            for h in held {
                self.admission.datasets[h.job.dataset].retries_pending -= 1;
                self.requeue_front(h.job, now);
            }
            let signature = std::mem::take(&mut self.streak.signature);
            let reason = StopReason::Systematic {
                advice: advice(&signature).to_string(),
                signature,
                count,
                sample: std::mem::take(&mut self.streak.sample),
            };
            self.event(now, reason.to_string());
            self.begin_stop(now, reason);
        }
    }

    /// Another outcome broke the streak: the held failures were the prompts' own; rejected.
    pub(super) fn write_held(&mut self, now: &Clock) {
        for h in std::mem::take(&mut self.streak.held) {
            self.admission.datasets[h.job.dataset].retries_pending -= 1;
            self.reject(h.job, h.why, h.label, h.cause, now);
        }
        self.streak.signature.clear();
    }

    /// Prompts whose rejects are held now.
    #[cfg(test)]
    pub(crate) fn held_rejects(&self) -> usize {
        self.streak.held.len()
    }
}
