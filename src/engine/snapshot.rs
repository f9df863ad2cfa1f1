//! The one view of a run that everything reads: the TUI, headless progress lines, the state file
//! and `harvest status`. Plain data, cloned out of the engine a few times a second.

use serde::{Deserialize, Serialize};

use crate::config::BudgetMode;
use crate::domain::Usd;

use super::health::BreakerState;
use super::reason::{IdleReason, OffReason, StopReason};
use crate::policy::{Exclusion, Fidelity, PolicyMode};

/// Where the run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Starting,
    Running,
    Paused,
    /// Dispatch stopped; in-flight requests are finishing.
    Draining,
    /// Stopped before the work was done (operator, budget, credit); resumable.
    Stopped,
    Done,
}

impl RunState {
    pub fn label(self) -> &'static str {
        match self {
            RunState::Starting => "STARTING",
            RunState::Running => "RUNNING",
            RunState::Paused => "PAUSED",
            RunState::Draining => "DRAINING",
            RunState::Stopped => "STOPPED",
            RunState::Done => "DONE",
        }
    }
}

/// Where one dataset is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetState {
    Queued,
    Running,
    /// Its output-token budget (or sample cap) is reached; in-flight requests finish.
    BudgetReached,
    /// The run is draining: its requests in flight finish, no new ones start.
    Draining,
    /// The run stopped (operator, dollar budget, credit) before this dataset was done.
    Stopped,
    Done,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DatasetSnap {
    pub name: String,
    /// Prompts in this run's share (after `--shard`), duplicates counted once.
    pub total: u64,
    pub done: u64,
    pub rejected: u64,
    pub in_flight: u64,
    /// Completion tokens of finished prompts (carried over from earlier runs included).
    pub output_tokens: u64,
    pub output_token_budget: Option<u64>,
    pub max_samples: Option<u64>,
    /// Lines of its prompt file skipped because an earlier line had their id.
    #[serde(default)]
    pub duplicates: u64,
    pub tok_per_s: f64,
    pub spent: Usd,
    pub eta_s: Option<f64>,
    pub state: DatasetState,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointSnap {
    pub tag: String,
    pub provider: String,
    pub quantization: String,
    pub fidelity: Fidelity,
    pub price_in_per_m: f64,
    pub price_out_per_m: f64,
    /// API status and 30-minute uptime, as listed.
    pub status: Option<i64>,
    pub uptime_30m: Option<f64>,
    /// Allowed to serve the next request.
    pub allowed: bool,
    /// Allowed by the operator and the policy, health aside: the include mark, and what space
    /// flips (an open breaker or a 429 wait keeps it).
    #[serde(default)]
    pub included: bool,
    /// Why it serves no request now, when it does not.
    #[serde(default)]
    pub off: Option<OffReason>,
    /// Why it gets no request though it may serve (`off` is `None`), when that is known.
    #[serde(default)]
    pub idle: Option<IdleReason>,
    /// The operator's own choice, when they made one (overrides the policy).
    pub operator: Option<bool>,
    /// Why the policy in force excludes it, the operator's choice aside: with
    /// `operator: Some(true)`, an inclusion against the policy (lowered fidelity, marked).
    #[serde(default)]
    pub policy_off: Option<Exclusion>,
    pub breaker: BreakerState,
    pub in_flight: u64,
    pub done: u64,
    pub errors: u64,
    /// Dominant error kind and its count.
    pub top_error: Option<(String, u64)>,
    pub tok_per_s: f64,
    pub ttft_p50_ms: Option<u64>,
    pub ttft_p95_ms: Option<u64>,
    pub mean_output_tokens: Option<f64>,
    /// Share of its answers cut at `max_tokens` (with content or while thinking).
    pub truncation_rate: Option<f64>,
    /// Share of its answers cut at `max_tokens` before any content.
    #[serde(default)]
    pub cut_thinking_rate: Option<f64>,
    /// Share of answers that came back empty (each retried), of answers and empties.
    #[serde(default)]
    pub empty_rate: Option<f64>,
    pub spent: Usd,
}

/// What the account's in-flight spending budget has done to the run (present once it refused
/// a request).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InFlightBudgetSnap {
    /// The learned ceiling on OpenRouter streams (`None`: back to the configured concurrency).
    pub ceiling: Option<u32>,
    /// 402s of the in-flight budget in this run.
    pub refused: u64,
    /// Seconds OpenRouter traffic stays paused, when it is.
    pub paused_s: Option<f64>,
}

impl std::fmt::Display for InFlightBudgetSnap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ceiling {
            Some(c) => write!(
                f,
                "in-flight budget: {} streams",
                crate::domain::group_thousands(u64::from(c))
            )?,
            None => write!(
                f,
                "in-flight budget: {} refused",
                crate::domain::group_thousands(self.refused)
            )?,
        }
        if let Some(p) = self.paused_s {
            write!(f, ", paused {:.0}s", p.ceil())?;
        }
        Ok(())
    }
}

/// One line of the event log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    /// Seconds since the run started.
    pub at_s: f64,
    pub text: String,
}

