//! Why, as types: why an endpoint takes no requests ([`OffReason`]), why one that may gets none
//! ([`IdleReason`]), and why a run stopped
//! ([`StopReason`]). The engine decides them; the TUI, headless lines, `status --json` and the
//! exit code read the types, and `Display` makes the text. No front end parses these back.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::policy::Exclusion;

/// Why an endpoint serves no request right now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OffReason {
    /// The model's listing no longer shows it (or a pinned request got 404).
    Gone,
    /// The operator excluded it during the run (a key in the TUI).
    Operator,
    /// The policy leaves it out: the config's `exclude` (`Exclusion::Operator`), its
    /// quantization, the API's uptime, the probe.
    Policy { exclusion: Exclusion },
    /// Its circuit breaker is open for this many more seconds.
    Breaker { secs: u64 },
    /// Its breaker lets one probe request through, which is in flight.
    BreakerProbing,
    /// A 429 asked to wait this many more seconds.
    RateLimited { secs: u64 },
}

impl OffReason {
    /// Off by choice (operator or policy), as opposed to resting (health) or gone: the
    /// include mark follows this.
    pub fn is_choice(&self) -> bool {
        matches!(self, OffReason::Operator | OffReason::Policy { .. })
    }
}

/// Why an endpoint that may serve (no [`OffReason`]) gets no request all the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IdleReason {
    /// Under OpenRouter's routing with `require_parameters`, every dataset with work left sends
    /// a parameter its listing does not list (`params`), so OpenRouter would send it nothing
    /// (issue #53: Moonshot AI, allowed and 99.9% up, got no request in 10 minutes with a
    /// blank reason; why went to stderr once at the start).
    Unlisted { params: Vec<String> },
}

impl fmt::Display for IdleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdleReason::Unlisted { params } => {
                write!(f, "no {} (require_parameters)", params.join(", "))
            }
        }
    }
}

impl fmt::Display for OffReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffReason::Gone => f.write_str("gone from the listing"),
            OffReason::Operator => f.write_str("operator"),
            // In a run, the operator's own exclusions are TUI keys; the policy's comes from
            // the config file, and says so.
            OffReason::Policy {
                exclusion: Exclusion::Operator,
            } => f.write_str("config exclude"),
            OffReason::Policy { exclusion } => exclusion.fmt(f),
            OffReason::Breaker { secs } => write!(f, "breaker {secs}s"),
            OffReason::BreakerProbing => f.write_str("breaker: probing"),
            OffReason::RateLimited { secs } => write!(f, "429 wait {secs}s"),
        }
    }
}

/// Why a run stopped (or is draining).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// The operator asked to drain (first Ctrl-C, `q` then `d`, `harvest stop`).
    OperatorDrain,
    /// The operator asked to stop now (second Ctrl-C, `q` then `s`).
    OperatorStopNow,
    /// The terminal or the output stream went away (SIGHUP, a closed pipe, a vanished pty):
    /// the run drained; exit code 129.
    OutputLost,
    /// SIGTERM: the scheduler whose job this is stops it (Slurm before `--time` runs out, a
    /// preemption or `scancel`; Kubernetes before it kills a pod; or `kill`): the run drained
    /// and resumes when it is run again; exit code 75.
    SchedulerStop { by: Scheduler },
    /// Spent + accrued (+ what in-flight requests are expected to cost) reached `budget_usd`.
    DollarBudget,
    /// The API refused the key (HTTP 401).
    KeyRefused { variable: String, detail: String },
    /// The account is out of credit or past the key's limit (HTTP 402 without Retry-After).
    OutOfCredit { detail: String },
    /// One request alone is estimated over what the account may have in flight: a smaller
    /// `max_tokens` is the fix (HTTP 402 naming max_tokens, no Retry-After).
    RequestOverBudget {
        max_tokens: u32,
        estimate: crate::domain::Usd,
        detail: String,
    },
    /// `count` prompts in a row failed for good the same way: a setting of the account or
    /// the config, not the prompts. They stay pending.
    Systematic {
        signature: String,
        count: u32,
        sample: String,
        advice: String,
    },
    /// harvest itself could not go on (a write to the output directory failed, a task died).
    Internal { detail: String },
    /// A prompt file could not be read to the end the start counted (rewritten, cut or
    /// unreadable since): the run stops with its prompts pending; exit code 2.
    InputChanged { detail: String },
}

/// The scheduler a run is a job of, as the variables it sets in its jobs' environment say:
/// whom a SIGTERM comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    Slurm,
    Kubernetes,
    /// None that harvest knows: `kill`, systemd, `docker stop`, another scheduler.
    Unknown,
}

impl Scheduler {
    /// Slurm sets `SLURM_JOB_ID` in every job, whatever its `--export`; Kubernetes sets
    /// `KUBERNETES_SERVICE_HOST` in every container.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Scheduler {
        let set = |v: &str| env(v).is_some_and(|s| !s.is_empty());
        if set("SLURM_JOB_ID") {
            Scheduler::Slurm
        } else if set("KUBERNETES_SERVICE_HOST") {
            Scheduler::Kubernetes
        } else {
            Scheduler::Unknown
        }
    }
}

