//! What one attempt hands back to the core: how it ended, where, and what it cost so far. Plain
//! data, made by the worker and judged by the core.

use std::time::Duration;

use crate::openrouter::{ApiError, Completion};

/// How one attempt ended.
#[derive(Debug)]
pub enum AttemptOutcome {
    Done(Box<Completion>),
    Failed(ApiError),
    /// We closed it: stop-now or the dollar cap.
    Cancelled,
}

#[derive(Debug)]
pub struct AttemptResult {
    pub key: u64,
    pub outcome: AttemptOutcome,
    /// The endpoint that served (pinned, or named by the stream), when known.
    pub endpoint: Option<usize>,
    pub streamed_tokens: u64,
    /// Our estimate of what this attempt cost so far (prompt + streamed tokens).
    pub accrued_pico: i64,
    /// What the worker booked into the confirmed spend: the reported cost of a finished
    /// response, our estimate for one we closed (cancelled, timed out), zero otherwise.
    pub booked_pico: i64,
    /// The generation id, for looking up later what a closed stream really cost.
    pub generation_id: Option<String>,
    pub elapsed: Duration,
}