/// A point of the throughput/spend history.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryPoint {
    pub at_s: f64,
    pub tok_per_s: f64,
    pub usd_per_min: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub model: String,
    pub routing: String,
    /// The quantization policy in force: `faithful (native int4)` or `any`.
    #[serde(default)]
    pub policy: String,
    /// The same, as a value.
    #[serde(default)]
    pub policy_mode: PolicyMode,
    /// The tags of the endpoints the `any` policy would open now (not allowed now, not
    /// excluded by the operator): what the TUI names before it lowers the fidelity.
    #[serde(default)]
    pub any_opens: Vec<String>,
    pub state: RunState,
    /// Why the run stopped or is draining, when it did.
    pub reason: Option<StopReason>,
    pub started_at: String,
    pub elapsed_s: f64,
    pub concurrency_limit: u32,
    pub in_flight: u64,
    /// The account's in-flight budget, once it refused a request.
    #[serde(default)]
    pub inflight_budget: Option<InFlightBudgetSnap>,
    pub budget: Usd,
    /// Confirmed spend, this run and earlier ones.
    pub spent: Usd,
    /// Spend carried over from earlier runs of this output directory.
    pub carried_over: Usd,
    /// Cost of tokens streamed by requests still in flight.
    pub accrued: Usd,
    /// What the ledger holds (`spend.jsonl`, earlier runs' lines included): answers, closed
    /// and failed streams, look-ups' adjustments. The endpoints' `spent` and
    /// [`Snapshot::booked_no_endpoint`] sum to it; the datasets' and
    /// [`Snapshot::booked_no_dataset`] too. `spent + accrued - booked` is still streaming
    /// ([`Snapshot::streaming`]).
    #[serde(default)]
    pub booked: Usd,
    /// Booked on lines that name no endpoint of the table (a stream that ended before it named
    /// one, a crash's estimates, the key's true-up; earlier runs' at endpoints not listed now).
    #[serde(default)]
    pub booked_no_endpoint: Usd,
    /// Booked on lines that name no dataset of the run (the key's true-up).
    #[serde(default)]
    pub booked_no_dataset: Usd,
    /// How the dollar budget holds against requests in flight.
    #[serde(default)]
    pub budget_mode: BudgetMode,
    /// The projection: where the spend is expected to end. While prompts are left to send, at
    /// the current rate until the work is done (capped at the budget); in the tail
    /// ([`Snapshot::tail_streams`]) and while stopping, with what the streams in flight are
    /// expected to add (`engine/outlook.rs`).
    pub projected: Option<Usd>,
    /// While stopping or in the budget's last stretch: the most the spend can still come to,
    /// each stream in flight at its worst case (`max_tokens`) and each bill not known yet at
    /// what it holds.
    #[serde(default)]
    pub worst_case: Option<Usd>,
    pub done: u64,
    pub rejected: u64,
    pub total: u64,
    pub retries: u64,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    pub tok_per_s: f64,
    pub usd_per_min: f64,
    /// Seconds until the run ends: its work's, or its dollar budget's when that comes first;
    /// in the tail, its last streams'.
    pub eta_s: Option<f64>,
    /// The ETA is when the dollar budget runs out, before the work is done.
    #[serde(default)]
    pub eta_at_budget: bool,
    /// Every prompt is sent and only these streams are left in flight (0 before): the ETA is
    /// when they end, the projection what they add.
    #[serde(default)]
    pub tail_streams: u64,
    /// While the run stops: how long its requests in flight are expected to take still (the
    /// longest of them, from their ages and their datasets' usual request times), when known.
    #[serde(default)]
    pub drain_left_s: Option<f64>,
    /// While a drain runs: how long until its grace closes what is still in flight.
    #[serde(default)]
    pub drain_grace_left_s: Option<f64>,
    /// The share of recent answers cut at `max_tokens` while thinking, while it is high enough
    /// to warn of (`max_tokens` is below the model's reasoning).
    #[serde(default)]
    pub cut_thinking_share: Option<f64>,
    /// Seconds the run has spent in the dollar budget's last stretch (requests that may be
    /// billed in full when closed waiting for room for their worst case), once it entered it.
    #[serde(default)]
    pub last_stretch_s: Option<f64>,
    /// Requests of the last stretch: sent where closing the stream stops the bill (narrowed
    /// there, reserving their expectation), and sent with their worst case reserved.
    #[serde(default)]
    pub stretch_stoppable: u64,
    #[serde(default)]
    pub stretch_worst: u64,
    /// Look-ups of requests an earlier run's crash left in flight, not settled yet: how many,
    /// and what they were expected to cost (held against the budget, not in the ledger).
    #[serde(default)]
    pub open_look_ups: OpenLookUps,
    pub datasets: Vec<DatasetSnap>,
    pub endpoints: Vec<EndpointSnap>,
    /// The last events (at most a screen's worth).
    pub events: Vec<EventLine>,
    /// Events logged since the run started, of which `events` are the last: a follower that
    /// saw `n` prints the last `events_total - n`.
    #[serde(default)]
    pub events_total: u64,
    pub history: Vec<HistoryPoint>,
    /// How late the engine's own loop ran its last ticks, in ms (decaying maximum): a slow
    /// client shows here, a slow provider does not.
    #[serde(default)]
    pub loop_lag_ms: f64,
    /// `GET /key` usage at the start and at the last reconciliation, when the key allows.
    pub key_usage_start: Option<f64>,
    pub key_usage_now: Option<f64>,
}

/// Streams closed or left in flight (by this run, or a crash of an earlier one) whose cost the
/// API has not told yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpenLookUps {
    pub count: u64,
    pub expected: Usd,
}

impl Snapshot {
    /// Total spend including what in-flight requests have accrued.
    pub fn spent_with_accrued(&self) -> Usd {
        self.spent + self.accrued
    }

    /// What is spent but not in the ledger yet: streamed by requests in flight, or by ones
    /// just ended whose line is on its way.
    pub fn streaming(&self) -> Usd {
        (self.spent_with_accrued() - self.booked).max(Usd::ZERO)
    }
}