impl StopReason {
    /// The API or harvest stopped the run, not the operator and not a budget: exit code 1.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            StopReason::KeyRefused { .. }
                | StopReason::OutOfCredit { .. }
                | StopReason::RequestOverBudget { .. }
                | StopReason::Systematic { .. }
                | StopReason::Internal { .. }
        )
    }

    /// A prompt file changed under the run: bad input, exit code 2.
    pub fn is_input(&self) -> bool {
        matches!(self, StopReason::InputChanged { .. })
    }

    /// A scheduler stopped the run before it was done: exit code 75, run it again to resume.
    pub fn is_scheduler(&self) -> bool {
        matches!(self, StopReason::SchedulerStop { .. })
    }

    /// The operator stopped the run: exit code 130.
    pub fn is_operator(&self) -> bool {
        matches!(
            self,
            StopReason::OperatorDrain | StopReason::OperatorStopNow
        )
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::OperatorDrain => f.write_str("operator: drain"),
            StopReason::OperatorStopNow => f.write_str("operator: stop now"),
            StopReason::OutputLost => f.write_str("terminal or output lost: drained"),
            StopReason::SchedulerStop { by } => f.write_str(match by {
                Scheduler::Slurm => "scheduler stop: SIGTERM from Slurm, resumes when resubmitted",
                Scheduler::Kubernetes => {
                    "scheduler stop: SIGTERM from Kubernetes, resumes when the Job retries the pod"
                }
                Scheduler::Unknown => "scheduler stop: SIGTERM, resumes when run again",
            }),
            StopReason::DollarBudget => f.write_str("dollar budget reached"),
            StopReason::KeyRefused { variable, detail } => {
                write!(f, "the API key was refused ({detail}): check {variable}")
            }
            StopReason::OutOfCredit { detail } => {
                write!(
                    f,
                    "out of credit ({detail}): add credit or raise the key's limit"
                )
            }
            StopReason::RequestOverBudget {
                max_tokens,
                estimate,
                detail,
            } => write!(
                f,
                "one request is over the account's budget: max_tokens = {max_tokens} makes its \
                 estimate {estimate}, more than the account can have in flight ({detail}); lower \
                 max_tokens or add credit"
            ),
            StopReason::Systematic {
                signature,
                count,
                sample,
                advice,
            } => write!(
                f,
                "the last {count} prompts all failed the same way ({signature}: {sample}); \
                 they are kept pending, not rejected; check {advice}, then run again"
            ),
            StopReason::Internal { detail } => write!(f, "internal error: {detail}"),
            StopReason::InputChanged { detail } => write!(
                f,
                "a prompt file changed during the run ({detail}): its prompts not yet sent stay \
                 pending; restore the file and run again (a new file wants a new output_dir)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_reasons_read_as_before_and_say_whether_chosen() {
        let cases: Vec<(OffReason, &str, bool)> = vec![
            (OffReason::Gone, "gone from the listing", false),
            (OffReason::Operator, "operator", true),
            (
                OffReason::Policy {
                    exclusion: Exclusion::Operator,
                },
                "config exclude",
                true,
            ),
            (
                OffReason::Policy {
                    exclusion: Exclusion::Requantized("fp8".into()),
                },
                "policy: fp8 re-quantized",
                true,
            ),
            (
                OffReason::Policy {
                    exclusion: Exclusion::Probe("agreement 0.76 < 0.90".into()),
                },
                "probe: agreement 0.76 < 0.90",
                true,
            ),
            (OffReason::Breaker { secs: 38 }, "breaker 38s", false),
            (OffReason::BreakerProbing, "breaker: probing", false),
            (OffReason::RateLimited { secs: 4 }, "429 wait 4s", false),
        ];
        for (r, text, chosen) in cases {
            assert_eq!(r.to_string(), text);
            assert_eq!(r.is_choice(), chosen, "{text}");
            let json = serde_json::to_value(&r).expect("serialises");
            let back: OffReason = serde_json::from_value(json).expect("reads back");
            assert_eq!(back, r);
        }
    }

    #[test]
    fn stop_reasons_map_to_exit_classes() {
        let cases = [
            (StopReason::OperatorDrain, "operator: drain", false, true),
            (
                StopReason::OperatorStopNow,
                "operator: stop now",
                false,
                true,
            ),
            (
                StopReason::DollarBudget,
                "dollar budget reached",
                false,
                false,
            ),
            (
                StopReason::KeyRefused {
                    variable: "OPENROUTER_API_KEY".into(),
                    detail: "HTTP 401".into(),
                },
                "the API key was refused (HTTP 401): check OPENROUTER_API_KEY",
                true,
                false,
            ),
            (
                StopReason::OutOfCredit {
                    detail: "HTTP 402".into(),
                },
                "out of credit (HTTP 402): add credit or raise the key's limit",
                true,
                false,
            ),
            (
                StopReason::Internal {
                    detail: "disk full".into(),
                },
                "internal error: disk full",
                true,
                false,
            ),
        ];
        for (r, text, failure, operator) in cases {
            assert_eq!(r.to_string(), text);
            assert_eq!(r.is_failure(), failure, "{text}");
            assert_eq!(r.is_operator(), operator, "{text}");
            assert!(!r.is_scheduler(), "{text}");
        }
        // SIGTERM: the scheduler's stop, neither the operator's nor a failure.
        for (by, text) in [
            (
                Scheduler::Slurm,
                "scheduler stop: SIGTERM from Slurm, resumes when resubmitted",
            ),
            (
                Scheduler::Kubernetes,
                "scheduler stop: SIGTERM from Kubernetes, resumes when the Job retries the pod",
            ),
            (
                Scheduler::Unknown,
                "scheduler stop: SIGTERM, resumes when run again",
            ),
        ] {
            let r = StopReason::SchedulerStop { by };
            assert_eq!(r.to_string(), text);
            assert!(
                r.is_scheduler() && !r.is_operator() && !r.is_failure(),
                "{text}"
            );
        }
        assert_eq!(
            serde_json::to_value(StopReason::SchedulerStop {
                by: Scheduler::Slurm
            })
            .expect("serialises"),
            serde_json::json!({"kind": "scheduler_stop", "by": "slurm"})
        );
        assert_eq!(
            serde_json::to_value(StopReason::OperatorDrain).expect("serialises"),
            serde_json::json!({"kind": "operator_drain"})
        );
    }
}
